#!/usr/bin/env python
"""vLLM's own loader on selq's static-FP8 MoE checkpoints whose routed experts
mostly got no calibration token (bench/vllm/setup_vllm.sh's CPU build).

A synthetic DeepSeek-V3 (selq synth: 16 routed experts, the real router) is
calibrated on 8 tokens and quantized FP8 per tensor with static FP8
activations in compressed-tensors, Quark and ModelOpt. vLLM builds the model
and runs its weight loader, which maps each expert's gate/up/down input_scale
into the fused MoE layer's per-expert w13_input_scale and w2_input_scale (and
refuses gate and up scales that differ). vLLM's CPU build has no static FP8
kernel (static_scaled_fp8_quant is a CUDA op), so the engine would stop in the
step after loading, process_weights_after_loading: this script replaces that
step with one that records every input scale parameter as loaded, then stops.

Checked per dialect: every routed expert's loaded scales are finite, positive
and equal to the ones in selq's files (none left at vLLM's initial value),
and so are every other linear's.

usage: ~/.cache/selq/vllm-venv/bin/python bench/vllm/moe_static_scales.py --selq build/release/src/selq --work DIR
Exit status 0 when every dialect loads and agrees, 1 otherwise; a JSON line per dialect.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys

from crosscheck import selq_run  # beside this script; importing it also sets vLLM's CPU environment

DIALECTS = ("compressed-tensors", "quark", "modelopt")
EXPERTS = 16
TEXT = "The mill closed in 1923."  # 8 byte-level tokens: most of the 16 experts get none


class Loaded(Exception):
    """Raised once the loader's output is recorded: the engine need not go on."""


def loaded_scales(model_dir, out_json):
    """In this process (no engine or worker processes), vLLM builds the model and
    loads its weights; the input scale parameters as loaded go to out_json."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm.model_executor.model_loader.base_loader as base_loader
    if not hasattr(base_loader, "process_weights_after_loading"):
        raise RuntimeError("this vLLM's loader has no process_weights_after_loading step to stop at")

    def record(model, model_config, target_device):
        got = {n: p.detach().float().flatten().tolist() for n, p in model.named_parameters()
               if n.endswith("input_scale")}
        with open(out_json, "w") as f:
            json.dump(got, f)
        raise Loaded()

    base_loader.process_weights_after_loading = record
    from vllm import LLM
    try:
        LLM(model=model_dir, dtype="bfloat16", enforce_eager=True, max_model_len=64,
            distributed_executor_backend="uni")
    except Exception:  # noqa: BLE001 - Loaded, wrapped or not by the engine
        if not os.path.exists(out_json):
            raise


def file_scales(model_dir):
    """Every '*.input_scale' tensor in the checkpoint's safetensors files, as floats."""
    from safetensors import safe_open
    out = {}
    for path in glob.glob(os.path.join(model_dir, "*.safetensors")):
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                if k.endswith(".input_scale"):
                    out[k] = f.get_tensor(k).float().flatten().tolist()
    return out


def compare(loaded, files):
    """Problems found: an expert's loaded scale that is not the file's, or not finite and positive."""
    problems = []
    for name, values in loaded.items():
        if not all(math.isfinite(v) and v > 0 for v in values):
            problems.append(f"{name}: {values}")
        if not name.endswith(("w13_input_scale", "w2_input_scale")):  # the fused MoE layer's, per expert
            continue
        layer = name.split(".mlp.")[0]
        proj = ("gate_proj", "up_proj") if "w13_input_scale" in name else ("down_proj",)
        for e, v in enumerate(values):
            for p in proj:
                want = files.get(f"{layer}.mlp.experts.{e}.{p}.input_scale")
                if want is None or want[0] != v:
                    problems.append(f"{name}[{e}] = {v}, the file's {p}: {want}")
    experts = [n for n in loaded if n.endswith("w13_input_scale") or n.endswith("w2_input_scale")]
    if len(experts) != 2:
        problems.append(f"expected one MoE layer's w13 and w2 input scales, vLLM loaded {experts}")
    elif any(len(loaded[n]) != EXPERTS for n in experts):
        problems.append(f"expected {EXPERTS} experts' scales: {[len(loaded[n]) for n in experts]}")
    return problems


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        loaded_scales(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--selq", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    base, text, cal = (os.path.join(a.work, n) for n in ("moe-bf16", "moe-text.txt", "moe-calib.json"))
    if not os.path.exists(base):
        selq_run(a.selq, "synth", "--arch", "deepseek-v3", "--scale", "16", "--layers", "2", "--experts", EXPERTS,
                 "--vocab", "512", base)
    with open(text, "w") as f:
        f.write(TEXT)
    selq_run(a.selq, "calibrate", base, "--calibration-text", text, "--calibration-tokens", "8",
             "--calibration-context", "8", "-o", cal, "-q")
    unreached = {m.rsplit(".", 1)[0] for m in json.load(open(cal))["unreached_experts"]}
    ok = True
    for dialect in DIALECTS:
        row = {"case": f"moe-fp8-static-{dialect}", "unreached_experts": len(unreached)}
        try:
            recipe, dst = os.path.join(a.work, f"moe-{dialect}.yaml"), os.path.join(a.work, f"moe-{dialect}")
            with open(recipe, "w") as f:
                f.write(f"name: moe-fp8-static\ndialect: {dialect}\ndefault:\n  scheme: fp8-tensor\n"
                        "  options: {activations: fp8-static}\n")
            selq_run(a.selq, "quantize", base, dst, "--recipe", recipe, "--calibration", cal, "-q", "--force")
            out_json, log = os.path.join(a.work, f"moe-{dialect}.loaded.json"), os.path.join(a.work, f"moe-{dialect}.log")
            if os.path.exists(out_json):
                os.remove(out_json)
            with open(log, "w") as lf:
                subprocess.run([sys.executable, __file__, "--one", dst, out_json], stdout=lf, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=900)
            if not os.path.exists(out_json):
                tail = open(log, errors="replace").read().splitlines()[-20:]
                raise RuntimeError("vLLM did not get through its weight loader:\n" + "\n".join(tail))
            problems = compare(json.load(open(out_json)), file_scales(dst))
            row.update(ok=not problems and len(unreached) >= EXPERTS // 2, problems=problems[:5],
                       status="loaded, every expert's input scale as written")
        except Exception as e:  # noqa: BLE001 - recorded per case
            row.update(ok=False, error=f"{type(e).__name__}: {str(e)[-1500:]}")
        ok = ok and row["ok"]
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
