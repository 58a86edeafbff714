#!/usr/bin/env bash
# The README's two commands as a user meets them, in their order, in a copy of
# the tree with nothing beside it (no ../shared), on a short budget:
#  1. scripts/demo.sh as on a fresh machine, where Open MPI is not installed yet,
#     whole: its own configure and build of the `selq` target alone (no tests, no
#     Python, so no -fPIC: the configuration a user's first command builds, which
#     no other build of the test run compiles), with Open MPI hidden (a mount
#     namespace) and offline (a network namespace). Warnings fail it when the
#     environment says SELQ_WERROR=ON (scripts/test.sh, CI), as in the test build.
#     It must exit 0 with the quality table filled for every recipe and its report.
#  2. scripts/test.sh's first steps in the same clone: `scripts/setup.sh test`
#     (offline: installed already, it must only check) and the test build's
#     configure of that same tree, which must now resolve SELQ_WITH_MPI to ON
#     and register the real e2e_mpi (the issue-33 regression: the demo's first
#     configure cached MPI OFF and test.sh silently built and skipped without it).
#     Its build and ctest are the test run this test belongs to, so not repeated.
#  3. SELQ_BINARY itself (the build under test) runs across 2 mpirun ranks.
set -euo pipefail
SRC="$1"; SELQ_BIN="$(realpath "$2")"
T="$(mktemp -d /tmp/selq-bare-XXXXXX)"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
start=$SECONDS
mkdir -p "$T/clone"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$T/clone")
else
  cp -r "$SRC"/. "$T/clone" && rm -rf "$T/clone/build"
fi
[ ! -e "$T/shared" ] || fail "$T/shared exists"
[ ! -e "$T/clone/build" ] || fail "the copy has a build tree"

# One namespace for the demo: its own mounts (Open MPI hidden) and no network.
isolate=()
if unshare -m -n true 2>/dev/null; then isolate=(unshare -m -n)
elif unshare -r -m -n true 2>/dev/null; then isolate=(unshare -r -m -n)
else fail "cannot make a mount and network namespace (unshare -m -n) to run the demo offline without Open MPI"; fi
offline=()
if unshare -n true 2>/dev/null; then offline=(unshare -n)
elif unshare -rn true 2>/dev/null; then offline=(unshare -rn)
else fail "cannot make a network namespace (unshare -n)"; fi

# Open MPI is what scripts/setup.sh test installs; this test runs after it.
MPICC="$(command -v mpicc || true)"; MPIRUN="$(command -v mpirun || true)"
[ -n "$MPICC" ] && [ -n "$MPIRUN" ] || fail "Open MPI is not installed (scripts/setup.sh test installs libopenmpi-dev openmpi-bin)"
MPI_WRAPPER="$(readlink -f "$MPICC")"
MPI_INC="$("$MPICC" --showme:incdirs | awk '{print $1}')"
MPI_HOME="$(dirname "$MPI_INC")"   # /usr/lib/x86_64-linux-gnu/openmpi on Debian: headers, libraries, pkg-config
# test.sh's own configure line, so that this test follows it as it changes.
TEST_CONFIGURE="$(grep -m1 -E '^[[:space:]]*cmake --preset release' "$T/clone/scripts/test.sh" | sed 's#>/dev/null##')"
[ -n "$TEST_CONFIGURE" ] || fail "no 'cmake --preset release' line in scripts/test.sh"
grep -q 'cmake --build --preset release .*--target selq' "$T/clone/scripts/demo.sh" || fail "scripts/demo.sh no longer builds the selq target"

# selq_dist's SELQ_WITH_MPI definition as the build tree compiles it (Ninja keeps
# it in build.ninja, make in the target's flags.make).
mpi_define() { cat build/release/build.ninja build/release/src/CMakeFiles/selq_dist.dir/flags.make 2>/dev/null |
  grep -o 'SELQ_WITH_MPI=[01]' | head -1; }

cd "$T/clone"
echo "== 1. scripts/demo.sh with its own build, Open MPI not installed yet ($MPI_HOME, $MPI_WRAPPER hidden), offline," \
  "SELQ_WERROR=${SELQ_WERROR:-OFF}"
mkdir -p "$T/empty"; : >"$T/empty-file"
set +e
"${isolate[@]}" bash -c 'set -euo pipefail
  mount --bind "$1" "$2"; mount --bind "$3" "$4"; shift 4; exec "$@"' _ \
  "$T/empty" "$MPI_HOME" "$T/empty-file" "$MPI_WRAPPER" \
  env SELQ_DEMO_DIR="$T/work" scripts/demo.sh \
  --max-tokens 256 --context 32 --max-prompts 8 --gen-tokens 4 --quiet >"$T/out.txt" 2>&1
rc=$?
set -e
# The whole demo output only when it failed: a short log keeps this test's own
# FAIL line in view where CI shows the head and tail of a failing run.
[ "$rc" -eq 0 ] || { cat "$T/out.txt"; echo "FAIL: scripts/demo.sh exited $rc"; exit 1; }
[ "$(mpi_define)" = SELQ_WITH_MPI=0 ] || fail "Open MPI was not hidden from the demo's configure ($(mpi_define))"
grep -q '^-- selq: SELQ_WITH_MPI=AUTO -> OFF' "$T/out.txt" || fail "the demo's configure did not run (no '-- selq:' line)"
grep -E '^   built build/release/src/selq in [0-9]+ s$' "$T/out.txt" || fail "the demo did not build its selq"
if [ "${SELQ_WERROR:-OFF}" = ON ]; then
  grep -q -- '-Werror' build/release/build.ninja || fail "SELQ_WERROR=ON did not reach the demo's build"
fi
! grep -nE '\.(c|cc|cpp|cxx|h|hpp)(:[0-9]+)+: (warning|error):' "$T/out.txt" || fail "the demo's build printed compiler diagnostics (above)"
echo "scripts/demo.sh: exit 0, $(wc -l <"$T/out.txt") lines; its last lines:"
tail -n 4 "$T/out.txt"
python3 - "$T/work/smollm2/eval.json" <<'PY' || { echo "FAIL: the demo's eval.json (above)"; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))
assert "Austen" in r["text_source"], r["text_source"]
assert "Persuasion" in r["prompts_source"], r["prompts_source"]
q = r["quantized"]
assert len(q) == 6, [m["path"] for m in q]  # four shipped recipes, llama-nvfp4 with mse, the planned mix
assert any(m["path"].endswith("llama-nvfp4-mse") for m in q), [m["path"] for m in q]
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
grep -q "^report of .*planned-6: $T/work/smollm2/report.html$" "$T/out.txt" ||
  { grep -n "report" "$T/out.txt"; echo "FAIL: no report path printed"; exit 1; }
for part in 'id="map-fmt"' 'id="map-snr"' 'id="bars-format"' 'id="eval-table"' 'id="kl-histogram"' 'id="chart-quality"' \
            'id="chart-predicted"' 'id="chart-depth"'; do
  grep -q "$part" "$T/work/smollm2/report.html" || { echo "FAIL: the demo's report has no $part"; exit 1; }
done
echo "demo report: ok, $(wc -c <"$T/work/smollm2/report.html") bytes"

echo "== 2. scripts/test.sh's setup (offline: it must find everything installed) and configure, same tree"
"${offline[@]}" scripts/setup.sh test >"$T/setup-offline.txt" 2>&1 ||
  { tail -n 30 "$T/setup-offline.txt"; fail "scripts/setup.sh test failed offline after the test run's setup (its last lines above)"; }
# With test.sh's own default for SELQ_WERROR when ctest runs this outside test.sh.
SELQ_WERROR="${SELQ_WERROR:-ON}" eval "$TEST_CONFIGURE" >"$T/configure-test.txt" || { cat "$T/configure-test.txt"; fail "test.sh's configure failed"; }
grep '^-- selq:' "$T/configure-test.txt"
grep -q 'SELQ_WITH_MPI=AUTO -> ON' "$T/configure-test.txt" || fail "test.sh's configure left Open MPI out after the demo's"
[ "$(mpi_define)" = SELQ_WITH_MPI=1 ] || fail "selq_dist is not compiled with SELQ_WITH_MPI=1 ($(mpi_define))"
# Into a file, not a pipe: `grep -q` leaves at its first match, and under
# pipefail the SIGPIPE ctest may then get fails the line at random.
ctest --test-dir build/release -N -R '^e2e_mpi$' >"$T/ctest-n.txt" 2>&1 || { cat "$T/ctest-n.txt"; fail "ctest -N failed"; }
grep -q 'e2e_mpi' "$T/ctest-n.txt" || { cat "$T/ctest-n.txt"; fail "e2e_mpi is not registered"; }
grep -q 'e2e/test_mpi.py' build/release/tests/CTestTestfile.cmake || fail "e2e_mpi is registered without test_mpi.py (the no-MPI placeholder)"
echo "the test build of the demo's tree has MPI: ok"

echo "== 3. $SELQ_BIN across 2 mpirun ranks"
"$SELQ_BIN" synth --arch llama --layers 2 --scale 16 "$T/mpi-src" >/dev/null
"$MPIRUN" --oversubscribe --allow-run-as-root -np 2 --mca btl self,vader \
  "$SELQ_BIN" quantize "$T/mpi-src" "$T/mpi-out" --recipe llama-fp8 >"$T/mpi.txt" 2>&1 || { cat "$T/mpi.txt"; fail "mpirun -np 2 selq quantize failed"; }
grep -q '^2 ranks' "$T/mpi.txt" || { cat "$T/mpi.txt"; fail "the selq under test did not run as 2 ranks (built without MPI?)"; }
echo "selq under mpirun: ok ($(grep '^2 ranks' "$T/mpi.txt"))"
echo "demo_bare_clone: ok in $((SECONDS - start)) s"
