"""Where the CUDA sources and the cubin cache live."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # .../chord_kernels


def csrc_dir() -> Path:
    """The CUDA sources: $CHORD_CSRC_DIR, else the copy a wheel ships, else the repo's csrc/."""
    override = os.environ.get("CHORD_CSRC_DIR")
    candidates = [Path(override)] if override else []
    candidates += [_PACKAGE / "csrc", _PACKAGE.parents[2] / "csrc"]  # wheel; editable checkout
    for path in candidates:
        if (path / "common").is_dir():
            return path
    raise FileNotFoundError(
        "Chord's CUDA sources were not found (looked in: " + ", ".join(map(str, candidates))
        + "); reinstall chord-runtime or set CHORD_CSRC_DIR"
    )


def cache_dir() -> Path:
    """The cubin cache: $CHORD_CACHE_DIR, else $XDG_CACHE_HOME/chord/jit (~/.cache/chord/jit)."""
    override = os.environ.get("CHORD_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "chord" / "jit"
