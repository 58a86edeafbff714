"""Static activation scales of routed experts that no calibration token reached.

An engine loads a missing per-expert input scale as 0 or leaves it at its
initial value, and a calibration that writes 0 or NaN for an expert without
tokens turns some prompts' outputs into NaN. Here a synthetic DeepSeek-V3 (its
router: sigmoid scores with a correction bias, expert groups) is calibrated on
8 tokens, so that most of its 16 routed experts get none, and quantized in every
dialect that writes static activation scales: FP8 static in compressed-tensors,
Quark and ModelOpt, NVFP4 W4A4 in compressed-tensors and ModelOpt.

Checked from Python: every expert linear has its input scale, finite and
positive; each is the dialect's formula applied in float32 to the calibration's
amax; an unreached expert's amax is the largest of the same projection among
its layer's reached experts (calibrate's rule, recomputed here from theirs).
The manifest records each expert's calibration tokens and the unreached ones,
the HTML report counts them per layer, and selq's runtime evaluates the W4A4
checkpoint to a finite KL. vLLM's own loader reads the FP8 ones:
bench/vllm/moe_static_scales.py, run by tests/e2e/vllm.sh.
"""
import json
import os
import re
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_util as E  # noqa: E402

EXPERTS = 16
LAYER = "model.layers.1.mlp.experts"  # the MoE layer (layer 0 is dense)
TEXT = "The mill closed in 1923."  # 24 bytes; the byte-level tokenizer's first 8 tokens


def bf16(x):
    """float32 -> bfloat16 -> float32, by torch (compressed-tensors stores FP8 scales in the model's dtype)."""
    import torch
    return np.float32(torch.tensor(float(x), dtype=torch.float32).to(torch.bfloat16).float().item())


# (recipe's scheme and activations, dialect) -> the input scale's name and its value from amax.
CASES = {
    ("fp8-tensor", "fp8-static", "compressed-tensors"): ("input_scale", lambda a: bf16(a / np.float32(448))),
    ("fp8-tensor", "fp8-static", "quark"): ("input_scale", lambda a: a / np.float32(448)),
    ("fp8-tensor", "fp8-static", "modelopt"): ("input_scale", lambda a: a / np.float32(448)),
    ("nvfp4", "nvfp4", "compressed-tensors"): ("input_global_scale", lambda a: np.float32(2688) / a),
    ("nvfp4", "nvfp4", "modelopt"): ("input_scale", lambda a: a / np.float32(2688)),
}


class UnreachedExperts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = cls.tmp.name
        cls.base = os.path.join(t, "base")
        E.selq("synth", "--arch", "deepseek-v3", "--scale", "16", "--layers", "2", "--experts", str(EXPERTS),
               "--vocab", "512", cls.base)
        cls.text = os.path.join(t, "text.txt")
        with open(cls.text, "w") as f:
            f.write(TEXT)
        cls.calib = os.path.join(t, "calib.json")
        E.selq("calibrate", cls.base, "--calibration-text", cls.text, "--calibration-tokens", "8",
               "--calibration-context", "8", "-o", cls.calib, "-q")
        cls.cal = E.read_json(cls.calib)
        cls.out = {}
        for (scheme, acts, dialect) in CASES:
            dst = os.path.join(t, f"{scheme}-{dialect}")
            recipe = os.path.join(t, f"{scheme}-{dialect}.yaml")
            with open(recipe, "w") as f:
                f.write(f"name: moe-static\ndialect: {dialect}\ndefault:\n  scheme: {scheme}\n"
                        f"  options: {{activations: {acts}}}\n")
            E.selq("quantize", cls.base, dst, "--recipe", recipe, "--calibration", cls.calib, "--quiet")
            cls.out[(scheme, acts, dialect)] = dst

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_most_experts_get_no_token_and_take_the_layers_largest_amax(self):
        tokens, unreached, amax = self.cal["expert_tokens"], self.cal["unreached_experts"], self.cal["activation_amax"]
        self.assertEqual(len(tokens), EXPERTS)
        self.assertEqual(sum(tokens.values()), 8 * 2)  # 8 tokens, 2 experts each at this scale
        empty = {e for e, n in tokens.items() if n == 0}
        self.assertGreaterEqual(len(empty), EXPERTS // 2)
        self.assertEqual({m.rsplit(".", 1)[0] for m in unreached}, empty)
        for m, source in unreached.items():
            proj = m.rsplit(".", 1)[1]
            reached = [amax[f"{e}.{proj}"] for e, n in tokens.items() if n > 0]
            with self.subTest(module=m):
                self.assertEqual(amax[m], max(reached))
                self.assertEqual(amax[source], max(reached))
                self.assertNotIn(source, unreached)

    def test_every_expert_has_a_finite_positive_scale_in_every_dialect(self):
        amax = self.cal["activation_amax"]
        pattern = re.compile(re.escape(LAYER) + r"\.\d+\.(gate|up|down)_proj$")
        for case, dst in self.out.items():
            suffix, formula = CASES[case]
            heads = E.safetensors_headers(dst)
            modules = sorted({n.rsplit(".", 1)[0] for n in heads if pattern.match(n.rsplit(".", 1)[0])})
            self.assertEqual(len(modules), EXPERTS * 3, case)
            for m in modules:
                with self.subTest(case=case, module=m):
                    name = f"{m}.{suffix}"
                    self.assertIn(name, heads)
                    got = np.float32(E.load_tensor(dst, name, heads).float().numpy().reshape(-1)[0])
                    self.assertTrue(np.isfinite(got) and got > 0, f"{name}: {got}")
                    self.assertEqual(got, formula(np.float32(amax[m])), f"{name}: amax {amax[m]}")

    def test_manifest_and_report_count_each_experts_tokens(self):
        dst = self.out[("fp8-tensor", "fp8-static", "compressed-tensors")]
        cal = E.read_json(os.path.join(dst, "selq-manifest.json"))["calibration"]
        self.assertEqual(cal["expert_tokens"], self.cal["expert_tokens"])
        self.assertEqual(cal["unreached_experts"], self.cal["unreached_experts"])
        self.assertEqual(cal["unreached_expert_rule"], self.cal["unreached_expert_rule"])
        html = open(os.path.join(dst, "selq-report.html"), encoding="utf-8").read()
        counts = sorted(self.cal["expert_tokens"].values())
        none = counts.count(0)
        row = (f"<tr><td>{LAYER}</td><td>{EXPERTS}</td><td>{counts[0]}</td><td>{counts[EXPERTS // 2]}</td>"
               f"<td>{counts[-1]}</td><td><b>{none}</b></td></tr>")
        self.assertIn("Static activation scales: calibration", html)
        self.assertIn(row, html)

    def test_runtime_evaluates_the_w4a4_moe(self):
        dst = self.out[("nvfp4", "nvfp4", "compressed-tensors")]
        text = os.path.join(self.tmp.name, "eval.txt")
        with open(text, "w") as f:
            f.write("A different sentence, for the evaluation only: the river froze early that year. " * 4)
        r = E.selq("eval", self.base, dst, "--text", text, "--max-tokens", "64", "--context", "32",
                   "--max-prompts", "0", "--json", "--quiet")
        q = json.loads(r.stdout)["quantized"][0]
        self.assertTrue(np.isfinite(q["kl_mean"]) and q["kl_mean"] > 0, q)


if __name__ == "__main__":
    E.main()
