#!/usr/bin/env bash
# selq's scheme quantizers next to ggml's row quantizers, on this machine, in
# one run: ggml's test-quantize-perf (quantize_row_q, F32 input) for MXFP4,
# NVFP4 and Q8_0 (its SIMD quantizer, as a reference point), and selq's
# bench_schemes (BF16 and F32 input), with memcpy of the same bytes.
#
#   bench/ggml_side_by_side.sh            # everything (first run builds ggml)
#
# ggml is never part of the selq tree: its source is exported from a git
# mirror into $GGML_SRC (default /tmp/ggml-src) and built in $GGML_BUILD
# (default /tmp/ggml-build) with -DGGML_NATIVE=ON. Environment:
#   GGML_SRC, GGML_BUILD   where ggml's source / build live
#   GGML_MIRROR            a git dir of github.com/ggml-org/ggml to export from
#                          when $GGML_SRC is missing (default: the session mirror)
#   GGML_REF               commit-ish to export (default HEAD)
#   SELQ_BUILD             selq build dir with SELQ_BUILD_BENCH=ON (default build/bench)
#   REPS                   benchmark repetitions (default 3)
#   JOBS                   build parallelism (default 2)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
GGML_SRC=${GGML_SRC:-/tmp/ggml-src}
GGML_BUILD=${GGML_BUILD:-/tmp/ggml-build}
GGML_MIRROR=${GGML_MIRROR:-/work/.mirror/ggml-org+ggml/repo}
GGML_REF=${GGML_REF:-HEAD}
SELQ_BUILD=${SELQ_BUILD:-$repo/build/bench}
REPS=${REPS:-3}
JOBS=${JOBS:-2}
out=$(mktemp -d /tmp/selq-ggml-sbs.XXXXXX)

case "$GGML_SRC" in "$repo"|"$repo"/*)
  echo "GGML_SRC must be outside the selq tree" >&2; exit 2 ;;
esac

if [[ ! -f $GGML_SRC/tests/test-quantize-perf.cpp ]]; then
  if [[ ! -d $GGML_MIRROR ]]; then
    echo "no ggml source at $GGML_SRC and no mirror at $GGML_MIRROR;" >&2
    echo "clone https://github.com/ggml-org/ggml to $GGML_SRC (or set GGML_MIRROR)" >&2
    exit 2
  fi
  mkdir -p "$GGML_SRC"
  git --git-dir="$GGML_MIRROR" archive "$GGML_REF" | tar -x -C "$GGML_SRC"
fi
ggml_rev=$(git --git-dir="$GGML_MIRROR" rev-parse --short "$GGML_REF" 2>/dev/null || echo unknown)

echo "== building ggml test-quantize-perf (GGML_NATIVE=ON) in $GGML_BUILD"
cmake -S "$GGML_SRC" -B "$GGML_BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF >"$out/ggml-cmake.log"
cmake --build "$GGML_BUILD" --target test-quantize-perf -j"$JOBS" >"$out/ggml-build.log"
perf_bin=$(find "$GGML_BUILD" -type f -name test-quantize-perf -perm -u+x | head -1)

echo "== building selq bench_schemes in $SELQ_BUILD"
if [[ ! -f $SELQ_BUILD/CMakeCache.txt ]]; then
  cmake -S "$repo" -B "$SELQ_BUILD" -DCMAKE_BUILD_TYPE=Release -DSELQ_BUILD_BENCH=ON >"$out/selq-cmake.log"
fi
cmake --build "$SELQ_BUILD" --target bench_schemes -j"$JOBS" >"$out/selq-build.log"

# ggml knows NVFP4 only in recent versions; say so instead of failing.
types=()
help=$("$perf_bin" --help || true)  # exits 1 after printing usage
for t in q8_0 mxfp4 nvfp4; do
  if grep -qw "$t" <<<"$help"; then types+=("$t"); else echo "ggml $ggml_rev has no $t type"; fi
done

# TSC ticks per ns, to turn ggml's rdtsc cycle counts into time. TSC counts
# wall time, so this holds on a loaded machine too.
cat >"$out/tsc.c" <<'EOF'
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>
static double ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(void) {
  double a = ns(), b; unsigned long long t0 = __rdtsc();
  do b = ns(); while (b - a < 3e8);
  printf("%.4f\n", (double)(__rdtsc() - t0) / (b - a));
  return 0;
}
EOF
cc -O2 "$out/tsc.c" -o "$out/tsc"
tsc_ghz=$("$out/tsc")

echo "== load before: $(uptime)"
# 8,388,608 elements is selq's 1024 x 8192 benchmark matrix; -3 adds ggml's
# L1/L2/L3-sized rows.
for t in "${types[@]}"; do
  for r in $(seq "$REPS"); do
    "$perf_bin" --op quantize_row_q --type "$t" -3 --size 8388608 -i 10 >"$out/ggml-$t-$r.txt"
  done
done
"$SELQ_BUILD/bench/bench_schemes" \
  --benchmark_filter='memcpy|run_scheme' \
  --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$out/selq.json" --benchmark_out_format=json >/dev/null
echo "== load after:  $(uptime)"

python3 - "$out" "$ggml_rev" "$tsc_ghz" "${types[@]}" <<'EOF'
import json, re, sys, pathlib, statistics
out, rev, tsc, types = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4:]

# ggml prints, per size, "min cycles/32 vals" (rdtsc, fastest iteration) and
# "avg cycles/32 vals"; its GB/s line is wall time with two decimals. On a
# shared machine wall time counts time spent descheduled, while Google
# Benchmark's items/s for selq is CPU time: the fastest iteration of the
# L1/L2-sized rows (which fit in one time slice) is the fair per-core figure.
ggml = {}  # (type, size) -> {"min": [G el/s per rep], "avg": [...]}
for t in types:
    for f in sorted(out.glob(f"ggml-{t}-*.txt")):
        size = None
        for line in f.read_text().splitlines():
            m = re.match(r"\s+(\d+) values", line)
            if m: size = int(m.group(1))
            m = re.match(r"\s+(min|avg) cycles/32 vals\s*:\s*([\d.]+)", line)
            if m and size:
                ggml.setdefault((t, size), {"min": [], "avg": []})[m.group(1)].append(32 * tsc / float(m.group(2)))

selq = {}  # benchmark name -> median items/s (G)
for b in json.loads((out / "selq.json").read_text())["benchmarks"]:
    if b.get("aggregate_name") == "median":
        selq[b["run_name"]] = b["items_per_second"] / 1e9
memcpy = selq.get("BM_memcpy_same_bytes")

print(f"\nggml {rev} quantize_row_q (F32 input), TSC {tsc:.3f} GHz; selq bench_schemes: median of "
      "CPU-time repetitions; G elements/s on one core")
print(f"memcpy of the BF16 bytes (selq run): {memcpy:.3f} G elements/s = {memcpy*2:.2f} GB/s\n")
print("ggml by row size: fastest iteration / mean iteration (medians over repetitions):")
best = {}
for (t, size), v in sorted(ggml.items()):
    b, a = statistics.median(v["min"]), statistics.median(v["avg"])
    best[t] = max(best.get(t, 0.0), b)
    print(f"  {t:6s} {size:>8d} values: {b:7.3f} / {a:7.3f}")

pairs = [("mxfp4", "mxfp4"), ("nvfp4", "nvfp4"), ("q8_0", None)]
print("\n| scheme | ggml F32 (fastest size) | selq F32 | selq BF16 | selq F32 / ggml | selq BF16 / ggml | selq BF16 / memcpy |")
print("|---|---|---|---|---|---|---|")
cell = lambda x: f"{x:.3f}" if x else "–"
ratio = lambda a, b: f"{a / b:.1f}×" if a and b else "–"
for t, s in pairs:
    gv = best.get(t)
    f32 = selq.get(f"run_scheme_f32/{s}") if s else None
    bf = selq.get(f"run_scheme/{s}") if s else None
    mem = f"{bf / memcpy:.2f}" if bf and memcpy else "–"
    print(f"| {t} | {cell(gv)} | {cell(f32)} | {cell(bf)} | {ratio(f32, gv)} | {ratio(bf, gv)} | {mem} |")
print("\nall selq benchmarks (median G elements/s; ratio to memcpy of the BF16 bytes):")
for name, v in selq.items():
    print(f"  {name:46s} {v:7.3f}  {v / memcpy:5.2f}")
EOF
echo "raw output: $out"
