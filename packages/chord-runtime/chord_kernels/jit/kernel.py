"""Kernel descriptors: one small generated translation unit per kernel configuration.

A :class:`KernelSpec` names a device-side body (a ``run`` function of a class template in a
csrc header) and its template arguments; :meth:`KernelSpec.source` wraps it in an
``extern "C"`` kernel taking the family's parameter struct by value. Problem sizes (tokens,
N, K, experts) are run-time arguments, so a profile needs only a handful of cubins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_ARCH = "sm_90a"


@dataclass(frozen=True)
class KernelSpec:
    family: str  # e.g. "indexed_simple"
    header: str  # relative to csrc/, e.g. "indexed/w4a16_indexed_simple.cuh"
    body: str  # class template with a static __device__ run(const Params&)
    params_type: str  # the parameter struct, passed by value as __grid_constant__; the body gets chord::moe_params of it
    template_args: tuple[tuple[str, int], ...]  # (name, value), in template order
    threads: int
    min_blocks_per_sm: int = 1  # __launch_bounds__ occupancy target (caps registers)
    arch: str = DEFAULT_ARCH
    extra_flags: tuple[str, ...] = ()
    # CTAs a cluster along z (compile-time __cluster_dims__: an ordinary launch runs the grid in
    # clusters; gridDim.z must be a multiple). 1: no cluster.
    cluster_z: int = 1
    # The diagnostic build (chord_kernels.cta_trace, CHORD_CTA_TRACE=1): the kernel's body between
    # per-CTA start/end stamps (csrc/common/cta_trace.cuh). Off, the source is the plain wrapper.
    trace: bool = False

    @property
    def symbol(self) -> str:
        args = "_".join(f"{name}{value}" for name, value in self.template_args)
        return re.sub(r"\W", "_", f"chord_{self.family}_{args}")

    @property
    def config(self) -> dict[str, int]:
        return dict(self.template_args)

    def source(self) -> str:
        targs = ", ".join(str(v) for _, v in self.template_args)
        cluster = f"__cluster_dims__(1, 1, {self.cluster_z}) " if self.cluster_z > 1 else ""
        body = f"  {self.body}<{targs}>::run(chord::moe_params(params));\n"
        if self.trace:
            body = f"  chord::cta_trace_begin();\n{body}  chord::cta_trace_end();\n"
        # Traced: the stamps' header first, and the macro that turns on the stream-K schedules'
        # notes (cta_trace_schedule) in the body's headers.
        trace = '#define CHORD_CTA_TRACE 1\n#include "common/cta_trace.cuh"\n' if self.trace else ""
        return (
            f'{trace}#include "{self.header}"\n\n'
            f'extern "C" __global__ void {cluster}__launch_bounds__({self.threads}, {self.min_blocks_per_sm})\n'
            f"{self.symbol}(const __grid_constant__ {self.params_type} params) {{\n"
            f"{body}"
            f"}}\n"
        )

    def describe(self) -> str:
        cfg = ", ".join(f"{k}={v}" for k, v in self.template_args)
        cluster = f" cluster=1x1x{self.cluster_z}" if self.cluster_z > 1 else ""
        trace = " trace" if self.trace else ""
        flags = "".join(f" {flag}" for flag in self.extra_flags)
        return (f"{self.family}[{cfg}] threads={self.threads}x{self.min_blocks_per_sm}/SM{cluster} "
                f"arch={self.arch}{trace}{flags}")
