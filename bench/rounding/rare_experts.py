"""Summarises bench/rounding/rare_experts.sh: per held-out domain, each model's mean KL
with its 95% interval, and the paired 95% interval of its difference from nearest's and
from gptq with no prior; then the experts' calibration tokens (from a manifest).
  python3 rare_experts.py WORKDIR DOMAIN..."""
import json
import os
import statistics
import sys

import eval_report


def main():
    work, domains = sys.argv[1], sys.argv[2:]
    print("| domain | model | KL mean [95%] | − nearest's (paired 95%) | − prior 0's (paired 95%) |")
    print("|---|---|---|---|---|")
    for d in domains:
        rep, kl, paired = eval_report.load(work, d)

        def diff(a, b):
            if a == b:
                return ""
            p = paired.get((a, b))
            sign = 1
            if p is None:
                p, sign = paired[(b, a)], -1
            lo, hi = sorted((sign * p["lo"], sign * p["hi"]))
            return f"{sign * p['value']:+.4f} [{lo:+.4f}, {hi:+.4f}]"

        for m in sorted(kl, key=lambda m: (m != "q-nearest", m)):
            ci = kl[m]["intervals"]["text"]["kl_mean"]
            print(f"| {d} | {m} | {kl[m]['kl_mean']:.4f} [{ci['lo']:.4f}, {ci['hi']:.4f}] | {diff('q-nearest', m)} | "
                  f"{diff('q-gptq-p0', m) if m != 'q-nearest' else ''} |")
    man = json.load(open(os.path.join(work, "q-gptq-p0.25", "selq-manifest.json")))["gptq_calibration"]
    tok = [n for m, n in man["module_tokens"].items() if m.endswith("gate_proj")]
    print(f"\nrouted experts: {len(tok)}, calibration tokens min {min(tok)}, median {statistics.median(tok)}, "
          f"max {max(tok)}; no token: {sum(1 for n in tok if n == 0)}; with pseudo-tokens: "
          f"{sum(1 for m in man.get('expert_prior', {}) if m.endswith('gate_proj'))}")


if __name__ == "__main__":
    main()
