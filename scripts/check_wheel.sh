#!/usr/bin/env bash
# The Python package as a user installs it: builds the wheel with
# scikit-build-core from the release build tree that scripts/test.sh just
# built (SELQ_BUILD_PYTHON=ON, so the libraries are not compiled a second
# time: a wheel built from scratch recompiles all of them, see
# docs/PYTHON.md), installs it into a fresh venv with its dependencies, and
# runs the installed module and the installed `selq` command. The wheel stays
# in build/dist (SELQ_WHEEL_DIR), installable directly into any venv of the same
# Python: `pip install build/dist/selq-*.whl` (docs/PYTHON.md).
#   scripts/check_wheel.sh [BUILD_DIR]     (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/release}"
PY="${SELQ_VENV:-$HOME/.cache/selq/venv}/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# The build tree's own settings are kept (tests, bench): the wheel needs only
# its `python` install component.
dist="${SELQ_WHEEL_DIR:-build/dist}"
mkdir -p "$dist" && rm -f "$dist"/selq-*.whl
CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}" "$PY" -m pip wheel . -q --no-build-isolation --no-deps -w "$dist" \
  -Cbuild-dir="$BUILD" -Ccmake.define.SELQ_BUILD_TESTS=ON -Ccmake.define.SELQ_BUILD_BENCH=ON
wheel=$(realpath "$(ls "$dist"/selq-*.whl)")
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
cd "$work"  # away from the source tree: the installed package, not python/selq
"$work/venv/bin/selq" --version >/dev/null
"$work/venv/bin/selq" recipes >"$work/recipes.txt"  # a file: grep -q on a pipe can SIGPIPE the writer
grep -q llama-nvfp4 "$work/recipes.txt"
"$work/venv/bin/selq" synth --arch llama --scale 16 --layers 2 "$work/src" >/dev/null
"$work/venv/bin/python" - "$work" <<'PY'
import sys, numpy as np, ml_dtypes, selq
work = sys.argv[1]
assert "llama-nvfp4" in selq.recipes(), selq.recipes()
r = selq.quantize(f"{work}/src", f"{work}/q", recipe="llama-nvfp4")
assert selq.verify(f"{work}/q", against=f"{work}/src").ok
q = selq.quantize_tensor(np.ones((32, 64), ml_dtypes.bfloat16), "mxfp4")
assert list(q) == ["weight_packed", "weight_scale"]
import os
assert os.path.exists(os.path.join(os.path.dirname(selq.__file__), "_selq.pyi"))
print(f"check_wheel: the installed package at {os.path.dirname(selq.__file__)} works")
PY
echo "check_wheel: $wheel built, installed and run in $((SECONDS - start)) s (pip install it into a venv of the same Python)"
