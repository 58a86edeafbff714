"""`selq verify`: clean on what `selq quantize` writes, and each corruption of
a copy gives its own specific finding (checked by message, not just status)."""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import e2e_util as u


# ---- raw safetensors editing (no framework needed, works for F8/U8 too) ----

def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def write_st(path, header, body):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def shard_of(directory, tensor):
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            header, _ = read_st(os.path.join(directory, name))
            if tensor in header:
                return os.path.join(directory, name)
    raise KeyError(tensor)


def patch_bytes(directory, tensor, fn):
    """Replaces the bytes of `tensor` with fn(bytes) (same length)."""
    path = shard_of(directory, tensor)
    header, body = read_st(path)
    a, b = header[tensor]["data_offsets"]
    new = fn(body[a:b])
    assert len(new) == b - a
    write_st(path, header, body[:a] + new + body[b:])


def remove_tensor(directory, tensor):
    """Rewrites the shard without `tensor` (offsets recomputed) and drops it from the index."""
    path = shard_of(directory, tensor)
    header, body = read_st(path)
    meta = header.pop("__metadata__", None)
    del header[tensor]
    out, new_header = bytearray(), {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = e["data_offsets"]
        new_header[name] = dict(e, data_offsets=[len(out), len(out) + b - a])
        out += body[a:b]
    if meta is not None:
        new_header["__metadata__"] = meta
    write_st(path, new_header, bytes(out))
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        j = u.read_json(index)
        j["weight_map"].pop(tensor, None)
        with open(index, "w") as f:
            json.dump(j, f)


def edit_config(directory, fn):
    p = os.path.join(directory, "config.json")
    cfg = u.read_json(p)
    fn(cfg["quantization_config"])
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2)


def verify(*args):
    return u.selq("verify", *args, check=False)


def manifest_modules(directory, scheme_prefix):
    m = u.read_json(os.path.join(directory, "selq-manifest.json"))
    return [t["module"] for t in m["tensors"] if t.get("scheme", "").startswith(scheme_prefix)]


class Verify(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = cls.tmp.name
        cls.out = {}
        cls.dspark = os.path.join(t, "dspark")
        u.selq("synth", "--arch", "dspark", "--scale", "16", "--vocab", "1024", cls.dspark)
        cls.out["dspark-quark"] = os.path.join(t, "dspark-q")
        u.selq("quantize", cls.dspark, cls.out["dspark-quark"], "--recipe", u.recipe("dspark-oproj-mxfp4"), "--quiet")
        cls.llama = os.path.join(t, "llama")
        u.selq("synth", "--arch", "llama", "--scale", "4", "--vocab", "256", "--layers", "2", cls.llama)
        cls.llama_other = os.path.join(t, "llama-seed2")
        u.selq("synth", "--arch", "llama", "--scale", "4", "--vocab", "256", "--layers", "2", "--seed", "2",
               cls.llama_other)
        for rec, dialect in [("llama-mxfp4", "compressed-tensors"), ("llama-mxfp4", "quark"),
                             ("llama-fp8", "compressed-tensors"), ("llama-fp8", "quark"),
                             ("llama-nvfp4", "compressed-tensors"), ("llama-nvfp4", "modelopt"),
                             ("llama-mix", "compressed-tensors")]:
            key = f"{rec}-{dialect}"
            cls.out[key] = os.path.join(t, key)
            u.selq("quantize", cls.llama, cls.out[key], "--recipe", u.recipe(rec), "--dialect", dialect, "--quiet")
        cls.kimi = os.path.join(t, "k3-nvfp4")
        u.selq("synth", "--arch", "kimi-k3", "--scale", "16", "--layers", "3", "--experts", "4", "--vocab", "512",
               "--experts-nvfp4", cls.kimi)
        cls.sources = {k: (cls.dspark if k.startswith("dspark") else cls.kimi if k.startswith("kimi") else cls.llama)
                       for k in cls.out}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def copy(self, key):
        dst = os.path.join(self.tmp.name, f"copy-{key}-{self.id().split('.')[-1]}")
        shutil.copytree(self.out[key], dst)
        return dst

    def assert_finding(self, directory, needle, *extra, status=1):
        r = verify(directory, *extra)
        self.assertEqual(r.returncode, status, r.stdout + r.stderr)
        self.assertIn(needle, r.stdout, r.stdout)
        return r.stdout

    # ---- clean outputs ----

    def test_clean_outputs_pass_with_against(self):
        for key, d in self.out.items():
            with self.subTest(key):
                r = verify(d, "--against", self.sources[key], "--json")
                self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr)
                rep = json.loads(r.stdout)
                self.assertTrue(rep["ok"])
                self.assertEqual(rep["findings"], [])
                self.assertTrue(rep["has_manifest"])
                self.assertGreater(rep["verified_modules"], 0)
                # Every engine of the dialect resolved every linear without raising.
                self.assertTrue(rep["engines"])
                for eng, s in rep["engines"].items():
                    self.assertEqual(s["errors"], 0, eng)
                    self.assertGreater(s["quantized"], 0, eng)
                # Per-tensor errors are reported and within their budgets.
                self.assertTrue(rep["errors"])
                for m, e in rep["errors"].items():
                    self.assertLessEqual(e["rel_frobenius"], e["budget"], m)
                    self.assertGreater(e["rel_frobenius"], 0.0, m)
                # Text mode agrees.
                r2 = verify(d)
                self.assertEqual(r2.returncode, 0, r2.stdout)
                self.assertIn("verify: 0 finding(s)", r2.stdout)

    def test_per_engine_summary(self):
        rep = json.loads(verify(self.out["dspark-quark"], "--json").stdout)
        self.assertEqual(set(rep["engines"]), {"vllm-quark", "sglang-quark", "atom-quark"})
        rep = json.loads(verify(self.out["llama-nvfp4-compressed-tensors"], "--json").stdout)
        self.assertEqual(set(rep["engines"]), {"vllm-compressed-tensors", "sglang-compressed-tensors"})
        self.assertIn("nvfp4", rep["engines"]["vllm-compressed-tensors"]["schemes"])

    def test_kimi_nvfp4_upgrade(self):
        # Compressed-tensors source with NVFP4 experts already there; the upgrade keeps them.
        dst = os.path.join(self.tmp.name, "k3-out")
        u.selq("quantize", self.kimi, dst, "--recipe", u.recipe("kimi-k3-nvfp4-fp8attn-fp8se"), "--quiet")
        r = verify(dst, "--against", self.kimi, "--json")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr)
        rep = json.loads(r.stdout)
        self.assertTrue(rep["errors"])
        self.assertIn("nvfp4", rep["engines"]["vllm-compressed-tensors"]["schemes"])

    def test_source_without_manifest_is_clean(self):
        # The pre-quantized NVFP4 source has a config but no manifest.
        r = verify(self.kimi, "--json")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:])
        self.assertFalse(json.loads(r.stdout)["has_manifest"])

    # ---- corruptions ----

    def test_flipped_weight_byte_is_a_hash_mismatch(self):
        d = self.copy("llama-fp8-compressed-tensors")
        name = manifest_modules(d, "fp8")[0] + ".weight"
        patch_bytes(d, name, lambda b: bytes([b[0] ^ 0x01]) + b[1:])
        out = self.assert_finding(d, f"{name}: [manifest] xxh3")
        self.assertIn("bytes changed", out)

    def test_e8m0_nan_scale(self):
        d = self.copy("llama-mxfp4-quark")
        name = manifest_modules(d, "mxfp4")[0] + ".weight_scale"
        patch_bytes(d, name, lambda b: b[:3] + b"\xff" + b[4:])
        self.assert_finding(d, f"{name}: [numeric] 1 E8M0 0xFF (NaN) value(s), first at element 3")

    def test_module_dropped_from_layer_quant_config(self):
        d = self.copy("dspark-quark")
        cfg = u.read_json(os.path.join(d, "config.json"))["quantization_config"]
        self.assertTrue(cfg["layer_quant_config"], cfg)
        key = next(iter(cfg["layer_quant_config"]))
        edit_config(d, lambda q: q["layer_quant_config"].pop(key))
        self.assert_finding(d, "but the manifest says mxfp4")

    def test_bogus_ignore_entry(self):
        d = self.copy("llama-mix-compressed-tensors")
        edit_config(d, lambda q: q.setdefault("ignore", []).append("model.layers.42.mlp.nothing_proj"))
        # Legal (presets carry generic patterns): a note, exit 0.
        self.assert_finding(d, "note: config.json: model.layers.42.mlp.nothing_proj: [config] quantization_config.ignore "
                               "entry names no module", status=0)

    def test_bogus_quark_exclude_entry(self):
        d = self.copy("llama-fp8-quark")
        edit_config(d, lambda q: q.setdefault("exclude", []).append("model.layers.7.self_attn.q_proj"))
        self.assert_finding(d, "quantization_config.exclude entry names no module", status=0)

    def test_ignoring_a_quantized_module(self):
        d = self.copy("llama-fp8-compressed-tensors")
        # o_proj: not a fused shard (a partly ignored q/k/v makes vLLM raise instead).
        m = [x for x in manifest_modules(d, "fp8") if x.endswith("o_proj")][0]
        edit_config(d, lambda q: q.setdefault("ignore", []).append(m))
        out = self.assert_finding(d, "but vllm-compressed-tensors builds it unquantized")
        self.assertIn(m, out)

    def test_removed_scale_tensor(self):
        d = self.copy("llama-mxfp4-compressed-tensors")
        m = manifest_modules(d, "mxfp4")[0]
        remove_tensor(d, m + ".weight_scale")
        out = self.assert_finding(d, f"{m}.weight_scale: [structure] missing")
        self.assertIn("listed in the manifest but missing", out)

    def test_zero_global_scale(self):
        for key, suffix in [("llama-nvfp4-compressed-tensors", ".weight_global_scale"),
                            ("llama-nvfp4-modelopt", ".weight_scale_2")]:
            with self.subTest(key):
                d = self.copy(key)
                name = manifest_modules(d, "nvfp4")[0] + suffix
                patch_bytes(d, name, lambda b: bytes(len(b)))
                self.assert_finding(d, f"{name}: [numeric] 1 zero, negative, NaN or Inf global scale")

    def test_fused_shards_with_different_global_scales(self):
        # vLLM loads q/k/v as one qkv_proj with the largest of their global scales.
        for key, suffix in [("llama-nvfp4-compressed-tensors", ".weight_global_scale"),
                            ("llama-nvfp4-modelopt", ".weight_scale_2")]:
            with self.subTest(key):
                d = self.copy(key)
                self.assertEqual(verify(d).returncode, 0)
                name = "model.layers.0.self_attn.k_proj" + suffix
                patch_bytes(d, name, lambda b: struct.pack("<f", 2 * struct.unpack("<f", b)[0]))
                out = self.assert_finding(d, "[numeric] NVFP4 global scale")
                self.assertIn(name, out)
                self.assertIn("of model.layers.0.self_attn.qkv_proj", out)

    def test_against_a_different_source(self):
        out = self.assert_finding(self.out["llama-mxfp4-quark"], "[error-bound] relative error",
                                  "--against", self.llama_other)
        self.assertIn("exceeds the mxfp4 budget 0.25", out)

    def test_unreadable_input(self):
        r = verify(os.path.join(self.tmp.name, "does-not-exist"))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)


if __name__ == "__main__":
    u.main()
