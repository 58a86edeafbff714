#!/usr/bin/env python3
"""selq.quantize_tensor on a 4096x4096 BF16 array against the C++ kernel
(bench/bench_tensor: quantize_weight, buffers allocated per call) on the same
tensor shape and scheme, in alternating rounds; prints the median of each and
their ratio (the issue's bar: within 10%).

    PYTHONPATH=build/release/python bench/python_overhead.py build/release/bench/bench_tensor [ROUNDS]
"""
import json
import statistics
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

import selq

BENCH = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SCHEMES = {"nvfp4": "nvfp4", "mxfp4": "mxfp4", "fp8_channel": "fp8-channel"}

w = (np.random.default_rng(7).standard_normal((4096, 4096)) * 0.02).astype(ml_dtypes.bfloat16)


def python_ms(scheme, reps=10):
    selq.quantize_tensor(w, scheme)  # warm
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        selq.quantize_tensor(w, scheme)
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def cpp_ms():
    out = subprocess.run([BENCH, "--benchmark_format=json", "--benchmark_min_time=0.5",
                          "--benchmark_repetitions=1"], capture_output=True, text=True, check=True).stdout
    return {b["name"].split("/")[1]: b["real_time"] for b in json.loads(out)["benchmarks"]}


py = {k: [] for k in SCHEMES}
cc = {k: [] for k in SCHEMES}
for r in range(ROUNDS):
    c = cpp_ms()
    for k, s in SCHEMES.items():
        cc[k].append(c[k])
        py[k].append(python_ms(s))
print(f"{'scheme':12} {'C++ ms':>8} {'Python ms':>10} {'ratio':>6}   ({ROUNDS} rounds, medians)")
for k in SCHEMES:
    a, b = statistics.median(cc[k]), statistics.median(py[k])
    print(f"{k:12} {a:8.2f} {b:10.2f} {b / a:6.3f}")
