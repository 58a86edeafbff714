"""Summarises chart.sh's eval: a Markdown table (KL, top-1, KL - nearest's paired,
with intervals) and the JSON `selq chart` draws: one series per format, x the
rounding (0 nearest, 1 mse, 2 weighted, 3 gptq), y the mean KL with its interval.
  python3 chart.py EVAL_JSON CHART_JSON > summary.md"""
import json
import sys

ROUNDINGS = ["nearest", "mse", "weighted", "gptq"]


def main(eval_path, chart_path):
    ev = json.load(open(eval_path))
    models = {m["path"].rstrip("/").split("/")[-1]: m for m in ev["quantized"]}
    paired = {(p["a"], p["b"]): p["b_minus_a"] for p in ev["paired"]}
    formats = []
    for name in models:
        fmt = name[len("q-"):name.rindex("-")]
        if fmt not in formats:
            formats.append(fmt)
    series = []
    print("| format (W4A16) | rounding | KL mean | top-1 % | KL − nearest's (paired) | ratio |")
    print("|---|---|---|---|---|---|")
    for fmt in formats:
        points = []
        near = models[f"q-{fmt}-nearest"]["intervals"]["text"]["kl_mean"]["value"]
        for x, r in enumerate(ROUNDINGS):
            m = models.get(f"q-{fmt}-{r}")
            if m is None:
                continue
            t = m["intervals"]["text"]
            kl, top1 = t["kl_mean"], t["same_top_p"]["value"] * 100
            points.append({"x": x, "y": kl["value"], "lo": kl["lo"], "hi": kl["hi"], "label": f"{fmt} {r}"})
            d = paired.get((f"q-{fmt}-nearest", f"q-{fmt}-{r}"), {}).get("kl_mean")
            diff = f"{d['value']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]" if d else ""
            print(f"| {fmt} | {r} | {kl['value']:.4f} [{kl['lo']:.4f}, {kl['hi']:.4f}] | {top1:.1f} | {diff} "
                  f"| {kl['value'] / near:.2f}× |")
        series.append({"name": fmt, "points": points})
    chart = {"title": "Mean KL to the base by rounding, W4A16 (held-out WikiText-2)",
             "x_label": "rounding: 0 nearest, 1 mse (data-free), 2 weighted (calibrated), 3 gptq",
             "y_label": "mean KL (nats/token), 95% interval", "log_y": True, "series": series}
    json.dump(chart, open(chart_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
