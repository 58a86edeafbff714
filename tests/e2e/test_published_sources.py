"""Checkpoints other tools published, as sources of every subcommand (issue 32).

The peers' outputs are made here by the peers themselves or, for the native
formats, written as those projects publish them:

* AMD Quark 0.13 (seed 003's tool), `direct_quantize_checkpoint` of SmolLM2 with
  its own `llama` template: MLP MXFP4 W4A4, attention left in BF16. Its config
  carries fields selq does not write (block_size, zero_point_type,
  enable_buffer_reuse, max_input_numel, target_device, kv_cache_post_rope, ...).
  inspect, verify (every MLP checked), eval (KL equal to selq's own output of the
  same values), an in-place FP8 attention upgrade, requantize.
* DeepSeek-V3's native block FP8 (quant_method "fp8", weight_scale_inv): verify
  checks every module, eval equals the compressed-tensors form of the same bytes,
  an in-place upgrade into a dialect that cannot describe it is refused before a
  byte changes.
* A transformers-5 config (rope_parameters, dtype) evaluates exactly as its
  transformers-4 form; a config without RoPE is refused by name.
* verify: a config entry that names no module is a note (exit 0), a scheme
  selq cannot read is a finding (exit 1), never "0 checked, exit 0".
* A recipe asking for a format pre-quantized modules are not in, without
  `requantize: true`: a warning naming them, an error with --strict.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crosscheck"))
import e2e_util as E  # noqa: E402
from test_requantize import write_recipe  # noqa: E402
from xref import smollm2_gguf  # noqa: E402

LAYERS = 30  # SmolLM2-135M
MLP = LAYERS * 3
ATTENTION = LAYERS * 4

QUARK_SCRIPT = """
import sys
from quark.torch import LLMTemplate, ModelQuantizer
config = LLMTemplate.get("llama").get_config(scheme="mxfp4", exclude_layers=["lm_head", "*self_attn*"])
ModelQuantizer(config).direct_quantize_checkpoint(pretrained_model_path=sys.argv[1], save_path=sys.argv[2],
                                                  device="cpu")
"""

# selq's recipe for what Quark was asked: MLP MXFP4 with dynamic MXFP4 inputs, the rest BF16.
SELQ_MLP_MXFP4 = """name: mlp-mxfp4
arch: llama
dialect: quark
rules:
  - match: ['*.mlp.*']
    scheme: mxfp4
    options: {activations: mxfp4-dynamic}
"""

ATTENTION_FP8 = """name: attn-fp8
arch: llama
dialect: {dialect}
rules:
  - match: ['*.self_attn.*']
    scheme: fp8-channel
    options: {{activations: fp8-per-token}}
"""


def eval_kl(base, *quantized):
    r = E.selq("eval", base, *quantized, "--max-tokens", "128", "--context", "64", "--max-prompts", "0",
               "--no-base-cache", "--json")
    return [q["kl_mean"] for q in json.loads(r.stdout)["quantized"]]


def verify(directory, *extra):
    return E.selq("verify", directory, *extra, check=False)


def checked_modules(v):
    """The 'N quantized modules checked' of verify's last line."""
    last = v.stdout.strip().splitlines()[-1]
    return int(last.split(" quantized modules checked")[0].rsplit(" ", 1)[1])


def edit_config(directory, fn):
    p = os.path.join(directory, "config.json")
    c = E.read_json(p)
    fn(c)
    with open(p, "w") as f:
        json.dump(c, f, indent=2)


def to_native_fp8(ct, dst):
    """selq's compressed-tensors block FP8, renamed to DeepSeek-V3's own layout:
    weight_scale -> weight_scale_inv (F32, the same values: q * scale), and the
    config DeepSeek-V3 ships."""
    from safetensors.torch import load_file, save_file
    import torch
    os.makedirs(dst)
    for name in os.listdir(ct):
        p = os.path.join(ct, name)
        if name.endswith(".safetensors"):
            t = load_file(p)
            out = {}
            for k, v in t.items():
                w = k[: -len("_scale")]
                if k.endswith(".weight_scale") and w in t and t[w].dtype == torch.float8_e4m3fn:
                    out[k + "_inv"] = v.float()
                else:
                    out[k] = v
            save_file(out, os.path.join(dst, name), metadata={"format": "pt"})
        elif name == "config.json":
            c = E.read_json(p)
            c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                        "weight_block_size": [128, 128]}
            with open(os.path.join(dst, name), "w") as f:
                json.dump(c, f, indent=2)
        elif not name.startswith("selq-"):
            shutil.copy(p, os.path.join(dst, name))


class PublishedSources(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = cls.tmp.name
        cls.base = os.path.join(t, "base")
        E.selq("import-gguf", smollm2_gguf(), cls.base)
        py = os.path.join(os.environ.get("SELQ_VENV", os.path.expanduser("~/.cache/selq/venv")), "bin", "python")
        cls.quark = os.path.join(t, "quark")
        r = subprocess.run([py, "-c", QUARK_SCRIPT, cls.base, cls.quark], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError("Quark failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
        cls.selq_mxfp4 = os.path.join(t, "selq-mxfp4")
        E.selq("quantize", cls.base, cls.selq_mxfp4, "--recipe",
               write_recipe(os.path.join(t, "mlp.yaml"), SELQ_MLP_MXFP4), "--quiet")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, *p):
        return os.path.join(self.tmp.name, *p)

    def copy(self, src, name):
        dst = self.path(name)
        shutil.copytree(src, dst)
        return dst

    def recipe(self, name, text):
        return write_recipe(self.path(name + ".yaml"), text)

    # ---- AMD Quark 0.13 ----

    def test_quark_config_carries_fields_selq_does_not_write(self):
        qc = E.read_json(os.path.join(self.quark, "config.json"))["quantization_config"]
        self.assertEqual(qc["version"], "0.13")
        w = qc["global_quant_config"]["weight"]
        for field in ("block_size", "zero_point_type", "enable_buffer_reuse", "max_input_numel"):
            self.assertIn(field, w)
        self.assertIn("kv_cache_post_rope", qc)

    def test_quark_inspect_and_verify(self):
        i = E.selq("inspect", self.quark)
        self.assertIn("mlp.down_proj                            U8 + U8 weight_scale", i.stdout)
        v = verify(self.quark)
        self.assertEqual(v.returncode, 0, v.stdout[-3000:])
        self.assertEqual(checked_modules(v), MLP, v.stdout[-500:])

    def test_quark_values_and_kl_equal_selq_own(self):
        qh, sh = E.safetensors_headers(self.quark), E.safetensors_headers(self.selq_mxfp4)
        mlp = [n for n in qh if ".mlp." in n]
        self.assertEqual(len(mlp), MLP * 2)  # weight + weight_scale
        signed_zeros = 0
        for n in mlp:
            self.assertEqual(qh[n][:2], sh[n][:2], n)
            q, s = E.load_tensor(self.quark, n, qh).numpy(), E.load_tensor(self.selq_mxfp4, n, sh).numpy()
            if n.endswith(".weight_scale"):
                self.assertTrue((q == s).all(), n)
                continue
            # The same E2M1 codes but the sign of zero: selq keeps a negative input's
            # sign (0x8, as compressed-tensors packs it), Quark writes 0x0.
            qn, sn = np.stack([q & 15, q >> 4], -1), np.stack([s & 15, s >> 4], -1)
            d = qn != sn
            self.assertTrue(((qn[d] == 0) & (sn[d] == 8)).all(), n)
            signed_zeros += int(d.sum())
        self.assertGreater(signed_zeros, 0)
        kl_quark, kl_selq = eval_kl(self.base, self.quark, self.selq_mxfp4)
        self.assertGreater(kl_quark, 0)
        self.assertEqual(kl_quark, kl_selq)

    def test_quark_in_place_attention_upgrade(self):
        work = self.copy(self.quark, "quark-upgrade")
        r = self.recipe("attn-quark", ATTENTION_FP8.format(dialect="quark"))
        E.selq("plan", work, "--recipe", r)
        E.selq("quantize", "--in-place", work, "--recipe", r, "--quiet")
        v = verify(work)
        self.assertEqual(v.returncode, 0, v.stdout[-3000:])
        self.assertEqual(checked_modules(v), MLP + ATTENTION, v.stdout[-500:])
        (kl,) = eval_kl(self.base, work)
        (kl_mlp_only,) = eval_kl(self.base, self.quark)
        self.assertGreater(kl, kl_mlp_only)  # FP8 attention adds a little error

    def test_upgrade_the_dialect_cannot_express_fails_before_writing(self):
        # compressed-tensors has no form for Quark's pre-quantized MLP modules.
        work = self.copy(self.quark, "quark-ct")
        r = self.recipe("attn-ct", ATTENTION_FP8.format(dialect="compressed-tensors"))
        before = E.tree_bytes(work)
        p = E.selq("plan", work, "--recipe", r, check=False)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        q = E.selq("quantize", "--in-place", work, "--recipe", r, "--quiet", check=False)
        self.assertEqual(q.returncode, 2, q.stderr)
        self.assertEqual(len(q.stderr.strip().splitlines()), 1, q.stderr)
        self.assertEqual(p.stderr.strip().split(": error: ")[-1], q.stderr.strip().split(": error: ")[-1])
        self.assertEqual(E.tree_bytes(work), before)  # nothing written, not even the journal

    def test_quark_requantize(self):
        r = self.recipe("req", "name: req\narch: llama\ndialect: compressed-tensors\nrequantize: true\n"
                               "rules:\n  - match: ['*.mlp.*']\n    scheme: nvfp4\n")
        dst = self.path("quark-nvfp4")
        E.selq("quantize", self.quark, dst, "--recipe", r, "--quiet")
        v = verify(dst)
        self.assertEqual(v.returncode, 0, v.stdout[-3000:])
        self.assertEqual(checked_modules(v), MLP)

    def test_pass_through_warns_and_strict_refuses(self):
        r = self.recipe("fp8-all", "name: x\narch: llama\ndialect: quark\n"
                                   "default: {scheme: fp8-channel, options: {activations: fp8-per-token}}\n")
        p = E.selq("plan", self.quark, "--recipe", r)
        self.assertIn("already quantized in the source", p.stderr + p.stdout)
        self.assertIn("requantize: true", p.stderr + p.stdout)
        s = E.selq("plan", self.quark, "--recipe", r, "--strict", check=False)
        self.assertEqual(s.returncode, 2, s.stdout + s.stderr)
        self.assertIn("already quantized in the source", s.stderr)
        self.assertEqual(len(s.stderr.strip().splitlines()), 1, s.stderr)

    # ---- ModelOpt (its layout as selq's modelopt dialect writes it: hf_quant_config.json) ----

    def test_modelopt_in_place_upgrade(self):
        work = self.path("modelopt")
        E.selq("quantize", self.base, work, "--recipe",
               self.recipe("mo-mlp", "name: mo\narch: llama\ndialect: modelopt\n"
                                     "rules:\n  - match: ['*.mlp.*']\n    scheme: nvfp4\n"), "--quiet")
        os.remove(os.path.join(work, "selq-manifest.json"))  # as a peer's checkpoint: no manifest
        # MIXED_PRECISION takes MXFP8 beside W4A16_NVFP4; FP8 per channel it cannot mix: refused, nothing written.
        before = E.tree_bytes(work)
        bad = E.selq("quantize", "--in-place", work, "--recipe", self.recipe("mo-bad", ATTENTION_FP8.format(
            dialect="modelopt")), "--quiet", check=False)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("cannot mix", bad.stderr)
        self.assertEqual(E.tree_bytes(work), before)
        E.selq("quantize", "--in-place", work, "--recipe",
               self.recipe("mo-attn", "name: a\narch: llama\ndialect: modelopt\nrules:\n"
                                      "  - match: ['*.self_attn.*']\n    scheme: mxfp8\n"
                                      "    options: {activations: mxfp8-dynamic}\n"), "--quiet")
        v = verify(work)
        self.assertEqual(v.returncode, 0, v.stdout[-3000:])
        self.assertEqual(checked_modules(v), MLP + ATTENTION, v.stdout[-500:])
        self.assertGreater(eval_kl(self.base, work)[0], 0)

    # ---- verify never passes silently ----

    def test_verify_notes_dead_entries_and_flags_unknown_schemes(self):
        d = self.copy(self.quark, "quark-generic")
        edit_config(d, lambda c: c["quantization_config"]["exclude"].append("re:.*vision_tower.*"))
        v = verify(d)
        self.assertEqual(v.returncode, 0, v.stdout[-2000:])
        self.assertIn("note: config.json: re:.*vision_tower.*", v.stdout)
        self.assertEqual(checked_modules(v), MLP)

        d = self.copy(self.quark, "quark-unknown")
        edit_config(d, lambda c: c["quantization_config"]["global_quant_config"]["weight"].update(dtype="int3"))
        v = verify(d)
        self.assertEqual(v.returncode, 1, v.stdout[-2000:])
        self.assertIn("does not recognise", v.stdout)

    def test_a_field_that_changes_the_numerics_is_refused_by_name(self):
        d = self.copy(self.quark, "quark-softmax")
        spec = E.read_json(os.path.join(self.quark, "config.json"))["quantization_config"]["global_quant_config"]["weight"]
        edit_config(d, lambda c: c["quantization_config"].update(softmax_quant_spec=spec))
        r = E.selq("eval", self.base, d, "--max-tokens", "64", "--context", "32", "--max-prompts", "0", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("softmax_quant_spec", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    # ---- DeepSeek-V3 native block FP8 ----

    def native_fp8(self):
        ct = self.path("block-ct")
        if not os.path.exists(ct):
            r = self.recipe("block", "name: block\narch: llama\ndialect: compressed-tensors\n"
                                     "default: {scheme: fp8-block, options: {activations: fp8-per-token-group128}}\n")
            E.selq("quantize", self.base, ct, "--recipe", r, "--quiet")
            to_native_fp8(ct, self.path("block-native"))
        return ct, self.path("block-native")

    def test_native_fp8_verify_and_eval(self):
        ct, native = self.native_fp8()
        v = verify(native)
        self.assertEqual(v.returncode, 0, v.stdout[-3000:])
        self.assertEqual(checked_modules(v), MLP + ATTENTION, v.stdout[-500:])
        kl_native, kl_ct = eval_kl(self.base, native, ct)
        self.assertGreater(kl_native, 0)
        self.assertEqual(kl_native, kl_ct)  # the same bytes, read through two configs

    def test_native_fp8_broken_scale_is_a_finding(self):
        _, native = self.native_fp8()
        d = self.copy(native, "block-native-nan")
        from safetensors.torch import load_file, save_file
        shard = os.path.join(d, "model.safetensors")
        t = load_file(shard)
        name = "model.layers.3.mlp.down_proj.weight_scale_inv"
        t[name][0, 0] = float("nan")
        save_file(t, shard, metadata={"format": "pt"})
        v = verify(d)
        self.assertEqual(v.returncode, 1, v.stdout[-2000:])
        self.assertIn(name, v.stdout)

    def test_native_fp8_upgrade_into_a_dialect_is_refused_before_writing(self):
        _, native = self.native_fp8()
        work = self.copy(native, "block-native-upgrade")
        before = E.tree_bytes(work)
        r = self.recipe("attn-ct2", ATTENTION_FP8.format(dialect="compressed-tensors"))
        q = E.selq("quantize", "--in-place", work, "--recipe", r, "--quiet", check=False)
        self.assertEqual(q.returncode, 2, q.stderr)
        self.assertEqual(len(q.stderr.strip().splitlines()), 1, q.stderr)
        self.assertEqual(E.tree_bytes(work), before)

    def test_calibrate_and_sensitivity_run_the_sources_as_stored(self):
        _, native = self.native_fp8()
        for name, src, dialect, bf16_units in (("quark", self.quark, "quark", 2 * LAYERS),
                                               ("native-fp8", native, "compressed-tensors", 0)):
            with self.subTest(name):
                c = self.path(f"calib-{name}.json")
                E.selq("calibrate", src, "--calibration-tokens", "128", "--quiet", "-o", c)
                self.assertEqual(len(E.read_json(c)["activation_amax"]), MLP + ATTENTION)
                s = self.path(f"sens-{name}.json")
                E.selq("sensitivity", src, "--tier", "activation-aware", "--calibration-tokens", "64", "--quiet", "-o", s)
                named = self.path(f"sens-{name}-named.json")
                E.selq("sensitivity", src, "--dialect", dialect, "--quiet", "-o", named)
                self.assertEqual(E.read_json(s)["candidates"], E.read_json(named)["candidates"])  # the source's own
                # Pre-quantized modules are not decision units: Quark left attention in BF16 (q/k/v and o
                # of each layer), the native FP8 source has nothing left to decide.
                self.assertEqual(len(E.read_json(s)["units"]), bf16_units)

    # ---- a quantization selq does not read: refused by name, never passed through ----

    def test_gpt_oss_native_mxfp4_is_refused_by_name(self):
        d = self.copy(self.selq_mxfp4, "gpt-oss-like")
        os.remove(os.path.join(d, "selq-manifest.json"))
        # gpt-oss's own quantization_config (its experts' *_blocks/*_scales are read by nothing in selq yet).
        edit_config(d, lambda c: c.update(quantization_config={
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4"}))
        r = self.recipe("attn-q", ATTENTION_FP8.format(dialect="quark"))
        for cmd in (["plan", d, "--recipe", r], ["quantize", d, self.path("gpt-oss-out"), "--recipe", r, "-q"]):
            p = E.selq(*cmd, check=False)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn("quant_method 'mxfp4'", p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertFalse(os.path.exists(self.path("gpt-oss-out")))
        v = verify(d)
        self.assertEqual(v.returncode, 1, v.stdout[-2000:])
        self.assertIn("quant_method 'mxfp4' is not one selq reads", v.stdout)

    # ---- transformers 5 configs ----

    def test_transformers5_config_evaluates_as_its_v4_form(self):
        d = self.copy(self.selq_mxfp4, "t5")

        def to_v5(c):
            c["rope_parameters"] = {"rope_theta": c.pop("rope_theta"), "rope_type": "default"}
            c.pop("rope_scaling", None)
            c["dtype"] = c.pop("torch_dtype")
        edit_config(d, to_v5)
        self.assertEqual(eval_kl(self.base, d), eval_kl(self.base, self.selq_mxfp4))

        edit_config(d, lambda c: c.pop("rope_parameters"))
        r = E.selq("eval", self.base, d, "--max-tokens", "64", "--context", "32", "--max-prompts", "0", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("rope_theta", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    E.main()
