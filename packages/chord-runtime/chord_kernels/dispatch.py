"""Problem -> kernel configuration, as small pure functions (CPU tests cover them).

A *problem* is what the caller's shapes say (N, K, experts, top_k, routing block size); a
*kernel config* is how Chord runs it (family, tiles, launch shape). ``CHORD_PRINT_CONFIGS=1``
prints each distinct choice once, to stderr.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from .jit.kernel import DEFAULT_ARCH, KernelSpec
from .layouts import BLOCK_K_BY_MODE


@dataclass(frozen=True)
class IndexedProblem:
    n: int
    k: int
    num_experts: int
    top_k: int
    block_m: int  # routing block size used by moe_align_block_size


@dataclass(frozen=True)
class IndexedLaunch:
    spec: KernelSpec
    rows_per_cta: int
    cols_per_cta: int

    def ctas_per_block(self, problem: IndexedProblem) -> int:
        return -(-problem.block_m // self.rows_per_cta)

    def grid(self, problem: IndexedProblem, num_blocks: int) -> tuple[int, int, int]:
        return (-(-problem.n // self.cols_per_cta), num_blocks * self.ctas_per_block(problem), 1)


def indexed_simple_spec(arch: str = DEFAULT_ARCH) -> KernelSpec:
    return KernelSpec(
        family="indexed_simple",
        header="indexed/w4a16_indexed_simple.cuh",
        body="chord::IndexedSimple",
        params_type="chord::IndexedParams",
        template_args=(("BLOCK_K", BLOCK_K_BY_MODE["indexed"]),),
        threads=128,
        arch=arch,
    )


def select_indexed(problem: IndexedProblem, arch: str = DEFAULT_ARCH) -> IndexedLaunch:
    """The foundation has one indexed kernel (simple, correct); #4 adds the fast profiles."""
    launch = IndexedLaunch(indexed_simple_spec(arch), rows_per_cta=16, cols_per_cta=64)
    report_choice(problem, launch.spec)
    return launch


_reported: set = set()


def report_choice(problem, spec: KernelSpec) -> None:
    if os.environ.get("CHORD_PRINT_CONFIGS", "").lower() in ("", "0", "false", "no", "off"):
        return
    if (problem, spec) not in _reported:
        _reported.add((problem, spec))
        print(f"[chord] {problem} -> {spec.describe()}", file=sys.stderr)
