#!/usr/bin/env bash
# Prints --fresh when the build tree of configure preset PRESET (CMakePresets.json)
# was configured with another generator than the preset's, so that
# `cmake --preset release $(scripts/fresh_if_other_generator.sh release)` reconfigures
# a tree from before the release preset chose Ninja (2026-12-06) instead of stopping
# at CMake's "Does not match the generator used previously"; that tree is then
# built once in full. Prints nothing otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r dir want < <(python3 - "$1" <<'PY'
import json, sys
p = next(p for p in json.load(open("CMakePresets.json"))["configurePresets"] if p["name"] == sys.argv[1])
print(p["binaryDir"].replace("${sourceDir}/", ""), p["generator"])
PY
)
cache="$dir/CMakeCache.txt"
[ -f "$cache" ] || exit 0
have="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$cache")"
if [ -n "$have" ] && [ "$have" != "$want" ]; then
  echo "note: $dir was configured for $have; configuring it afresh for $want (one full rebuild)" >&2
  echo --fresh
fi
