"""The calibrated passes under mpirun, on a synthetic DeepSeek-V3 whose layers
round in several batches (a 64 MiB budget) and whose routed experts get few
calibration tokens (some none).

GPTQ: each rank runs its share of the sequences and rounds its share of each
layer's batches. The output of 1, 2 and 3 ranks is byte-identical to one plain
process; a rank killed mid-pass, then a rerun with another rank count, gives
the same bytes and reuses the batches already rounded; and two ranks on two
network namespaces of this machine joined by a veth pair (Open MPI over TCP,
each namespace a host) give the same bytes again. The namespaces need root:
locally that case is skipped without it, under CI=true it fails.

selq calibrate: the ranks share the windows; the JSON (amax, expert tokens,
unreached experts, the moments file's hash) and the input moments file are one
process's byte for byte (the moments are exact sums: calibration::SquareSums).

selq sensitivity's runtime tiers: the ranks share the units (scores and
measurements, a gptq candidate's too), rank 0 fits the measured tier's rest
(every second layer measured): the table is one process's."""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import e2e_util as u
import test_mpi

GPTQ_ARGS = ("--rounding", "gptq", "--calibration-tokens", "128", "--calibration-context", "16",
             "--memory-budget", "64MiB", "--threads", "1")
NET = "10.199.0"  # the veth pair's subnet
AGENT = """#!/bin/sh
# Open MPI's rsh agent: a host of the hostfile is a network namespace here.
host=$1; shift
case "$host" in
  {net}.1) ns={ns}0 ;;
  {net}.2) ns={ns}1 ;;
  *) echo "no namespace for host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
"""


@contextlib.contextmanager
def two_hosts(tmp):
    """Two network namespaces joined by a veth pair ({NET}.1 and .2); yields mpirun's
    leading arguments for them (run mpirun inside the first). Removed on exit."""
    ns = f"selq-test-{os.getpid()}-"
    veth = f"sq{os.getpid()}v"  # + 0 or 1: at most 15 characters, as Linux allows
    run = lambda *a: subprocess.run(["ip", *a], check=True, capture_output=True, text=True)
    try:
        run("netns", "add", ns + "0")
        run("netns", "add", ns + "1")
        run("link", "add", veth + "0", "type", "veth", "peer", "name", veth + "1")
        for i in (0, 1):
            run("link", "set", f"{veth}{i}", "netns", f"{ns}{i}")
            run("-n", f"{ns}{i}", "addr", "add", f"{NET}.{i + 1}/24", "dev", f"{veth}{i}")
            run("-n", f"{ns}{i}", "link", "set", "lo", "up")
            run("-n", f"{ns}{i}", "link", "set", f"{veth}{i}", "up")
        agent = os.path.join(tmp, "netns-agent.sh")
        with open(agent, "w") as f:
            f.write(AGENT.format(net=NET, ns=ns))
        os.chmod(agent, 0o755)
        hosts = os.path.join(tmp, "hosts")
        with open(hosts, "w") as f:
            f.write(f"{NET}.1 slots=1\n{NET}.2 slots=1\n")
        yield ["ip", "netns", "exec", ns + "0", test_mpi.MPIRUN, "--allow-run-as-root", "--hostfile", hosts,
               # --bind-to none: both hosts are this machine, and each would bind its rank to core 0.
               "-np", "2", "--map-by", "node", "--bind-to", "none", "--mca", "plm_rsh_agent", agent,
               "--mca", "oob_tcp_if_include", f"{NET}.0/24", "--mca", "btl", "tcp,self",
               "--mca", "btl_tcp_if_include", f"{NET}.0/24"]
    finally:
        for i in (0, 1):  # deleting a namespace deletes its end of the pair, and so the pair
            subprocess.run(["ip", "netns", "delete", f"{ns}{i}"], capture_output=True)
        subprocess.run(["ip", "link", "delete", veth + "0"], capture_output=True)  # a pair not yet moved


class MpiCalibration(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = os.path.join(cls.tmp.name, "src")
        u.selq("synth", "--arch", "deepseek-v3", "--scale", "8", "--layers", "3", "--experts", "64", "--vocab", "512",
               cls.src)
        cls.recipe = os.path.join(cls.tmp.name, "moe-nvfp4.yaml")
        with open(cls.recipe, "w") as f:
            f.write("name: moe-nvfp4\ndefault: {scheme: nvfp4, options: {activations: none}}\n")
        cls.dst = os.path.join(cls.tmp.name, "out")  # every run writes here: the manifest names its path
        r = u.selq("quantize", cls.src, cls.dst, "--recipe", cls.recipe, *GPTQ_ARGS)
        cls.reference = u.tree_bytes(cls.dst)
        cls.calibration = u.read_json(os.path.join(cls.dst, "selq-manifest.json"))["gptq_calibration"]
        cls.batches = int(re.search(r"layer 2/3: .*\((\d+) batches", r.stderr).group(1))
        shutil.rmtree(cls.dst)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):  # what a failed test left
        for d in (self.dst, self.dst + ".selq-gptq", self.dst + ".selq-partial"):
            shutil.rmtree(d, ignore_errors=True)

    def assert_reference(self):
        got = u.tree_bytes(self.dst)
        shutil.rmtree(self.dst)
        self.assertEqual(sorted(got), sorted(self.reference), "stray or missing files")
        for k in self.reference:
            self.assertEqual(got[k], self.reference[k], k)
        self.assertFalse(os.path.exists(self.dst + ".selq-gptq"), "the gptq work directory was left")

    def test_the_reference_has_what_the_ranks_must_share(self):
        self.assertGreaterEqual(self.batches, 8, "a layer should round in several batches")
        self.assertTrue(self.calibration.get("unreached"), "some routed expert should get no token")
        self.assertGreater(self.calibration["gate"]["held_out_sequences"], 0)

    def test_byte_identical_for_1_2_3_ranks(self):
        for np in (1, 2, 3):
            with self.subTest(ranks=np):
                r = test_mpi.mpirun(np, "quantize", self.src, self.dst, "--recipe", self.recipe, *GPTQ_ARGS)
                self.assertEqual(r.stderr.count("gptq: layer 3/3"), 1, r.stderr)  # rank 0's layer lines
                if np > 1:
                    self.assertIn(f"rank {np - 1} of {np}: layer 2: batch", r.stderr)  # every rank rounds
                self.assert_reference()
                self.setUp()

    def test_killed_rank_then_resume_with_other_count(self):
        work = self.dst + ".selq-gptq"
        cmd = [test_mpi.MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", "--mca", "btl", "self,vader",
               u.ARGS.selq, "quantize", self.src, self.dst, "--recipe", self.recipe, *GPTQ_ARGS, "--quiet"]
        with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
            deadline = time.time() + 120
            while time.time() < deadline and p.poll() is None:
                if os.path.exists(os.path.join(work, "layer-0002-b0001.safetensors")):
                    break
                time.sleep(0.005)
            self.assertIsNone(p.poll(), "the run finished before a rank could be killed")
            ranks = test_mpi.children(p.pid)
            self.assertTrue(ranks)
            os.kill(sorted(ranks)[-1], signal.SIGKILL)
            p.wait(timeout=60)
            self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.exists(self.dst), "partial output under DST")
        kept = {f: os.stat(os.path.join(work, f)).st_ino for f in os.listdir(work) if f.startswith("layer-0001-b")}
        self.assertTrue(kept, "no batch of layer 1 was rounded before the kill")
        r = test_mpi.mpirun(3, "quantize", self.src, self.dst, "--recipe", self.recipe, *GPTQ_ARGS)
        # Another rank count runs the sequences from the start, but rounds nothing twice.
        self.assertRegex(r.stderr, r"layer 1/3: .*\((\d+) batches, \1 from a previous run;")
        self.assert_reference()

    def test_calibrate_on_1_2_3_ranks(self):
        out = os.path.join(self.tmp.name, "calib.json")  # one path: the JSON names its moments file
        moments = os.path.join(self.tmp.name, "calib.moments.safetensors")
        args = ("calibrate", self.src, "--calibration-tokens", "512", "--calibration-context", "32", "-o", out)
        u.selq(*args, "--quiet")

        def files():
            with open(out, "rb") as j, open(moments, "rb") as m:
                return j.read(), m.read()
        want = files()
        self.assertTrue(u.read_json(out)["unreached_experts"], "some expert should get no token")
        for np_ in (1, 2, 3):
            with self.subTest(ranks=np_):
                os.remove(out)
                os.remove(moments)
                test_mpi.mpirun(np_, *args)
                got = files()
                self.assertEqual(got[0], want[0])
                self.assertTrue(got[1] == want[1], "the moments file differs from one process's")

    def test_sensitivity_runtime_tiers_on_2_and_3_ranks(self):
        out = os.path.join(self.tmp.name, "sens.json")
        args = ("sensitivity", self.src, "-o", out, "--tier", "measured", "--probe-every", "2", "--candidates",
                "nvfp4-w4a16,nvfp4-w4a16+gptq", "--calibration-tokens", "128", "--quiet")

        def table():
            t = u.read_json(out)
            del t["seconds"]
            return t
        u.selq(*args)
        want = table()
        self.assertEqual(want["tier"], "measured")
        measured = [s.get("measured") for unit in want["units"] for s in unit["scores"].values()]
        self.assertIn(True, measured)
        self.assertIn(False, measured)  # fitted: the layer not measured, and the other candidate
        for np_ in (2, 3):
            with self.subTest(ranks=np_):
                test_mpi.mpirun(np_, *args)
                self.assertEqual(table(), want)

    @unittest.skipIf(os.geteuid() != 0 and os.environ.get("CI") != "true", "network namespaces need root")
    def test_two_hosts_over_tcp(self):
        with two_hosts(self.tmp.name) as mpirun:
            r = subprocess.run([*mpirun, u.ARGS.selq, "quantize", self.src, self.dst, "--recipe", self.recipe,
                                *GPTQ_ARGS], capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("rank 1 of 2: layer 2: batch", r.stderr)
        self.assert_reference()


if __name__ == "__main__":
    p_argv = u.parse_args()
    i = p_argv.index("--mpirun") if "--mpirun" in p_argv else -1
    test_mpi.MPIRUN = p_argv[i + 1] if i >= 0 else shutil.which("mpirun")
    if i >= 0:
        del p_argv[i:i + 2]
    unittest.main(argv=p_argv)
