"""Load compiled kernels once per (descriptor, device) and launch them on torch's stream."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, replace

from .. import env
from .compiler import compile_kernel
from .kernel import KernelSpec


@dataclass(frozen=True)
class LoadedKernel:
    spec: KernelSpec
    device: int
    fn: int  # CUfunction handle
    ctx: int  # CUcontext handle (the device's primary context)
    max_dynamic_smem: int

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int,
               stream: int, params: bytes) -> None:
        (_launch or _bind_launch())(self.fn, self.ctx, grid[0], grid[1], grid[2], block[0], block[1],
                                    block[2], smem, stream, params)

    def attributes(self) -> dict:
        return _launcher().function_attributes(self.fn)

    def max_active_blocks(self, threads: int, smem: int) -> int:
        """CTAs one SM holds at once (the driver's occupancy calculator)."""
        return _launcher().max_active_blocks(self.fn, self.ctx, threads, smem)


def _launcher():
    # Imported lazily so that `import chord_kernels` never even loads the extension.
    from .. import _launcher as mod

    return mod


# The extension's launch entry, bound on the first launch: the import statement in _launcher()
# costs ~0.45 µs a call on the CPU machine, more than the launch binding itself (~0.2 µs).
_launch = None


def _bind_launch():
    global _launch
    _launch = _launcher().launch
    return _launch


_lock = threading.Lock()
_loaded: list[LoadedKernel] = []  # every kernel this process loaded, in load order


@functools.cache
def _load(spec: KernelSpec, device: int, max_dynamic_smem: int) -> LoadedKernel:
    path = compile_kernel(spec)
    fn, ctx = _launcher().load_kernel(path.read_bytes(), spec.symbol, device, max_dynamic_smem)
    kernel = LoadedKernel(spec, device, fn, ctx, max_dynamic_smem)
    _loaded.append(kernel)
    return kernel


# The diagnostic build without the consumers' k-loop work (no dequantization, no MMA: every
# `mma_stage` returns at once; CHORD_DIAG_FEED_ONLY=1): the kernel then takes as long as what feeds
# its k loop (producer, ring, memory, epilogue). Set against the normal build and the k loop
# alone (benchmarks/probes/), it says which of them sets a kernel's pace. Its results are wrong.
FEED_ONLY_FLAG = "-DCHORD_DIAG_FEED_ONLY=1"
# The diagnostic build without the output's global stores (CHORD_DIAG_NO_STORE=1; kDiagNoStore in
# csrc/common/moe_params.cuh): with the feed-only build it splits a feed-bound kernel's time into
# its loads and its stores. Its outputs are never written. The two switches combine.
NO_STORE_FLAG = "-DCHORD_DIAG_NO_STORE=1"
_DIAGNOSTIC_FLAGS = ((env.DIAG_FEED_ONLY, FEED_ONLY_FLAG), (env.DIAG_NO_STORE, NO_STORE_FLAG))


def diagnostic_spec(spec: KernelSpec) -> KernelSpec:
    """``spec`` as the environment's diagnostic switches ask for: the traced build
    (CHORD_CTA_TRACE, chord_kernels.cta_trace), the feed-only build (CHORD_DIAG_FEED_ONLY), the
    build without the output's stores (CHORD_DIAG_NO_STORE)."""
    if env.flag(env.CTA_TRACE):
        spec = replace(spec, trace=True)
    for switch, flag in _DIAGNOSTIC_FLAGS:
        if env.flag(switch) and flag not in spec.extra_flags:
            spec = replace(spec, extra_flags=(*spec.extra_flags, flag))
    return spec


def load_kernel(spec: KernelSpec, device: int, max_dynamic_smem: int = 0) -> LoadedKernel:
    """Compile (cached on disk) and load ``spec`` on ``device``; memoized per process. With a
    diagnostic switch set, that build of it (diagnostic_spec)."""
    spec = diagnostic_spec(spec)
    with _lock:
        return _load(spec, device, max_dynamic_smem)


def loaded_kernels() -> list[LoadedKernel]:
    with _lock:
        return list(_loaded)
