"""rounding= in Python: selq.quantize_tensor(w, scheme, rounding="mse") and
selq.quantize / selq.plan(..., rounding="mse") are the CLI's --rounding mse
(docs/RECIPES.md, "Rounding"): the same format, searched scales, the same bytes
as the CLI writes, and the roundings not built yet are BadInput errors."""
import numpy as np
import pytest

import ml_dtypes
import selq


def weight(shape, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_t(3, size=shape).astype(np.float32)
    w *= np.exp(rng.uniform(-2, 1, size=shape[:-1] + (1,))).astype(np.float32) * 0.02
    return w.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("scheme,options", [("nvfp4", {}), ("mxfp4", {}), ("int4", {"group_size": 128}),
                                            ("fp8-channel", {})])
def test_quantize_tensor_mse_same_format_lower_error(scheme, options):
    w = weight((64, 256), 3)
    near = selq.quantize_tensor(w, scheme, **options)
    mse = selq.quantize_tensor(w, scheme, rounding="mse", **options)
    assert list(mse) == list(near)
    for k in near:
        assert mse[k].dtype == near[k].dtype and mse[k].shape == near[k].shape, k
    if scheme == "mxfp4":  # without data, only the coarser exponent is tried (docs/RECIPES.md): ties are fine
        assert mse.metrics["rel_frobenius"] <= near.metrics["rel_frobenius"]
        assert np.all(mse["weight_scale"].view(np.uint8) >= near["weight_scale"].view(np.uint8))
    else:
        assert mse.metrics["rel_frobenius"] < near.metrics["rel_frobenius"]
    # It decodes with the unchanged dequantizer, to the error the kernel measured.
    ref = w.astype(np.float32)
    dq = selq.dequantize(mse)
    rel = np.linalg.norm(dq - ref) / np.linalg.norm(ref)
    assert rel == pytest.approx(mse.metrics["rel_frobenius"], rel=1e-5)
    # nearest is the default
    same = selq.quantize_tensor(w, scheme, rounding="nearest", **options)
    assert [v.tobytes() for v in same.values()] == [v.tobytes() for v in near.values()]


def test_gptq_needs_a_hessian_and_unknown_roundings_are_bad_input():
    w = weight((16, 64), 1)
    with pytest.raises(selq.BadInput, match="needs hessian="):
        selq.quantize_tensor(w, "nvfp4", rounding="gptq")
    with pytest.raises(selq.BadInput, match="unknown"):
        selq.quantize_tensor(w, "nvfp4", rounding="sgd")


def test_quantize_tensor_weighted():
    w = weight((64, 256), 4)
    rng = np.random.default_rng(1)
    cw = (10.0 ** rng.uniform(-2, 2, size=256)).astype(np.float32)
    mse = selq.quantize_tensor(w, "nvfp4", rounding="mse")
    wt = selq.quantize_tensor(w, "nvfp4", rounding="weighted", channel_weights=cw)
    assert list(wt) == list(mse)
    ref = w.astype(np.float32)

    def werr(q):
        return float((((selq.dequantize(q) - ref) ** 2) * cw).sum())
    assert werr(wt) < werr(mse)  # the error the weights ask for
    ones = selq.quantize_tensor(w, "nvfp4", rounding="weighted", channel_weights=np.ones(256, np.float32))
    assert [v.tobytes() for v in ones.values()] == [v.tobytes() for v in mse.values()]
    with pytest.raises(selq.BadInput, match="input-channel weights"):
        selq.quantize_tensor(w, "nvfp4", rounding="weighted")


def test_quantize_rounding_matches_cli(llama, cli, tmp_path):
    py = tmp_path / "py"
    res = selq.quantize(llama, py, "llama-nvfp4", rounding="mse")
    assert all(t.get("rounding") == "mse" for t in res.manifest["tensors"] if "scheme" in t)
    out = tmp_path / "cli"
    cli("quantize", llama, out, "--recipe", "llama-nvfp4", "--rounding", "mse", "--quiet")
    for f in sorted(p.name for p in py.iterdir() if p.suffix == ".safetensors"):
        assert (py / f).read_bytes() == (out / f).read_bytes(), f
    plan = selq.plan(llama, "llama-nvfp4", rounding="mse")
    assert all(t.get("rounding") == "mse" for t in plan.tensors if "scheme" in t)
    gptq = selq.plan(llama, "llama-nvfp4", rounding="gptq")  # planned; quantize runs the GPTQ pass
    assert all(t.get("rounding") == "gptq" for t in gptq.tensors if "scheme" in t)


def test_quantize_gptq_gate_and_expert_prior_as_the_cli(cli, tmp_path):
    # A small DeepSeek-V3 whose routed experts get few tokens: gptq_gate= and
    # gptq_expert_prior= are --no-gptq-gate and --gptq-expert-prior, byte for byte.
    src = tmp_path / "dsv3"
    cli("synth", "--arch", "deepseek-v3", "--scale", "8", "--layers", "2", "--experts", "16", "--vocab", "512", src)
    recipe = tmp_path / "moe.yaml"
    recipe.write_text("name: moe\ndefault: {scheme: nvfp4, options: {activations: none}}\n")
    for gate, prior in ((False, 0.0), (True, 0.25)):
        py, out = tmp_path / f"py-{gate}", tmp_path / f"cli-{gate}"
        res = selq.quantize(src, py, recipe, rounding="gptq", calibration_tokens=128, calibration_context=16,
                            gptq_gate=gate, gptq_expert_prior=prior)
        cli("quantize", src, out, "--recipe", recipe, "--rounding", "gptq", "--calibration-tokens", "128",
            "--calibration-context", "16", "--gptq-expert-prior", str(prior), *([] if gate else ["--no-gptq-gate"]),
            "--quiet")
        for f in sorted(p.name for p in py.iterdir() if p.suffix == ".safetensors"):
            assert (py / f).read_bytes() == (out / f).read_bytes(), (gate, f)
        cal = res.manifest["gptq_calibration"]
        assert ("expert_prior" in cal) == (prior > 0), cal.keys()
        assert (cal["gate"]["rule"] == "off: turned off") == (not gate), cal["gate"]["rule"]
    with pytest.raises(selq.BadInput, match="gptq_expert_prior"):
        selq.quantize(src, tmp_path / "bad", recipe, rounding="gptq", gptq_expert_prior=-1)
