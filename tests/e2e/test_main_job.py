"""The main job end to end: synth -> plan -> quantize -> read back."""
import json
import os
import re
import shutil
import tempfile
import unittest

import torch

import e2e_util as u


class DsparkOprojMxfp4(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "dspark")
        u.selq("synth", "--arch", "dspark", "--scale", "16", "--vocab", "1024", cls.src,
               "--max-shard-size", "8MB")
        cls.dst = os.path.join(cls.tmp.name, "out")
        cls.result = json.loads(u.selq("quantize", cls.src, cls.dst, "--recipe",
                                       u.recipe("dspark-oproj-mxfp4"), "--json").stdout)
        cls.headers = u.safetensors_headers(cls.dst)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_counts_per_format(self):
        m = u.read_json(os.path.join(self.dst, "selq-manifest.json"))
        self.assertEqual(len(m["formats"]["mxfp4"]), 5)
        fp8 = [k for k in m["formats"] if k.startswith("fp8")]
        self.assertEqual(len(fp8), 1, m["formats"].keys())
        self.assertEqual(len(m["formats"][fp8[0]]), 25)
        for t in m["formats"]["mxfp4"]:
            self.assertRegex(t, r"model\.layers\.\d\.self_attn\.o_proj\.weight")

    def test_mxfp4_tensors_and_scale_shapes(self):
        src = u.safetensors_headers(self.src)
        for l in range(5):
            mod = f"model.layers.{l}.self_attn.o_proj"
            out_f, in_f = src[mod + ".weight"][1]
            self.assertEqual(self.headers[mod + ".weight"][:2], ("U8", [out_f, in_f // 2]))
            self.assertEqual(self.headers[mod + ".weight_scale"][:2], ("U8", [out_f, in_f // 32]))

    def test_fp8_channel_tensors(self):
        for l in range(5):
            for p in ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "self_attn.q_b_proj", "self_attn.kv_b_proj"]:
                mod = f"model.layers.{l}.{p}"
                dt, shape, _ = self.headers[mod + ".weight"]
                self.assertEqual(dt, "F8_E4M3")
                sdt, sshape, _ = self.headers[mod + ".weight_scale"]
                self.assertEqual(sshape, [shape[0]], "quark per_channel scale is 1-D [out]")

    def test_untouched_tensors_bitwise_equal(self):
        src_headers = u.safetensors_headers(self.src)
        kept = ["model.embed_tokens.weight", "lm_head.weight", "model.context_proj.weight",
                "model.layers.0.self_attn.q_a_proj.weight", "model.layers.3.self_attn.kv_a_proj_with_mqa.weight",
                "model.markov_head.weight", "model.confidence_head.weight", "model.norm.weight"]
        for name in kept:
            self.assertEqual(self.headers[name][0], "BF16", name)
            got = u.load_tensor(self.dst, name, self.headers)
            want = u.load_tensor(self.src, name, src_headers)
            self.assertTrue(torch.equal(got.view(torch.int16), want.view(torch.int16)), name)

    def test_quark_config(self):
        cfg = u.read_json(os.path.join(self.dst, "config.json"))["quantization_config"]
        self.assertEqual(cfg["quant_method"], "quark")
        self.assertIn("export", cfg)
        g = cfg["global_quant_config"]
        self.assertEqual(g["weight"]["dtype"], "fp8_e4m3")
        self.assertEqual(g["weight"]["qscheme"], "per_channel")
        overrides = cfg["layer_quant_config"]
        self.assertTrue(overrides)
        for key, spec in overrides.items():
            self.assertIn("o_proj", key)
            self.assertEqual(spec["weight"]["dtype"], "fp4")
            self.assertTrue(spec["input_tensors"]["is_dynamic"])
        excluded = set(cfg["exclude"])
        for name in ["lm_head", "model.context_proj", "model.markov_head", "model.confidence_head",
                     "model.layers.0.self_attn.q_a_proj", "model.layers.4.self_attn.kv_a_proj_with_mqa"]:
            self.assertIn(name, excluded)

    def test_index_and_other_files(self):
        idx = u.read_json(os.path.join(self.dst, "model.safetensors.index.json"))
        self.assertEqual(set(idx["weight_map"]), set(self.headers))
        for f in ["generation_config.json", "tokenizer_config.json", "selq-report.txt"]:
            self.assertTrue(os.path.exists(os.path.join(self.dst, f)), f)
        self.assertFalse(os.path.exists(self.dst + ".selq-partial"))

    def test_metrics_recorded(self):
        m = u.read_json(os.path.join(self.dst, "selq-manifest.json"))
        for t in m["tensors"]:
            if t.get("scheme") == "mxfp4":
                self.assertGreater(t["metrics"]["snr_db"], 10.0)
                self.assertLess(t["metrics"]["rel_frobenius"], 0.3)
                self.assertGreater(t["metrics"]["cosine"], 0.95)


class FusedGroupGlobalScale(unittest.TestCase):
    """NVFP4 members of a fused group (q/k/v, gate/up) share one global scale,
    from the max of their amax. File to file it is computed when the group's
    first member is quantized, reading the others then; in place, before any
    shard is rewritten. A group split across source shards must come out as
    it does from one shard, both ways."""

    def test_group_split_across_source_shards(self):
        from safetensors.torch import save_file
        with tempfile.TemporaryDirectory() as tmp:
            one = os.path.join(tmp, "one")
            u.selq("synth", "--arch", "llama", "--scale", "16", "--layers", "2", "--vocab", "256", one)
            headers = u.safetensors_headers(one)
            tensors = {k: u.load_tensor(one, k, headers) for k in headers}
            # Shard 2 takes q_proj and up_proj; their groups' other members stay in shard 1.
            split = os.path.join(tmp, "split")
            shutil.copytree(one, split, ignore=shutil.ignore_patterns("*.safetensors*"))
            second = {k for k in tensors if k.endswith(("q_proj.weight", "up_proj.weight"))}
            names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
            save_file({k: v for k, v in tensors.items() if k not in second}, os.path.join(split, names[0]))
            save_file({k: v for k, v in tensors.items() if k in second}, os.path.join(split, names[1]))
            with open(os.path.join(split, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": {k: names[k in second] for k in tensors}}, f)
            outs = {}
            for name, src in (("one", one), ("split", split)):
                outs[name] = os.path.join(tmp, "q-" + name)
                u.selq("quantize", src, outs[name], "--recipe", u.recipe("llama-nvfp4"), "--quiet")
            outs["in-place"] = os.path.join(tmp, "in-place")
            shutil.copytree(split, outs["in-place"])
            u.selq("quantize", outs["in-place"], "--in-place", "--recipe", u.recipe("llama-nvfp4"), "--quiet")

            got = {n: u.safetensors_headers(d) for n, d in outs.items()}
            self.assertEqual(set(got["one"]), set(got["split"]))
            self.assertEqual(set(got["one"]), set(got["in-place"]))
            for k in got["one"]:
                want = u.load_tensor(outs["one"], k, got["one"])
                for n in ("split", "in-place"):
                    self.assertTrue(torch.equal(u.load_tensor(outs[n], k, got[n]).view(torch.uint8),
                                                want.view(torch.uint8)), f"{n}: {k}")
            groups = [("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj"))]
            for layer in range(2):
                for block, members in groups:
                    mods = [f"model.layers.{layer}.{block}.{m}" for m in members]
                    gs = {u.load_tensor(outs["split"], m + ".weight_global_scale", got["split"]).item() for m in mods}
                    self.assertEqual(len(gs), 1, mods)
                    amax = max(tensors[m + ".weight"].float().abs().max().item() for m in mods)
                    # compressed-tensors' convention, in the weight's dtype (BF16):
                    # the reciprocal of the amax rounded, then times 448 * 6 rounded.
                    want = (1.0 / torch.tensor(amax, dtype=torch.bfloat16)) * (448.0 * 6.0)
                    self.assertEqual(gs.pop(), want.float().item(), mods)


class Determinism(unittest.TestCase):
    def test_thread_count_does_not_change_bytes(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "llama")
            u.selq("synth", "--arch", "llama", "--scale", "2", "--vocab", "512", src)
            outs = []
            for threads in (1, 2, 3):
                dst = os.path.join(tmp, f"out{threads}")
                u.selq("quantize", src, dst, "--recipe", u.recipe("llama-mix"), "-j", threads, "--quiet")
                outs.append(u.tree_bytes(dst))
            self.assertEqual(outs[0].keys(), outs[1].keys())
            for k in outs[0]:
                self.assertEqual(outs[0][k], outs[1][k], k)
                self.assertEqual(outs[0][k], outs[2][k], k)


class Refusals(unittest.TestCase):
    def test_existing_destination_refused_and_failure_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "llama")
            u.selq("synth", "--arch", "llama", "--scale", "4", "--vocab", "256", src)
            dst = os.path.join(tmp, "out")
            os.mkdir(dst)
            r = u.selq("quantize", src, dst, "--recipe", u.recipe("llama-fp8"), check=False)
            self.assertEqual(r.returncode, 2)
            self.assertIn("exists", r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            # A recipe error: one line naming the file and line, nothing written.
            bad = os.path.join(tmp, "bad.yaml")
            with open(bad, "w") as f:
                f.write("dialect: quark\nrules:\n  - match: ['*.o_proj']\n    scheme: mxfp9\n")
            dst2 = os.path.join(tmp, "out2")
            r = u.selq("quantize", src, dst2, "--recipe", bad, check=False)
            self.assertEqual(r.returncode, 2)
            self.assertIn("bad.yaml", r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertFalse(os.path.exists(dst2))
            self.assertFalse(os.path.exists(dst2 + ".selq-partial"))

    def test_nan_weight_is_reported_by_tensor(self):
        from safetensors.torch import save_file
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "tiny")
            os.mkdir(src)
            w = torch.ones((64, 64), dtype=torch.float32)
            w[3, 5] = float("nan")
            save_file({"model.layers.0.self_attn.o_proj.weight": w.to(torch.bfloat16)},
                      os.path.join(src, "model.safetensors"))
            with open(os.path.join(src, "config.json"), "w") as f:
                json.dump({"model_type": "llama", "num_hidden_layers": 1}, f)
            dst = os.path.join(tmp, "out")
            r = u.selq("quantize", src, dst, "--recipe", u.recipe("llama-fp8"), check=False)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("model.layers.0.self_attn.o_proj.weight", r.stderr)
            self.assertFalse(os.path.exists(dst))


if __name__ == "__main__":
    u.main()
