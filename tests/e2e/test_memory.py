"""Bounded memory: quantizing the 3.22 GB dspark synthetic keeps anonymous
memory (RssAnon, sampled from /proc while it runs) under the memory budget,
with 2 threads and with 16 and 64 (an oversubscribed arena on a small machine
stands in for a large node), and the output bytes do not depend on the thread
count or the budget (64 MiB splits every large tensor into many row blocks).
File-backed pages of the memory-mapped source do not count: the kernel can
drop them at will."""
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import e2e_util as u

DEFAULT_BUDGET = 512 << 20
SCHEMES = ("fp8-channel", "nvfp4", "mxfp4")
RUNS = ((2, None), (16, None), (64, None), (2, "64MiB"))


def rss_anon(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def big_tmp_dir():
    """tmpfs when it has room for the ~6 GB this test holds at once (much
    faster than a VM disk; tmpfs pages are shared memory, not RssAnon), else
    the default."""
    if os.environ.get("SELQ_BIG_TMP"):
        return os.environ["SELQ_BIG_TMP"]
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 7 << 30:
            return "/dev/shm"
    except OSError:
        pass
    return None


def tree_digest(directory):
    """SHA-256 over every file's name and bytes (shards, index, config, manifest)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        h.update(name.encode() + b"\0")
        with open(os.path.join(directory, name), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                h.update(chunk)
    return h.hexdigest()


def quantize_sampled(args):
    """Runs `selq quantize ARGS`; returns the peak RssAnon sampled every 10 ms."""
    p = subprocess.Popen([u.ARGS.selq, "quantize", *args, "--quiet"], stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        try:
            peak = max(peak, rss_anon(p.pid))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.01)
    _, err = p.communicate()
    if p.returncode != 0:
        raise AssertionError(err.decode())
    return peak


class BoundedMemory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=big_tmp_dir())
        cls.src = os.path.join(cls.tmp, "src")
        u.selq("synth", "--arch", "dspark", "--layers", "2", "--vocab", "32000", cls.src)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_3gb_dspark_under_budget_same_bytes(self):
        total = sum(os.path.getsize(os.path.join(self.src, f)) for f in os.listdir(self.src))
        self.assertGreaterEqual(total, 3_000_000_000)
        for scheme in SCHEMES:
            recipe = os.path.join(self.tmp, f"{scheme}.yaml")
            with open(recipe, "w") as f:
                f.write(f"name: mem-{scheme}\ndialect: compressed-tensors\ndefault:\n  scheme: {scheme}\n")
            digests = {}
            for threads, budget in RUNS:
                with self.subTest(scheme=scheme, threads=threads, budget=budget):
                    dst = os.path.join(self.tmp, "out")
                    shutil.rmtree(dst, ignore_errors=True)
                    extra = ["--memory-budget", budget] if budget else []
                    t0 = time.time()
                    peak = quantize_sampled([self.src, dst, "--recipe", recipe, "-j", str(threads), *extra])
                    limit = int(budget[:-3]) << 20 if budget else DEFAULT_BUDGET  # "64MiB"
                    print(f"\n{scheme} -j {threads} budget {budget or '512MiB'}: {total / 1e9:.2f} GB in "
                          f"{time.time() - t0:.1f}s, peak RssAnon {peak / 2**20:.0f} MiB")
                    self.assertGreater(peak, 0)
                    self.assertLess(peak, limit, f"peak RssAnon {peak / 2**20:.0f} MiB")
                    digests[(threads, budget)] = tree_digest(dst)
                    shutil.rmtree(dst)
            self.assertEqual(len(set(digests.values())), 1, f"{scheme}: output differs across runs: {digests}")


if __name__ == "__main__":
    u.main()
