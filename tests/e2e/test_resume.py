"""Crash safety: kill -9 at random points of in-place and file-to-file runs,
resume, and compare with an uninterrupted run byte for byte; disk full."""
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import e2e_util as u

KILLS_PER_MODE = 10


def shard_files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def run_with_kill(cmd, delay):
    """Starts cmd, kills it with SIGKILL after `delay` seconds; returns exit code (None if killed)."""
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            return None
        if p.returncode != 0:
            raise AssertionError(f"{cmd} failed: {p.stderr.read().decode()}")
    return 0


class Resume(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "src")
        # ~40 MB in ~20 shards so that kills land in many different places.
        u.selq("synth", "--arch", "llama", "--layers", "6", "--vocab", "4096", cls.src, "--max-shard-size", "2MB")
        cls.recipe = u.recipe("llama-mix")
        cls.src_bytes = u.tree_bytes(cls.src)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def reference(self, path, in_place, src=None, recipe=None):
        """Uninterrupted run at `path` (paths appear in the manifest); returns (bytes, seconds)."""
        src, recipe = src or self.src, recipe or self.recipe
        shutil.rmtree(path, ignore_errors=True)
        t0 = time.time()
        if in_place:
            shutil.copytree(src, path)
            u.selq("quantize", "--in-place", path, "--recipe", recipe, "--quiet")
            out = u.tree_bytes(path)
        else:
            u.selq("quantize", src, path, "--recipe", recipe, "--quiet")
            out = u.tree_bytes(path)
        elapsed = time.time() - t0
        shutil.rmtree(path)
        return out, elapsed

    def check_shards_old_or_new(self, path, final, original=None):
        original = original or self.src_bytes
        for f in shard_files(path):
            with open(os.path.join(path, f), "rb") as fh:
                b = fh.read()
            self.assertTrue(b == original.get(f) or b == final.get(f),
                            f"{f} is neither the original nor the final shard")

    def kill_and_resume_in_place(self, path, src, recipe, seed):
        final, seconds = self.reference(path, in_place=True, src=src, recipe=recipe)
        original = u.tree_bytes(src)
        rng = random.Random(seed)
        shutil.copytree(src, path)
        cmd = [u.ARGS.selq, "quantize", "--in-place", path, "--recipe", recipe, "--quiet"]
        kills = 0
        while kills < KILLS_PER_MODE:
            if run_with_kill(cmd, rng.uniform(0.0, seconds * 1.1)) == 0:
                # Finished before the kill: start a fresh copy so every trial kills something.
                shutil.rmtree(path)
                shutil.copytree(src, path)
                continue
            kills += 1
            self.check_shards_old_or_new(path, final, original)
        self.assertIsNotNone(run_with_kill(cmd, 600))
        got = u.tree_bytes(path)
        self.assertEqual(sorted(got), sorted(final), "stray or missing files after resume")
        for k in final:
            self.assertEqual(got[k], final[k], k)

    def test_in_place_kill_and_resume(self):
        self.kill_and_resume_in_place(os.path.join(self.tmp.name, "inplace"), self.src, self.recipe, 1234)

    def test_in_place_upgrade_of_a_quantized_source_kill_and_resume(self):
        """The published-checkpoint case: MLP already MXFP4 (quark), attention upgraded to FP8 in place."""
        pre = os.path.join(self.tmp.name, "pre-mxfp4")
        mlp = os.path.join(self.tmp.name, "mlp.yaml")
        with open(mlp, "w") as f:
            f.write("name: mlp\narch: llama\ndialect: quark\nrules:\n  - match: ['*.mlp.*']\n    scheme: mxfp4\n"
                    "    options: {activations: mxfp4-dynamic}\n")
        u.selq("quantize", self.src, pre, "--recipe", mlp, "--quiet")
        attn = os.path.join(self.tmp.name, "attn.yaml")
        with open(attn, "w") as f:
            f.write("name: attn\narch: llama\ndialect: quark\nrules:\n  - match: ['*.self_attn.*']\n"
                    "    scheme: fp8-channel\n    options: {activations: fp8-per-token}\n")
        self.kill_and_resume_in_place(os.path.join(self.tmp.name, "upgrade"), pre, attn, 4321)

    def test_file_to_file_kill_and_resume(self):
        dst = os.path.join(self.tmp.name, "f2f")
        final, seconds = self.reference(dst, in_place=False)
        rng = random.Random(99)
        cmd = [u.ARGS.selq, "quantize", self.src, dst, "--recipe", self.recipe, "--quiet"]
        kills = 0
        while kills < KILLS_PER_MODE:
            if run_with_kill(cmd, rng.uniform(0.0, seconds * 1.1)) == 0:
                shutil.rmtree(dst)
                continue
            kills += 1
            if os.path.exists(dst):
                # Killed after the final rename: the output must be complete.
                self.assertFalse(os.path.exists(dst + ".selq-partial"))
                self.assertEqual(u.tree_bytes(dst), final)
                shutil.rmtree(dst)
        self.assertIsNotNone(run_with_kill(cmd, 600))
        self.assertFalse(os.path.exists(dst + ".selq-partial"))
        got = u.tree_bytes(dst)
        self.assertEqual(sorted(got), sorted(final))
        for k in final:
            self.assertEqual(got[k], final[k], k)
        self.assertEqual(u.tree_bytes(self.src), self.src_bytes, "source modified")

    def test_in_place_killed_between_intent_and_rename_of_an_unchanged_shard(self):
        """The kill lands after a shard's journal intent, before its rename, on
        a shard whose rewrite equals the original (only passed-through tensors):
        the original then already counts as committed, and the finished temp
        file must not stay behind (the random kills above hit this rarely)."""
        path = os.path.join(self.tmp.name, "inplace-window")
        final, _ = self.reference(path, in_place=True)
        unchanged = [f for f in shard_files(self.src) if final.get(f) == self.src_bytes[f]]
        self.assertTrue(unchanged, "precondition: the recipe leaves some shard as it is")
        shard = unchanged[0]
        journal = os.path.join(path, ".selq-inplace", "journal.json")
        cmd = [u.ARGS.selq, "quantize", "--in-place", path, "--recipe", self.recipe, "--quiet"]
        for _attempt in range(50):
            shutil.copytree(self.src, path)
            with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as p:
                while p.poll() is None:  # kill once the shard's intent is journaled
                    try:
                        if shard in u.journal_shards(journal):
                            p.send_signal(signal.SIGKILL)
                            break
                    except (OSError, ValueError):
                        pass
                    time.sleep(0.0005)
                p.wait()
            if p.returncode == -signal.SIGKILL:
                break
            shutil.rmtree(path)  # finished before the kill: try again
        else:
            self.fail("the run always finished before its first shard was journaled")
        # The state of a kill inside the window: the finished temp file exists.
        shutil.copyfile(os.path.join(path, shard), os.path.join(path, shard + ".selq-tmp"))
        self.assertIsNotNone(run_with_kill(cmd, 600))
        got = u.tree_bytes(path)
        self.assertEqual(sorted(got), sorted(final), "stray or missing files after resume")
        for k in final:
            self.assertEqual(got[k], final[k], k)


@unittest.skipIf(os.geteuid() != 0 and os.environ.get("CI") != "true", "mounting a tmpfs needs root")
class DiskFull(unittest.TestCase):
    def make_tmp(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)  # runs after the umount (LIFO)
        return tmp

    def mount_tmpfs(self, path, size):
        os.mkdir(path)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
        self.addCleanup(subprocess.run, ["umount", path], check=True)

    def test_file_to_file_on_full_disk(self):
        tmp = self.make_tmp()
        src = os.path.join(tmp, "src")
        u.selq("synth", "--arch", "llama", "--layers", "2", "--vocab", "4096", src, "--max-shard-size", "4MB")
        mnt = os.path.join(tmp, "mnt")
        self.mount_tmpfs(mnt, "3m")
        dst = os.path.join(mnt, "out")
        r = u.selq("quantize", src, dst, "--recipe", u.recipe("llama-fp8"), "--quiet", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("out.selq-partial", r.stderr)
        self.assertFalse(os.path.exists(dst))

    def test_in_place_refuses_without_room_for_a_shard(self):
        tmp = self.make_tmp()
        src = os.path.join(tmp, "src")
        u.selq("synth", "--arch", "llama", "--layers", "2", "--vocab", "4096", src, "--max-shard-size", "4MB")
        total = sum(len(b) for b in u.tree_bytes(src).values())
        mnt = os.path.join(tmp, "mnt")
        self.mount_tmpfs(mnt, str(total + (2 << 20)))
        ip = os.path.join(mnt, "ip")
        shutil.copytree(src, ip)
        before = u.tree_bytes(ip)
        r = u.selq("quantize", "--in-place", ip, "--recipe", u.recipe("llama-fp8"), "--quiet", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("not enough free space", r.stderr)
        after = {k: v for k, v in u.tree_bytes(ip).items() if not k.startswith(".selq-inplace")}
        self.assertEqual(after, before, "an in-place run that refused must not change the checkpoint")


if __name__ == "__main__":
    u.main()
