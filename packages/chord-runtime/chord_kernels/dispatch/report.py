"""CHORD_PRINT_CONFIGS=1: each distinct choice of the dispatch, printed once."""

from __future__ import annotations

import sys

from .. import env
from ..jit.kernel import KernelSpec

_reported: set = set()


def report_choice(problem, spec: KernelSpec, why: str = "") -> None:
    """CHORD_PRINT_CONFIGS=1: the chosen kernel per problem, once, to stderr (with ``why``, the
    alternatives the dispatch weighed, where it weighs any)."""
    if env.get(env.PRINT_CONFIGS).lower() in ("", "0", "false", "no", "off"):
        return
    if (problem, spec) not in _reported:
        _reported.add((problem, spec))
        print(f"[chord] {problem} -> {spec.describe()}" + (f" ({why})" if why else ""), file=sys.stderr)
