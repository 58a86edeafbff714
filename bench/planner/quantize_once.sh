# Sourced by front.sh and refine.sh: `quantize NAME RECIPE` writes $OUT/models/NAME
# from $SRC once (kept across reruns) and appends it to MODELS, the eval's list.
MODELS=()
quantize() {  # name recipe
  local dst="$OUT/models/$1"
  if [ ! -f "$dst/config.json" ]; then
    rm -rf "$dst"
    "$SELQ" quantize "$SRC" "$dst" --recipe "$2" -q >/dev/null
  fi
  MODELS+=("$dst")
}
