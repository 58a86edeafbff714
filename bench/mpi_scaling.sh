#!/usr/bin/env bash
# Throughput of `mpirun -np N selq quantize` against one rank, 1 thread per
# rank, interleaved in rounds; also the plain one-process run of this build and
# of a BASELINE binary (alone and as 2 ranks) in the same rounds. Prints one line per run
# with the load average before it, and each rank's CPU seconds (user+sys,
# /usr/bin/time) so that a loaded machine's wall times can be read against the
# work done. Source and output on tmpfs.
# Usage: SRC=/dev/shm/dspark [RECIPE=bench/peers/recipes/nvfp4a16.yaml] [REPEATS=3] [BASELINE=selq-binary]
#        bench/mpi_scaling.sh build/release/src/selq
set -euo pipefail
SELQ=$(realpath "$1")
RECIPE=${RECIPE:-bench/peers/recipes/nvfp4a16.yaml}
REPEATS=${REPEATS:-3}
OUT=${OUT:-/dev/shm/selq-mpi-scaling-out}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --mca btl self,vader --bind-to none)
CPU=(/usr/bin/time -a -o "$OUT.cpu" -f "%U %S")
run() {  # label, command...
  local label=$1; shift
  rm -rf "$OUT" "$OUT.selq-partial"
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  rm -f "$OUT.cpu"
  local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
  printf '%-16s %7.2f s  load %s  cpu s per rank %s\n' "$label" "$(echo "$t1 - $t0" | bc)" "$load" \
    "$(awk '{printf "%.2f ", $1 + $2}' "$OUT.cpu")"
}
cases() {
  if [[ -n "${BASELINE:-}" ]]; then
    run baseline-1proc "${CPU[@]}" "$BASELINE" quantize "$SRC" "$OUT" --recipe "$RECIPE" -j 1 --quiet
    run baseline-np2 "${MPIRUN[@]}" -np 2 "${CPU[@]}" "$BASELINE" quantize "$SRC" "$OUT" --recipe "$RECIPE" -j 1 --quiet
  fi
  run 1proc "${CPU[@]}" "$SELQ" quantize "$SRC" "$OUT" --recipe "$RECIPE" -j 1 --quiet
  run mpirun-np1 "${MPIRUN[@]}" -np 1 "${CPU[@]}" "$SELQ" quantize "$SRC" "$OUT" --recipe "$RECIPE" -j 1 --quiet
  run mpirun-np2 "${MPIRUN[@]}" -np 2 "${CPU[@]}" "$SELQ" quantize "$SRC" "$OUT" --recipe "$RECIPE" -j 1 --quiet
  run np2-by-tensor "${MPIRUN[@]}" -np 2 "${CPU[@]}" "$SELQ" quantize "$SRC" "$OUT" --recipe "$RECIPE" -j 1 --quiet \
    --split-by tensor
}
cases >/dev/null  # warm-up: page cache, libraries
for r in $(seq "$REPEATS"); do echo "round $r"; cases; done
rm -rf "$OUT" "$OUT.cpu"
