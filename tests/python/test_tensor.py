"""The tensor API: bit-exact with compressed-tensors on random tensors, with
what `selq quantize` writes into a checkpoint, and its own dequantize."""
import numpy as np
import pytest

import ml_dtypes
import selq

torch = pytest.importorskip("torch")
ct_forward = pytest.importorskip("compressed_tensors.quantization.lifecycle.forward")
from compressed_tensors.compressors.mx_utils import compress_mx_scale  # noqa: E402
from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8  # noqa: E402
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, quant_scheme  # noqa: E402
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam  # noqa: E402


def weight(shape, seed):
    """Rows of varied magnitude with outliers and exact zeros."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w *= np.exp(rng.uniform(-4, 2, size=shape[:-1] + (1,))).astype(np.float32)
    flat = w.reshape(-1)
    flat[rng.integers(0, flat.size, flat.size // 300)] *= 40.0
    flat[rng.integers(0, flat.size, flat.size // 50)] = 0.0
    return w


def tbytes(t):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


def groups_minmax(W, g):
    x = W.unflatten(-1, (W.shape[-1] // g, g))
    return x.amin(-1), x.amax(-1)


# compressed-tensors driven as llm-compressor's observers drive it (the same
# references as tests/crosscheck/schemes_crosscheck.py).
def ct_fp8_channel(W):
    args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel")
    s, _ = calculate_qparams(W.amin(-1, keepdim=True), W.amax(-1, keepdim=True), args)
    q = ct_forward.quantize(W, s, None, args, dtype=torch.float8_e4m3fn)
    return [tbytes(q), tbytes(s)]


def ct_mxfp4(W):
    args = QuantizationArgs(num_bits=4, type="float", symmetric=True, strategy="group", group_size=32,
                            scale_dtype=torch.uint8, zp_dtype=torch.uint8)
    mn, mx = groups_minmax(W, 32)
    s, _ = calculate_qparams(mn, mx, args)
    q = ct_forward.quantize(W, s, None, args)
    return [pack_fp4_to_uint8(q).numpy().tobytes(), compress_mx_scale(s, torch.uint8).numpy().tobytes()]


def ct_nvfp4(W, global_amax=None):
    args = quant_scheme.NVFP4["weights"]
    mn, mx = groups_minmax(W, 16)
    absmax = torch.max(mx.max(), -mn.min()) if global_amax is None else torch.tensor(global_amax, dtype=W.dtype)
    gs = generate_gparam(-absmax.reshape(1), absmax.reshape(1))
    s, _ = calculate_qparams(mn, mx, args, global_scale=gs)
    s8 = s.to(torch.float8_e4m3fn)
    q = ct_forward.quantize(W, s8.to(torch.float32), None, args, global_scale=gs)
    return [pack_fp4_to_uint8(q).numpy().tobytes(), tbytes(s8), tbytes(gs)]


def ct_int4_group_asym(W, group):
    args = QuantizationArgs(num_bits=4, type="int", symmetric=False, strategy="group", group_size=group)
    mn, mx = groups_minmax(W, group)
    s, zp = calculate_qparams(mn, mx, args)
    q = ct_forward.quantize(W, s, zp, args, dtype=torch.int8)
    return [pack_to_int32(q, 4).numpy().tobytes(), tbytes(s),
            pack_to_int32(zp.to(torch.int8), 4, packed_dim=0).numpy().tobytes(),
            np.array(W.shape, np.int64).tobytes()]


CASES = [
    ("fp8-channel", {}, ct_fp8_channel),
    ("mxfp4", {}, ct_mxfp4),
    ("nvfp4", {}, ct_nvfp4),
    ("nvfp4", {"global_amax": 97.5}, lambda W: ct_nvfp4(W, 97.5)),  # representable in BF16
    ("int4", {"group_size": 64, "symmetric": False}, lambda W: ct_int4_group_asym(W, 64)),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("scheme,options,ref", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bit_exact_with_compressed_tensors(scheme, options, ref, dtype):
    for seed, shape in enumerate([(96, 256), (33, 512)]):
        W = torch.from_numpy(weight(shape, seed)).to(getattr(torch, dtype))
        a = W.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if dtype == "bfloat16" else W.numpy()
        q = selq.quantize_tensor(a, scheme, **options)
        want = ref(W)
        got = [np.ascontiguousarray(v).tobytes() for v in q.values()]
        assert len(got) == len(want), list(q)
        for name, g, w in zip(q, got, want):
            assert g == w, f"{scheme} {dtype} {shape}: {name} differs from compressed-tensors"
        # torch in, the same bytes
        q2 = selq.quantize_tensor(W, scheme, **options)
        assert [np.ascontiguousarray(v).tobytes() for v in q2.values()] == got


def test_dtypes_names_and_dequantize():
    w = weight((64, 128), 7).astype(ml_dtypes.bfloat16)
    q = selq.quantize_tensor(w, "nvfp4")
    assert list(q) == ["weight_packed", "weight_scale", "weight_global_scale"]
    assert q["weight_packed"].dtype == np.uint8 and q["weight_packed"].shape == (64, 64)
    assert q["weight_scale"].dtype == ml_dtypes.float8_e4m3fn and q["weight_scale"].shape == (64, 8)
    assert q.scheme == "nvfp4" and q.shape == (64, 128) and q.dtype == "BF16"
    dq = selq.dequantize(q)
    assert dq.dtype == np.float32 and dq.shape == (64, 128)
    ref = w.astype(np.float32)
    rel = np.linalg.norm(dq - ref) / np.linalg.norm(ref)
    assert rel == pytest.approx(q.metrics["rel_frobenius"], rel=1e-6)
    # The stored arrays alone, by name or in order, give the same weights.
    by_name = selq.dequantize(dict(q), "nvfp4", shape=(64, 128))
    in_order = selq.dequantize(list(q.values()), "nvfp4", shape=(64, 128))
    assert np.array_equal(by_name, dq) and np.array_equal(in_order, dq)
    # Other dialects name the outputs their way.
    mo = selq.quantize_tensor(w, "nvfp4", dialect="modelopt")
    assert "weight_scale_2" in mo
    assert selq.scheme_outputs("fp8-block", (256, 384), activations="fp8-per-token-group128")[1] == ("weight_scale", "F32", (2, 3))


def test_input_is_not_copied_and_not_changed():
    w = weight((128, 256), 3)
    before = w.copy()
    selq.quantize_tensor(w, "mxfp4")
    assert np.array_equal(w, before)
    # A non-contiguous view is accepted (copied to contiguous first) and gives the contiguous result.
    big = weight((128, 512), 4)
    view = big[:, ::2]
    assert [v.tobytes() for v in selq.quantize_tensor(view, "mxfp4").values()] == \
           [v.tobytes() for v in selq.quantize_tensor(np.ascontiguousarray(view), "mxfp4").values()]


def test_same_bytes_as_selq_quantize(llama, tmp_path):
    from safetensors.torch import load_file

    def tensors(d):
        out = {}
        for f in d.glob("*.safetensors"):
            out.update(load_file(str(f)))
        return out

    def raw(t):
        return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()

    selq.quantize(llama, tmp_path / "q", recipe="llama-nvfp4")
    src, out = tensors(llama), tensors(tmp_path / "q")
    for name in ["model.layers.1.mlp.down_proj", "model.layers.0.self_attn.o_proj"]:
        w = src[name + ".weight"]
        assert w.dtype == torch.bfloat16
        q = selq.quantize_tensor(w, "nvfp4", activations="none")
        for suffix, arr in q.items():
            assert arr.tobytes() == raw(out[f"{name}.{suffix}"]), f"{name}.{suffix}"
