"""selq: selective mixed-precision post-training quantization of LLM checkpoints.

The CLI's commands as functions (the same libraries, no second implementation)::

    import selq
    plan = selq.plan("SmolLM2-135M/", recipe="llama-fp8")         # dry run: what, where, how big
    selq.quantize("SmolLM2-135M/", "out/fp8", recipe={...})        # a name, path, YAML text or dict
    selq.verify("out/fp8", against="SmolLM2-135M/").ok
    print(selq.eval("SmolLM2-135M/", ["out/fp8"], max_tokens=512))

and one tensor at a time, bit-exact with what ``selq quantize`` writes::

    q = selq.quantize_tensor(weight_bf16, "nvfp4")   # {"weight_packed": ..., "weight_scale": ..., ...}
    w = selq.dequantize(q)

Errors are :class:`selq.Error` (``BadInput``, ``Unsupported``, ``Io``,
``Internal``) with ``file``, ``tensor`` and ``offset``. docs/PYTHON.md has a
worked example.
"""
import os as _os

# Shipped recipes inside an installed package (selq/share/selq/recipes, where
# the packaged CLI finds them too); a build tree finds the source tree's.
_recipes_dir = _os.path.join(_os.path.dirname(__file__), "share", "selq", "recipes")
if "SELQ_RECIPES_DIR" not in _os.environ and _os.path.isdir(_recipes_dir):
    _os.environ["SELQ_RECIPES_DIR"] = _recipes_dir

from . import _selq  # noqa: E402
from ._api import (  # noqa: E402
    Calibration, EvalReport, Plan, Progress, QuantizeResult, Recipe, RecipeLike, Sensitivity, VerifyResult,
    calibrate, eval, inspect, load_recipe, plan, quantize, recipes, rotate, sensitivity, verify)
from ._errors import BadInput, Error, Internal, Io, Unsupported  # noqa: E402
from ._serve import Server, serve  # noqa: E402
from ._tensor import QuantizedTensor, dequantize, quantize_tensor, scheme_outputs  # noqa: E402

__version__ = _selq.__version__

__all__ = [
    "Error", "BadInput", "Unsupported", "Io", "Internal",
    "Recipe", "RecipeLike", "recipes", "load_recipe",
    "Server", "serve",
    "inspect", "Plan", "plan", "Progress", "QuantizeResult", "quantize", "VerifyResult", "verify",
    "EvalReport", "eval", "Sensitivity", "sensitivity", "Calibration", "calibrate", "rotate",
    "QuantizedTensor", "quantize_tensor", "dequantize", "scheme_outputs",
]
