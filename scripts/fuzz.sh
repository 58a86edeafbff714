#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) with the "fuzz" preset,
# generates the seed corpora, and runs each fuzzer for N seconds (default 30).
# Exits non-zero on any crash, sanitizer report, leak or timeout.
set -euo pipefail

secs="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$root/build/fuzz"
jobs="${FUZZ_JOBS:-$(nproc)}"

cmake --preset fuzz
# Only the fuzz targets: they do not depend on the rest of the project.
cmake --build --preset fuzz --target fuzz_safetensors fuzz_index fuzz_corpus_gen -j "$jobs"

work="$build/fuzz-run"
rm -rf "$work/seeds"
mkdir -p "$work/seeds" "$work/artifacts"
"$build/tests/fuzz/fuzz_corpus_gen" "$work/seeds/safetensors" "$work/seeds/index"

status=0
for target in safetensors index; do
  corpus="$work/corpus/$target"  # grows across runs; seeds are regenerated each time
  mkdir -p "$corpus"
  echo "== fuzz_$target for ${secs}s"
  if ! "$build/tests/fuzz/fuzz_$target" \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -dict="$root/tests/fuzz/$target.dict" \
      -artifact_prefix="$work/artifacts/$target-" -print_final_stats=1 \
      "$corpus" "$work/seeds/$target"; then
    echo "fuzz_$target FAILED; reproducer(s) in $work/artifacts" >&2
    status=1
  fi
done
exit "$status"
