"""One name per idea (docs/ARCHITECTURE.md, "Vocabulary"): every
subcommand's --help and the Python API's signatures, read as a user reads
them, use the one spelling of each shared idea; the old spellings are only
deprecated aliases (they still work, and say so)."""
import inspect
import json
import os
import re
import subprocess
import warnings

import pytest

import selq

# Spellings no longer current, wherever they appear outside "Deprecated".
RETIRED_OPTIONS = {"--overwrite", "--refine-text", "--refine-tokens", "--refine-context", "--tokens", "--schemes"}
RETIRED_KEYWORDS = {"overwrite", "text_file", "refine_text", "refine_tokens", "tokens", "context_tokens"}
# Commands whose --text/--max-tokens/--context are the evaluation text; everywhere
# else a text is the calibration text and must be spelled --calibration-*.
EVALUATION_COMMANDS = {"eval", "demo"}


def help_text(*args):
    p = subprocess.run([os.environ["SELQ_CLI"], *args, "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def subcommands():
    top = help_text()
    block = top.split("SUBCOMMANDS:", 1)[1] if "SUBCOMMANDS:" in top else top.split("Subcommands:", 1)[1]
    names = re.findall(r"^\s{2}([a-z][a-z-]+)\s", block, re.M)
    assert {"quantize", "plan", "calibrate", "sensitivity", "eval", "import-gguf"} <= set(names), names
    return names


def options(help_out):
    """(current, deprecated) long option names of one --help page."""
    current, deprecated, section = set(), set(), ""
    for line in help_out.splitlines():
        if re.match(r"^[A-Za-z][A-Za-z ]*:\s*$", line):
            section = line.strip().rstrip(":").lower()
            continue
        # An option's line: two spaces, its names up to the next run of spaces
        # (deeper-indented lines continue a description).
        m = re.match(r"^ {2}(-\S*)", line)
        if m:
            names = set(re.findall(r"--[a-z][a-z0-9-]*", m.group(1)))
            (deprecated if section == "deprecated" else current).update(names)
    return current, deprecated


@pytest.fixture(scope="module")
def pages():
    return {c: options(help_text(c)) for c in subcommands()}


def test_help_pages_use_one_spelling(pages):
    seen_calibration = 0
    for cmd, (current, deprecated) in pages.items():
        assert not current & RETIRED_OPTIONS, (cmd, current & RETIRED_OPTIONS)
        if cmd not in EVALUATION_COMMANDS:
            # A text read by a command that fits something is the calibration text.
            assert not current & {"--text", "--max-tokens", "--context"}, (cmd, current)
        if "--calibration-text" in current:
            seen_calibration += 1
            assert {"--calibration-tokens", "--calibration-context"} <= current, (cmd, current)
        assert "--overwrite" not in current, cmd
        for old in deprecated:
            page = help_text(cmd)
            assert re.search(re.escape(old) + r".*deprecated: use --", page), (cmd, old)
    assert seen_calibration >= 4, "calibrate, sensitivity, plan and quantize all take --calibration-text"
    assert "--force" in pages["quantize"][0] and "--force" in pages["import-gguf"][0]


def test_deprecated_option_still_works_and_warns(smollm2, tmp_path):
    p = subprocess.run([os.environ["SELQ_CLI"], "calibrate", smollm2, "--max-tokens", "16", "--context", "16", "-q",
                        "-o", tmp_path / "c.json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "--max-tokens is deprecated; use --calibration-tokens" in p.stderr, p.stderr
    assert '"tokens": 16' in (tmp_path / "c.json").read_text()


def api_functions():
    return {name: getattr(selq, name) for name in ("plan", "quantize", "verify", "eval", "sensitivity", "calibrate")}


def test_python_keywords_are_the_cli_options_in_snake_case(pages):
    for name, fn in api_functions().items():
        params = set(inspect.signature(fn).parameters)
        assert not params & RETIRED_KEYWORDS, (name, params & RETIRED_KEYWORDS)
        cmd = name
        current = pages[cmd][0]
        for opt in ("--calibration-text", "--calibration-tokens", "--calibration-context", "--force"):
            kw = opt[2:].replace("-", "_")
            if kw in params:
                assert opt in current, f"selq.{name}({kw}=) has no {opt} in `selq {cmd} --help`"
        if "--calibration-text" in current:
            assert "calibration_text" in params, name


def test_python_old_keywords_still_work_and_warn(llama, tmp_path):
    with pytest.warns(DeprecationWarning, match="overwrite= is deprecated; use force="):
        selq.quantize(llama, tmp_path / "q", recipe="llama-fp8", overwrite=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = selq.quantize(llama, tmp_path / "q", recipe="llama-fp8", force=True)
    assert (tmp_path / "q" / "selq-report.html").is_file(), "Python's quantize writes the report as the CLI does"
    assert not [w for w in res.warnings if "HTML" in w]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        selq.quantize(llama, tmp_path / "q", recipe="llama-fp8", bogus=1)


def test_errors_hint_in_each_front_ends_words(llama, tmp_path):
    selq.quantize(llama, tmp_path / "q", recipe="llama-fp8")
    with pytest.raises(selq.BadInput) as e:
        selq.quantize(llama, tmp_path / "q", recipe="llama-fp8")
    assert "force=True replaces it" in str(e.value) and "--force" not in str(e.value)
    p = subprocess.run([os.environ["SELQ_CLI"], "quantize", llama, tmp_path / "q", "--recipe", "llama-fp8"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "(--force replaces it)" in p.stderr and "force=True" not in p.stderr, p.stderr


def test_calibrate_matches_the_cli(smollm2, cli, tmp_path):
    cal = selq.calibrate(smollm2, tmp_path / "api.json", calibration_tokens=64, calibration_context=32)
    cli("calibrate", smollm2, "--calibration-tokens", "64", "--calibration-context", "32", "-o", tmp_path / "cli.json",
        "-q")
    want = json.loads((tmp_path / "cli.json").read_text())
    assert cal.activation_amax == want["activation_amax"] and len(cal.activation_amax) == 210
    assert (tmp_path / "api.moments.safetensors").read_bytes() == (tmp_path / "cli.moments.safetensors").read_bytes()
    # What calibrate returns is what plan/quantize take as calibration=.
    plan = selq.plan(smollm2, "llama-nvfp4", rounding="weighted", calibration=cal)
    assert plan.bits_per_weight > 4
