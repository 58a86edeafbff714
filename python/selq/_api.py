"""Checkpoint level: the CLI's commands as functions, with Python values in and out."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

from . import _selq

__all__ = ["Recipe", "RecipeLike", "recipes", "load_recipe", "inspect", "Plan", "plan", "Progress",
           "QuantizeResult", "quantize", "VerifyResult", "verify", "EvalReport", "eval", "Sensitivity",
           "sensitivity", "Calibration", "calibrate"]

Recipe = _selq.Recipe
PathLike = Union[str, "os.PathLike[str]"]
RecipeLike = Union[str, "os.PathLike[str]", Mapping[str, Any], "_selq.Recipe"]
_MIB = 1 << 20


def _renamed(func: str, old: Dict[str, Any], names: Mapping[str, str]) -> Dict[str, Any]:
    """Old keyword spellings, kept for one release (docs/ARCHITECTURE.md,
    "Vocabulary"): each warns and is returned under its new name."""
    out = {}
    for k, v in old.items():
        if k not in names:
            raise TypeError(f"{func}() got an unexpected keyword argument '{k}'")
        warnings.warn(f"selq.{func}: {k}= is deprecated; use {names[k]}=", DeprecationWarning, stacklevel=3)
        out[names[k]] = v
    return out


def _read_text(func: str, name: str, value: Optional[PathLike]) -> Optional[tuple]:
    """(content, source) of a text given as a path, as the CLI takes it; a str
    that names no file is the text itself (deprecated: the older API took
    content, so for one release it still does, with a warning)."""
    if value is None:
        return None
    if isinstance(value, str) and not os.path.exists(value):
        warnings.warn(f"selq.{func}: {name}= takes a path; {value[:40]!r} names no file, so it is read as the text "
                      "itself (deprecated)", DeprecationWarning, stacklevel=3)
        return value, "<text>"
    path = os.fspath(value)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as e:
        raise _bad(f"{path}: cannot read the {name.replace('_', ' ')}: {e.strerror}") from None


def recipes() -> Dict[str, str]:
    """The shipped recipes, usable by name anywhere a recipe is taken: name -> description."""
    return {name: desc for name, _, desc in _selq.shipped_recipes()}


def load_recipe(recipe: RecipeLike) -> "_selq.Recipe":
    """A recipe from a shipped name (``"llama-fp8"``), a file path, YAML text,
    or a dict with a recipe's keys (docs/RECIPES.md). Errors name the file (or
    ``<string>``/``<dict>``), line and column."""
    if isinstance(recipe, _selq.Recipe):
        return recipe
    if isinstance(recipe, Mapping):
        # JSON is YAML: the dict goes through the same parser as a file.
        return _selq.parse_recipe(json.dumps(recipe, indent=1), "<dict>")
    if isinstance(recipe, os.PathLike):
        return _selq.load_recipe(os.fspath(recipe))
    if isinstance(recipe, str):
        if "\n" in recipe or (":" in recipe and not os.path.exists(recipe)):
            return _selq.parse_recipe(recipe, "<string>")
        return _selq.load_recipe(recipe)
    raise TypeError(f"a recipe is a name, a path, YAML text or a dict, not {type(recipe).__name__}")


def inspect(path: PathLike, *, tensors: bool = False) -> Dict[str, Any]:
    """What a checkpoint holds (``selq inspect --json``): tensors by dtype, the
    per-layer formats, the quantization_config; every tensor with ``tensors=True``.
    ``path`` is a .safetensors file, a directory, an index.json or an http(s) URL."""
    text, _ = _selq.inspect(os.fspath(path), tensors)
    return json.loads(text)


class Plan:
    """What ``quantize`` will do, tensor by tensor (``selq plan``): headers
    only, nothing written. ``str(plan)`` is the CLI's summary."""

    def __init__(self, handle: "_selq.PlanHandle", source: str, mix: Optional[Dict[str, Any]] = None):
        self._handle = handle
        self._json: Optional[Dict[str, Any]] = None
        self.source = source
        #: For ``plan(target_bpw=...)``: the chosen mix (``selq plan --sensitivity --json``).
        self.mix = mix

    def to_json(self) -> str:
        """The plan as JSON text, as ``selq plan --json`` prints it."""
        return json.dumps(self.as_dict(), indent=2)

    def as_dict(self) -> Dict[str, Any]:
        if self._json is None:
            self._json = json.loads(self._handle.to_json())
        return self._json

    @property
    def tensors(self) -> List[Dict[str, Any]]:
        """One entry per source tensor: action, scheme, outputs, shard."""
        return self.as_dict()["tensors"]

    @property
    def sizes(self) -> Dict[str, float]:
        """source_bytes, output_bytes and bits_per_weight (over the linear weights)."""
        h = self._handle
        return {"source_bytes": h.source_bytes, "output_bytes": h.output_bytes,
                "bits_per_weight": h.bits_per_weight}

    @property
    def bits_per_weight(self) -> float:
        return self._handle.bits_per_weight

    @property
    def warnings(self) -> List[str]:
        return list(self._handle.warnings)

    @property
    def dialect(self) -> str:
        return self._handle.dialect

    @property
    def recipe(self) -> "_selq.Recipe":
        return self._handle.recipe

    def __str__(self) -> str:
        return self._handle.format()

    def __repr__(self) -> str:
        s = self.sizes
        return (f"<selq.Plan {self.source!r} recipe={self.recipe.name!r} dialect={self.dialect} "
                f"{len(self.tensors)} tensors, {s['source_bytes']} -> {s['output_bytes']} bytes, "
                f"{s['bits_per_weight']:.3f} bpw>")


class Sensitivity:
    """A sensitivity table (``selq sensitivity``): what each decision unit
    loses under each candidate format, for ``plan(target_bpw=...)``."""

    def __init__(self, text: str, path: Optional[str]):
        self._text = text
        self.path = path
        self.table: Dict[str, Any] = json.loads(text)

    def to_json(self) -> str:
        return self._text

    def save(self, path: PathLike) -> str:
        """Writes the table (the bytes `selq sensitivity -o` writes) atomically; returns the path."""
        path = os.fspath(path)
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".selq-sens-")
        with os.fdopen(fd, "w") as f:
            f.write(self._text)
        os.replace(tmp, path)
        self.path = path
        return path

    def __repr__(self) -> str:
        return (f"<selq.Sensitivity {len(self.table.get('units', []))} units x "
                f"{len(self.table.get('candidates', []))} candidates, tier {self.table.get('tier')}>")


def plan(source: PathLike, recipe: Optional[RecipeLike] = None, *, dialect: Optional[str] = None,
         max_shard_bytes: int = 0, calibration: Optional[PathLike] = None,
         sensitivity: Union[Sensitivity, PathLike, None] = None, target_bpw: Optional[float] = None,
         hardware: str = "any", objective: str = "kl", tier: Optional[str] = None,
         candidates: Sequence[str] = (), arch: str = "", kv_cache: str = "bf16",
         prefill_query_quant: bool = False, refine: int = 0, calibration_text: Optional[PathLike] = None,
         calibration_tokens: int = 512, rounding: Optional[str] = None, **deprecated: Any) -> Plan:
    """Plan ``source`` with ``recipe`` (a name, path, YAML text or dict), or,
    with ``sensitivity`` and ``target_bpw``, choose each unit's format under
    that budget of stored bits per linear weight and plan the chosen recipe
    (``selq plan --sensitivity S --target-bpw B``; the mix is ``Plan.mix``, its
    recipe ``Plan.recipe.text``). ``dialect`` overrides the recipe's.
    ``refine=N`` then improves the mix by at most N end-to-end measurements on
    ``calibration_tokens`` tokens of the file ``calibration_text`` (default
    the calibration mix of prose, code and man pages), as ``--refine``; ``Plan.mix["refine"]`` says what it did.
    ``rounding="mse"`` is ``--rounding mse``: searched scales for every rule
    whose options name no rounding (docs/RECIPES.md, "Rounding")."""
    old = _renamed("plan", deprecated, {"refine_text": "calibration_text", "refine_tokens": "calibration_tokens"})
    calibration_text = old.get("calibration_text", calibration_text)
    calibration_tokens = old.get("calibration_tokens", calibration_tokens)
    source = os.fspath(source)
    cal = os.fspath(calibration) if calibration is not None else None
    mix = None
    if sensitivity is not None or target_bpw is not None:
        if recipe is not None:
            raise _bad("give recipe or sensitivity, not both")
        if sensitivity is None or target_bpw is None:
            raise _bad("planning to a budget needs sensitivity= and target_bpw=")
        if objective not in ("kl", "acceptance"):
            raise _bad(f"unknown objective '{objective}' (kl, acceptance)")
        if kv_cache not in ("bf16", "fp8"):
            raise _bad(f"unknown kv_cache '{kv_cache}' (bf16, fp8)")
        sens_path = _sensitivity_path(sensitivity)
        text, text_source = (_read_text("plan", "calibration_text", calibration_text) if refine > 0 else None) \
            or (None, "")
        mix_json, recipe_yaml, _ = _selq.plan_target(
            source, sens_path, float(target_bpw), 0, tier, objective == "acceptance", hardware, list(candidates),
            dialect or "compressed-tensors", "planned-mix", arch, kv_cache == "fp8", prefill_query_quant,
            int(refine), text, text_source, int(calibration_tokens))
        mix = json.loads(mix_json)
        recipe = _selq.parse_recipe(recipe_yaml, "<planned-mix>")
    if recipe is None:
        raise _bad("plan needs recipe=, or sensitivity= with target_bpw=")
    handle = _selq.make_plan(source, _with_rounding(load_recipe(recipe), rounding), dialect, int(max_shard_bytes),
                             cal)
    return Plan(handle, source, mix)


def _with_rounding(recipe: "_selq.Recipe", rounding: Optional[str]) -> "_selq.Recipe":
    # The CLI's --rounding: the recipe with a top-level `rounding:` (nearest, the default, changes nothing).
    return recipe if rounding is None else _selq.with_rounding(recipe, str(rounding))


_plan = plan  # `quantize` has a parameter named plan


def _sensitivity_path(s: Union[Sensitivity, PathLike]) -> str:
    if isinstance(s, Sensitivity):
        if s.path is None:
            fd, tmp = tempfile.mkstemp(prefix="selq-sensitivity-", suffix=".json")
            os.close(fd)
            s.save(tmp)
        return s.path  # type: ignore[return-value]
    return os.fspath(s)


def _bad(message: str) -> Exception:
    from ._errors import BadInput

    return BadInput(message)


class Progress(NamedTuple):
    """A progress report of ``quantize``: source bytes and tensors done so far."""

    bytes_done: int
    bytes_total: int
    tensors_done: int
    tensors_total: int


@dataclass
class QuantizeResult:
    destination: str
    seconds: float
    bytes_read: int
    bytes_written: int
    bits_per_weight: float
    warnings: List[str]
    manifest: Dict[str, Any] = field(repr=False)  # selq-manifest.json (per-tensor hashes and error metrics)
    already_done: bool = False  # in place: this recipe was already applied


def _progress_fn(progress: Optional[Callable[[Progress], Any]]):
    if progress is None:
        return None
    return lambda bd, bt, td, tt: progress(Progress(bd, bt, td, tt))


def quantize(source: PathLike, destination: Optional[PathLike] = None, recipe: Optional[RecipeLike] = None, *,
             plan: Optional[Plan] = None, dialect: Optional[str] = None, in_place: bool = False,
             force: bool = False, threads: int = 0, allow_non_finite: bool = False,
             memory_budget: Optional[int] = None, max_shard_bytes: int = 0, calibration: Optional[PathLike] = None,
             progress: Optional[Callable[[Progress], Any]] = None, rounding: Optional[str] = None,
             calibration_text: Optional[PathLike] = None, calibration_tokens: int = 8192,
             calibration_context: int = 512, gptq_gate: bool = True, gptq_expert_prior: float = 0.25,
             rotation: Optional[str] = None, rotation_seed: int = 0,
             rotation_block: Optional[int] = None, **deprecated: Any) -> QuantizeResult:
    """Quantize ``source`` into ``destination`` (``selq quantize``): the same
    bytes as the CLI for the same recipe, with the same selq-report.html
    inside. ``recipe`` is a name, path, YAML text or dict; or give a ``plan``
    from :func:`plan`; ``force=True`` replaces an existing ``destination``. The work runs on all
    cores (``threads`` to limit) with the GIL released; ``progress`` is called
    on the calling thread with a :class:`Progress` after each tensor.

    Output is staged in ``DESTINATION.selq-partial`` and renamed when complete:
    Ctrl-C (KeyboardInterrupt) or an exception raised by ``progress`` stops the
    run, raises that exception, and leaves nothing under ``destination``
    (re-running the same call resumes from the committed shards).
    ``in_place=True`` rewrites ``source`` shard by shard (journaled; re-run to
    resume). ``rounding="mse"`` is ``--rounding mse`` (searched block scales,
    same formats; docs/RECIPES.md, "Rounding"); ``"weighted"`` also weighs
    each input channel's error by its mean squared activation from
    ``calibration`` (``selq calibrate -o``); ``"gptq"`` runs GPTQ layer by layer
    on ``calibration_tokens`` tokens of ``calibration_text`` (a UTF-8 file;
    default: the Austen calibration text) in windows of ``calibration_context``
    onto ``"mse"``'s scales, file to file (``--rounding gptq --calibration-text``);
    ``gptq_gate=False`` is ``--no-gptq-gate`` (GPTQ everywhere, fitted on every
    sequence) and ``gptq_expert_prior`` is ``--gptq-expert-prior`` (a rarely routed
    expert's Hessian completed with the layer's mean; 0: off; docs/RECIPES.md,
    "GPTQ on a large MoE").
    ``rotation="r1"`` (or ``"r1r2"``; default the recipe's ``rotation:``) folds a
    rotation into the weights first (``--rotation``; ``rotation_block=32`` for
    MXFP4's groups, docs/RECIPES.md, "Rotation"), in ``DESTINATION.selq-rotated``,
    removed once the output is complete."""
    old = _renamed("quantize", deprecated, {"overwrite": "force"})
    if "force" in old:
        if force:
            raise _bad("give force or overwrite, not both")
        force = old["force"]
    # The writer's bound (default 512 MiB); given explicitly it also bounds GPTQ's Hessians (else half of RAM).
    writer_budget = memory_budget if memory_budget is not None else 512 * _MIB
    source = os.fspath(source)
    cal = os.fspath(calibration) if calibration is not None else None
    cb = _progress_fn(progress)
    if in_place:
        if destination is not None or plan is not None:
            raise _bad("in_place takes no destination or plan")
        if recipe is None:
            raise _bad("quantize needs recipe=")
        res, plan_json, bpw = _selq.quantize_in_place(source, _with_rounding(load_recipe(recipe), rounding), dialect,
                                                      cal, threads,
                                                      allow_non_finite, writer_budget, cb)
        warnings = json.loads(plan_json).get("warnings", [])
        return _result(source, res, bpw, warnings)
    if destination is None:
        raise _bad("quantize needs a destination (or in_place=True)")
    rotated = None
    if rotation is not None or (recipe is not None and plan is None and load_recipe(recipe).rotation not in ("", "none")):
        if plan is not None:
            raise _bad("give rotation with recipe=, not plan= (plan the rotated checkpoint from selq.rotate)")
        if cal is not None and rotation not in (None, "none"):
            raise _bad("calibration measured the unrotated model: selq.rotate first, calibrate the rotation, "
                       "then quantize that with calibration=")
        r = load_recipe(recipe)
        if rotation is not None:  # as the CLI's --rotation: the recipe's own line, in the manifest's text
            r = _selq.with_rotation(r, str(rotation))
        if rotation_block is not None:
            r = _selq.with_rotation_block(r, int(rotation_block))
        recipe, kind, block = r, (r.rotation or "none"), r.rotation_block
        if kind != "none":
            work = os.fspath(destination) + ".selq-rotated"
            got = _selq.rotated_source(source, work, kind, int(rotation_seed), int(block), None)
            rotated = got if got != source else None
            source = got
    if plan is None:
        if recipe is None:
            raise _bad("quantize needs recipe= or plan=")
        plan = _plan(source, recipe, dialect=dialect, max_shard_bytes=max_shard_bytes, calibration=cal,
                     rounding=rounding)
    elif recipe is not None or dialect is not None or rounding is not None:
        raise _bad("give recipe (and rounding) or plan, not both")
    if gptq_expert_prior < 0:
        raise _bad(f"gptq_expert_prior={gptq_expert_prior} must be 0 (off) or more")
    dst = os.fspath(destination)
    text = os.fspath(calibration_text) if calibration_text is not None else None
    res = _selq.quantize(plan._handle, dst, force, threads, allow_non_finite, writer_budget, cb, text,
                         calibration_tokens, calibration_context, memory_budget or 0, gptq_gate,
                         float(gptq_expert_prior))
    if rotated is not None:
        shutil.rmtree(rotated, ignore_errors=True)  # the rotation made for this run
    return _result(dst, res, plan.bits_per_weight, plan.warnings)


def _result(dst: str, res, bpw: float, plan_warnings: List[str]) -> QuantizeResult:
    manifest, seconds, read, written, done, run_warnings = res
    return QuantizeResult(dst, seconds, read, written, bpw, list(plan_warnings) + list(run_warnings),
                          json.loads(manifest) if manifest else {}, done)


@dataclass
class VerifyResult:
    findings: List[str]  # "file: tensor: problem", one per finding
    report: Dict[str, Any] = field(repr=False)  # everything (``selq verify --json``)

    @property
    def ok(self) -> bool:
        return not self.findings

    def __bool__(self) -> bool:
        return self.ok


def verify(path: PathLike, against: Optional[PathLike] = None) -> VerifyResult:
    """Check a quantized checkpoint as its readers see it (``selq verify``):
    config vs tensors, manifest hashes, every linear resolved by each engine
    of its dialect, scales; with ``against``, the dequantized error against
    the source. Findings are returned (``result.ok`` is True when clean);
    unreadable input raises."""
    report, findings = _selq.verify(os.fspath(path), os.fspath(against) if against is not None else None)
    return VerifyResult(list(findings), json.loads(report))


@dataclass
class EvalReport:
    """``selq eval``: perplexity, KL, top-1 agreement and draft acceptance of
    each quantized model against the base. ``str(report)`` is the CLI's table."""

    table: str = field(repr=False)
    report: Dict[str, Any] = field(repr=False)

    @property
    def base(self) -> Dict[str, Any]:
        return self.report["base"]

    @property
    def quantized(self) -> List[Dict[str, Any]]:
        return self.report["quantized"]

    def rows(self) -> List[Dict[str, Any]]:
        """One flat dict per model (base first): path, perplexity, kl_mean, top1_agreement, ..."""
        return [{k: v for k, v in m.items() if not isinstance(v, (dict, list))} for m in [self.base, *self.quantized]]

    def __str__(self) -> str:
        return self.table


def eval(base: PathLike, quantized: Union[PathLike, Sequence[PathLike]], *, text: Optional[PathLike] = None,
         prompts: Optional[Sequence[str]] = None, max_tokens: int = 2048,
         context: int = 256, draft_k: int = 7, max_prompts: int = 32, gen_tokens: int = 32,
         chat_template: bool = True, base_cache: Union[PathLike, bool] = True,
         progress: Optional[Callable[[str, int, int], Any]] = None, **deprecated: Any) -> EvalReport:
    """Measure quantized checkpoints against their base with selq's reference
    runtime (``selq eval``). ``text`` is the evaluation text's file, default
    Jane Austen's Emma; ``prompts`` the questions for draft
    acceptance (default: openings of Persuasion). ``base_cache``: the directory
    caching the base's log-probabilities between calls (True: selq's default,
    ``~/.cache/selq/base-logprobs``; False: no cache). ``progress(stage, done, total)``."""
    old = _renamed("eval", deprecated, {"text_file": "text"})
    if "text" in old:
        if text is not None:
            raise _bad("give text or text_file, not both")
        text = old["text"]
    if isinstance(quantized, (str, os.PathLike)):
        quantized = [quantized]
    content, source = _read_text("eval", "text", text) or (None, "")
    prompt_list = list(prompts) if prompts is not None else None
    cache = None if base_cache is True else ("" if base_cache is False else os.fspath(base_cache))
    report, table = _selq.evaluate(os.fspath(base), [os.fspath(q) for q in quantized], content, source, prompt_list,
                                   "<prompts>", context, max_tokens, draft_k, max_prompts, gen_tokens,
                                   chat_template, cache, progress)
    return EvalReport(table, json.loads(report))


def sensitivity(source: PathLike, out: Optional[PathLike] = None, *, candidates: Sequence[str] = (),
                dialect: str = "compressed-tensors", hardware: str = "any", tier: str = "data-free",
                calibration_text: Optional[PathLike] = None, calibration_tokens: int = 512,
                calibration_context: int = 128, rows: int = 256, probes: Sequence[str] = (), probe_every: int = 1,
                progress: Optional[Callable[[str, int, int], Any]] = None, **deprecated: Any) -> Sensitivity:
    """Score every decision unit under every candidate format (``selq
    sensitivity``); tiers data-free, activation-aware, measured (on
    ``calibration_tokens`` tokens of the file ``calibration_text``, default
    the calibration mix of prose, code and man pages). Saved to ``out`` when given; pass the
    result to ``plan(sensitivity=..., target_bpw=...)``."""
    old = _renamed("sensitivity", deprecated,
                   {"text": "calibration_text", "tokens": "calibration_tokens", "context": "calibration_context"})
    calibration_text = old.get("calibration_text", calibration_text)
    calibration_tokens = old.get("calibration_tokens", calibration_tokens)
    calibration_context = old.get("calibration_context", calibration_context)
    text, text_source = _read_text("sensitivity", "calibration_text", calibration_text) or (None, "")
    t = _selq.sensitivity(os.fspath(source), list(candidates), dialect, hardware, tier, text, text_source,
                          calibration_tokens, calibration_context, rows, list(probes), probe_every, progress)
    s = Sensitivity(t, None)
    if out is not None:
        s.save(out)
    return s


@dataclass
class Calibration:
    """What ``selq calibrate`` measured: each linear's input amax
    (``activation_amax``) and, when saved, each input channel's mean squared
    activation in the moments file beside ``path``. Pass ``path`` as
    ``calibration=`` to :func:`plan` / :func:`quantize`."""

    path: Optional[str]
    data: Dict[str, Any] = field(repr=False)  # what `selq calibrate` prints (the saved file also names its moments)

    @property
    def activation_amax(self) -> Dict[str, float]:
        return self.data["activation_amax"]

    def __fspath__(self) -> str:
        if self.path is None:
            raise _bad("this calibration was not saved: give calibrate() an out= path")
        return self.path


def rotate(source: PathLike, dst: PathLike, rotation: str = "r1", *, seed: int = 0, f32_linears: bool = False,
           force: bool = False, progress: Optional[Callable[[str, int, int], Any]] = None) -> dict:
    """Fold an orthogonal rotation into the float checkpoint ``source`` and
    write it to ``dst`` (``selq rotate``): ``"r1"`` rotates the residual
    stream (each RMSNorm's scale folded into the linears reading it),
    ``"r1r2"`` also each attention head's values. The output is the same
    architecture with the same logits (within float rounding) that every
    engine loads; plan and quantize it as any checkpoint, and its manifest
    records the rotation. ``f32_linears`` writes the layers' rotated linears
    in F32 (BF16's rounding of them is the rotation's only error). Returns
    the rotation record (selq-rotation.json)."""
    return json.loads(_selq.rotate(os.fspath(source), os.fspath(dst), str(rotation), int(seed), bool(f32_linears),
                                   bool(force), progress))


def calibrate(source: PathLike, out: Optional[PathLike] = None, *, calibration_text: Optional[PathLike] = None,
              calibration_tokens: int = 2048, calibration_context: int = 256,
              progress: Optional[Callable[[str, int, int], Any]] = None) -> Calibration:
    """Run ``calibration_tokens`` tokens of the file ``calibration_text``
    (default the calibration mix of prose, code and man pages, which eval never uses) through
    ``source`` with the reference runtime and record each linear's input
    activation amax and second moments (``selq calibrate``). With ``out`` the
    JSON is written there and the moments beside it (OUT.moments.safetensors),
    both atomically: what static activation scales (``calibration=``) and
    ``rounding="weighted"`` read."""
    text, text_source = _read_text("calibrate", "calibration_text", calibration_text) or (None, "")
    dst = os.fspath(out) if out is not None else None
    data = _selq.calibrate(os.fspath(source), text, text_source, int(calibration_tokens), int(calibration_context),
                           dst, progress)
    return Calibration(dst, json.loads(data))
