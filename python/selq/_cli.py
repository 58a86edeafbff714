"""The ``selq`` console command: runs the CLI binary installed in the package
(``selq/bin/selq``, built from the same sources as this module)."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def binary() -> Path:
    """Path of the packaged ``selq`` executable."""
    return Path(__file__).resolve().parent / "bin" / "selq"


def main() -> None:
    exe = binary()
    if not exe.is_file():
        sys.exit(f"selq: no command-line binary at {exe} (a build-tree package has none: run build/release/src/selq)")
    # exec, not a subprocess: signals, exit status and the terminal are the binary's own.
    os.execv(exe, ["selq", *sys.argv[1:]])
