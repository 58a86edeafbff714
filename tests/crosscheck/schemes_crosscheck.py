#!/usr/bin/env python3
"""Bit-for-bit cross-check of selq's weight schemes (src/quant) against the
tools whose checkpoints the engines load.

    schemes_crosscheck.py <path to crosscheck_schemes_driver>

References:
  * compressed-tensors (installed package, CPU torch path), driven the way
    llm-compressor's weight observers drive it: per-group min/max in the
    weight's dtype -> calculate_qparams (-> generate_gparam for NVFP4) ->
    forward.quantize -> pack_fp4_to_uint8 / pack_to_int32 / compress_mx_scale.
    Covers FP8 tensor/channel/block (model-dtype scales), MXFP4/MXFP8 (EVEN),
    NVFP4 (CT convention, incl. a fused global amax), int4/int8 group/channel,
    symmetric and asymmetric, naive I8 and pack-quantized I32.
  * Ports (no installable package; each cites its source):
      - ModelOpt NVFP4: NVFP4QTensor.quantize / get_weights_scaling_factor /
        _cast_fp4 (NVIDIA/TensorRT-Model-Optimizer
        modelopt/torch/quantization/qtensor/nvfp4_tensor.py), in torch.
      - MX FLOOR / CEIL / RCEIL scales: torchao to_mx ScaleCalculationMode
        (pytorch/ao torchao/prototype/mx_formats/mx_tensor.py) and the OCP spec
        formula, in numpy; elements via ml_dtypes.
      - DeepSeek-V3 block FP8 with F32 weight_scale_inv: s = amax/448,
        W = q * s (deepseek-ai/DeepSeek-V3 inference/kernel.py weight_dequant;
        README_WEIGHTS.md), edge blocks partial.
      - Activations: DeepSeek act_quant (s = max(amax,1e-4)/448 per 128),
        per-token FP8 (amax/448), MX / NVFP4 dynamic via the CT weight path.
Under CI=true a missing reference package is a failure; locally a skip.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

CI = os.environ.get("CI", "").lower() == "true"
failures = []
skipped = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + detail) if detail and not ok else ''}")
    if not ok:
        failures.append(name)


def missing(what):
    if CI:
        check(f"reference available: {what}", False, "missing under CI")
    else:
        print(f"skip {what} (not installed)")
        skipped.append(what)


try:
    import torch
except Exception:  # noqa: BLE001
    torch = None
try:
    import ml_dtypes
except Exception:  # noqa: BLE001
    ml_dtypes = None
ct = None
if torch is not None:
    try:
        import compressed_tensors  # noqa: F401
        from compressed_tensors.quantization import QuantizationArgs
        from compressed_tensors.quantization.lifecycle.forward import quantize as ct_quantize
        from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam
        from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8
        from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
        from compressed_tensors.compressors.mx_utils import compress_mx_scale
        from compressed_tensors.quantization import quant_scheme
        ct = True
    except Exception as e:  # noqa: BLE001
        print("compressed-tensors import failed:", e)

DRIVER = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="selq_schemes_")
TDT = {"BF16": "bfloat16", "F32": "float32", "F16": "float16"}


# ------------------------------------------------------------------ inputs

def make_weight(shape, seed, in_block=32):
    """Gaussian rows of varied magnitude plus the cases that break quantizers:
    outliers, exact zeros, an all-zero row and block, tiny (subnormal) values,
    and rows built so that scaled elements land exactly on rounding ties."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w *= np.exp(rng.uniform(-6, 2, size=shape[:-1] + (1,))).astype(np.float32)
    flat = w.reshape(-1, shape[-1])
    rows, cols = flat.shape
    idx = rng.integers(0, flat.size, size=max(1, flat.size // 500))
    flat.reshape(-1)[idx] *= 50.0
    flat.reshape(-1)[rng.integers(0, flat.size, size=max(1, flat.size // 50))] = 0.0
    flat[min(1, rows - 1)] = 0.0
    flat.reshape(-1)[rng.integers(0, flat.size, size=max(1, flat.size // 200))] = -0.0
    flat[min(2, rows - 1), :in_block] = 0.0
    if rows > 3:
        flat[3] = rng.standard_normal(cols).astype(np.float32) * 1e-38  # subnormal/tiny
    if rows > 4:
        # FP4 ties: block amax 6 -> scale 1 (EVEN/FLOOR), elements on midpoints
        ties = np.array([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -5.0,
                         0.1, -0.1, 4.0, 3.0], np.float32)
        flat[4] = np.resize(ties, cols)
    if rows > 5:
        # FP8 ties: amax 448 -> scale 1; E4M3 midpoints
        ties8 = np.array([448.0, 1.0625, 17.0, 304.0, -304.0, 2.0 ** -10, 3 * 2.0 ** -10, 0.0],
                         np.float32)
        flat[5] = np.resize(ties8, cols)
    if rows > 6:
        # int4 ties: amax 7.5 -> scale 1 (symmetric); x.5 values
        flat[6] = np.resize(np.array([7.5, 0.5, 1.5, 2.5, -0.5, -3.5, 6.5, -7.5], np.float32), cols)
    return w


def as_dtype_bytes(w32, dt):
    t = torch.from_numpy(w32).to(getattr(torch, TDT[dt]))
    return t, t.view(torch.uint8 if t.element_size() == 1 else torch.int16).numpy().tobytes()


def run_driver(case, dt, shape, data, **kw):
    inp = os.path.join(TMP, case + ".in")
    with open(inp, "wb") as f:
        f.write(data)
    out = os.path.join(TMP, case)
    args = [DRIVER, "weight", f"in={inp}", f"dtype={dt}", "shape=" + ",".join(map(str, shape)),
            f"out={out}"] + [f"{k}={v}" for k, v in kw.items()]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    outs = []
    i = 0
    while os.path.exists(f"{out}.{i}.bin"):
        outs.append(open(f"{out}.{i}.bin", "rb").read())
        i += 1
    dq = np.fromfile(out + ".dq.bin", dtype=np.float32).reshape(shape)
    metrics = {}
    for line in open(out + ".metrics.txt"):
        k, v = line.split()
        metrics[k] = float(v)
    return (outs, dq, metrics), None


def tbytes(t):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    if t.dtype in (torch.float8_e4m3fn,):
        return t.view(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


def compare_bytes(name, got, want, itemsize=1):
    if got == want:
        check(name, True)
        return
    g = np.frombuffer(got, np.uint8)
    w = np.frombuffer(want, np.uint8)
    if g.size != w.size:
        check(name, False, f"size {g.size} != {w.size}")
        return
    bad = np.nonzero(g != w)[0]
    check(name, False, f"{bad.size} of {g.size} bytes differ; first at byte {bad[0]} "
                       f"(element {bad[0] // itemsize}): got {g[bad[0]]:#x} want {w[bad[0]]:#x}")


# ---------------------------------------------------------- CT references

def groups_minmax(W, g):
    x = W.unflatten(-1, (W.shape[-1] // g, g))
    return x.amin(-1), x.amax(-1)


def ct_fp8(W, strategy, block=(128, 128)):
    args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy=strategy,
                            **({"block_structure": list(block)} if strategy == "block" else {}))
    if strategy == "tensor":
        mn, mx = W.amin(), W.amax()
    elif strategy == "channel":
        mn, mx = W.amin(-1, keepdim=True), W.amax(-1, keepdim=True)
    else:
        br, bc = block
        pr, pc = (-W.shape[0]) % br, (-W.shape[1]) % bc
        P = torch.nn.functional.pad(W, (0, pc, 0, pr))
        B = P.reshape(P.shape[0] // br, br, P.shape[1] // bc, bc)
        mn, mx = B.amin(dim=(1, 3)), B.amax(dim=(1, 3))
    s, zp = calculate_qparams(mn, mx, args)
    # Symmetric schemes have no weight_zero_point parameter, so the compressor
    # passes None (a zero tensor would also turn -0.0 into +0.0).
    q = ct_quantize(W, s, None, args, dtype=torch.float8_e4m3fn)
    return [tbytes(q), tbytes(s)]


def ct_mx(W, bits):
    args = QuantizationArgs(num_bits=bits, type="float", symmetric=True, strategy="group",
                            group_size=32, scale_dtype=torch.uint8, zp_dtype=torch.uint8)
    mn, mx = groups_minmax(W, 32)
    s, zp = calculate_qparams(mn, mx, args)
    sb = compress_mx_scale(s, torch.uint8)
    if bits == 4:
        q = ct_quantize(W, s, None, args)
        return [pack_fp4_to_uint8(q).numpy().tobytes(), sb.numpy().tobytes()]
    q = ct_quantize(W, s, None, args, dtype=torch.float8_e4m3fn)
    return [tbytes(q), sb.numpy().tobytes()]


def ct_nvfp4(W, global_amax=None):
    args = quant_scheme.NVFP4["weights"]
    mn, mx = groups_minmax(W, 16)
    if global_amax is None:
        absmax = torch.max(mx.max(), -mn.min())
    else:
        absmax = torch.tensor(global_amax, dtype=W.dtype)
    gs = generate_gparam(-absmax.reshape(1), absmax.reshape(1))
    s, zp = calculate_qparams(mn, mx, args, global_scale=gs)
    s8 = s.to(torch.float8_e4m3fn)
    q = ct_quantize(W, s8.to(torch.float32), None, args, global_scale=gs)
    return [pack_fp4_to_uint8(q).numpy().tobytes(), tbytes(s8), tbytes(gs)]


def ct_int(W, bits, group, sym, pack):
    kw = {"strategy": "channel"} if group is None else {"strategy": "group", "group_size": group}
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=sym, **kw)
    if group is None:
        mn, mx = W.amin(-1, keepdim=True), W.amax(-1, keepdim=True)
    else:
        mn, mx = groups_minmax(W, group)
    s, zp = calculate_qparams(mn, mx, args)
    q = ct_quantize(W, s, zp if not sym else None, args, dtype=torch.int8)
    outs = []
    outs.append(pack_to_int32(q, bits).numpy().tobytes() if pack else q.numpy().tobytes())
    outs.append(tbytes(s))
    if not sym:
        z = zp.to(torch.int8)
        outs.append(pack_to_int32(z, bits, packed_dim=0).numpy().tobytes() if pack
                    else z.numpy().tobytes())
    if pack:
        outs.append(torch.tensor(W.shape).numpy().astype(np.int64).tobytes())
    return outs


# ---------------------------------------------------------------- ports

def modelopt_nvfp4(W):
    # Port of NVFP4QTensor.get_weights_scaling_factor_2 / _factor / quantize /
    # _cast_fp4 (modelopt/torch/quantization/qtensor/nvfp4_tensor.py).
    wsf2 = W.abs().amax().float() / (6.0 * 448.0)
    blk = W.unflatten(-1, (W.shape[-1] // 16, 16))
    pba = blk.abs().amax(-1).float()
    pbs = pba / (6.0 * wsf2)
    pbs[pbs == 0] = 1.0
    pbs8 = pbs.to(torch.float8_e4m3fn)
    scaled = (blk / (pbs8.to(torch.float32) * wsf2).unsqueeze(-1)).reshape(W.shape)
    bounds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5])
    sign = (scaled < 0).to(torch.uint8)
    a = scaled.abs()
    ordv = torch.searchsorted(bounds, a.contiguous(), out_int32=True).to(torch.uint8)
    eq = torch.any(a.unsqueeze(-1) == bounds[[1, 3, 5]], dim=-1).to(torch.uint8)
    q = (sign << 3) + ordv + eq
    packed = (q[..., 1::2] << 4) | q[..., 0::2]
    return [packed.numpy().tobytes(), tbytes(pbs8), wsf2.reshape(()).numpy().tobytes()]


def mx_rule_port(W, bits, rule):
    # Scale exponents per torchao ScaleCalculationMode (FLOOR = OCP spec,
    # CEIL, RCEIL = cvt.rp.ue8m0 of amax/max) and OCP element rounding (RNE,
    # saturating) via ml_dtypes.
    x = W.float().numpy().astype(np.float32)
    blk = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    amax = np.abs(blk).max(-1).astype(np.float32)
    emax, emaxval = (2, 6.0) if bits == 4 else (8, 448.0)
    with np.errstate(divide="ignore"):
        if rule == "floor":
            e = np.floor(np.log2(amax)) - emax
        elif rule == "ceil":
            e = np.ceil(np.log2(amax)) - emax
        else:
            e = np.ceil(np.log2((amax / np.float32(emaxval)).astype(np.float32)))
    e = np.where(amax == 0, -127, e)
    e = np.clip(e, -127, 127)
    sb = (e + 127).astype(np.uint8)
    scale = np.ldexp(np.float32(1), e.astype(np.int32)).astype(np.float32)
    v = np.clip(blk / scale[..., None], -emaxval, emaxval).astype(np.float32)
    if bits == 4:
        codes = v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
        # -0.0 quotients are written as +0 by compressed-tensors and ModelOpt
        codes = np.where(v == 0, 0, codes).reshape(x.shape).astype(np.uint8)
        packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
        return [packed.tobytes(), sb.tobytes()]
    return [v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(x.shape).tobytes(), sb.tobytes()]


def deepseek_block(W, br=128, bc=128):
    # W = q * weight_scale_inv per 128x128 block (DeepSeek-V3 kernel.py
    # weight_dequant); s = amax/448 in f32; a zero block takes selq's (and
    # compressed-tensors') eps scale instead of 0/0.
    x = W.float().numpy()
    out, inn = x.shape
    nbr, nbc = -(-out // br), -(-inn // bc)
    s = np.zeros((nbr, nbc), np.float32)
    q = np.zeros(x.shape, np.uint8)
    for i in range(nbr):
        for j in range(nbc):
            b = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            sv = np.float32(np.abs(b).max()) / np.float32(448.0)
            if sv == 0:
                sv = np.finfo(np.float32).eps
            s[i, j] = sv
            v = np.clip((b / sv).astype(np.float32), -448, 448)
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return [q.tobytes(), s.tobytes()]


# ---------------------------------------------------------------- cases

def per_expert(ref, W3, *a, **k):
    parts = [ref(W3[e], *a, **k) for e in range(W3.shape[0])]
    return [b"".join(p[i] for p in parts) for i in range(len(parts[0]))]


def weight_case(name, dt, shape, ref, seed=0, **kw):
    w32 = make_weight(shape, seed)
    W, data = as_dtype_bytes(w32, dt)
    res, err = run_driver(name, dt, shape, data, **kw)
    if res is None:
        check(name, False, "driver failed: " + err)
        return
    outs, dq, metrics = res
    want = per_expert(ref, W) if W.dim() == 3 else ref(W)
    if W.dim() == 3 and kw.get("pack") in (1, "1"):
        # compressed-tensors stores torch.tensor(weight.shape) of the whole 3-D weight
        want[-1] = np.array(W.shape, np.int64).tobytes()
    if len(outs) != len(want):
        check(name, False, f"{len(outs)} outputs, reference has {len(want)}")
        return
    for i, (g, w) in enumerate(zip(outs, want)):
        compare_bytes(f"{name} out[{i}]", g, w)
    # metrics must describe the driver's own dequantization
    x = W.float().numpy().astype(np.float64)
    err2 = ((x - dq.astype(np.float64)) ** 2).sum()
    ok = abs(err2 - metrics["sum_sq_err"]) <= 1e-3 * max(err2, 1e-30) + 1e-30
    check(f"{name} metrics.sum_sq_err", ok, f"{metrics['sum_sq_err']} vs {err2}")


# ------------------------------------------------- rounding mse (issue 35)

def decode_ref(kind, outs, shape, dt):
    """The stored tensors decoded by the formats' definitions alone (ml_dtypes
    element types, E8M0 2^(s-127), compressed-tensors' NVFP4 q * (s / gs) in
    float32, int q * s): what an engine computes, whatever chose the scales."""
    rows, cols = shape
    if kind in ("mxfp4", "nvfp4"):
        packed = np.frombuffer(outs[0], np.uint8).reshape(rows, cols // 2)
        nib = np.stack([packed & 0xF, packed >> 4], -1).reshape(rows, cols)
        q = nib.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    elif kind in ("mxfp8", "fp8-channel"):
        q = np.frombuffer(outs[0], np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(shape)
    else:
        q = np.frombuffer(outs[0], np.int8).astype(np.float32).reshape(shape)
    if kind in ("mxfp4", "mxfp8"):
        e = np.frombuffer(outs[1], np.uint8).astype(np.int32).reshape(rows, cols // 32)
        s = np.ldexp(np.float32(1), e - 127).astype(np.float32)
        return (q.reshape(rows, -1, 32) * s[..., None]).reshape(shape)
    if kind == "nvfp4":
        s8 = np.frombuffer(outs[1], np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(rows, cols // 16)
        gs = np.frombuffer(outs[2], np.float32)[0]
        return (q.reshape(rows, -1, 16) * (s8 / gs)[..., None]).reshape(shape)
    sdt = {"BF16": ml_dtypes.bfloat16, "F32": np.float32}[dt]
    s = np.frombuffer(outs[1], sdt).astype(np.float32)
    if kind == "fp8-channel":
        return q * s.reshape(rows, 1)
    g = cols // s.reshape(rows, -1).shape[1]
    return (q.reshape(rows, -1, g) * s.reshape(rows, -1)[..., None]).reshape(shape)


def magnitude_weights(x, block):
    """mse's weights on 4-bit INT and MXFP4 (docs/RECIPES.md, "Rounding"):
    2 + x^2 / mean(x^2) of the block, 2 in an all-zero block, as float32."""
    xb = x.reshape(x.shape[0], -1, block)
    ms = (xb ** 2).mean(-1, keepdims=True)
    w = np.where(ms > 0, 2.0 + xb ** 2 / np.where(ms > 0, ms, 1.0), 2.0)
    return w.astype(np.float32).astype(np.float64).reshape(x.shape)


def mse_case(name, dt, shape, kind, block, **kw):
    """--rounding mse: the output decodes, by the definitions above, to the
    values selq's own dequantizer gives, and no block's squared error is above
    nearest's (the same source, the same format); on 4-bit INT and MXFP4 the
    error is weighted by magnitude, as mse defines it there."""
    w32 = make_weight(shape, 3)
    rng = np.random.default_rng(5)
    w32 = w32 * (1 + 0.5 * rng.standard_t(3, size=shape).astype(np.float32) ** 2 * 0.01)  # heavier tails
    W, data = as_dtype_bytes(w32.astype(np.float32), dt)
    got = {}
    for rounding in ("nearest", "mse"):
        res, err = run_driver(f"{name}-{rounding}", dt, shape, data, kind=kind, rounding=rounding, **kw)
        if res is None:
            check(f"mse {name}", False, f"driver failed ({rounding}): " + err)
            return
        got[rounding] = res
    outs, dq, _ = got["mse"]
    ref = decode_ref(kind, outs, shape, dt)
    check(f"mse {name}: decodes as the format defines", np.array_equal(ref, dq),
          f"max |diff| {np.max(np.abs(ref - dq))}")
    x = W.float().numpy().astype(np.float64)
    by_magnitude = kind == "mxfp4" or kw.get("bits") == 4
    weights = magnitude_weights(x, block) if by_magnitude else 1.0
    # selq sums a block's squares in another order, so a weight may differ in its
    # last float32 bit (6e-8): a block can then read that much above nearest's.
    tol = 1e-6 if by_magnitude else 1e-12
    def block_err(d):
        e = (x - d.astype(np.float64)) ** 2 * weights
        return e.reshape(shape[0], -1, block).sum(-1) if block else e.sum(-1)
    en, em = block_err(got["nearest"][1]), block_err(dq)
    check(f"mse {name}: no block worse than nearest", bool(np.all(em <= en * (1 + tol))),
          f"{int(np.sum(em > en * (1 + tol)))} blocks worse")
    if kind == "mxfp4" and kw.get("rule", "even") != "floor":
        # Without data MXFP4's search leaves out the finer exponent e - 1 (docs/RECIPES.md):
        # no block's exponent is below nearest's, and on these weights e + 1 never wins.
        e_near = np.frombuffer(got["nearest"][0][1], np.uint8)
        e_mse = np.frombuffer(outs[1], np.uint8)
        check(f"mse {name}: no exponent below nearest's", bool(np.all(e_mse >= e_near)),
              f"{int(np.sum(e_mse < e_near))} blocks took e - 1")
        check(f"mse {name}: total error not above nearest's", em.sum() <= en.sum(), f"{em.sum()} vs {en.sum()}")
    else:
        check(f"mse {name}: lower total error", em.sum() < en.sum(), f"{em.sum()} vs {en.sum()}")


def mse_checks():
    for dt in ("BF16", "F32"):
        mse_case(f"mxfp4 {dt}", dt, (24, 256), "mxfp4", 32)
        mse_case(f"mxfp4 floor {dt}", dt, (24, 256), "mxfp4", 32, rule="floor")
        mse_case(f"mxfp8 {dt}", dt, (24, 256), "mxfp8", 32, rule="floor")
        mse_case(f"nvfp4 {dt}", dt, (24, 256), "nvfp4", 16)
        mse_case(f"int4 g128 {dt}", dt, (24, 256), "int-group", 128, group=128, bits=4, scale_dtype=dt)
        mse_case(f"fp8-channel {dt}", dt, (24, 256), "fp8-channel", 0, scale_dtype=dt)


def main():
    if torch is None or ml_dtypes is None:
        missing("torch/ml_dtypes")
        return
    if ct is None:
        missing("compressed-tensors")
    else:
        for dt in ("BF16", "F32", "F16"):
            weight_case(f"ct fp8-channel {dt}", dt, (37, 96), lambda W: ct_fp8(W, "channel"),
                        kind="fp8-channel", scale_dtype=dt)
            weight_case(f"ct fp8-tensor {dt}", dt, (19, 64), lambda W: ct_fp8(W, "tensor"),
                        kind="fp8-tensor", scale_dtype=dt)
        weight_case("ct fp8-block BF16 (edges)", "BF16", (300, 200),
                    lambda W: ct_fp8(W, "block"), kind="fp8-block", scale_dtype="BF16")
        for dt in ("BF16", "F32"):
            weight_case(f"ct mxfp4 {dt}", dt, (41, 256), lambda W: ct_mx(W, 4), kind="mxfp4")
            weight_case(f"ct mxfp8 {dt}", dt, (23, 128), lambda W: ct_mx(W, 8), kind="mxfp8")
            weight_case(f"ct nvfp4 {dt}", dt, (29, 160), ct_nvfp4, kind="nvfp4")
        weight_case("ct nvfp4 fused global amax", "BF16", (13, 64),
                    lambda W: ct_nvfp4(W, global_amax=123.5), kind="nvfp4", global_amax="123.5")
        weight_case("ct mxfp4 3-D experts", "BF16", (3, 11, 64),
                    lambda W: ct_mx(W, 4), kind="mxfp4")
        weight_case("ct nvfp4 3-D experts", "BF16", (2, 9, 48), ct_nvfp4, kind="nvfp4")
        for bits in (4, 8):
            for sym in (True, False):
                for pack in (False, True):
                    tag = f"int{bits}{'' if sym else '-asym'}{'-packed' if pack else ''}"
                    kw = dict(bits=bits, asym="0" if sym else "1", pack="1" if pack else "0",
                              scale_dtype="BF16")
                    weight_case(f"ct {tag} g128 BF16", "BF16", (37, 384),
                                lambda W, b=bits, s=sym, p=pack: ct_int(W, b, 128, s, p),
                                kind="int-group", group=128, **kw)
                    weight_case(f"ct {tag} channel BF16", "BF16", (37, 72),
                                lambda W, b=bits, s=sym, p=pack: ct_int(W, b, None, s, p),
                                kind="int-channel", **kw)
        weight_case("ct int4 g32 F32 asym packed", "F32", (20, 96),
                    lambda W: ct_int(W, 4, 32, False, True), kind="int-group", group=32, bits=4,
                    asym=1, pack=1, scale_dtype="F32")
        weight_case("ct int4 g128 packed 3-D", "BF16", (2, 16, 256),
                    lambda W: ct_int(W, 4, 128, True, True), kind="int-group", group=128, bits=4,
                    pack=1, scale_dtype="BF16")

    for dt in ("BF16", "F32"):
        weight_case(f"modelopt nvfp4 {dt}", dt, (29, 160), modelopt_nvfp4, kind="nvfp4",
                    nvfp="modelopt")
        for rule in ("floor", "ceil", "rceil"):
            weight_case(f"port mxfp4-{rule} {dt}", dt, (17, 128),
                        lambda W, r=rule: mx_rule_port(W, 4, r), kind="mxfp4", rule=rule)
            weight_case(f"port mxfp8-{rule} {dt}", dt, (17, 128),
                        lambda W, r=rule: mx_rule_port(W, 8, r), kind="mxfp8", rule=rule)
        weight_case(f"deepseek fp8-block F32 scale {dt}", dt, (300, 260), deepseek_block,
                    kind="fp8-block", scale_dtype="F32")
    activation_checks()
    mse_checks()
    error_checks()


def run_act(mode, x, n, **kw):
    inp = os.path.join(TMP, f"act_{mode}.in")
    x.astype(np.float32).tofile(inp)
    out = inp + ".out"
    p = subprocess.run([DRIVER, "act", f"mode={mode}", f"n={n}", f"in={inp}", f"out={out}"] +
                       [f"{k}={v}" for k, v in kw.items()], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    return np.fromfile(out, np.float32).reshape(x.shape)


def act_fp8_ref(x, s):
    return (torch.from_numpy(x) / s).clamp(-448, 448).to(torch.float8_e4m3fn).float().numpy() * s


def activation_checks():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 384)) * np.exp(rng.uniform(-3, 3, (6, 1)))).astype(np.float32)
    x[1] = 0.0
    x[2, :128] = 0.0
    got = run_act("fp8-token", x, 384)
    want = np.stack([act_fp8_ref(r, np.float32(np.abs(r).max()) / np.float32(448)) if np.abs(r).max() > 0
                     else r for r in x])
    check("act fp8 per-token", got is not None and np.array_equal(got, want))
    got = run_act("fp8-group128", x, 384)
    want = x.copy()
    for r in range(x.shape[0]):
        for c in range(0, 384, 128):
            b = x[r, c:c + 128]
            s = np.float32(max(np.float32(np.abs(b).max()), np.float32(1e-4))) / np.float32(448)
            want[r, c:c + 128] = act_fp8_ref(b, s)
    check("act fp8 per-token-group-128 (DeepSeek act_quant)", got is not None and np.array_equal(got, want))
    got = run_act("fp8-static", x, 384, static="0.0123")
    check("act fp8 static", got is not None and np.array_equal(got, act_fp8_ref(x, np.float32(0.0123))))
    # MX / NVFP4 dynamic activations must equal the (already cross-checked)
    # F32 weight path on the same values.
    for mode, kind in (("mxfp4", "mxfp4"), ("mxfp8", "mxfp8")):
        got = run_act(mode, x, 384)
        res, _ = run_driver(f"act_ref_{mode}", "F32", x.shape, x.tobytes(), kind=kind)
        check(f"act {mode} dynamic == weight path", got is not None and res is not None and
              np.array_equal(got, res[1]))
    if ct is not None:
        gs = 448.0 * 6.0 / 37.0
        got = run_act("nvfp4", x, 384, static=repr(np.float32(gs).item()))
        W = torch.from_numpy(x)
        args = quant_scheme.NVFP4["weights"]
        mn, mx = groups_minmax(W, 16)
        g = torch.tensor([np.float32(gs)])
        s, zp = calculate_qparams(mn, mx, args, global_scale=g)
        q = ct_quantize(W, s, None, args, global_scale=g)
        want = (q.unflatten(-1, (24, 16)) * (s / g).unsqueeze(-1)).reshape(x.shape).numpy()
        check("act nvfp4 static global scale (CT QDQ)", got is not None and np.array_equal(got, want))


def error_checks():
    w = np.ones((4, 64), np.float32)
    w[2, 17] = np.nan
    res, err = run_driver("nan", "F32", (4, 64), w.tobytes(), kind="mxfp4", name="layers.0.w")
    check("NaN weight rejected with tensor name and index",
          res is None and "layers.0.w" in err and "145" in err, err)
    res, err = run_driver("odd", "F32", (4, 48), np.ones((4, 48), np.float32).tobytes(), kind="mxfp4")
    check("in % 32 != 0 rejected for mxfp4", res is None and "multiple of 32" in err, err)
    res, err = run_driver("1d", "F32", (64,), np.ones(64, np.float32).tobytes(), kind="fp8-channel")
    check("1-D tensor rejected", res is None and "1-D" in err, err)


if __name__ == "__main__":
    main()
    print(f"\n{len(failures)} failures" + (f", skipped: {skipped}" if skipped else ""))
    sys.exit(1 if failures else 0)
