"""Serving profiles: the kernels a deployment needs, so they can be compiled before serving.

Token counts are run-time arguments, so a profile is a short list of kernel configs, not one
per batch size. ``chord-runtime precompile --profile NAME`` compiles a profile in parallel.
Expert-parallel profiles also carry the grouped family (vLLM with EP runs grouped_contiguous).
"""

from __future__ import annotations

from .dispatch import (
    GROUPED_ROUTINGS,
    grouped_launch_variants,
    grouped_reachable_launches,
    grouped_tile_row_choices,
    indexed_profile_launches,
    indexed_reachable_launches,
)
from .jit.kernel import DEFAULT_ARCH, KernelSpec
from .layouts import BLOCK_K_BY_MODE

EP_SHAPES = [(4096, 7168), (7168, 2048)]  # gate_up, down (same N/K for EP8/16/32)
# name -> (description, [(N, K) of each projection], grouped family too)
PROFILES = {
    "h200_ep8": ("H200, expert parallel 8 (48 local experts): gate_up N=4096 K=7168, down N=7168 K=2048",
                 EP_SHAPES, True),
    "h200_ep16": ("H200, expert parallel 16 (24 local experts), same N/K as EP8", EP_SHAPES, True),
    "h200_ep32": ("H200, expert parallel 32 (12 local experts), same N/K as EP8", EP_SHAPES, True),
    "h200_tp8": ("H200, tensor parallel 8 (384 experts): gate_up N=512 K=7168, down N=7168 K=256",
                 [(512, 7168), (7168, 256)], False),
}
DEFAULT_PROFILES = ("h200_ep8", "h200_tp8")


def _grouped_specs(n: int, k: int, arch: str) -> list[KernelSpec]:
    specs = []
    for routing in GROUPED_ROUTINGS:
        block_k = BLOCK_K_BY_MODE["masked" if routing == "masked" else "contiguous"]
        for rows in grouped_tile_row_choices(routing):
            specs += [launch.spec for launch in grouped_launch_variants(routing, n, k, rows, block_k, arch)]
    return specs


def profile_specs(name: str, arch: str = DEFAULT_ARCH) -> list[KernelSpec]:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    _, shapes, grouped = PROFILES[name]
    specs: dict[str, KernelSpec] = {}
    for n, k in shapes:
        for launch in indexed_profile_launches(n, k, arch):
            specs.setdefault(launch.spec.symbol, launch.spec)
        for spec in _grouped_specs(n, k, arch) if grouped else []:
            specs.setdefault(spec.symbol, spec)
    return list(specs.values())


def all_default_specs(arch: str = DEFAULT_ARCH) -> list[KernelSpec]:
    """Every distinct kernel the dispatch tables can pick, for any shape (CI compiles these);
    a superset of every profile."""
    launches = indexed_reachable_launches(arch) + grouped_reachable_launches(arch)
    specs = {launch.spec.symbol: launch.spec for launch in launches}
    for name in PROFILES:
        for spec in profile_specs(name, arch):
            specs.setdefault(spec.symbol, spec)
    return list(specs.values())
