"""Bounded memory: quantizing a >= 4 GB checkpoint keeps anonymous memory
(RssAnon, sampled from /proc while it runs) under 512 MB. File-backed pages of
the memory-mapped source do not count: the kernel can drop them at will."""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import e2e_util as u

LIMIT = 512 << 20


def rss_anon(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def big_tmp_dir():
    """tmpfs when it has room for the ~8 GB this test writes (much faster than a
    VM disk; tmpfs pages are shared memory, not RssAnon), else the default."""
    if os.environ.get("SELQ_BIG_TMP"):
        return os.environ["SELQ_BIG_TMP"]
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 9 << 30:
            return "/dev/shm"
    except OSError:
        pass
    return None


class BoundedMemory(unittest.TestCase):
    def test_4gb_dspark(self):
        tmp = tempfile.mkdtemp(dir=big_tmp_dir())
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        src = os.path.join(tmp, "src")
        u.selq("synth", "--arch", "dspark", "--layers", "4", "--vocab", "32000", src)
        total = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
        self.assertGreaterEqual(total, 4_000_000_000)
        dst = os.path.join(tmp, "out")
        t0 = time.time()
        p = subprocess.Popen([u.ARGS.selq, "quantize", src, dst, "--recipe", u.recipe("dspark-oproj-mxfp4"), "--quiet"],
                             stderr=subprocess.PIPE)
        peak = 0
        while p.poll() is None:
            try:
                peak = max(peak, rss_anon(p.pid))
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.01)
        _, err = p.communicate()
        self.assertEqual(p.returncode, 0, err.decode())
        elapsed = time.time() - t0
        print(f"\nquantized {total / 1e9:.2f} GB in {elapsed:.1f}s, peak RssAnon {peak / 2**20:.0f} MiB")
        self.assertGreater(peak, 0)
        self.assertLess(peak, LIMIT, f"peak RssAnon {peak / 2**20:.0f} MiB")


if __name__ == "__main__":
    u.main()
