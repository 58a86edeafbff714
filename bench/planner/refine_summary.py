#!/usr/bin/env python3
"""Summarises bench/planner/refine.sh: per tier and budget, the refinement's
loss on calibration text (start -> end) and the held-out KL of the solver's
mix and of the refined one, with their paired difference and its 95% interval."""
import json
import os
import sys


def main():
    out = sys.argv[1]
    ev = json.load(open(os.path.join(out, "eval.json")))
    kl = {os.path.basename(q["path"]): q["intervals"]["text"]["kl_mean"] for q in ev["quantized"]}
    bpw = {os.path.basename(q["path"]): q["linear_bits_per_weight"] for q in ev["quantized"]}
    paired = {(os.path.basename(p["a"]), os.path.basename(p["b"])): p["b_minus_a"]["kl_mean"] for p in ev["paired"]}
    print(f"Held-out: {ev['text_source']}, {ev['text_tokens']} tokens, context {ev['context']}.\n")
    print("| tier, budget | evaluations (kept) | calibration KL start → end | held-out KL solver | held-out KL refined | refined − solver [95% CI] |")
    print("|---|---:|---|---|---|---|")
    for name in sorted(kl):
        if name.endswith("-refined") or name + "-refined" not in kl:
            continue
        ref = name + "-refined"
        plan = json.load(open(os.path.join(out, "recipes", ref + ".plan.json")))["refine"]
        d = paired.get((name, ref))
        if d is None:
            e = paired[(ref, name)]
            d = {"value": -e["value"], "lo": -e["hi"], "hi": -e["lo"]}
        a, b = kl[name], kl[ref]
        print(f"| {name} ({bpw[name]:.3f} → {bpw[ref]:.3f} bpw) | {plan['evaluations']} ({plan['kept']}) | "
              f"{plan['start_loss']:.4f} → {plan['loss']:.4f} | {a['value']:.4f} [{a['lo']:.4f}, {a['hi']:.4f}] | "
              f"{b['value']:.4f} [{b['lo']:.4f}, {b['hi']:.4f}] | {d['value']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] |")


if __name__ == "__main__":
    main()
