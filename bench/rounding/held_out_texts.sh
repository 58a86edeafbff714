#!/usr/bin/env bash
# Writes WORKDIR/held-out-DOMAIN.txt (64 KiB) for each text source selq holds out of its
# calibration mix (`selq text --json`), and WikiText-2 where ../shared/data has it (an
# optional extra); prints the domains, one per line. Shared by domains.sh and rare_experts.sh.
#   bench/rounding/held_out_texts.sh SELQ WORKDIR
set -euo pipefail
S=$1 W=$2
SHARED=$(cd "$(dirname "$0")" && pwd)/../../../shared/data
while read -r d name; do
  "$S" text "$name" --max-bytes 65536 -o "$W/held-out-$d.txt" 2>/dev/null
  echo "$d"
done < <("$S" text --json | python3 -c 'import json,sys; [print(s["domain"], s["name"]) for s in json.load(sys.stdin) if s["held_out"]]')
if [ -f "$SHARED/wikitext2-test.txt" ]; then head -c 65536 "$SHARED/wikitext2-test.txt" > "$W/held-out-wikitext2.txt"; echo wikitext2; fi
