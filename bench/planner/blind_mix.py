#!/usr/bin/env python3
"""A sensitivity-blind mix in llama.cpp's manner: FP8 W8A8 for whole decoder
layers taken from the two ends inwards (0, N-1, 1, N-2, ...), NVFP4 weight-only
elsewhere, as many FP8 layers as fit in --bpw (sizes from `selq plan --json`)."""
import argparse
import json
import subprocess
import tempfile


def recipe(fp8_layers):
    lines = ["name: blind-ends", "dialect: compressed-tensors", "rules:"]
    if fp8_layers:
        alt = "|".join(str(l) for l in sorted(fp8_layers))
        lines += [f"  - match: 're:model\\.layers\\.({alt})\\..*_proj'",
                  "    scheme: fp8-channel", "    options: {activations: fp8-per-token}"]
    lines += ["  - match: 're:model\\.layers\\.\\d+\\..*_proj'", "    scheme: nvfp4", "default: null"]
    return "\n".join(lines) + "\n"


def bpw(selq, src, text):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        out = subprocess.run([selq, "plan", src, "--recipe", f.name, "--json"], check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out)["bits_per_weight"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--bpw", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--selq", default="build/release/src/selq")
    a = ap.parse_args()
    layers = json.load(open(f"{a.src}/config.json"))["num_hidden_layers"]
    order = [x for pair in zip(range(layers), reversed(range(layers))) for x in pair]
    order = list(dict.fromkeys(order))
    chosen = []
    for l in order:
        if bpw(a.selq, a.src, recipe(chosen + [l])) > a.bpw:
            break
        chosen.append(l)
    text = recipe(chosen)
    open(a.out, "w").write(f"# FP8 layers {sorted(chosen)}: {bpw(a.selq, a.src, text):.4f} bpw\n" + text)


if __name__ == "__main__":
    main()
