"""Static activation scales on the real model: `selq calibrate` measures each
linear's input amax on text, `selq quantize --calibration` turns it into the
dialect's input scale (compressed-tensors input_global_scale = 448*6/amax,
ModelOpt input_scale = amax/(6*448), FP8 static input_scale = amax/448), and
the reference runtime loads the result and evaluates it against the base.

Checked from Python: every stored input scale equals the formula applied in
float32 to the calibration file's value (bit for bit), `selq verify` finds
nothing, and W4A4 perplexity is finite and worse than the base but not absurd.

Rounding `weighted` reads the same calibration's input second moments (the
file `selq calibrate -o` writes beside its JSON): the same formats as nearest,
other bytes than mse, verify clean, the manifest says so; a calibration
without moments, or with another moments file, is one line naming the file.
"""
import json
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "crosscheck"))
import e2e_util as E  # noqa: E402
from xref import smollm2_gguf  # noqa: E402

class StaticActivationScales(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = cls.tmp.name
        cls.base = os.path.join(t, "base")
        E.selq("import-gguf", smollm2_gguf(), cls.base)
        # Calibrated on the default mix, evaluated on held-out encyclopedia text (FOLDOC):
        # `selq eval` refuses text that shares a line with the calibration.
        cls.text = os.path.join(t, "text.txt")
        E.selq("text", "foldoc", "--max-bytes", "20000", "-o", cls.text)
        cls.calib = os.path.join(t, "calib.json")
        E.selq("calibrate", cls.base, "--calibration-tokens", "128", "--calibration-context", "64", "-o", cls.calib, "-q")
        cls.amax = E.read_json(cls.calib)["activation_amax"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def quantize(self, recipe, dialect, name):
        dst = os.path.join(self.tmp.name, name)
        E.selq("quantize", self.base, dst, "--recipe", E.recipe(recipe), "--dialect", dialect,
               "--calibration", self.calib, "--quiet")
        v = E.selq("verify", dst, "--against", self.base, "--json", check=False)
        self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr)
        return dst

    def check_scales(self, dst, suffix, dtype, shape, formula):
        heads = E.safetensors_headers(dst)
        modules = sorted(n[: -len(".weight_scale")] for n in heads if n.endswith(".weight_scale"))
        self.assertEqual(len(modules), 30 * 7)
        for m in modules:
            name = f"{m}.{suffix}"
            self.assertIn(name, heads)
            self.assertEqual(heads[name][0], dtype, name)
            self.assertEqual(heads[name][1], shape, name)
            got = E.load_tensor(dst, name, heads).float().numpy().reshape(-1)[0]
            want = formula(np.float32(self.amax[m]))
            self.assertEqual(np.float32(got), want, f"{name}: {got} vs {want} (amax {self.amax[m]})")

    def test_calibration_covers_every_linear(self):
        self.assertEqual(len(self.amax), 30 * 7)
        self.assertTrue(all(v > 0 for v in self.amax.values()))
        # q/k/v (and gate/up) read the same activations.
        self.assertEqual(self.amax["model.layers.3.self_attn.q_proj"], self.amax["model.layers.3.self_attn.v_proj"])

    def test_nvfp4_w4a4_compressed_tensors(self):
        dst = self.quantize("llama-nvfp4-w4a4", "compressed-tensors", "ct")
        self.check_scales(dst, "input_global_scale", "F32", [1], lambda a: np.float32(2688.0) / a)
        group = E.read_json(os.path.join(dst, "config.json"))["quantization_config"]["config_groups"]
        acts = [g["input_activations"] for g in group.values()]
        self.assertTrue(all(a and a["num_bits"] == 4 and a["type"] == "float" for a in acts), acts)
        # The runtime loads it (static global scale) and it is measurably lossy.
        r = E.selq("eval", self.base, dst, "--text", self.text, "--max-tokens", "128", "--context", "64",
                   "--max-prompts", "0", "--json")
        rep = json.loads(r.stdout)
        base_ppl, q_ppl = rep["base"]["perplexity"], rep["quantized"][0]["perplexity"]
        self.assertTrue(np.isfinite(q_ppl))
        self.assertGreater(q_ppl, base_ppl)
        self.assertLess(q_ppl, 3 * base_ppl)

    def test_calibration_is_recorded_and_eval_refuses_its_text(self):
        cal = E.read_json(self.calib)["text_provenance"]
        self.assertIn("Sense and Sensibility", cal["source"])
        self.assertGreater(cal["bytes"][1], 200)
        self.assertEqual(cal["shingle_words"], 16)
        self.assertGreater(len(cal["shingle_xxh3"]), 50)
        # Calibrated on cls.text itself: evaluating on it is one clear error naming the shared line.
        own = os.path.join(self.tmp.name, "own-calib.json")
        E.selq("calibrate", self.base, "--calibration-text", self.text, "--calibration-tokens", "128", "--calibration-context", "64", "-o", own, "-q")
        dst = os.path.join(self.tmp.name, "own")
        E.selq("quantize", self.base, dst, "--recipe", E.recipe("llama-nvfp4-w4a4"), "--calibration", own, "--quiet")
        manifest = E.read_json(os.path.join(dst, "selq-manifest.json"))
        self.assertEqual(manifest["calibration"]["path"], own)
        self.assertEqual(manifest["calibration"]["shingle_xxh3"], E.read_json(own)["text_provenance"]["shingle_xxh3"])
        r = E.selq("eval", self.base, dst, "--text", self.text, "--max-tokens", "64", "--context", "32",
                   "--max-prompts", "0", check=False)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("shares a run of 16 words with the calibration", r.stderr)
        self.assertIn(self.text, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_nvfp4_w4a4_modelopt(self):
        dst = self.quantize("llama-nvfp4-w4a4", "modelopt", "mo")
        self.check_scales(dst, "input_scale", "F32", [], lambda a: a / np.float32(2688.0))

    def test_fp8_static_compressed_tensors_in_model_dtype(self):
        import torch
        dst = self.quantize("llama-fp8-static", "compressed-tensors", "fp8s")
        bf16 = lambda a: np.float32(torch.tensor(float(a / np.float32(448.0)), dtype=torch.float32)  # noqa: E731
                                    .to(torch.bfloat16).float().item())
        self.check_scales(dst, "input_scale", "BF16", [1], bf16)

    def test_weighted_rounding_reads_the_moments(self):
        import torch
        j = E.read_json(self.calib)
        moments = os.path.join(self.tmp.name, j["input_moments"]["file"])
        self.assertEqual(j["input_moments"]["file"], "calib.moments.safetensors")
        from safetensors.numpy import load_file
        m = load_file(moments)
        self.assertEqual(sorted(m), sorted(self.amax))  # one [in] F32 tensor per linear
        self.assertEqual((m["model.layers.0.mlp.down_proj"].dtype, m["model.layers.0.mlp.down_proj"].shape),
                         (np.float32, (1536,)))
        # q/k/v read the same activations; each channel's mean x^2 is at most amax^2
        q, v = m["model.layers.3.self_attn.q_proj"], m["model.layers.3.self_attn.v_proj"]
        self.assertEqual(q.tobytes(), v.tobytes())
        self.assertTrue((q >= 0).all() and (q <= self.amax["model.layers.3.self_attn.q_proj"] ** 2).all())
        outs = {}
        for rounding in ("mse", "weighted"):
            dst = os.path.join(self.tmp.name, f"nvfp4-{rounding}")
            E.selq("quantize", self.base, dst, "--recipe", E.recipe("llama-nvfp4"), "--rounding", rounding,
                   "--calibration", self.calib, "--quiet")
            v = E.selq("verify", dst, "--against", self.base, "--json", check=False)
            self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr)
            outs[rounding] = dst
        hm, hw = E.safetensors_headers(outs["mse"]), E.safetensors_headers(outs["weighted"])
        self.assertEqual(hm, hw)  # the same names, dtypes and shapes
        name = "model.layers.5.mlp.down_proj.weight_scale"
        self.assertNotEqual(E.load_tensor(outs["mse"], name, hm).view(torch.uint8).numpy().tobytes(),
                            E.load_tensor(outs["weighted"], name, hw).view(torch.uint8).numpy().tobytes())
        manifest = E.read_json(os.path.join(outs["weighted"], "selq-manifest.json"))
        self.assertTrue(all(t.get("rounding") == "weighted" for t in manifest["tensors"] if "scheme" in t))
        self.assertEqual(manifest["calibration"]["path"], self.calib)

    def calibration_naming(self, name, moments_file):
        """A copy of the calibration JSON whose input_moments names another file."""
        path = os.path.join(self.tmp.name, name)
        j = E.read_json(self.calib)
        j["input_moments"]["file"] = moments_file
        with open(path, "w") as f:
            json.dump(j, f)
        return path

    def test_weighted_without_moments_is_one_line(self):
        cases = []
        # A calibration JSON whose moments file is gone.
        cases.append((self.calibration_naming("gone.json", "gone.moments.safetensors"),
                      "are missing or not a safetensors file"))
        # One whose moments file is another calibration's.
        other = os.path.join(self.tmp.name, "other.json")
        E.selq("calibrate", self.base, "--calibration-tokens", "64", "--calibration-context", "32", "-o", other, "-q")
        cases.append((self.calibration_naming("swapped.json", "other.moments.safetensors"),
                      "is not the moments file this calibration wrote"))
        # One written to stdout (no moments).
        r = E.selq("calibrate", self.base, "--calibration-tokens", "64", "--calibration-context", "32")
        stdout_json = os.path.join(self.tmp.name, "stdout.json")
        with open(stdout_json, "w") as f:
            f.write(r.stdout)
        cases.append((stdout_json, "names no input second moments"))
        cases.append((None, "needs a calibration"))
        for calib, text in cases:
            dst = os.path.join(self.tmp.name, "refused")
            args = ["quantize", self.base, dst, "--recipe", E.recipe("llama-nvfp4"), "--rounding", "weighted"]
            r = E.selq(*args, *(["--calibration", calib] if calib else []), check=False)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(text, r.stderr)
            if calib:
                self.assertIn(calib, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertFalse(os.path.exists(dst))

    def test_missing_calibration_is_one_clear_error(self):
        r = E.selq("quantize", self.base, os.path.join(self.tmp.name, "none"), "--recipe",
                   E.recipe("llama-nvfp4-w4a4"), "--quiet", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)  # bad input
        self.assertIn("--calibration", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "none")))


if __name__ == "__main__":
    E.main()
