"""The table of bench/serve/gsm8k.sh: per model, GSM8K exact match (strict and flexible
extraction) with its 95% Wilson interval (a proportion of few problems: the normal
approximation would cross 0 and 100%), and the paired difference to the first model (the
base) over the same problems, with its 95% interval (normal approximation of the mean of
per-problem differences) and the problems each got right alone.
   python3 gsm8k_table.py WORKDIR BASE [QUANT...]"""
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


def wilson(xs, z=1.96):
    n = len(xs)
    p = sum(xs) / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, c - h, c + h


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    h = 1.96 * sd / math.sqrt(n)
    return m, m - h, m + h


def main():
    work, models = sys.argv[1], [os.path.basename(m.rstrip("/")) for m in sys.argv[2:]]
    print("| model | extraction | problems | exact match [95% Wilson] | − base's (paired 95%) | right only here / only in the base |\n"
          "|---|---|---|---|---|---|")
    for flt in ("strict-match", "flexible-extract"):
        base = scores(work, models[0], flt)
        for name in models:
            s = scores(work, name, flt)
            ids = sorted(set(s) & set(base))
            m, lo, hi = wilson([s[i] for i in ids])
            row = f"| {name} | {flt} | {len(ids)} | {100 * m:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] |"
            if name == models[0]:
                print(row + " | |")
                continue
            d, dlo, dhi = mean_ci([s[i] - base[i] for i in ids])
            gained = sum(1 for i in ids if s[i] > base[i])
            lost = sum(1 for i in ids if s[i] < base[i])
            print(row + f" {100 * d:+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] points | {gained} / {lost} |")


if __name__ == "__main__":
    main()
