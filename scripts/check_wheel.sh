#!/usr/bin/env bash
# The Python package as a user installs it: builds the wheel with
# scikit-build-core the way `pip install .` does, from a clean build directory
# with pyproject.toml's own settings (the Python module, no tests, no bench),
# so that this configuration is compiled by CI as a user compiles it (warnings
# are errors where the environment says SELQ_WERROR=ON: scripts/test.sh, CI);
# installs it into a fresh venv with its dependencies, and runs the installed
# module and the installed `selq` command. The wheel stays in build/dist
# (SELQ_WHEEL_DIR), installable directly into any venv of the same Python:
# `pip install build/dist/selq-*.whl` (docs/PYTHON.md).
#   scripts/check_wheel.sh [BUILD_DIR]     (default: a fresh directory, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${SELQ_VENV:-$HOME/.cache/selq/venv}/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
BUILD="${1:-$work/build}"
start=$SECONDS
# pyproject.toml's build requirements are installed in the venv already (scripts/setup.sh
# test pins the same versions), so no build isolation: the same build, offline.
dist="${SELQ_WHEEL_DIR:-build/dist}"
mkdir -p "$dist" && rm -f "$dist"/selq-*.whl
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}" "$PY" -m pip wheel . -v --no-build-isolation --no-deps -w "$dist" \
  -Cbuild-dir="$BUILD" >"$work/build.log" 2>&1 || { cat "$work/build.log"; echo "check_wheel: the wheel's build failed" >&2; exit 1; }
if grep -nE '\.(c|cc|cpp|cxx|h|hpp)(:[0-9]+)+: warning:' "$work/build.log"; then
  echo "check_wheel: the wheel's build printed compiler warnings (above)" >&2; exit 1
fi
echo "check_wheel: built from a clean tree in $((SECONDS - start)) s"
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
