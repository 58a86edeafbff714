#!/usr/bin/env bash
# Sets up, builds (release, -Werror) and runs every test: unit tests, Python
# cross-checks, end-to-end tests (all through ctest), then a short fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
JOBS="${JOBS:-$(nproc)}"
# Warnings are errors here (the developers' and CI's build); the environment passes that
# on to the builds the tests run themselves: the demo's in a bare clone, the wheel's.
export SELQ_WERROR="${SELQ_WERROR:-ON}"
# One line: tests/e2e/demo_bare_clone.sh runs this configure line as it is.
cmake --preset release $(scripts/fresh_if_other_generator.sh release) -DSELQ_BUILD_TESTS=ON -DSELQ_BUILD_BENCH=ON -DSELQ_BUILD_PYTHON=ON -DSELQ_WERROR="$SELQ_WERROR" >/dev/null
cmake --build --preset release -j "$JOBS"
ctest --test-dir build/release --output-on-failure -j "$JOBS" --timeout 900
scripts/check_wheel.sh  # the wheel as `pip install .` builds it (a clean build directory), installed in a fresh venv
if [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh "${SELQ_FUZZ_SECONDS:-30}"
fi
