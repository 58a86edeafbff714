"""Checkpoints made here by llm-compressor 0.14 and ModelOpt 0.47 themselves, as
sources of every subcommand (issue 32's conformance table; Quark 0.13's row is
test_published_sources.py, the native formats' rows too).

The peers run in their own venv (bench/peers/setup_peers.sh, which
scripts/setup.sh test runs) through bench/peers/run_peer.py, on SmolLM2-135M:

* llm-compressor `model_free_ptq` NVFP4A16 with the attention left in BF16 (the
  source of an in-place attention upgrade, seed 002's situation);
* llm-compressor INT4 symmetric group 32 saved `pack-quantized`, every linear
  (the form Kimi-K2-Thinking ships);
* ModelOpt `W4A16_NVFP4_CFG` with the attention left in BF16, exported with
  `export_hf_checkpoint` (`hf_quant_config.json` beside config.json).

Each: inspect; calibrate and sensitivity run the peer's model; verify checks every quantized module (the peer's generic
ignore/exclude entries are notes, exit 0); the stored bytes equal selq's own
output of the same scheme and so does eval's KL; an in-place attention upgrade
in the source's dialect verifies clean and evaluates; a recipe asking for
another format without `requantize: true` warns naming the modules; with it,
requantize verifies clean.

Skips (77) without the peers venv, fails under CI=true.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crosscheck"))
import e2e_util as E  # noqa: E402
from test_published_sources import ATTENTION, LAYERS, MLP, checked_modules, eval_kl, verify  # noqa: E402
from test_requantize import write_recipe  # noqa: E402
from xref import smollm2_gguf  # noqa: E402

PEERS_PY = os.path.join(os.environ.get("PEERS_VENV", os.path.expanduser("~/.cache/selq/peers-venv")),
                        "bin", "python")

MLP_NVFP4 = """name: mlp-nvfp4
arch: llama
dialect: {dialect}
rules:
  - match: ['*.mlp.*']
    scheme: nvfp4
"""
INT4_G32 = """name: int4-g32
arch: llama
dialect: compressed-tensors
default: {scheme: int4, options: {group_size: 32, pack_int32: true}}
"""
# The attention upgrade each dialect can mix with NVFP4 MLPs: compressed-tensors
# takes FP8 per channel; ModelOpt's MIXED_PRECISION takes MXFP8, not FP8 per channel.
ATTENTION_UPGRADE = {
    "compressed-tensors": "scheme: fp8-channel\n    options: {activations: fp8-per-token}",
    "modelopt": "scheme: mxfp8\n    options: {activations: mxfp8-dynamic}",
}
FP8_ALL = """name: fp8
arch: llama
dialect: compressed-tensors
{requantize}default: {{scheme: fp8-channel, options: {{activations: fp8-per-token}}}}
"""

# name: (peer, scheme, --mlp-only, dialect, selq's recipe of the same scheme, quantized modules)
SOURCES = {
    "llmc-nvfp4": ("llmcompressor", "NVFP4A16", True, "compressed-tensors",
                   MLP_NVFP4.format(dialect="compressed-tensors"), MLP),
    "llmc-int4-g32": ("llmcompressor", "w4a16-g32", False, "compressed-tensors", INT4_G32, MLP + ATTENTION),
    "modelopt-nvfp4": ("modelopt", "nvfp4", True, "modelopt", MLP_NVFP4.format(dialect="modelopt"), MLP),
}


def peers_installed():
    if not os.path.exists(PEERS_PY):
        return False
    r = subprocess.run([PEERS_PY, "-c", "import llmcompressor, modelopt"], capture_output=True)
    return r.returncode == 0


class PeerSources(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.base = cls.path("base")
        E.selq("import-gguf", smollm2_gguf(), cls.base)
        run_peer = os.path.join(E.ARGS.source_dir, "bench", "peers", "run_peer.py")
        for name, (peer, scheme, mlp_only, _, recipe, _) in SOURCES.items():
            cmd = [PEERS_PY, run_peer, peer, scheme, cls.base, cls.path(name), "--threads", "2"]
            r = subprocess.run(cmd + ["--mlp-only"] * mlp_only, capture_output=True, text=True)
            if r.returncode != 0:
                raise AssertionError(f"{peer} {scheme} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
            E.selq("quantize", cls.base, cls.path("selq-" + name), "--recipe",
                   write_recipe(cls.path(name + ".yaml"), recipe), "--quiet")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def path(cls, *p):
        return os.path.join(cls.tmp.name, *p)

    def test_made_by_the_peers(self):
        ct = E.read_json(self.path("llmc-nvfp4", "config.json"))["quantization_config"]
        self.assertEqual(ct["quant_method"], "compressed-tensors")
        self.assertIn("re:.*\\.self_attn\\..*", ct["ignore"])
        int4 = E.read_json(self.path("llmc-int4-g32", "config.json"))["quantization_config"]
        self.assertEqual(int4["format"], "pack-quantized")
        (group,) = int4["config_groups"].values()
        self.assertEqual((group["weights"]["num_bits"], group["weights"]["group_size"]), (4, 32))
        side = E.read_json(self.path("modelopt-nvfp4", "hf_quant_config.json"))
        self.assertEqual(side["quantization"]["quant_algo"], "W4A16_NVFP4")
        self.assertIn("producer", side)
        for name in SOURCES:  # a peer's checkpoint has no selq manifest
            self.assertFalse(os.path.exists(self.path(name, "selq-manifest.json")), name)

    def test_inspect(self):
        for name in SOURCES:
            with self.subTest(name):
                i = E.selq("inspect", self.path(name))
                self.assertIn("mlp.down_proj", i.stdout)

    def test_verify_checks_every_quantized_module(self):
        for name, (*_, modules) in SOURCES.items():
            with self.subTest(name):
                v = verify(self.path(name))
                self.assertEqual(v.returncode, 0, v.stdout[-3000:])
                self.assertEqual(checked_modules(v), modules, v.stdout[-500:])
                self.assertIn("0 finding(s)", v.stdout)
        # llm-compressor's preset ignore list names routers this model does not have: a note.
        self.assertIn("note: config.json: re:.*\\.mlp\\.gate$", verify(self.path("llmc-nvfp4")).stdout)

    def test_calibrate_and_sensitivity(self):
        for name, (*_, dialect, _, _) in SOURCES.items():
            with self.subTest(name):
                self.assertTrue(os.path.exists(self.path(name, "tokenizer.json")), name)
                c = self.path(f"calib-{name}.json")
                E.selq("calibrate", self.path(name), "--calibration-tokens", "128", "--quiet", "-o", c)
                self.assertEqual(len(E.read_json(c)["activation_amax"]), MLP + ATTENTION)
                s = self.path(f"sens-{name}.json")
                r = E.selq("sensitivity", self.path(name), "--tier", "activation-aware", "--calibration-tokens", "64",
                           "--quiet", "-o", s)
                # Scored in the source's own dialect by default (its candidates, its scale conventions).
                named = self.path(f"sens-{name}-named.json")
                E.selq("sensitivity", self.path(name), "--dialect", dialect, "--quiet", "-o", named)
                self.assertEqual(E.read_json(s)["candidates"], E.read_json(named)["candidates"], name)
                # The peer's quantized modules are not decision units; the BF16 attention's are (2 a layer).
                everything_quantized = SOURCES[name][-1] == MLP + ATTENTION
                self.assertEqual(len(E.read_json(s)["units"]), 0 if everything_quantized else 2 * LAYERS, name)
                self.assertEqual("no unit to score" in r.stderr, everything_quantized, r.stderr)

    def test_bytes_and_kl_equal_selq_own(self):
        for name in SOURCES:
            with self.subTest(name):
                peer, own = E.safetensors_headers(self.path(name)), E.safetensors_headers(self.path("selq-" + name))
                self.assertEqual(set(peer), set(own))
                for t in peer:
                    self.assertEqual(peer[t][:2], own[t][:2], t)
                    a = E.load_tensor(self.path(name), t, peer)
                    b = E.load_tensor(self.path("selq-" + name), t, own)
                    self.assertTrue(a.view(-1).view(torch.uint8).equal(b.view(-1).view(torch.uint8)), f"{name}: {t}")
        names = list(SOURCES)
        kl = eval_kl(self.base, *[self.path(n) for n in names], *[self.path("selq-" + n) for n in names])
        for i, name in enumerate(names):
            self.assertGreater(kl[i], 0, name)
            self.assertEqual(kl[i], kl[len(names) + i], name)

    def test_in_place_attention_upgrade(self):
        for name in ("llmc-nvfp4", "modelopt-nvfp4"):
            with self.subTest(name):
                dialect = SOURCES[name][3]
                work = self.path("upgraded-" + name)
                shutil.copytree(self.path(name), work)
                r = write_recipe(self.path(f"attn-{name}.yaml"),
                                 f"name: attn\narch: llama\ndialect: {dialect}\nrules:\n"
                                 f"  - match: ['*.self_attn.*']\n    {ATTENTION_UPGRADE[dialect]}\n")
                E.selq("plan", work, "--recipe", r)
                E.selq("quantize", "--in-place", work, "--recipe", r, "--quiet")
                v = verify(work)
                self.assertEqual(v.returncode, 0, v.stdout[-3000:])
                self.assertEqual(checked_modules(v), MLP + ATTENTION, v.stdout[-500:])
                upgraded, mlp_only = eval_kl(self.base, work, self.path(name))
                self.assertGreater(upgraded, mlp_only)  # 8-bit attention adds a little error
                # The peer's MLP bytes pass through untouched.
                before, after = E.safetensors_headers(self.path(name)), E.safetensors_headers(work)
                for t in (t for t in before if ".mlp." in t):
                    self.assertTrue(E.load_tensor(work, t, after).equal(E.load_tensor(self.path(name), t, before)), t)

    def test_another_format_without_requantize_warns_and_with_it_requantizes(self):
        # In the source's dialect the pre-quantized modules pass through, with a warning naming them.
        for name, body in (("llmc-int4-g32", FP8_ALL.format(requantize="")),
                           ("modelopt-nvfp4", "name: mx\narch: llama\ndialect: modelopt\n"
                                              "default: {scheme: mxfp8, options: {activations: mxfp8-dynamic}}\n")):
            with self.subTest(name):
                r = write_recipe(self.path(f"other-{name}.yaml"), body)
                p = E.selq("plan", self.path(name), "--recipe", r)
                self.assertIn("already quantized in the source", p.stderr + p.stdout)
                self.assertIn("model.layers.0.mlp.down_proj", p.stderr + p.stdout)
                strict = E.selq("plan", self.path(name), "--recipe", r, "--strict", check=False)
                self.assertEqual(strict.returncode, 2, strict.stderr)
        # ModelOpt's config.json carries compressed-tensors-like config_groups, but its NVFP4
        # cannot pass through into compressed-tensors (another global-scale convention): one line.
        r = write_recipe(self.path("fp8.yaml"), FP8_ALL.format(requantize=""))
        p = E.selq("plan", self.path("modelopt-nvfp4"), "--recipe", r, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("use the source's dialect or `requantize: true`", p.stderr)
        r = write_recipe(self.path("fp8-req.yaml"), FP8_ALL.format(requantize="requantize: true\n"))
        for name in SOURCES:
            with self.subTest(name):
                dst = self.path("requantized-" + name)
                E.selq("quantize", self.path(name), dst, "--recipe", r, "--quiet")
                v = verify(dst)
                self.assertEqual(v.returncode, 0, v.stdout[-3000:])
                self.assertEqual(checked_modules(v), MLP + ATTENTION)
                formats = {t["format"] for t in E.read_json(os.path.join(dst, "selq-manifest.json"))["tensors"]}
                self.assertEqual(formats, {"fp8-channel", "unquantized"}, name)
        (kl,) = eval_kl(self.base, self.path("requantized-llmc-nvfp4"))
        self.assertGreater(kl, 0)

if __name__ == "__main__":
    argv = E.parse_args()
    if not peers_installed():
        print(f"llm-compressor / ModelOpt missing in {PEERS_PY}: run scripts/setup.sh test "
              "(or bench/peers/setup_peers.sh)")
        sys.exit(1 if os.environ.get("CI") == "true" else 77)
    unittest.main(argv=argv, verbosity=2)
