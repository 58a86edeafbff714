"""`requantize: true`: pre-quantized modules a rule claims are dequantized from
their stored tensors and quantized with the new scheme.

* Block-FP8 source (DeepSeek-V3 layout: weight F8_E4M3 + weight_scale_inv F32
  per 128x128 block, quant_method "fp8"), re-quantized to FP8 per-channel in
  the quark dialect: every output byte equals a numpy reference (dequantize
  q*scale_inv in F32, then amax/448 per row and a saturating RNE cast), the
  scale_inv tensors are gone, and `selq verify` is clean.
* compressed-tensors NVFP4 experts re-quantized to MXFP4: the source group's
  expert patterns are dropped (or kept for the layers left as stored), no
  NVFP4 companion tensor survives, verify is clean.
* A ModelOpt FP8 source (per-channel weights) re-quantized to NVFP4 in
  compressed-tensors: any of selq's dialects is read back as a source.
* MXFP4 -> NVFP4 keeps every value (power-of-two NVFP4 scales), in both NVFP4
  conventions and whatever the rounding, and the plan says so.
* Without the flag the rule only warns and the modules pass through; in place
  is refused with one clear line.
"""
import json
import os
import sys
import tempfile
import unittest

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as E  # noqa: E402


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def nvfp4_values(directory, module, headers):
    """The dequantized weight of a compressed-tensors NVFP4 module: codes x E4M3 block scale / global scale."""
    import torch
    codes = E.load_tensor(directory, module + ".weight_packed", headers).numpy()
    ws = E.load_tensor(directory, module + ".weight_scale", headers).view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    gs = E.load_tensor(directory, module + ".weight_global_scale", headers).numpy()[0]
    vals = np.stack([E2M1[codes & 15], E2M1[codes >> 4]], -1).reshape(codes.shape[0], -1)
    return vals * np.repeat(ws.astype(np.float32) / gs, 16, 1)


def write_recipe(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def fp8_block_source(tmp):
    """A DeepSeek-style block-FP8 checkpoint: selq writes FP8 128x128 blocks in the
    compressed-tensors layout, which is then renamed to the DeepSeek one."""
    import torch
    from safetensors.torch import load_file, save_file
    synth = os.path.join(tmp, "ds-bf16")
    E.selq("synth", "--arch", "deepseek-v3", "--scale", "16", "--layers", "2", "--experts", "4", "--vocab", "512", synth)
    ct = os.path.join(tmp, "ds-ct")
    r = write_recipe(os.path.join(tmp, "block.yaml"),
                     "name: block\narch: deepseek-v3\ndialect: compressed-tensors\n"
                     "default: {scheme: fp8-block, options: {activations: fp8-per-token-group128}}\n")
    E.selq("quantize", synth, ct, "--recipe", r, "--quiet")
    src = os.path.join(tmp, "ds-fp8")
    os.makedirs(src)
    for name in os.listdir(ct):
        p = os.path.join(ct, name)
        if name.endswith(".safetensors"):
            t = load_file(p)
            out = {}
            for k, v in t.items():
                if k.endswith(".weight_scale") and (k[: -len("_scale")]) in t and t[k[: -len("_scale")]].dtype == torch.float8_e4m3fn:
                    out[k + "_inv"] = v.float()
                else:
                    out[k] = v
            save_file(out, os.path.join(src, name), metadata={"format": "pt"})
        elif name.endswith(".json") and name.startswith("model.safetensors.index"):
            idx = json.load(open(p))
            idx["weight_map"] = {(k + "_inv" if k.endswith(".weight_scale") else k): v for k, v in idx["weight_map"].items()}
            json.dump(idx, open(os.path.join(src, name), "w"))
        elif name == "config.json":
            c = json.load(open(p))
            c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                        "weight_block_size": [128, 128]}
            json.dump(c, open(os.path.join(src, name), "w"))
    return src


class Requantize(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, *p):
        return os.path.join(self.tmp.name, *p)

    def quantize_and_verify(self, src, dst, recipe):
        E.selq("quantize", src, dst, "--recipe", recipe, "--quiet")
        v = E.selq("verify", dst, check=False)
        self.assertEqual(v.returncode, 0, v.stdout[-3000:] + v.stderr)

    def test_block_fp8_to_channel_fp8_bit_exact(self):
        src = fp8_block_source(self.tmp.name)
        r = write_recipe(self.path("chan.yaml"),
                         "name: chan\narch: deepseek-v3\ndialect: quark\nrequantize: true\n"
                         "default: {scheme: fp8-channel, options: {activations: fp8-per-token}}\n")
        dst = self.path("ds-chan")
        self.quantize_and_verify(src, dst, r)
        sh, dh = E.safetensors_headers(src), E.safetensors_headers(dst)
        modules = [k[: -len(".weight_scale_inv")] for k in sh if k.endswith(".weight_scale_inv")]
        self.assertGreater(len(modules), 10)
        self.assertFalse([k for k in dh if k.endswith("_scale_inv")])
        for m in modules:
            import torch
            q = E.load_tensor(src, m + ".weight", sh).view(torch.uint8).numpy()
            q = q.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
            s = E.load_tensor(src, m + ".weight_scale_inv", sh).float().numpy()
            rows, cols = q.shape
            full = np.repeat(np.repeat(s, 128, 0), 128, 1)[:rows, :cols]
            w = (q * full).astype(np.float32)
            amax = np.abs(w).max(axis=1)
            scale = (amax / np.float32(448.0)).astype(np.float32)
            safe = np.where(scale == 0, np.float32(1), scale)
            codes = np.clip(w / safe[:, None], -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
            got = E.load_tensor(dst, m + ".weight", dh)
            got_codes = got.view(torch.uint8).numpy()
            got_scale = E.load_tensor(dst, m + ".weight_scale", dh).float().numpy().reshape(-1)
            np.testing.assert_array_equal(got_scale, scale, err_msg=m)
            nz = scale != 0
            np.testing.assert_array_equal(got_codes[nz], codes[nz], err_msg=m)

    def nvfp4_source(self):
        src = self.path("k3-nvfp4")
        if not os.path.exists(src):
            E.selq("synth", "--arch", "kimi-k3", "--scale", "16", "--layers", "3", "--experts", "4", "--vocab", "512",
                   "--experts-nvfp4", src)
        return src

    def test_nvfp4_experts_to_mxfp4(self):
        src = self.nvfp4_source()
        r = write_recipe(self.path("mx.yaml"),
                         "name: mx\narch: kimi-k3\ndialect: compressed-tensors\nrequantize: true\nrules:\n"
                         "  - match: ['@experts']\n    scheme: mxfp4\n"
                         "    options: {activations: mxfp4-dynamic}\n")
        dst = self.path("k3-mx")
        self.quantize_and_verify(src, dst, r)
        sh, h = E.safetensors_headers(src), E.safetensors_headers(dst)
        experts = sorted(k[: -len(".weight_packed")] for k in sh if ".mlp.experts." in k and k.endswith(".weight_packed"))
        self.assertEqual(len(experts), 2 * 4 * 3)
        self.assertFalse([k for k in h if ".mlp.experts." in k and "global_scale" in k])
        for m in experts:
            self.assertEqual(h[m + ".weight_scale"][0], "U8")  # E8M0 per 32 (was E4M3 per 16)
            # MXFP4 of the dequantized NVFP4 weight stays within the MXFP4 error budget of it.
            ref = nvfp4_values(src, m, sh)
            mc = E.load_tensor(dst, m + ".weight_packed", h).numpy()
            me = E.load_tensor(dst, m + ".weight_scale", h).numpy().astype(np.int32)
            mv = np.stack([E2M1[mc & 15], E2M1[mc >> 4]], -1).reshape(mc.shape[0], -1)
            got = mv * np.repeat(np.exp2(me - 127.0).astype(np.float32), 32, 1)
            rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            self.assertLess(rel, 0.25, m)
            self.assertGreater(rel, 0.0, m)
        groups = E.read_json(os.path.join(dst, "config.json"))["quantization_config"]["config_groups"]
        self.assertEqual([g["format"] for g in groups.values()], ["mxfp4-pack-quantized"], groups)

    def test_modelopt_fp8_source_to_nvfp4(self):
        # Any of selq's dialects is read back as a source (export/dialect_read.h), not only compressed-tensors.
        synth = self.path("llama-bf16")
        E.selq("synth", "--arch", "llama", "--layers", "2", "--scale", "16", "--vocab", "512", synth)
        src = self.path("llama-modelopt-fp8")
        r = write_recipe(self.path("mo.yaml"),
                         "name: mo\narch: llama\ndialect: modelopt\n"
                         "default: {scheme: fp8-channel, options: {activations: fp8-per-token}}\n")
        E.selq("quantize", synth, src, "--recipe", r, "--quiet")
        r = write_recipe(self.path("nv.yaml"),
                         "name: nv\narch: llama\ndialect: compressed-tensors\nrequantize: true\n"
                         "default: {scheme: nvfp4, options: {activations: none}}\n")
        dst = self.path("llama-nvfp4")
        self.quantize_and_verify(src, dst, r)
        sh, h = E.safetensors_headers(src), E.safetensors_headers(dst)
        modules = sorted(k[: -len(".weight_scale")] for k in sh if k.endswith(".weight_scale"))
        self.assertEqual(len(modules), 2 * 7)
        import torch
        for m in modules:
            self.assertIn(m + ".weight_packed", h)
            self.assertIn(m + ".weight_global_scale", h)
            # NVFP4 of the dequantized FP8 weight stays within NVFP4's error budget of it.
            q = E.load_tensor(src, m + ".weight", sh).view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
            s = E.load_tensor(src, m + ".weight_scale", sh).float().numpy().reshape(-1, 1)
            ref = q.astype(np.float32) * s
            got = nvfp4_values(dst, m, h)
            rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            self.assertLess(rel, 0.2, m)
            self.assertGreater(rel, 0.0, m)

    def test_mxfp4_to_nvfp4_keeps_every_value(self):
        # MXFP4 -> NVFP4 is exact with power-of-two NVFP4 scales (global and per block), in both
        # NVFP4 conventions and whatever the rounding; the plan says so.
        synth = self.path("llama-bf16-mx")
        E.selq("synth", "--arch", "llama", "--layers", "2", "--scale", "16", "--vocab", "512", synth)
        src = self.path("llama-mxfp4")
        E.selq("quantize", synth, src, "--recipe",
               write_recipe(self.path("mx-src.yaml"), "name: m\ndefault: {scheme: mxfp4, options: {activations: none}}\n"),
               "--quiet")
        sh = E.safetensors_headers(src)
        modules = sorted(k[: -len(".weight_packed")] for k in sh if k.endswith(".weight_packed"))
        self.assertEqual(len(modules), 2 * 7)
        import torch

        def mxfp4_values(m):
            c = E.load_tensor(src, m + ".weight_packed", sh).numpy()
            e = E.load_tensor(src, m + ".weight_scale", sh).numpy().astype(np.int32)
            v = np.stack([E2M1[c & 15], E2M1[c >> 4]], -1).reshape(c.shape[0], -1)
            return v * np.repeat(np.exp2(e - 127.0).astype(np.float32), 32, 1)

        def modelopt_values(d, m, h):
            c = E.load_tensor(d, m + ".weight", h).numpy()
            ws = E.load_tensor(d, m + ".weight_scale", h).view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
            w2 = float(E.load_tensor(d, m + ".weight_scale_2", h).float().numpy().reshape(-1)[0])
            v = np.stack([E2M1[c & 15], E2M1[c >> 4]], -1).reshape(c.shape[0], -1)
            return v * np.repeat(ws.astype(np.float32) * np.float32(w2), 16, 1)

        for dialect, rounding in (("compressed-tensors", "nearest"), ("compressed-tensors", "mse"), ("modelopt", "nearest")):
            r = write_recipe(self.path(f"nv-{dialect}.yaml"),
                             f"name: nv\narch: llama\ndialect: {dialect}\nrequantize: true\n"
                             "default: {scheme: nvfp4, options: {activations: none}}\n")
            plan = E.selq("plan", src, "--recipe", r, "--rounding", rounding).stdout
            self.assertIn("exact: 14 MXFP4 tensor(s) re-quantized to NVFP4 with power-of-two scales", plan)
            dst = self.path(f"llama-mx-nv-{dialect}-{rounding}")
            E.selq("quantize", src, dst, "--recipe", r, "--rounding", rounding, "--quiet")
            v = E.selq("verify", dst, "--against", src, "--json", check=False)
            self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr)
            h = E.safetensors_headers(dst)
            for m in modules:
                got = nvfp4_values(dst, m, h) if dialect == "compressed-tensors" else modelopt_values(dst, m, h)
                self.assertTrue(np.array_equal(got, mxfp4_values(m)), f"{dialect} {rounding} {m}")

    def test_partial_requantize_of_a_shared_source_pattern_is_refused(self):
        src = self.nvfp4_source()
        r = write_recipe(self.path("part.yaml"),
                         "name: part\narch: kimi-k3\ndialect: compressed-tensors\nrequantize: true\nrules:\n"
                         "  - match: ['model.layers.1.mlp.experts.*']\n    scheme: mxfp4\n")
        res = E.selq("quantize", src, self.path("part-out"), "--recipe", r, "--quiet", check=False)
        self.assertEqual(res.returncode, 2, res.stderr)
        self.assertIn("covers both", res.stderr)
        self.assertFalse(os.path.exists(self.path("part-out")))

    def test_without_flag_warns_and_passes_through(self):
        src = self.nvfp4_source()
        r = write_recipe(self.path("noflag.yaml"),
                         "name: nf\narch: kimi-k3\ndialect: compressed-tensors\nrules:\n"
                         "  - match: ['@experts']\n    scheme: mxfp4\n")
        p = E.selq("plan", src, "--recipe", r)
        self.assertIn("requantize: true", p.stdout + p.stderr)

    def test_in_place_is_refused(self):
        import shutil
        src = self.nvfp4_source()
        work = self.path("inplace")
        shutil.copytree(src, work)
        r = write_recipe(self.path("ip.yaml"),
                         "name: ip\narch: kimi-k3\ndialect: compressed-tensors\nrequantize: true\nrules:\n"
                         "  - match: ['@experts']\n    scheme: mxfp4\n")
        before = E.tree_bytes(work)
        res = E.selq("quantize", "--in-place", work, "--recipe", r, "--quiet", check=False)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("not in place", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
        after = {k: v for k, v in E.tree_bytes(work).items() if not k.startswith(".selq-inplace")}
        self.assertEqual(after, before)


if __name__ == "__main__":
    E.main()
