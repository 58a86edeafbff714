#!/usr/bin/env bash
# Installs the peer quantizers (llm-compressor, AMD Quark, NVIDIA ModelOpt) from
# PyPI into their own venv, apart from the project venv: they pin torch and
# transformers versions of their own. bench/ and tests/e2e/test_peer_sources.py
# use them (scripts/setup.sh test runs this; ~6 GB, most of it PyPI's CUDA torch).
# Pinned: the tests compare their outputs with selq's byte for byte.
# Idempotent: a stamp per peer; a peer whose install fails is recorded with the
# tail of pip's output in $VENV/peers-status/<peer>.err and the script goes on.
# Usage: bench/peers/setup_peers.sh   (env PEERS_VENV overrides the location)
set -uo pipefail
VENV="${PEERS_VENV:-$HOME/.cache/selq/peers-venv}"
STATUS="$VENV/peers-status"
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV" || exit 1
fi
mkdir -p "$STATUS"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check)

install_peer() {  # name, pip requirement(s)...
  local name="$1"; shift
  # The stamp records the requirement it installed: a changed pin installs again.
  if [[ -f "$STATUS/$name.ok" ]] && [[ "$(head -n 1 "$STATUS/$name.ok")" == "$*" ]]; then
    echo "peer $name: already installed"; return 0
  fi
  echo "peer $name: pip install $*"
  if "${PIP[@]}" "$@" >"$STATUS/$name.log" 2>&1; then
    rm -f "$STATUS/$name.err"; printf '%s\n%s\n' "$*" "$(date -u +%FT%TZ)" >"$STATUS/$name.ok"
    echo "peer $name: ok"
  else
    tail -n 30 "$STATUS/$name.log" >"$STATUS/$name.err"
    echo "peer $name: INSTALL FAILED, see $STATUS/$name.err" >&2
  fi
}

# llm-compressor first: it pins torch (<=2.14 in 0.14) and so picks the torch
# build. The others are then held to that torch and to its transformers and
# compressed-tensors, so that installing them cannot break it; a peer that
# needs other versions fails its install and is recorded as such.
install_peer llmcompressor llmcompressor==0.14.0.1
"$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null \
  | grep -i -E '^(torch|transformers|compressed-tensors)==' >"$STATUS/constraints.txt"
install_peer quark amd-quark==0.13 -c "$STATUS/constraints.txt"
install_peer modelopt nvidia-modelopt==0.47.0 -c "$STATUS/constraints.txt"
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -i -E '^(torch|transformers|compressed-tensors|llmcompressor|amd-quark|nvidia-modelopt|safetensors|numpy) ' \
  >"$STATUS/versions.txt"
cat "$STATUS/versions.txt"
