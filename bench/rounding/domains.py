"""Summarises bench/rounding/domains.sh: per domain, format and rounding, the
mean KL and its ratio to nearest's with the paired 95% interval of the difference.
  python3 domains.py WORKDIR DOMAIN..."""
import os
import sys

import eval_report


def main():
    work, domains = sys.argv[1], sys.argv[2:]
    print("| domain | format | rounding | KL mean [95%] | ratio to nearest | KL − nearest's (paired 95%) |")
    print("|---|---|---|---|---|---|")
    for d in domains:
        rep, kl, paired = eval_report.load(work, d)
        for fmt in (os.environ.get("FORMATS") or "nvfp4 mxfp4 int4-g64").split():
            near = kl[f"q-{fmt}-nearest"]["kl_mean"]
            for r in ("nearest", "mse", "gptq"):
                q = kl[f"q-{fmt}-{r}"]
                ci = q["intervals"]["text"]["kl_mean"]
                row = f"| {d} | {fmt} | {r} | {q['kl_mean']:.4f} [{ci['lo']:.4f}, {ci['hi']:.4f}] |"
                if r == "nearest":
                    print(row + " 1 | |")
                    continue
                p = paired[(f"q-{fmt}-nearest", f"q-{fmt}-{r}")]
                print(row + f" {q['kl_mean'] / near:.2f}× | {p['value']:+.4f} [{p['lo']:+.4f}, {p['hi']:+.4f}] |")
        print(f"| {d} | | | text: {rep['text_source'][:60]}, {rep['uncertainty']['windows']} windows | | |")


if __name__ == "__main__":
    main()
