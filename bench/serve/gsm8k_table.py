"""The table of bench/serve/gsm8k.sh: per model, GSM8K exact match (strict and flexible
extraction) with its 95% interval, and the paired difference to the first model (the
base) over the same problems, with its 95% interval (normal approximation of the mean of
per-problem differences).   python3 gsm8k_table.py WORKDIR BASE [QUANT...]"""
import glob
import json
import math
import os
import sys


def scores(work, name, flt):
    (path,) = glob.glob(os.path.join(work, f"out-{name}", "**", "samples_gsm8k_local_*.jsonl"), recursive=True)
    out = {}
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if d["filter"] == flt:
                out[d["doc_id"]] = float(d["exact_match"])
    return out


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    h = 1.96 * sd / math.sqrt(n)
    return m, m - h, m + h


def main():
    work, models = sys.argv[1], [os.path.basename(m.rstrip("/")) for m in sys.argv[2:]]
    print("| model | extraction | problems | exact match [95%] | − base's (paired 95%) |\n|---|---|---|---|---|")
    for flt in ("strict-match", "flexible-extract"):
        base = scores(work, models[0], flt)
        for name in models:
            s = scores(work, name, flt)
            ids = sorted(set(s) & set(base))
            m, lo, hi = mean_ci([s[i] for i in ids])
            row = f"| {name} | {flt} | {len(ids)} | {100 * m:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] |"
            if name == models[0]:
                print(row + " |")
                continue
            d, dlo, dhi = mean_ci([s[i] - base[i] for i in ids])
            print(row + f" {100 * d:+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] points |")


if __name__ == "__main__":
    main()
