"""Serving profiles: the kernels a deployment needs, so they can be compiled before serving.

Token counts are run-time arguments, so a profile is a short list of kernel configs, not one
per batch size. ``chord-runtime precompile --profile NAME`` compiles a profile in parallel.
"""

from __future__ import annotations

from .dispatch import indexed_profile_launches, indexed_reachable_launches
from .jit.kernel import DEFAULT_ARCH, KernelSpec

# name -> (description, [(N, K) of each projection])
PROFILES = {
    "h200_ep8": ("H200, expert parallel 8 (48 local experts): gate_up N=4096 K=7168, down N=7168 K=2048",
                 [(4096, 7168), (7168, 2048)]),
    "h200_tp8": ("H200, tensor parallel 8 (384 experts): gate_up N=512 K=7168, down N=7168 K=256",
                 [(512, 7168), (7168, 256)]),
}
DEFAULT_PROFILES = ("h200_ep8", "h200_tp8")


def profile_specs(name: str, arch: str = DEFAULT_ARCH) -> list[KernelSpec]:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    specs: dict[str, KernelSpec] = {}
    for n, k in PROFILES[name][1]:
        for launch in indexed_profile_launches(n, k, arch):
            specs.setdefault(launch.spec.symbol, launch.spec)
    return list(specs.values())


def all_default_specs(arch: str = DEFAULT_ARCH) -> list[KernelSpec]:
    """Every distinct kernel the dispatch tables can pick, for any shape (CI compiles these);
    a superset of the default profiles."""
    specs = {launch.spec.symbol: launch.spec for launch in indexed_reachable_launches(arch)}
    for name in DEFAULT_PROFILES:
        for spec in profile_specs(name, arch):
            specs.setdefault(spec.symbol, spec)
    return list(specs.values())
