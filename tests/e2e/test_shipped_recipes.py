"""The published Kimi-K3 layouts and the uniform Llama recipes, end to end."""
import json
import os
import re
import tempfile
import unittest

import e2e_util as u


def formats(dst):
    return u.read_json(os.path.join(dst, "selq-manifest.json"))["formats"]


# Quark's RoundType names (quark/torch/quantization/config/type.py, 0.13): its
# QConfig.from_dict looks round_method up there and raises KeyError otherwise.
QUARK_ROUND_METHODS = {"round", "floor", "half_even"}


def quark_tensor_specs(cfg):
    """Every tensor spec of a Quark quantization_config (global and per layer)."""
    layers = [cfg["global_quant_config"], *cfg["layer_quant_config"].values()]
    for layer in layers:
        for key in ("weight", "input_tensors", "output_tensors", "bias"):
            spec = (layer or {}).get(key)
            for one in spec if isinstance(spec, list) else [spec]:
                if one is not None:
                    yield one


class KimiK3(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "k3")
        u.selq("synth", "--arch", "kimi-k3", "--scale", "16", "--layers", "3", "--experts", "4",
               "--vocab", "512", cls.src)
        cls.src_nvfp4 = os.path.join(cls.tmp.name, "k3-nvfp4")
        u.selq("synth", "--arch", "kimi-k3", "--scale", "16", "--layers", "3", "--experts", "4",
               "--vocab", "512", "--experts-nvfp4", cls.src_nvfp4)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_mxfp4_experts_fp8_attention(self):
        dst = os.path.join(self.tmp.name, "out-mxfp4")
        u.selq("quantize", self.src, dst, "--recipe", u.recipe("kimi-k3-mxfp4-attnfp8"), "--quiet")
        f = formats(dst)
        mx = f["mxfp4"]
        # As Quark's kimi_k3 template (seed 003's run, bench/quark): routed experts (2 MoE
        # layers x 4 x 3), shared experts (2 x 3) and the dense layer-0 MLP (3).
        self.assertEqual(len(mx), 2 * 4 * 3 + 2 * 3 + 3)
        self.assertEqual(sum(".mlp.experts." in t for t in mx), 2 * 4 * 3)
        self.assertEqual(sum(".mlp.shared_experts." in t for t in mx), 2 * 3)
        self.assertTrue(all(".mlp." in t and ".mlp.gate." not in t for t in mx), mx)
        fp8 = [k for k in f if k.startswith("fp8")]
        self.assertEqual(len(fp8), 1)
        attn = f[fp8[0]]
        self.assertTrue(all(".self_attn." in t for t in attn), attn)
        # q_a, q_b, kv_a, kv_b, o per layer; *_conv1d and attn_res_proj excluded.
        self.assertEqual(len(attn), 3 * 5)
        cfg = u.read_json(os.path.join(dst, "config.json"))["quantization_config"]
        self.assertEqual(cfg["quant_method"], "quark")
        excl = cfg["exclude"]
        for must in ["lm_head", "model.layers.1.mlp.gate", "mm_projector.linear_1",
                     "vision_tower.blocks.0.attn.qkv", "model.layers.0.self_attn.attn_res_proj"]:
            self.assertTrue(any(e == must or (e.startswith("re:") and re.match(e[3:], must)) for e in excl),
                            f"{must} not excluded: {excl}")
        self.assertNotIn("model.layers.1.mlp.shared_experts.down_proj", excl)
        self.assertNotIn("model.layers.0.mlp.down_proj", excl)
        for spec in quark_tensor_specs(cfg):
            self.assertIn(spec["round_method"], QUARK_ROUND_METHODS, spec)

    def test_nvfp4_source_upgraded_in_config(self):
        dst = os.path.join(self.tmp.name, "out-nvfp4")
        u.selq("quantize", self.src_nvfp4, dst, "--recipe", u.recipe("kimi-k3-nvfp4-fp8attn-fp8se"), "--quiet")
        h = u.safetensors_headers(dst)
        src_h = u.safetensors_headers(self.src_nvfp4)
        # Pre-quantized experts pass through byte for byte (names, dtypes, shapes).
        for name, (dt, shape, _) in src_h.items():
            if ".mlp.experts." in name:
                self.assertEqual(h[name][:2], (dt, shape), name)
        for l in range(3):
            for p in ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa"]:
                self.assertEqual(h[f"model.layers.{l}.self_attn.{p}.weight"][0], "F8_E4M3")
                self.assertEqual(h[f"model.layers.{l}.self_attn.{p}.weight_scale"][1][1], 1, "(out,1) scale")
            for p in ["kv_b_proj", "o_proj"]:
                self.assertEqual(h[f"model.layers.{l}.self_attn.{p}.weight"][0], "BF16")
        for l in (1, 2):
            self.assertEqual(h[f"model.layers.{l}.mlp.shared_experts.up_proj.weight"][0], "F8_E4M3")
        self.assertEqual(h["model.layers.0.mlp.gate_proj.weight"][0], "F8_E4M3")
        cfg = u.read_json(os.path.join(dst, "config.json"))["quantization_config"]
        self.assertEqual(cfg["quant_method"], "compressed-tensors")
        fmts = {g.get("format") for g in cfg["config_groups"].values()}
        self.assertIn("nvfp4-pack-quantized", fmts)
        self.assertIn("float-quantized", fmts)
        self.assertEqual(cfg["format"], "mixed-precision")
        ignore = set(cfg["ignore"])
        for l in range(3):
            self.assertIn(f"model.layers.{l}.self_attn.kv_b_proj", ignore)
            self.assertIn(f"model.layers.{l}.self_attn.o_proj", ignore)
        self.assertIn("lm_head", ignore)
        self.assertNotIn("model.layers.1.self_attn.q_a_proj", ignore)


class LlamaDialects(unittest.TestCase):
    def test_uniform_recipes_in_each_dialect(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "llama")
            u.selq("synth", "--arch", "llama", "--scale", "2", "--vocab", "512", "--layers", "2", src)
            cases = [("llama-mxfp4", "compressed-tensors", "mxfp4-pack-quantized"),
                     ("llama-mxfp4", "quark", None),
                     ("llama-fp8", "compressed-tensors", "float-quantized"),
                     ("llama-fp8", "quark", None),
                     ("llama-nvfp4", "compressed-tensors", "nvfp4-pack-quantized"),
                     ("llama-nvfp4", "modelopt", None)]
            for rec, dialect, ct_format in cases:
                with self.subTest(recipe=rec, dialect=dialect):
                    dst = os.path.join(tmp, f"{rec}-{dialect}")
                    u.selq("quantize", src, dst, "--recipe", u.recipe(rec), "--dialect", dialect, "--quiet")
                    cfg = u.read_json(os.path.join(dst, "config.json"))["quantization_config"]
                    if dialect == "compressed-tensors":
                        self.assertEqual(cfg["format"], ct_format)
                    elif dialect == "quark":
                        self.assertEqual(cfg["quant_method"], "quark")
                        for spec in quark_tensor_specs(cfg):
                            self.assertIn(spec["round_method"], QUARK_ROUND_METHODS, spec)
                    else:
                        self.assertTrue(os.path.exists(os.path.join(dst, "hf_quant_config.json")))
                    f = formats(dst)
                    quantized = sum(len(v) for k, v in f.items() if k not in ("unquantized", "pre-quantized"))
                    self.assertEqual(quantized, 2 * 7)

    def test_plan_json_matches_quantize(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "llama")
            u.selq("synth", "--arch", "llama", "--scale", "4", "--vocab", "256", "--layers", "2", src)
            plan = json.loads(u.selq("plan", src, "--recipe", u.recipe("llama-mix"), "--json").stdout)
            dst = os.path.join(tmp, "out")
            u.selq("quantize", src, dst, "--recipe", u.recipe("llama-mix"), "--quiet")
            h = u.safetensors_headers(dst)
            planned = {o["name"]: (o["dtype"], o["shape"]) for t in plan["tensors"] for o in t["outputs"]}
            self.assertEqual(planned, {k: (v[0], v[1]) for k, v in h.items()})
            self.assertGreater(plan["bits_per_weight"], 4.0)
            self.assertLess(plan["bits_per_weight"], 9.0)


if __name__ == "__main__":
    u.main()
