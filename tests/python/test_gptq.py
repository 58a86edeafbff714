"""rounding="gptq" against an independent GPTQ written here in NumPy.

selq's GPTQ (src/calibration/gptq.cpp, element grids in src/quant/gptq_grid.cpp)
keeps the scales the "weighted" search picks for the original weight (with
the Hessian's diagonal as each input channel's weight) and rounds
the columns one at a time onto that fixed grid, in static act-order
(decreasing Hessian diagonal, ties by index), spreading each rounding error
over the columns not yet rounded through the upper Cholesky factor of the
damped inverse Hessian, in lazy blocks of 128 columns. Nothing in the stored
format tells whether that happened correctly: a wrong permutation, a
transposed factor or a wrong dead-column rule still gives valid bytes, only
worse ones. So the reference below redoes the algorithm from its
description, with its own decoding of the stored scales (E4M3 and E8M0 bytes,
int scales and packed zero points) and its own element rounding, and the two
must agree value for value on random layers whose inputs are correlated
(shared directions, uneven channel scales, dead inputs, an exactly repeated
input), where GPTQ differs most from rounding each weight to nearest.

Both sides work in double and snap every weight to the float32 grid of fixed
scales, so their results are equal unless BLAS/LAPACK summation order moves a
value across a rounding midpoint, which random data makes vanishingly rare.
"""
import ml_dtypes
import numpy as np
import pytest

import selq

IN = 256
DAMP = 0.01  # GptqOptions::dampening
BLOCK = 128  # GptqOptions::block_columns

# (out, seed, dead input channels, (a, b): input b repeats input a exactly)
LAYERS = {
    "plain48": (48, 11, (), None),
    "dead80": (80, 12, (3, 100, 255), (17, 200)),
    "plain96": (96, 13, (), None),
}

# id -> (scheme, options)
SCHEMES = {
    "nvfp4": ("nvfp4", {}),
    "mxfp4": ("mxfp4", {}),
    "mxfp8": ("mxfp8", {}),
    "int4-g64-asym": ("int4", {"group_size": 64, "symmetric": False}),
    "int4-g64-sym": ("int4", {"group_size": 64, "symmetric": True}),
}


# ---------------------------------------------------------------------------
# Layers


def layer(name):
    """A float32 weight [out, IN] with heavy tails and a float64 Hessian
    H = XᵀX of correlated inputs [4·IN, IN] (exactly symmetric)."""
    out, seed, dead, repeat = LAYERS[name]
    rng = np.random.default_rng(seed)
    w = (rng.standard_t(3, size=(out, IN)) * 0.02).astype(np.float32)
    tokens = 4 * IN
    dirs = rng.standard_normal((6, IN))
    x = rng.standard_normal((tokens, IN)) + 2.0 * rng.standard_normal((tokens, 6)) @ dirs
    x *= np.exp(rng.uniform(-1.5, 1.5, size=IN))  # uneven input channels: act-order matters
    for c in dead:
        x[:, c] = 0.0
    h = x.T @ x
    h = (h + h.T) / 2  # exactly symmetric
    if repeat is not None:  # an exact tie of the diagonal (a singular H, damping makes it definite)
        a, b = repeat
        h[b, :] = h[a, :]
        h[:, b] = h[:, a]
        h[b, b] = h[a, a]
    for c in dead:
        assert h[c, c] == 0.0
    return w, h


# ---------------------------------------------------------------------------
# The stored scales, decoded here


def e4m3fn_value(b):
    """E4M3FN bytes -> float32 (sign, 4-bit exponent of bias 7, 3-bit
    mantissa, subnormals 2^-9 apart; 0x7F/0xFF NaN)."""
    b = np.asarray(b, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 0x7
    mag = np.where(e == 0, m * 2.0**-9, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    mag = np.where((b & 0x7F) == 0x7F, np.nan, mag)
    return (sign * mag).astype(np.float32)


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def e2m1_round(v):
    """float32 -> the nearest E2M1 value (ties to the even mantissa),
    saturating at ±6."""
    a = np.abs(v)
    code = ((a > 0.25).astype(np.int64) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5)
            + (a > 5.0))
    return np.where(v < 0, -E2M1[code], E2M1[code])


def e4m3_round(v):
    """float32 -> the nearest E4M3FN value, saturating at ±448 (ml_dtypes
    rounds to nearest even; the clip first makes it saturate)."""
    return np.clip(v, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


class Grid:
    """The fixed grid of one quantized weight: per element, a float32 scale
    (and zero point), and the rounding of a float32 weight onto it."""

    def __init__(self, kind, q, out, bits=4):
        self.kind = kind
        if kind == "nvfp4":  # compressed-tensors: block scale / global scale
            g = np.float32(q["weight_global_scale"].reshape(-1)[0])
            blocks = e4m3fn_value(q["weight_scale"].view(np.uint8))
            self.block, self.scale, self.zero = 16, blocks / g, None
        elif kind in ("mxfp4", "mxfp8"):  # E8M0: 2^(byte - 127)
            byte = q["weight_scale"].view(np.uint8).astype(np.int64)
            self.block, self.scale, self.zero = 32, np.ldexp(np.float32(1.0), byte - 127).astype(np.float32), None
        else:  # int: scales as stored (float32 for a float32 weight), zero points packed along out
            s = q["weight_scale"]
            assert s.dtype == np.float32, s.dtype  # the weight's dtype (compressed-tensors)
            self.scale = s.reshape(out, -1)
            self.block = IN // self.scale.shape[1]
            self.qmin, self.qmax = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1
            self.zero = None
            if "weight_zero_point" in q:
                zp = q["weight_zero_point"]
                assert zp.dtype == np.int32 and zp.shape == ((out * bits + 31) // 32, self.scale.shape[1])
                words = zp.view(np.uint32).astype(np.int64)
                r = np.arange(out)
                bits_of_row = (words[(r * bits) // 32, :] >> ((r * bits) % 32)[:, None]) & ((1 << bits) - 1)
                self.zero = (bits_of_row - (1 << (bits - 1))).astype(np.float32)
        self.scale = self.scale.reshape(out, -1).astype(np.float32)

    def nearest(self, col, v):
        """The grid value nearest to float32 column `v` (all rows) of input `col`."""
        s = self.scale[:, col // self.block]
        if self.kind in ("nvfp4", "mxfp4"):
            return e2m1_round(v / s + np.float32(0)) * s
        if self.kind == "mxfp8":
            return e4m3_round(v / s) * s
        zp = np.float32(0) if self.zero is None else self.zero[:, col // self.block]
        q = np.clip(np.rint(v / s + zp), np.float32(self.qmin), np.float32(self.qmax))
        return ((q - zp) * s).astype(np.float32)

    def round_all(self, w):
        return np.stack([self.nearest(c, w[:, c]) for c in range(w.shape[1])], axis=1)


# ---------------------------------------------------------------------------
# GPTQ, from its description


def gptq_reference(w, h, grid, damp=DAMP, block=BLOCK):
    out, n = w.shape
    diag = np.diag(h).copy()
    dead = diag <= 0
    mean_diag = 0.0
    for d in np.where(dead, 1.0, diag):  # in index order, like the C++ sum
        mean_diag += d
    mean_diag /= n
    perm = np.argsort(-diag, kind="stable")  # decreasing diagonal, ties by index

    hp = h[np.ix_(perm, perm)].copy()
    i = np.arange(n)
    hp[i, i] = np.where(dead[perm], 1.0, hp[i, i]) + damp * mean_diag
    lower = np.linalg.cholesky(hp)
    lower_inv = np.linalg.inv(lower)
    hinv = lower_inv.T @ lower_inv
    u = np.linalg.cholesky(hinv).T  # upper, hinv = uᵀ u
    # (C++ raises the dampening tenfold when H stays indefinite; these layers do not need it)

    wp = w[:, perm].astype(np.float64)
    wp[:, dead[perm]] = 0.0
    q = np.zeros((out, n), dtype=np.float32)
    for i1 in range(0, n, block):
        i2 = min(i1 + block, n)
        err = np.zeros((out, i2 - i1))
        for c in range(i1, i2):
            qc = grid.nearest(perm[c], wp[:, c].astype(np.float32))
            q[:, perm[c]] = qc
            e = (wp[:, c] - qc.astype(np.float64)) / u[c, c]
            err[:, c - i1] = e
            wp[:, c + 1:i2] -= e[:, None] * u[c, c + 1:i2][None, :]
        wp[:, i2:] -= err @ u[i1:i2, i2:]
    return q


def output_error(w, q, h):
    """trace((W − Q) H (W − Q)ᵀ): the squared error of the layer's outputs."""
    d = (w.astype(np.float64) - q.astype(np.float64))
    return float(np.einsum("ij,jk,ik->", d, h, d))


def code_key(q):
    return "weight_packed" if "weight_packed" in q else "weight"


# ---------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def layers():
    return {name: layer(name) for name in LAYERS}


def test_e4m3_decoder():
    """The scale decoder above agrees with ml_dtypes on every finite byte."""
    b = np.arange(256, dtype=np.uint8)
    finite = (b & 0x7F) != 0x7F
    ref = b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(e4m3fn_value(b)[finite], ref[finite])


@pytest.mark.parametrize("layer_name", list(LAYERS))
@pytest.mark.parametrize("scheme_id", list(SCHEMES))
def test_gptq_matches_numpy_reference(layers, scheme_id, layer_name):
    scheme, options = SCHEMES[scheme_id]
    w, h = layers[layer_name]
    out = w.shape[0]
    # GPTQ's scales: the `weighted` search with the Hessian's diagonal as channel weights.
    mse = selq.quantize_tensor(w, scheme, rounding="weighted", channel_weights=np.diag(h).astype(np.float32), **options)
    gq = selq.quantize_tensor(w, scheme, rounding="gptq", hessian=h, **options)

    # Same format; the scales (and zero points) are the search's, byte for byte.
    assert list(gq) == list(mse)
    ck = code_key(mse)
    for k in mse:
        assert gq[k].dtype == mse[k].dtype and gq[k].shape == mse[k].shape, k
        if k != ck:
            assert gq[k].tobytes() == mse[k].tobytes(), f"{k} differs from the weighted search's"

    kind = scheme if scheme != "int4" else "int"
    grid = Grid(kind, mse, out)
    # The grid decoded here is the one selq stores: the search's values sit on it.
    dq_mse = selq.dequantize(mse)
    assert np.array_equal(grid.round_all(dq_mse), dq_mse)

    dq = selq.dequantize(gq)
    ref = gptq_reference(w, h, grid)
    bad = np.argwhere(dq != ref)
    if len(bad):
        r, c = bad[0]
        pytest.fail(f"{len(bad)} of {dq.size} values differ from the NumPy GPTQ, in {len(np.unique(bad[:, 0]))} rows; "
                    f"first [{r}, {c}]: selq {dq[r, c]!r}, numpy {ref[r, c]!r} (weight {w[r, c]!r})")

    dead = LAYERS[layer_name][2]
    assert not dq[:, list(dead)].any()  # dead inputs' weights are zeroed

    # GPTQ is for the layer's outputs: less output error than the search's rounding alone.
    e_gptq, e_mse = output_error(w, dq, h), output_error(w, dq_mse, h)
    assert e_gptq < e_mse, (e_gptq, e_mse)


def test_gptq_needs_hessian():
    w, h = layer("plain48")
    with pytest.raises(selq.BadInput, match="hessian"):
        selq.quantize_tensor(w, "nvfp4", rounding="gptq")
    with pytest.raises(selq.BadInput, match="hessian"):
        selq.quantize_tensor(w, "nvfp4", rounding="mse", hessian=h)
    with pytest.raises(selq.BadInput, match="hessian"):
        selq.quantize_tensor(w, "nvfp4", rounding="gptq", hessian=h[:128, :128])
