"""Rounding `mse` end to end on a synthetic Llama (docs/RECIPES.md, "Rounding").

`selq quantize --rounding mse` writes the same formats as nearest (same tensor
names, dtypes, shapes, config.json), with searched scales: the bytes do not
depend on the thread count or the memory budget (-j 1, -j 2, and 64 MiB with
tensors split in row blocks), `selq verify --against SRC` is clean, every
quantized tensor's error is at most nearest's, the manifest records the
rounding of each tensor (and nearest's manifest has no such key), `selq plan`
shows it, a recipe can ask for it per rule, and the rounding not built yet
(and `weighted` without a calibration: tests/e2e/test_static_activation.py
has it with one) is one line of bad input.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_util as E  # noqa: E402


class RoundingMse(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "llama")
        E.selq("synth", "--arch", "llama", "--scale", "2", "--vocab", "512", cls.src)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def quantize(self, name, recipe, *extra):
        dst = os.path.join(self.tmp.name, name)
        E.selq("quantize", self.src, dst, "--recipe", recipe, "--quiet", *extra)
        return dst

    def test_thread_count_and_budget_do_not_change_bytes(self):
        for recipe in ("llama-nvfp4", "llama-mix"):
            outs = [E.tree_bytes(self.quantize(f"{recipe}-j{j}", E.recipe(recipe), "--rounding", "mse", "-j", j))
                    for j in (1, 2)]
            outs.append(E.tree_bytes(self.quantize(f"{recipe}-small", E.recipe(recipe), "--rounding", "mse", "-j", 2,
                                                   "--memory-budget", "64MiB")))
            self.assertEqual(outs[0].keys(), outs[1].keys())
            for k in outs[0]:
                if k.endswith(".html"):
                    continue
                self.assertEqual(outs[0][k], outs[1][k], f"{recipe}: {k}")
                self.assertEqual(outs[0][k], outs[2][k], f"{recipe}: {k} (64 MiB budget)")

    def test_same_format_lower_error_verify_clean_manifest_says_so(self):
        near = self.quantize("near", E.recipe("llama-nvfp4"))
        mse = self.quantize("mse", E.recipe("llama-nvfp4"), "--rounding", "mse")
        v = E.selq("verify", mse, "--against", self.src, "--json", check=False)
        self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr)
        self.assertEqual(E.read_json(os.path.join(near, "config.json")),
                         E.read_json(os.path.join(mse, "config.json")))
        hn, hm = E.safetensors_headers(near), E.safetensors_headers(mse)
        self.assertEqual({k: v[:2] for k, v in hn.items()}, {k: v[:2] for k, v in hm.items()})

        mn = E.read_json(os.path.join(near, "selq-manifest.json"))
        mm = E.read_json(os.path.join(mse, "selq-manifest.json"))
        self.assertIn("\nrounding: mse", mm["recipe"]["text"])
        near_t = {t["source"]: t for t in mn["tensors"]}
        quantized = [t for t in mm["tensors"] if "scheme" in t]
        self.assertGreater(len(quantized), 10)
        differ = 0
        for t in quantized:
            self.assertEqual(t["rounding"], "mse", t["source"])
            n = near_t[t["source"]]
            self.assertNotIn("rounding", n)
            self.assertEqual(t["scheme"], n["scheme"])
            self.assertLessEqual(t["metrics"]["rel_frobenius"], n["metrics"]["rel_frobenius"] * (1 + 1e-6), t["source"])
            differ += t["outputs"][0]["xxh3"] != n["outputs"][0]["xxh3"]
        self.assertEqual(differ, len(quantized))
        for t in mm["tensors"]:
            if "scheme" not in t:
                self.assertNotIn("rounding", t)

    def test_plan_shows_it_and_recipe_rules_choose_it(self):
        p = E.selq("plan", self.src, "--recipe", E.recipe("llama-nvfp4"), "--rounding", "mse").stdout
        self.assertIn("nvfp4+mse", p)
        j = json.loads(E.selq("plan", self.src, "--recipe", E.recipe("llama-nvfp4"), "--rounding", "mse",
                              "--json").stdout)
        self.assertTrue(all(t.get("rounding") == "mse" for t in j["tensors"] if "scheme" in t))
        self.assertNotIn("rounding", E.selq("plan", self.src, "--recipe", E.recipe("llama-nvfp4"), "--json").stdout)

        recipe = os.path.join(self.tmp.name, "per-rule.yaml")
        with open(recipe, "w") as f:
            f.write("name: per-rule\narch: llama\nrules:\n"
                    "  - match: '@attention'\n    scheme: nvfp4\n    options: {rounding: mse}\n"
                    "  - match: '@mlp'\n    scheme: mxfp4\n")
        dst = self.quantize("per-rule", recipe)
        rounding = {t["source"]: t.get("rounding") for t in
                    E.read_json(os.path.join(dst, "selq-manifest.json"))["tensors"] if "scheme" in t}
        self.assertEqual({r for s, r in rounding.items() if ".self_attn." in s}, {"mse"})
        self.assertEqual({r for s, r in rounding.items() if ".mlp." in s}, {None})

    def test_a_run_interrupted_with_another_rounding_is_not_adopted(self):
        """The rounding is in the run's fingerprint (the recipe text --rounding
        extends): a staged run of nearest, killed after its first committed
        shard, is redone by an mse run into the same DST, and the reverse."""
        src = os.path.join(self.tmp.name, "sharded")
        E.selq("synth", "--arch", "llama", "--layers", "4", "--vocab", "2048", src, "--max-shard-size", "2MB")
        for first, second in (("nearest", "mse"), ("mse", "nearest")):
            clean = os.path.join(self.tmp.name, f"clean-{second}")
            E.selq("quantize", src, clean, "--recipe", E.recipe("llama-nvfp4"), "--rounding", second, "--quiet")
            want = E.tree_bytes(clean)
            dst = os.path.join(self.tmp.name, f"resumed-{first}-{second}")
            partial = dst + ".selq-partial"
            killed = False
            for _attempt in range(20):
                shutil.rmtree(dst, ignore_errors=True)
                shutil.rmtree(partial, ignore_errors=True)
                cmd = [E.ARGS.selq, "quantize", src, dst, "--recipe", E.recipe("llama-nvfp4"), "--rounding", first,
                       "--quiet", "-j", "1"]
                with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as p:
                    while p.poll() is None:
                        if os.path.isdir(partial) and any(f.endswith(".safetensors") for f in os.listdir(partial)):
                            p.send_signal(signal.SIGKILL)
                            killed = True
                            break
                        time.sleep(0.002)
                    p.wait()
                if killed and not os.path.exists(dst):
                    break
                killed = False
            self.assertTrue(killed, "could not interrupt a run after its first shard")
            E.selq("quantize", src, dst, "--recipe", E.recipe("llama-nvfp4"), "--rounding", second, "--quiet")
            got = E.tree_bytes(dst)
            self.assertEqual(sorted(got), sorted(want))
            for k in want:
                if k.endswith(".html") or k == "selq-manifest.json":
                    continue  # the destination's path is in them
                self.assertEqual(got[k], want[k], f"{first} then {second}: {k}")

    def test_not_implemented_and_unknown_are_one_line(self):
        for name, text in (("weighted", "'weighted' weighs each input channel by its mean squared activation, "
                                        "which needs a calibration"),
                           ("sgd", "unknown --rounding 'sgd'")):
            dst = os.path.join(self.tmp.name, f"bad-{name}")
            r = E.selq("quantize", self.src, dst, "--recipe", E.recipe("llama-nvfp4"), "--rounding", name,
                       check=False)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(text, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertFalse(os.path.exists(dst))


if __name__ == "__main__":
    E.main()
