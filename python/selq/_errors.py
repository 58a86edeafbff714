"""The exceptions selq raises: one class per kind of selq::Error (src/core/error.h)."""
from __future__ import annotations

from typing import Optional

__all__ = ["Error", "BadInput", "Unsupported", "Io", "Internal"]


class Error(Exception):
    """A selq failure. ``str(e)`` is the CLI's one-line message; ``message``
    is the bare problem, and ``file``, ``tensor`` and ``offset`` say where it
    happened (``None`` when not applicable)."""

    def __init__(self, message: str, *, file: Optional[str] = None, tensor: Optional[str] = None,
                 offset: Optional[int] = None, text: Optional[str] = None):
        super().__init__(text or message)
        self.message = message
        self.file = file
        self.tensor = tensor
        self.offset = offset


class BadInput(Error, ValueError):
    """Malformed file, bad recipe, missing tensor, bad argument (CLI exit code 2)."""


class Unsupported(BadInput):
    """A scheme, dialect or shape combination that cannot be expressed (exit code 2)."""


class Io(Error, OSError):
    """Open, read, write, fsync or rename failed, disk full included (exit code 2)."""


class Internal(Error, RuntimeError):
    """A bug in selq (CLI exit code 1)."""


_KINDS = {"BadInput": BadInput, "Unsupported": Unsupported, "Io": Io, "Internal": Internal}

# Python's words for an error's hint (selq::ErrorHint; the CLI's are in src/cli/error_hint.cpp).
_HINTS = {
    "ReplaceOutput": " (force=True replaces it)",
    "CalibrationFile": ": run selq.calibrate(source, 'calib.json') and pass calibration='calib.json'",
    "TextFile": "; or give a text file: text= (eval), calibration_text= (the others)",
    "PromptsFile": "; or give the prompts: prompts=[...]",
    "GgufFile": "",
    "SourceCheckpoint": "",
    "AllowNonFinite": " (allow_non_finite=True quantizes it anyway)",
    "Refine": " (refine=N)",
    "MemoryBudget": " (memory_budget=)",
}


def _from_core(kind: str, message: str, file: str, tensor: str, offset: Optional[int], text: str,
               hint: str = "") -> Error:
    """Called by the native module to build the exception for a selq::Error."""
    text = text + _HINTS.get(hint, "")
    return _KINDS.get(kind, Internal)(message, file=file or None, tensor=tensor or None, offset=offset, text=text)
