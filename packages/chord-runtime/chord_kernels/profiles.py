"""Serving profiles: the kernels a deployment needs, so they can be compiled before serving.

Token counts are run-time arguments, so a profile is a short list of kernel configs, not one
per batch size. ``chord-runtime precompile --profile NAME`` compiles a profile in parallel.
"""

from __future__ import annotations

from .dispatch import indexed_simple_spec
from .jit.kernel import DEFAULT_ARCH, KernelSpec

# name -> (description, function of arch returning the specs)
PROFILES = {
    "h200_ep8": ("H200, expert parallel 8 (48 local experts): gate_up N=4096 K=7168, down N=7168 K=2048",
                 lambda arch: [indexed_simple_spec(arch)]),
    "h200_tp8": ("H200, tensor parallel 8 (384 experts): gate_up N=512 K=7168, down N=7168 K=256",
                 lambda arch: [indexed_simple_spec(arch)]),
}
DEFAULT_PROFILES = ("h200_ep8", "h200_tp8")


def profile_specs(name: str, arch: str = DEFAULT_ARCH) -> list[KernelSpec]:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name][1](arch)


def all_default_specs(arch: str = DEFAULT_ARCH) -> list[KernelSpec]:
    """Every distinct kernel the default profiles can pick (CI compiles each of these)."""
    specs: dict[str, KernelSpec] = {}
    for name in DEFAULT_PROFILES:
        for spec in profile_specs(name, arch):
            specs.setdefault(spec.symbol + spec.arch, spec)
    return list(specs.values())
