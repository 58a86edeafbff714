#!/usr/bin/env python3
"""GPTQ over two mpirun ranks on two network namespaces (Open MPI over TCP, the
e2e test's setup: tests/e2e/test_mpi_calibration.py two_hosts) against one process, each
rank and the process on one thread (issue 49's goal: >= 1.8x). A synthetic
DeepSeek-V3 (a dense layer, one MoE layer), routed experts MXFP4 rounded by gptq,
self_attn FP8 per channel; the outputs' bytes compared. Needs root (namespaces).
  sudo bench/gptq_ranks.py WORKDIR [--scale 2] [--experts 32] [--tokens 2048] [--rounds 1]
Prints the CPU, each run's wall time and the ratio; docs/BENCHMARKS.md records it."""
import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import test_mpi  # noqa: E402
from test_mpi_calibration import two_hosts  # noqa: E402

RECIPE = os.path.join(HERE, "dsv3-experts-mxfp4-gptq.yaml")


def tree(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors") or f == "selq-manifest.json":
            with open(os.path.join(d, f), "rb") as fh:
                out[f] = fh.read()
    return out


def timed(cmd):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return time.time() - t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workdir")
    p.add_argument("--scale", default="2")
    p.add_argument("--experts", default="32")
    p.add_argument("--tokens", default="2048")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--selq", default=os.path.join(HERE, "..", "build", "release", "src", "selq"))
    a = p.parse_args()
    selq = os.path.realpath(a.selq)
    test_mpi.MPIRUN = shutil.which("mpirun")
    os.makedirs(a.workdir, exist_ok=True)
    src, recipe = os.path.join(a.workdir, "src"), RECIPE
    if not os.path.isdir(src):
        subprocess.run([selq, "synth", "--arch", "deepseek-v3", "--scale", a.scale, "--layers", "2", "--experts",
                        a.experts, "--vocab", "32000", src], check=True, capture_output=True)
    print(subprocess.run(["grep", "-m1", "model name", "/proc/cpuinfo"], capture_output=True, text=True).stdout.strip())
    dst = os.path.join(a.workdir, "out")  # one path for every run: the manifest names it
    args = ["quantize", src, dst, "--recipe", recipe, "--calibration-tokens", a.tokens, "--threads", "1", "--quiet"]
    times = {"1 process": [], "2 ranks over TCP": []}
    outputs = {}
    for _ in range(a.rounds):
        for label in times:
            shutil.rmtree(dst, ignore_errors=True)
            if label == "1 process":
                times[label].append(timed([selq, *args]))
            else:
                with two_hosts(a.workdir) as mpirun:
                    times[label].append(timed([*mpirun, selq, *args]))
            outputs[label] = tree(dst)
    same = outputs["1 process"] == outputs["2 ranks over TCP"]
    for label, t in times.items():
        print(f"{label}: {' '.join(f'{x:.1f}' for x in t)} s")
    one, two = min(times["1 process"]), min(times["2 ranks over TCP"])
    print(f"speedup {one / two:.2f}x; outputs byte-identical: {same}")
    shutil.rmtree(dst, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
