#!/usr/bin/env python3
"""Summarises bench/planner/front.sh's run: a markdown table of every model
(bits per weight, held-out mean KL with its 95% bootstrap interval), the
paired comparisons the issue's goals are stated in, how well each sensitivity
tier's predicted loss ranks the planned mixes' measured KL (Spearman), and
front.json for `selq chart`."""
import glob
import json
import os
import sys

TIERS = ["data-free", "activation-aware", "measured"]


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def predicted(sens, units, tier):
    prior = sens.get("activation_prior", {})
    by_name = {u["name"]: u for u in sens["units"]}
    total = 0.0
    for name, cand in units.items():
        s = by_name[name]["scores"][cand]
        if cand == "bf16":
            continue
        if tier == "data-free":
            total += s["weight_nmse"] + prior.get(cand, 0.0)
        elif tier == "activation-aware":
            total += s["output_nmse"]
        else:
            total += s["kl"]
    return total


def main():
    out = sys.argv[1]
    mid = sys.argv[2] if len(sys.argv) > 2 else "6.0"  # the budget of the blind comparisons
    ev = json.load(open(os.path.join(out, "eval.json")))
    sens = json.load(open(os.path.join(out, "sens.json")))
    rows = {}
    for q in ev["quantized"]:
        name = os.path.basename(q["path"])
        kl = q["intervals"]["text"]["kl_mean"]
        rows[name] = {"bpw": q["linear_bits_per_weight"], "kl": kl["value"], "lo": kl["lo"], "hi": kl["hi"],
                      "top": q["intervals"]["text"]["same_top_p"]["value"], "path": q["path"]}
    paired = {(os.path.basename(p["a"]), os.path.basename(p["b"])): p["b_minus_a"]["kl_mean"] for p in ev["paired"]}

    def diff(a, b):  # KL(b) - KL(a) with its interval
        if (a, b) in paired:
            d = paired[(a, b)]
            return d["value"], d["lo"], d["hi"]
        d = paired[(b, a)]
        return -d["value"], -d["hi"], -d["lo"]

    print(f"Held-out text: {ev['text_source']}, {ev['text_tokens']} tokens, context {ev['context']}; "
          f"sensitivity on {sens.get('text_provenance', {}).get('source', '?')} "
          f"({sens['seconds']:.0f} s, tier {sens['tier']}).\n")
    print("| model | bits/weight | mean KL [95% CI] | same top |")
    print("|---|---:|---|---:|")
    for name in sorted(rows, key=lambda n: (not n.startswith("uniform"), n.split("-")[0], rows[n]["bpw"])):
        r = rows[name]
        print(f"| {name} | {r['bpw']:.3f} | {r['kl']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}] | {r['top']:.3f} |")

    nv, fp8 = rows["uniform-llama-nvfp4"], rows["uniform-llama-fp8"]
    print("\nGoals (paired differences: KL(planned) - KL(reference), 95% CI):\n")
    for tier in TIERS:
        name = f"{tier}-4.5"
        if name in rows:
            d = diff("uniform-llama-nvfp4", name)
            print(f"- {tier} at 4.5 bpw vs uniform NVFP4 ({nv['bpw']:.3f} bpw, KL {nv['kl']:.4f}): "
                  f"{d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}]")
    t = (float(mid) - nv["bpw"]) / (fp8["bpw"] - nv["bpw"])
    interp = nv["kl"] + t * (fp8["kl"] - nv["kl"])
    blind = f"blind-ends-{mid}"
    print(f"- sensitivity-blind interpolation NVFP4→FP8 at {mid} bpw: KL {interp:.4f}")
    if blind in rows:
        print(f"- llama.cpp-style ends mix ({rows[blind]['bpw']:.3f} bpw): KL {rows[blind]['kl']:.4f}")
    for tier in TIERS:
        name = f"{tier}-{mid}"
        if name in rows:
            r = rows[name]
            line = f"- {tier} at {mid} bpw: KL {r['kl']:.4f}, {100 * (1 - r['kl'] / interp):.0f}% below the interpolation"
            if blind in rows:
                d = diff(blind, name)
                line += f"; vs the ends mix {d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}]"
            print(line)
    mix = rows.get("uniform-llama-mix")
    for tier in TIERS:
        name = f"{tier}-7.7"
        if mix and name in rows:
            r = rows[name]
            print(f"- {tier} at 7.7 bpw: KL {r['kl']:.4f} = {r['kl'] / mix['kl']:.2f} x llama-mix's "
                  f"({mix['bpw']:.3f} bpw, KL {mix['kl']:.4f})")

    print("\nHow well each tier's predicted loss ranks the measured KL of the planned mixes (Spearman):\n")
    plans = sorted(glob.glob(os.path.join(out, "recipes", "*.plan.json")))
    units_of = {os.path.basename(p)[:-len(".plan.json")]: json.load(open(p))["mix"]["units"] for p in plans}
    names = [n for n in units_of if n in rows]
    measured_kl = [rows[n]["kl"] for n in names]
    for tier in TIERS:
        pred = [predicted(sens, units_of[n], tier) for n in names]
        print(f"- {tier}: {spearman(pred, measured_kl):.3f} over {len(names)} mixes")

    series = []
    for tier in TIERS:
        pts = [{"x": rows[n]["bpw"], "y": rows[n]["kl"], "lo": rows[n]["lo"], "hi": rows[n]["hi"]}
               for n in sorted(rows, key=lambda n: rows[n]["bpw"]) if n.startswith(tier + "-")]
        series.append({"name": f"planned ({tier})", "points": pts})
    for name, label in [("uniform-llama-fp8", "uniform FP8 W8A8"), ("uniform-llama-nvfp4", "uniform NVFP4 W4A16"),
                        ("uniform-llama-mxfp4", "uniform MXFP4 W4A4"), ("uniform-llama-mix", "llama-mix (hand)"),
                        (f"blind-ends-{mid}", "ends mix (blind)")]:
        if name in rows:
            r = rows[name]
            series.append({"name": label, "points": [{"x": r["bpw"], "y": r["kl"], "lo": r["lo"], "hi": r["hi"]}]})
    chart = {"title": f"Planned mixes vs uniform schemes ({ev['text_tokens']} held-out tokens)",
             "x_label": "stored bits per linear weight", "y_label": "mean KL to BF16 (nats)", "log_y": True,
             "series": series}
    json.dump(chart, open(os.path.join(out, "front.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
