#!/usr/bin/env bash
# selq against the reference quantizers (llm-compressor model_free_ptq, AMD
# Quark, NVIDIA ModelOpt) on the same checkpoint, back to back in one run:
# wall time, peak RSS and peak anonymous memory of each (peakmem.py), and `cp -r` of the same bytes as
# the floor. By default input and output live on /dev/shm so the disk is not
# the limit; each output is deleted before the next run (tmpfs counts against
# RAM). With --workdir on a disk and --drop-caches every run starts with a cold
# page cache, and the time of a `sync` after it (flushing its output) is
# recorded apart as sync_s.
# The peers come from bench/peers/setup_peers.sh (their own venv).
#
# Usage: bench/compare.sh [options]
#   --selq BIN            selq binary (default build/release/src/selq)
#   --ckpt NAME           synth | real | both (default both)
#   --synth-args "..."    selq synth arguments (default: --arch dspark --layers 4 --vocab 32000, 5.2 GB)
#   --pairs LIST          comma list of peer:scheme (default: all, see PAIRS below)
#   --peer-timeout S      stop a peer run after S seconds (default 900) and record it as such
#   --workdir DIR         where checkpoints go (default a fresh dir under /dev/shm);
#                         a given DIR keeps its checkpoints for the next invocation
#   --drop-caches         before each run: sync and drop the page cache (root);
#                         otherwise the input is read once beforehand (warm cache)
#   --no-peers            only cp and the selq side of each pair
#   --json FILE           also write the raw measurements (one JSON object per line)
set -uo pipefail
cd "$(dirname "$0")/.."
SELQ=build/release/src/selq; CKPT=both; SYNTH_ARGS="--arch dspark --layers 4 --vocab 32000"
PAIRS_ARG=""; PEER_TIMEOUT=900; WORK=""; JSON=""; DROP=0; PEERS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --selq) SELQ="$2"; shift 2;; --ckpt) CKPT="$2"; shift 2;;
    --synth-args) SYNTH_ARGS="$2"; shift 2;; --pairs) PAIRS_ARG="$2"; shift 2;;
    --peer-timeout) PEER_TIMEOUT="$2"; shift 2;; --workdir) WORK="$2"; shift 2;;
    --json) JSON="$2"; shift 2;;
    --drop-caches) DROP=1; shift;; --no-peers) PEERS=0; shift;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
PEERS_PY="${PEERS_VENV:-$HOME/.cache/selq/peers-venv}/bin/python"
# peer:scheme -> selq recipe and dialect that produce the same layout.
declare -A RECIPE=(
  [llmcompressor:FP8_DYNAMIC]="fp8-dynamic compressed-tensors"
  [llmcompressor:FP8_BLOCK]="fp8-block compressed-tensors"
  [llmcompressor:NVFP4A16]="nvfp4a16 compressed-tensors"
  [llmcompressor:MXFP4]="mxfp4 compressed-tensors"
  [quark:mxfp4]="mxfp4 quark"
  [quark:ptpc_fp8]="ptpc-fp8 quark"
  [modelopt:nvfp4]="nvfp4a16 modelopt"
)
PAIRS=(llmcompressor:FP8_DYNAMIC llmcompressor:FP8_BLOCK llmcompressor:NVFP4A16
       llmcompressor:MXFP4 quark:mxfp4 quark:ptpc_fp8 modelopt:nvfp4)
[[ -n "$PAIRS_ARG" ]] && IFS=, read -r -a PAIRS <<<"$PAIRS_ARG"
[[ -x "$SELQ" ]] || { echo "no selq binary at $SELQ (--selq)" >&2; exit 2; }
if [[ $DROP == 1 ]] && ! { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
  echo "--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root)" >&2; exit 2
fi
OWN_WORK=0
if [[ -z "$WORK" ]]; then WORK="$(mktemp -d /dev/shm/selq-compare.XXXXXX)"; OWN_WORK=1; fi
RESULTS="$WORK/results.jsonl"; : >"$RESULTS"
cleanup() { rm -rf "$WORK/out" "$WORK/out.selq-partial"; [[ $OWN_WORK == 1 ]] && rm -rf "$WORK"; }
trap cleanup EXIT
THREADS=$(nproc)

# measure CKPT TOOL SCHEME TIMEOUT CMD... : one run under peakmem.py (wall,
# kernel peak RSS, sampled peak anonymous memory), one JSON line; the load
# average before and after it, since the machine may be shared.
measure() {
  local ckpt="$1" tool="$2" scheme="$3" limit="$4"; shift 4
  rm -rf "$WORK/out" "$WORK/out.selq-partial"
  [[ $DROP == 1 ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  python3 bench/peers/peakmem.py --timeout "$limit" -- "$@" >"$WORK/run.log" 2>&1
  local t0 t1 sync_s; t0=$(date +%s.%N); sync; t1=$(date +%s.%N)
  sync_s=$(python3 -c "print(round($t1 - $t0, 3))")
  local load_after; load_after=$(cut -d' ' -f1 /proc/loadavg)
  local m; m=$(grep -oE '\{"wall_s": [^}]*\}' "$WORK/run.log" | tail -1)
  [[ -z "$m" ]] && m='{"wall_s": 0, "cpu_s": 0, "peak_rss_kb": 0, "peak_anon_kb": 0, "rc": 255}'
  local outb=0; [[ -d "$WORK/out" ]] && outb=$(du -sb "$WORK/out" | cut -f1)
  python3 - "$m" "$ckpt" "$tool" "$scheme" "$IN_BYTES" "$outb" "$THREADS" "$load" "$WORK/run.log" "$load_after" "$sync_s" "$DROP" "$WORK" <<'PY' | tee -a "$RESULTS"
import json, sys
m = json.loads(sys.argv[1])
log = [l for l in open(sys.argv[9], errors="replace").read().splitlines() if '{"wall_s"' not in l]
m.update(ckpt=sys.argv[2], tool=sys.argv[3], scheme=sys.argv[4], in_bytes=int(sys.argv[5]),
         out_bytes=int(sys.argv[6]), threads=int(sys.argv[7]), load1_before=float(sys.argv[8]),
         load1_after=float(sys.argv[10]), sync_s=float(sys.argv[11]),
         cache="dropped" if sys.argv[12] == "1" else "warm", workdir=sys.argv[13],
         error="" if m["rc"] == 0 else " | ".join(log[-3:])[-400:])
print(json.dumps(m))
PY
  grep -q '"rc": 0' <(tail -1 "$RESULTS") || cp "$WORK/run.log" "$WORK/fail-$ckpt-$tool-${scheme//\//_}.log"
  rm -rf "$WORK/out" "$WORK/out.selq-partial"
}

make_ckpt() {  # name -> path on stdout
  case "$1" in
    synth) [[ -d "$WORK/synth" ]] || "$SELQ" synth $SYNTH_ARGS "$WORK/synth" >/dev/null || return 1
           echo "$WORK/synth";;
    real)  if [[ ! -d "$WORK/real" ]]; then
             local gguf; gguf=$("$HOME/.cache/selq/venv/bin/python" -c \
               'import sys; sys.path.insert(0, "tests/crosscheck"); import xref; print(xref.smollm2_gguf())') || return 1
             "$SELQ" import-gguf "$gguf" "$WORK/real" >/dev/null || return 1
           fi
           echo "$WORK/real";;
  esac
}

CKPTS=(synth real); [[ "$CKPT" != both ]] && CKPTS=("$CKPT")
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(uptime | sed 's/.*load/load/')" >&2
for c in "${CKPTS[@]}"; do
  src=$(make_ckpt "$c") || { echo "cannot make checkpoint $c" >&2; exit 1; }
  IN_BYTES=$(du -sb "$src" | cut -f1)
  if [[ $DROP == 0 ]]; then
    # Warm the page cache, and on a VM the guest memory the outputs will use:
    # the first pass over memory the guest has not touched yet runs at about
    # a third of the later speed for any program (cp of 5.2 GB: 12.9 s cold,
    # 5–6 s after), which would flatter whoever is timed second.
    cat "$src"/* >/dev/null
    cp -r "$src" "$WORK/out" && rm -rf "$WORK/out"
  fi
  measure "$c" cp - 600 cp -r "$src" "$WORK/out"
  for p in "${PAIRS[@]}"; do
    read -r recipe dialect <<<"${RECIPE[$p]}"
    peer="${p%%:*}"; scheme="${p#*:}"
    measure "$c" selq "$recipe/$dialect" 600 "$SELQ" quantize "$src" "$WORK/out" \
      --recipe "bench/peers/recipes/$recipe.yaml" --dialect "$dialect" --quiet
    [[ $PEERS == 1 ]] && measure "$c" "$peer" "$scheme" "$PEER_TIMEOUT" "$PEERS_PY" bench/peers/run_peer.py \
      "$peer" "$scheme" "$src" "$WORK/out" --threads "$THREADS"
  done
done
echo "# $(uptime | sed 's/.*load/load/')" >&2
[[ -n "$JSON" ]] && cp "$RESULTS" "$JSON"
python3 bench/peers/table.py --flat "$RESULTS"
if [[ $PEERS == 1 ]]; then python3 bench/peers/table.py "$RESULTS"; fi
