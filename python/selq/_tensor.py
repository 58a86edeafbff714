"""Tensor level: one weight through selq's scheme kernels, bytes as `selq quantize` writes them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import ml_dtypes
import numpy as np

from . import _selq

__all__ = ["QuantizedTensor", "quantize_tensor", "dequantize", "scheme_outputs"]

# safetensors dtype names (src/core/dtype.h) <-> numpy dtypes.
_NUMPY = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16), "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32), "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64),
    "F16": np.dtype(np.float16), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
}
_FLOAT_SOURCES = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
                  np.dtype(ml_dtypes.bfloat16): "BF16"}

ArrayLike = Any  # numpy.ndarray or torch.Tensor (CPU)


def _scheme_yaml(scheme: str, options: Mapping[str, Any]) -> str:
    """A one-line recipe whose default is the scheme: parsed by selq's recipe
    parser, so names and options are exactly a recipe's (docs/RECIPES.md)."""
    default: Dict[str, Any] = {"scheme": scheme}
    if options:
        default["options"] = dict(options)
    return json.dumps({"name": "tensor", "default": default})


def _source(array: ArrayLike) -> Tuple[np.ndarray, str]:
    """The array's bytes as a C-contiguous numpy view (no copy when it already
    is one) and their safetensors dtype."""
    if type(array).__module__.startswith("torch"):
        import torch

        t = array.detach()
        if t.device.type != "cpu":
            raise TypeError(f"quantize_tensor takes CPU tensors (got one on {t.device})")
        names = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64"}
        if t.dtype not in names:
            raise TypeError(f"cannot quantize a {t.dtype} tensor (float16, bfloat16, float32 or float64)")
        t = t.contiguous()
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        return raw.numpy(), names[t.dtype]  # shares the tensor's memory
    a = np.asarray(array)
    if a.dtype not in _FLOAT_SOURCES:
        raise TypeError(f"cannot quantize a {a.dtype} array (float16, ml_dtypes.bfloat16, float32 or float64)")
    dtype = _FLOAT_SOURCES[a.dtype]
    a = np.ascontiguousarray(a)
    return (a.view(np.uint16) if dtype == "BF16" else a), dtype


@dataclass
class QuantizedTensor(Mapping[str, np.ndarray]):
    """The stored tensors of one quantized weight, by their name suffix in the
    dialect (``weight``/``weight_packed``, ``weight_scale``, ``weight_global_scale``,
    ...), in the order the scheme stores them. A read-only mapping."""

    tensors: Dict[str, np.ndarray]
    scheme: str  # canonical scheme name after the dialect's adaptation ("nvfp4", "fp8-channel", ...)
    shape: Tuple[int, ...]  # the unquantized weight's shape
    dtype: str  # the unquantized weight's dtype (safetensors name)
    dialect: str
    metrics: Dict[str, float] = field(default_factory=dict)  # error of the dequantized weight
    recipe_scheme: str = ""  # the scheme as requested, with its options (to dequantize)
    options: Dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def quantize_tensor(array: ArrayLike, scheme: str, *, dialect: str = "compressed-tensors",
                    global_amax: Optional[float] = None, allow_non_finite: bool = False,
                    rounding: str = "nearest", channel_weights: Optional[ArrayLike] = None,
                    hessian: Optional[ArrayLike] = None, **options: Any) -> QuantizedTensor:
    """Quantize one weight (2-D ``[out, in]`` or 3-D ``[experts, out, in]``)
    with ``scheme`` and a recipe's scheme ``options`` (``group_size=128``,
    ``symmetric=False``, ``activations="fp8-per-token"``, ``block_size=[128, 128]``,
    ``scale_rule="even"``, ...), adapted to ``dialect`` as ``selq quantize``
    does for a model of the array's dtype: the returned arrays hold exactly
    the bytes it writes for that tensor.

    ``array`` is a numpy array (float32, float16, float64 or
    ``ml_dtypes.bfloat16``) or a CPU torch tensor, read in place. The GIL is
    released while the kernels run on all cores. ``global_amax`` replaces the
    tensor's own amax for NVFP4's global scale and FP8 per-tensor (fused
    q/k/v or gate/up groups share one). ``rounding="mse"`` searches each
    block's scale for the least squared error (same format, never a worse
    block than the default ``"nearest"``; docs/RECIPES.md, "Rounding").
    ``rounding="weighted"`` is the same search with each input channel's
    squared error weighted by ``channel_weights`` (one per input channel, or
    experts × in for a 3-D weight: the channel's mean squared activation,
    what ``selq calibrate -o`` writes beside its JSON).
    ``rounding="gptq"`` runs GPTQ with ``hessian`` (``[in, in]``, the sum of
    ``x xᵀ`` over the layer's calibration inputs) onto the scales ``"mse"``
    chooses: the same stored format (mxfp4, mxfp8, nvfp4, int schemes).

    >>> import numpy as np, ml_dtypes, selq
    >>> w = np.random.default_rng(0).standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    >>> q = selq.quantize_tensor(w, "nvfp4")
    >>> sorted(q)
    ['weight_global_scale', 'weight_packed', 'weight_scale']
    """
    data, dtype = _source(array)
    shape = list(np.shape(data))
    if rounding != "nearest":
        options = {**options, "rounding": rounding}  # a recipe option: `options: {rounding: mse}`
    yaml = _scheme_yaml(scheme, options)
    weights = None
    if channel_weights is not None:
        weights = [float(v) for v in np.asarray(channel_weights, dtype=np.float32).reshape(-1)]
    h = None if hessian is None else np.ascontiguousarray(hessian, dtype=np.float64)
    tensors, metrics, name = _selq.quantize_tensor(data, dtype, shape, yaml, dialect, global_amax, allow_non_finite,
                                                   weights, h)
    out = {suffix: raw.view(_NUMPY[dt]).reshape(shp) for suffix, dt, shp, raw in tensors}
    return QuantizedTensor(out, name, tuple(shape), dtype, dialect, metrics, scheme, dict(options))


def dequantize(stored: Union[QuantizedTensor, Mapping[str, np.ndarray], Sequence[np.ndarray]],
               scheme: Optional[str] = None, *, shape: Optional[Sequence[int]] = None, dtype: str = "BF16",
               dialect: str = "compressed-tensors", **options: Any) -> np.ndarray:
    """The float32 weights a quantized tensor stands for (as the engines and
    ``selq verify`` decode them). Give a :class:`QuantizedTensor`, or the
    stored arrays (a mapping by suffix or a sequence in storage order) with the
    ``scheme``, its ``options``, the weight's ``shape`` and source ``dtype``
    (which decides some scale dtypes) and the ``dialect``."""
    if isinstance(stored, QuantizedTensor):
        scheme, shape, dtype, dialect = stored.recipe_scheme, stored.shape, stored.dtype, stored.dialect
        options = {**stored.options, **options}
    if scheme is None or shape is None:
        raise TypeError("dequantize needs scheme= and shape= unless given a QuantizedTensor")
    shape = [int(s) for s in shape]
    yaml = _scheme_yaml(scheme, options)
    if isinstance(stored, Mapping):
        names = [n for n, _, _ in _selq.scheme_outputs(shape, dtype, yaml, dialect)]
        missing = [n for n in names if n not in stored]
        if missing:
            raise KeyError(f"stored tensors lack {', '.join(missing)} (scheme stores {', '.join(names)})")
        arrays: List[Any] = [stored[n] for n in names]
    else:
        arrays = list(stored)
    raw = [np.ascontiguousarray(np.asarray(a)).view(np.uint8).reshape(-1) for a in arrays]
    return _selq.dequantize(raw, shape, dtype, yaml, dialect)


def scheme_outputs(scheme: str, shape: Sequence[int], *, dtype: str = "BF16", dialect: str = "compressed-tensors",
                   **options: Any) -> List[Tuple[str, str, Tuple[int, ...]]]:
    """(suffix, dtype, shape) of each tensor the scheme stores for a weight of ``shape``."""
    return [(n, dt, tuple(s)) for n, dt, s in
            _selq.scheme_outputs([int(s) for s in shape], dtype, _scheme_yaml(scheme, options), dialect)]
