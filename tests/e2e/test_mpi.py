"""selq under mpirun: the output of 1, 2 and 3 ranks is byte-identical to a
single-process run (file to file and in place; the sensitivity table too); a
rank that fails or is killed leaves nothing under DST, names itself, and a
rerun with another rank count resumes what was committed."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import e2e_util as u

MPIRUN = None


def mpirun(np, *args, check=True):
    cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", str(np),
           "--mca", "btl", "self,vader", u.ARGS.selq, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # a hung rank fails, not stalls, CI
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def shard_inodes(d):
    return {f: os.stat(os.path.join(d, f)).st_ino for f in os.listdir(d) if f.endswith(".safetensors")}


def children(pid):
    """Pids whose parent is `pid` (the ranks mpirun started on this machine)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except OSError:
                pass
    return out


@contextlib.contextmanager
def nginx_serving(www, tmp):
    """test_remote's nginx serving the directory `www` (its files in `tmp`); yields the base URL."""
    import test_remote
    server = type("Server", (), {})()
    server.tmp = tmp
    os.makedirs(tmp, exist_ok=True)
    server.www = www
    test_remote.RemoteTest.start_nginx.__func__(server)
    try:
        yield server.base
    finally:
        server.nginx.terminate()
        server.nginx.wait(10)


class Mpi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "src")
        # ~40 MB in ~20 shards: fused q/k/v and gate/up groups whose members
        # sit in different shards, which the ranks share.
        u.selq("synth", "--arch", "llama", "--layers", "6", "--vocab", "4096", cls.src, "--max-shard-size", "2MB")
        cls.recipe = u.recipe("llama-nvfp4")
        cls.reference_src = u.tree_bytes(cls.src)
        cls.dst = os.path.join(cls.tmp.name, "out")
        u.selq("quantize", cls.src, cls.dst, "--recipe", cls.recipe, "--quiet")
        cls.reference = u.tree_bytes(cls.dst)
        shutil.rmtree(cls.dst)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assert_reference(self, got, want=None):
        want = self.reference if want is None else want
        self.assertEqual(sorted(got), sorted(want), "stray or missing files")
        for k in want:
            self.assertEqual(got[k], want[k], k)

    def test_a_fused_group_spans_shards(self):
        index = u.read_json(os.path.join(self.src, "model.safetensors.index.json"))["weight_map"]
        groups = [[f"model.layers.{l}.self_attn.{p}_proj.weight" for p in "qkv"] for l in range(6)]
        groups += [[f"model.layers.{l}.mlp.{p}_proj.weight" for p in ("gate", "up")] for l in range(6)]
        spans = [g for g in groups if len({index[t] for t in g}) > 1]
        self.assertTrue(spans, "no fused group spans shards: the amax exchange is not exercised")

    def test_byte_identical_for_1_2_3_ranks(self):
        for np in (1, 2, 3):
            with self.subTest(ranks=np):
                r = mpirun(np, "quantize", self.src, self.dst, "--recipe", self.recipe)
                self.assertIn("wrote", r.stdout)  # rank 0's summary, once
                self.assertEqual(r.stdout.count("wrote"), 1)
                self.assert_reference(u.tree_bytes(self.dst))
                shutil.rmtree(self.dst)

    def test_failed_rank_then_resume_with_other_count(self):
        bad = os.path.join(self.tmp.name, "bad")
        shutil.copytree(self.src, bad)
        dst = os.path.join(self.tmp.name, "out_bad")
        # NaNs in a quantized weight of the last shard that has one: the rank
        # writing it fails after committing its earlier shards.
        index = u.read_json(os.path.join(bad, "model.safetensors.index.json"))["weight_map"]
        name = max((t for t in index if t.endswith("_proj.weight")), key=lambda t: (index[t], t))
        shard = index[name]
        poison(os.path.join(bad, shard), name)
        r = mpirun(2, "quantize", bad, dst, "--recipe", self.recipe, "--quiet", check=False)
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.startswith("selq: error:")]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r"^selq: error: rank [01] of 2: shard " + shard + ": .*" + name)
        self.assertFalse(os.path.exists(dst), "partial output under DST")
        staged = shard_inodes(dst + ".selq-partial")
        self.assertTrue(staged, "no shard was committed before the failure")
        # Fixed source (same headers: the same plan), three ranks: the committed shards are kept.
        shutil.copy(os.path.join(self.src, shard), os.path.join(bad, shard))
        mpirun(3, "quantize", bad, dst, "--recipe", self.recipe, "--quiet")
        self.assertFalse(os.path.exists(dst + ".selq-partial"))
        after = shard_inodes(dst)
        for f, ino in staged.items():
            self.assertEqual(after[f], ino, f"{f} was rewritten, not resumed")
        got = u.tree_bytes(dst)
        shutil.rmtree(dst)
        u.selq("quantize", bad, dst, "--recipe", self.recipe, "--quiet")  # the reference at the same paths
        self.assert_reference(got, u.tree_bytes(dst))
        shutil.rmtree(dst)

    def test_killed_rank_then_resume(self):
        dst = os.path.join(self.tmp.name, "out")  # the reference's path (the manifest names it)
        staging = dst + ".selq-partial"
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "3", "--mca", "btl", "self,vader",
               u.ARGS.selq, "quantize", self.src, dst, "--recipe", self.recipe, "--quiet", "--threads", "1"]
        with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
            deadline = time.time() + 60
            while time.time() < deadline and p.poll() is None:
                if os.path.isdir(staging) and shard_inodes(staging):
                    break
                time.sleep(0.005)
            self.assertIsNone(p.poll(), "the run finished before a rank could be killed")
            ranks = children(p.pid)
            self.assertTrue(ranks)
            os.kill(sorted(ranks)[-1], signal.SIGKILL)
            p.wait(timeout=60)
            self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.exists(dst), "partial output under DST")
        staged = shard_inodes(staging)
        self.assertTrue(staged)
        mpirun(2, "quantize", self.src, dst, "--recipe", self.recipe, "--quiet")
        after = shard_inodes(os.path.join(dst))
        for f, ino in staged.items():
            self.assertEqual(after[f], ino, f"{f} was rewritten, not resumed")
        got = u.tree_bytes(dst)
        shutil.rmtree(dst)
        # The reference at the same path (paths appear in the manifest).
        u.selq("quantize", self.src, dst, "--recipe", self.recipe, "--quiet")
        self.assert_reference(got, u.tree_bytes(dst))
        shutil.rmtree(dst)

    def test_in_place_killed_rank_then_resume(self):
        path = os.path.join(self.tmp.name, "inplace_kill")
        shutil.copytree(self.src, path)
        u.selq("quantize", "--in-place", path, "--recipe", self.recipe, "--quiet")
        want = u.tree_bytes(path)
        shutil.rmtree(path)
        shutil.copytree(self.src, path)
        work = os.path.join(path, ".selq-inplace")
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "3", "--mca", "btl", "self,vader",
               u.ARGS.selq, "quantize", "--in-place", path, "--recipe", self.recipe, "--quiet", "--threads", "1"]

        def committed():
            n = 0
            for f in os.listdir(work) if os.path.isdir(work) else []:
                if f.startswith("journal") and f.endswith(".json"):
                    try:
                        n += len(u.journal_shards(os.path.join(work, f)))
                    except (OSError, ValueError):
                        pass
            return n

        with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
            deadline = time.time() + 60
            while time.time() < deadline and p.poll() is None and committed() == 0:
                time.sleep(0.005)
            self.assertIsNone(p.poll(), "the run finished before a rank could be killed")
            os.kill(sorted(children(p.pid))[0], signal.SIGKILL)
            p.wait(timeout=60)
            self.assertNotEqual(p.returncode, 0)
        for f, b in u.tree_bytes(path).items():  # every shard the original or the final one
            if f.endswith(".safetensors") and "/" not in f:
                self.assertIn(b, (want.get(f), self.reference_src.get(f)), f)
        mpirun(2, "quantize", "--in-place", path, "--recipe", self.recipe, "--quiet")
        self.assert_reference(u.tree_bytes(path), want)
        shutil.rmtree(path)

    def test_in_place(self):
        path = os.path.join(self.tmp.name, "inplace")
        shutil.copytree(self.src, path)
        u.selq("quantize", "--in-place", path, "--recipe", self.recipe, "--quiet")
        want = u.tree_bytes(path)
        shutil.rmtree(path)
        shutil.copytree(self.src, path)
        mpirun(3, "quantize", "--in-place", path, "--recipe", self.recipe, "--quiet")
        self.assert_reference(u.tree_bytes(path), want)
        shutil.rmtree(path)

    def test_remote_source(self):
        """Each rank fetches its own shards' ranges from an https-style base URL (nginx)."""
        with nginx_serving(self.tmp.name, os.path.join(self.tmp.name, "nginx")) as base:
            url = f"{base}/src"
            dst = os.path.join(self.tmp.name, "out_remote")
            u.selq("quantize", url, dst, "--recipe", self.recipe, "--quiet")
            want = u.tree_bytes(dst)
            shutil.rmtree(dst)
            mpirun(2, "quantize", url, dst, "--recipe", self.recipe, "--quiet")
            self.assert_reference(u.tree_bytes(dst), want)
            shards = [f for f in want if f.endswith(".safetensors")]
            self.assertTrue(shards)
            for f in shards:  # and the shards are those of the local source
                self.assertEqual(want[f], self.reference[f], f)
            shutil.rmtree(dst)

    def test_sensitivity(self):
        out1 = os.path.join(self.tmp.name, "s1.json")
        out3 = os.path.join(self.tmp.name, "s3.json")
        args = ["--candidates", "fp8-w8a8,nvfp4-w4a16", "--quiet"]
        u.selq("sensitivity", self.src, "-o", out1, *args)
        r = mpirun(3, "sensitivity", self.src, "-o", out3, *args)
        self.assertEqual(r.stdout.count(out3), 1)
        a, b = u.read_json(out1), u.read_json(out3)
        del a["seconds"], b["seconds"]
        self.assertEqual(json.dumps(a), json.dumps(b))


class SplitByTensor(unittest.TestCase):
    """Fewer shards than ranks: each shard's tensors are spread over the
    ranks, which write into its one temporary file; rank 0 commits it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.recipe = u.recipe("llama-nvfp4")
        cls.src, cls.ref = {}, {}
        # 45 MB in one shard and in two; 170 MB in 8 (the kill: the shards
        # after the first commit take long enough for a rank to be killed in one).
        for shards, layers, cap in ((1, 6, "1GB"), (2, 6, "25MB"), (8, 24, "25MB")):
            src = os.path.join(cls.tmp.name, f"src{shards}")
            u.selq("synth", "--arch", "llama", "--layers", str(layers), "--vocab", "4096", src, "--max-shard-size", cap)
            got = len([f for f in os.listdir(src) if f.endswith(".safetensors")])
            assert got == shards, f"{src}: {got} shards, wanted {shards}"
            cls.src[shards] = src
            dst = os.path.join(cls.tmp.name, "out")
            u.selq("quantize", src, dst, "--recipe", cls.recipe, "--quiet")
            cls.ref[shards] = u.tree_bytes(dst)
            shutil.rmtree(dst)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):  # what a failed test left
        for d in ("out", "out.selq-partial"):
            shutil.rmtree(os.path.join(self.tmp.name, d), ignore_errors=True)

    def assert_reference(self, got, want):
        self.assertEqual(sorted(got), sorted(want), "stray or missing files")
        for k in want:
            self.assertEqual(got[k], want[k], k)

    def quantize(self, np, shards):
        dst = os.path.join(self.tmp.name, "out")
        r = mpirun(np, "quantize", self.src[shards], dst, "--recipe", self.recipe)
        self.assertIn(f"{np} ranks, work split by tensor", r.stdout)
        self.assert_reference(u.tree_bytes(dst), self.ref[shards])
        shutil.rmtree(dst)

    def test_one_shard_on_2_and_3_ranks(self):
        for np in (2, 3):
            with self.subTest(ranks=np):
                self.quantize(np, 1)

    def test_two_shards_on_3_ranks(self):
        self.quantize(3, 2)

    def test_remote_one_shard_on_2_ranks(self):
        """Each rank downloads only its tensors of the one shard (nginx)."""
        with nginx_serving(self.tmp.name, os.path.join(self.tmp.name, "nginx")) as base:
            url = f"{base}/src1"
            dst = os.path.join(self.tmp.name, "out")
            u.selq("quantize", url, dst, "--recipe", self.recipe, "--quiet")
            want = u.tree_bytes(dst)
            shutil.rmtree(dst)
            r = mpirun(2, "quantize", url, dst, "--recipe", self.recipe)
            self.assertIn("2 ranks, work split by tensor", r.stdout)
            self.assert_reference(u.tree_bytes(dst), want)
            shard = "model-00001-of-00001.safetensors"
            self.assertEqual(want[shard], self.ref[1][shard])  # the local source's shard
            shutil.rmtree(dst)

    def test_failing_rank_names_rank_shard_tensor(self):
        bad = os.path.join(self.tmp.name, "bad1")
        shutil.copytree(self.src[1], bad)
        shard = [f for f in os.listdir(bad) if f.endswith(".safetensors")][0]
        name = "model.layers.5.mlp.down_proj.weight"
        poison(os.path.join(bad, shard), name)
        dst = os.path.join(self.tmp.name, "out_bad1")
        r = mpirun(2, "quantize", bad, dst, "--recipe", self.recipe, "--quiet", check=False)
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.startswith("selq: error:")]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r"^selq: error: rank [01] of 2: shard " + shard + ": .*" + name)
        self.assertFalse(os.path.exists(dst), "partial output under DST")
        shutil.rmtree(bad)
        shutil.rmtree(dst + ".selq-partial", ignore_errors=True)

    def test_killed_mid_shard_then_rerun_with_other_count(self):
        dst = os.path.join(self.tmp.name, "out")  # the reference's path (the manifest names it)
        staging = dst + ".selq-partial"
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", "--mca", "btl", "self,vader",
               u.ARGS.selq, "quantize", self.src[8], dst, "--recipe", self.recipe, "--quiet", "--threads", "1"]
        with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
            deadline = time.time() + 60
            while time.time() < deadline and p.poll() is None:
                if os.path.isdir(staging) and shard_inodes(staging):
                    break
                time.sleep(0.001)
            self.assertIsNone(p.poll(), "the run finished before a rank could be killed")
            os.kill(sorted(children(p.pid))[-1], signal.SIGKILL)
            p.wait(timeout=60)
            self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.exists(dst), "partial output under DST")
        staged = shard_inodes(staging)
        self.assertTrue(0 < len(staged) < 8, staged)
        in_progress = [f for f in os.listdir(staging) if f.endswith(".safetensors.selq-tmp")]
        self.assertTrue(in_progress, "no shard was being written when the rank was killed")
        r = mpirun(3, "quantize", self.src[8], dst, "--recipe", self.recipe)
        self.assertIn("3 ranks, work split by tensor", r.stdout)
        after = shard_inodes(dst)
        for f, ino in staged.items():
            self.assertEqual(after[f], ino, f"{f} was rewritten, not resumed")
        self.assert_reference(u.tree_bytes(dst), self.ref[8])
        shutil.rmtree(dst)


def poison(path, tensor):
    """Overwrites the first elements of `tensor` in the shard at `path` with NaN."""
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        begin = header[tensor]["data_offsets"][0]
        f.seek(8 + n + begin)
        f.write(b"\xc0\x7f" * 16)  # BF16 NaN


if __name__ == "__main__":
    p_argv = u.parse_args()
    i = p_argv.index("--mpirun") if "--mpirun" in p_argv else -1
    MPIRUN = p_argv[i + 1] if i >= 0 else shutil.which("mpirun")
    if i >= 0:
        del p_argv[i:i + 2]
    unittest.main(argv=p_argv)
