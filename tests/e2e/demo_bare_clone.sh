#!/usr/bin/env bash
# The README's first command as a user meets it: scripts/demo.sh in a copy of
# the tree with nothing beside it (no ../shared), without network, on a short
# budget. Fails unless it ends with exit status 0 and the quality table filled
# for every recipe. Usage: demo_bare_clone.sh SOURCE_DIR SELQ_BINARY
set -euo pipefail
SRC="$1"; SELQ_BIN="$(realpath "$2")"
T="$(mktemp -d /tmp/selq-bare-XXXXXX)"
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/clone"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$T/clone")
else
  cp -r "$SRC"/. "$T/clone" && rm -rf "$T/clone/build"
fi
[ ! -e "$T/shared" ] || { echo "FAIL: $T/shared exists"; exit 1; }

isolate=()
if unshare -n true 2>/dev/null; then isolate=(unshare -n)
elif unshare -rn true 2>/dev/null; then isolate=(unshare -rn)
else echo "FAIL: cannot make a network namespace (unshare -n) to run the demo offline"; exit 1; fi

cd "$T/clone"
set +e
SELQ="$SELQ_BIN" SELQ_DEMO_DIR="$T/work" "${isolate[@]}" scripts/demo.sh \
  --max-tokens 256 --context 32 --max-prompts 8 --gen-tokens 4 --quiet >"$T/out.txt" 2>&1
rc=$?
set -e
cat "$T/out.txt"
[ "$rc" -eq 0 ] || { echo "FAIL: scripts/demo.sh exited $rc"; exit 1; }
python3 - "$T/work/smollm2/eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert "Austen" in r["text_source"], r["text_source"]
assert "Persuasion" in r["prompts_source"], r["prompts_source"]
q = r["quantized"]
assert len(q) == 6, [m["path"] for m in q]  # five shipped recipes and the planned mix
assert q[-1]["path"].endswith("planned-6"), q[-1]["path"]
assert q[-1]["linear_bits_per_weight"] <= 6.0, q[-1]["linear_bits_per_weight"]
for m in q:
    for k in ("perplexity", "kl_mean", "top1_agreement", "accepted_greedy", "accepted_expected_t1"):
        assert isinstance(m.get(k), (int, float)), (m["path"], k, m.get(k))
    assert m["spec_steps"] > 0, (m["path"], "no acceptance steps")
    ci = m["intervals"]
    for part, k in (("text", "kl_mean"), ("text", "ppl_ratio"), ("text", "same_top_p"),
                    ("acceptance", "accepted_greedy"), ("acceptance", "accepted_expected_t1")):
        i = ci[part][k]
        assert isinstance(i["lo"], float) and isinstance(i["hi"], float) and i["lo"] <= i["value"] <= i["hi"], \
            (m["path"], part, k, i)
    assert m["statistics"]["kld"]["mean"]["se"] >= 0, m["statistics"]
assert len(r["paired"]) == 15, len(r["paired"])
assert r["uncertainty"]["windows"] == 8 and r["uncertainty"]["prompts"] == 8, r["uncertainty"]
print("demo in a bare clone: ok,", len(q), "recipes evaluated")
PY
# The demo ends with the report of its best mix (the planned one) and says where it is.
grep -q "^report of .*planned-6: $T/work/smollm2/report.html$" "$T/out.txt" || { echo "FAIL: no report path printed"; exit 1; }
for part in 'id="map-fmt"' 'id="map-snr"' 'id="bars-format"' 'id="eval-table"' 'id="kl-histogram"' 'id="chart-quality"' \
            'id="chart-predicted"' 'id="chart-depth"'; do
  grep -q "$part" "$T/work/smollm2/report.html" || { echo "FAIL: the demo's report has no $part"; exit 1; }
done
echo "demo report: ok, $(wc -c <"$T/work/smollm2/report.html") bytes"
