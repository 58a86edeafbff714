"""The checkpoint-level API against the CLI: same plan, same bytes; recipes
as names, paths, YAML text and dicts; errors and their attributes; progress
callbacks that raise; Ctrl-C."""
import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import selq

RECIPE_DICT = {
    "name": "py-mix",
    "arch": "llama",
    "dialect": "compressed-tensors",
    "rules": [
        {"match": "@attention", "scheme": "fp8-channel", "options": {"activations": "fp8-per-token"}},
        {"match": "model.layers.*.mlp.down_proj", "scheme": "int4", "options": {"group_size": 32}},
    ],
    "default": {"scheme": "nvfp4", "options": {"activations": "none"}},
}


def same_files(a, b, names):
    for n in names:
        assert filecmp.cmp(a / n, b / n, shallow=False), f"{n} differs between the API and the CLI"


def outputs(d):
    return sorted(p.name for p in d.iterdir() if p.suffix in (".safetensors", ".json") and p.name != "selq-manifest.json")


def test_shipped_recipes_by_name():
    names = selq.recipes()
    assert "llama-nvfp4" in names and all(isinstance(v, str) for v in names.values())
    r = selq.load_recipe("llama-nvfp4")
    assert r.name == "llama-nvfp4" and r.dialect == "compressed-tensors"


def test_plan_matches_cli(llama, cli, tmp_path):
    plan = selq.plan(llama, "llama-nvfp4")
    assert json.loads(plan.to_json()) == json.loads(cli("plan", llama, "--recipe", "llama-nvfp4", "--json"))
    assert str(plan) == cli("plan", llama, "--recipe", "llama-nvfp4")
    assert plan.sizes["source_bytes"] > plan.sizes["output_bytes"] > 0
    assert 4.0 < plan.bits_per_weight < 5.0
    q = [t for t in plan.tensors if t["action"] == "quantize"]
    assert len(q) == 14 and all(t["scheme"] == "nvfp4" for t in q)
    assert plan.warnings == []
    assert "llama-nvfp4" in repr(plan)


def test_quantize_same_bytes_as_cli(llama, cli, tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text(json.dumps(RECIPE_DICT, indent=1))
    cli("quantize", llama, tmp_path / "cli", "--recipe", path, "-q")
    seen = []
    res = selq.quantize(llama, tmp_path / "api", recipe=path, progress=seen.append)
    names = outputs(tmp_path / "cli")
    assert names == outputs(tmp_path / "api") and "config.json" in names
    same_files(tmp_path / "cli", tmp_path / "api", names)
    manifest = json.loads((tmp_path / "api" / "selq-manifest.json").read_text())
    assert res.manifest["tensors"] == manifest["tensors"]
    assert res.bytes_written > 0 and res.destination == str(tmp_path / "api")
    # Reports arrive in order on this thread, the last one complete.
    assert seen and seen[-1].tensors_done == seen[-1].tensors_total > 0
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)
    assert seen[-1].bytes_done == seen[-1].bytes_total


def test_recipe_forms_agree(llama, tmp_path):
    """A dict, YAML text and a file give the same plan; only the recipe label differs."""
    path = tmp_path / "mix.yaml"
    path.write_text(json.dumps(RECIPE_DICT))
    text = textwrap.dedent("""\
        name: py-mix
        arch: llama
        rules:
          - {match: "@attention", scheme: fp8-channel, options: {activations: fp8-per-token}}
          - {match: model.layers.*.mlp.down_proj, scheme: int4, options: {group_size: 32}}
        default: {scheme: nvfp4, options: {activations: none}}
        """)
    plans = [selq.plan(llama, r).as_dict() for r in (RECIPE_DICT, text, path, str(path))]
    for p in plans:
        p.pop("recipe")
    assert all(p == plans[0] for p in plans[1:])
    schemes = {t["source"]: t.get("scheme") for t in plans[0]["tensors"]}
    assert schemes["model.layers.0.self_attn.q_proj.weight"] == "fp8-channel"
    assert schemes["model.layers.1.mlp.down_proj.weight"].startswith("int4")
    assert schemes["model.layers.1.mlp.up_proj.weight"] == "nvfp4"


def test_plan_then_quantize_and_verify(llama, tmp_path):
    plan = selq.plan(llama, "llama-fp8", dialect="quark")
    assert plan.dialect == "quark"
    res = selq.quantize(llama, tmp_path / "q", plan=plan)
    assert res.bits_per_weight == plan.bits_per_weight
    v = selq.verify(tmp_path / "q", against=llama)
    assert v.ok and v.findings == [] and v.report["has_manifest"]
    info = selq.inspect(tmp_path / "q", tensors=True)
    assert info["quantization_config"]["quant_method"] == "quark"


def test_in_place_same_bytes_as_cli(llama, cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(llama, a)
    shutil.copytree(llama, b)
    cli("quantize", "--in-place", a, "--recipe", "llama-mxfp4", "-q")
    res = selq.quantize(b, recipe="llama-mxfp4", in_place=True)
    assert not res.already_done
    same_files(a, b, outputs(a))
    assert selq.quantize(b, recipe="llama-mxfp4", in_place=True).already_done


def test_verify_reports_findings(llama, tmp_path):
    selq.quantize(llama, tmp_path / "q", recipe="llama-nvfp4")
    shard = next((tmp_path / "q").glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # a flipped bit in the last tensor's data
    shard.write_bytes(bytes(data))
    v = selq.verify(tmp_path / "q")
    assert not v.ok and any("hash" in f or "manifest" in f for f in v.findings)


def test_errors_carry_where(llama, tmp_path):
    with pytest.raises(selq.BadInput) as e:
        selq.load_recipe("name: x\ndefault: {scheme: nvfp5}\n")
    assert e.value.file.startswith("<string>:2:") and "nvfp5" in e.value.message  # file:line:column
    assert isinstance(e.value, ValueError) and isinstance(e.value, selq.Error)
    with pytest.raises(selq.BadInput) as e:
        selq.load_recipe({"name": "x", "rules": [{"match": "a", "scheme": "fp8-channel", "options": {"bogus": 1}}]})
    assert e.value.file.startswith("<dict>:") and "bogus" in str(e.value)
    with pytest.raises(selq.BadInput, match="shipped"):
        selq.load_recipe("no-such-recipe")
    # A truncated shard: the error names the file (and the tensor and offset where known).
    bad = tmp_path / "bad"
    bad.mkdir()
    src = next(llama.glob("*.safetensors"))
    (bad / "model.safetensors").write_bytes(src.read_bytes()[:-1000])
    with pytest.raises(selq.BadInput) as e:
        selq.inspect(bad / "model.safetensors")
    assert e.value.file == str(bad / "model.safetensors") and isinstance(e.value.offset, int)
    assert f"at byte {e.value.offset}" in str(e.value)
    with pytest.raises(selq.Io) as e:
        selq.inspect(tmp_path / "missing.safetensors")
    assert isinstance(e.value, OSError) and e.value.file.endswith("missing.safetensors")
    with pytest.raises(selq.Error) as e:
        selq.quantize(llama, tmp_path / "o", recipe="llama-nvfp4", memory_budget=1 << 20)
    assert "memory_budget" in str(e.value)


def test_tensor_error_names_tensor(tmp_path):
    import numpy as np

    w = np.zeros((64, 64), np.float32)
    w[3, 5] = np.nan
    with pytest.raises(selq.BadInput) as e:
        selq.quantize_tensor(w, "fp8-channel")
    assert e.value.tensor == "tensor" and "nan" in str(e.value).lower()
    with pytest.raises(selq.Error) as e:
        selq.quantize_tensor(np.zeros((64, 48), np.float32), "mxfp4")  # 48 % 32 != 0
    assert isinstance(e.value, selq.BadInput)


class Stop(Exception):
    pass


def test_progress_callback_that_raises(llama, tmp_path):
    calls = []

    def progress(p):
        calls.append(p)
        if len(calls) == 2:
            raise Stop("enough")

    with pytest.raises(Stop):
        selq.quantize(llama, tmp_path / "q", recipe="llama-nvfp4", progress=progress)
    assert len(calls) == 2  # no report after the one that raised
    assert not (tmp_path / "q").exists()
    # The staged run resumes to the same bytes as an uninterrupted one.
    selq.quantize(llama, tmp_path / "q", recipe="llama-nvfp4")
    selq.quantize(llama, tmp_path / "r", recipe="llama-nvfp4")
    same_files(tmp_path / "q", tmp_path / "r", outputs(tmp_path / "r"))


CHILD = textwrap.dedent("""\
    import sys, time, selq
    mode = sys.argv[3]
    def progress(p):
        if not getattr(progress, "said", False):
            progress.said = True
            print("started", flush=True)
            if mode == "in-callback":
                time.sleep(60)  # the signal arrives here
    selq.quantize(sys.argv[1], sys.argv[2], recipe="llama-nvfp4", threads=1, progress=progress)
    print("finished", flush=True)
    """)


@pytest.fixture(scope="session")
def larger(tmp_path_factory, cli):
    """108 MiB: a run of about half a second on one thread, after its first report."""
    d = tmp_path_factory.mktemp("larger") / "llama"
    cli("synth", "--arch", "llama", "--layers", "8", d)
    return d


# in-callback: the signal interrupts the progress callback (KeyboardInterrupt
# raised in it); while-working: the callback returns at once and the signal
# lands while the calling thread waits for the work (its 50 ms signal check).
@pytest.mark.parametrize("mode", ["in-callback", "while-working"])
def test_ctrl_c(mode, llama, larger, tmp_path):
    src = llama if mode == "in-callback" else larger
    dst = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(dst), mode], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert "finished" not in out, "the run completed before the signal (make the source larger)"
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err
    assert not dst.exists()
    assert (tmp_path / "out.selq-partial").exists()  # staged, resumable


def test_rotate_same_bytes_as_cli_and_quantize_records_it(llama, cli, tmp_path):
    rec = selq.rotate(llama, tmp_path / "py", "r1r2", seed=3)
    assert rec["rotation"] == "r1r2" and rec["seed"] == 3 and rec["head_written"]
    cli("rotate", llama, tmp_path / "cli", "--rotation", "r1r2", "--seed", "3", "-q")
    same_files(tmp_path / "py", tmp_path / "cli", outputs(tmp_path / "cli"))
    res = selq.quantize(tmp_path / "py", tmp_path / "q", "llama-mxfp4")
    assert res.manifest["rotation"]["seed"] == 3
    with pytest.raises(selq.Unsupported, match="already rotated"):
        selq.rotate(tmp_path / "py", tmp_path / "again")
    with pytest.raises(selq.BadInput, match="unknown rotation"):
        selq.rotate(llama, tmp_path / "bad", "r3")
    assert not (tmp_path / "again").exists() and not (tmp_path / "bad").exists()


def test_quantize_with_rotation_same_bytes_as_cli(llama, cli, tmp_path):
    selq.quantize(llama, tmp_path / "py", "llama-mxfp4", rotation="r1", rotation_block=32, rotation_seed=2)
    cli("quantize", llama, tmp_path / "cli", "--recipe", "llama-mxfp4", "--rotation", "r1", "--rotation-block", "32",
        "--rotation-seed", "2", "-q")
    same_files(tmp_path / "py", tmp_path / "cli", outputs(tmp_path / "cli"))
    m = json.loads((tmp_path / "py" / "selq-manifest.json").read_text())
    assert (m["rotation"]["block"], m["rotation"]["seed"]) == (32, 2) and "rotation_block: 32" in m["recipe"]["text"]
    assert not (tmp_path / "py.selq-rotated").exists()
    with pytest.raises(selq.BadInput, match="unrotated model"):
        selq.quantize(llama, tmp_path / "x", "llama-mxfp4", rotation="r1", calibration=tmp_path / "c.json")
