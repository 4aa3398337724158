"""Chord's entry points: ``indexed`` (vLLM moe_align_block_size routing), ``contiguous`` and
``masked`` (grouped routing, the seed's API).

CUDA tensors run Chord's kernels (SM90 only; any other GPU raises). CPU tensors run the
pure-PyTorch reference, so the same call works in CPU-only tests and tools. Argument checks
that depend only on shapes and dtypes are memoized per signature, and the CUDA path makes no
host sync (the routed count stays on the device), so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
import struct

import torch

from . import reference, routing
from .device import kernel_arch
from .dispatch import IndexedLaunch, IndexedProblem, indexed_family, indexed_tuning, select_indexed
from .jit.launch import load_kernel
from .layouts import PackedW4A16

# chord::IndexedParams (csrc/indexed/w4a16_indexed_simple.cuh): 7 pointers, 2 int64, 9 int32,
# padded to 112 bytes; the header static_asserts the same size and offsets.
INDEXED_PARAMS = struct.Struct("@7P2q9i4x")


class ModeError(ValueError):
    """A weight packed for one kernel family was passed to another."""


def _require_mode(packed: PackedW4A16, mode: str) -> None:
    if not isinstance(packed, PackedW4A16):
        raise TypeError(f"weight must be a PackedW4A16 (see chord_kernels.operator), got {type(packed).__name__}")
    if packed.mode != mode:
        raise ModeError(
            f"weight was packed for mode {packed.mode!r}, but the {mode} kernel needs a weight "
            f"packed with mode={mode!r}; repack it (chord-pack convert --mode {mode})"
        )


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


@functools.lru_cache(maxsize=4096)
def _indexed_plan(a_shape, a_stride, a_dtype, a_device, w_shape, block_k, sorted_numel,
                  expert_numel, out_shape, out_stride, out_dtype, top_k, block_m, family, tuning) -> tuple:
    m, k = a_shape
    e, n_tiles = w_shape[0], w_shape[1]
    n = n_tiles * 16
    _require(a_dtype == torch.bfloat16, f"a must be bfloat16, got {a_dtype}")
    _require(a_stride[1] == 1, f"a must have unit stride along K, got strides {a_stride}")
    _require(w_shape[2] * block_k == k, f"a has K={k}, the weight has K={w_shape[2] * block_k}")
    _require(top_k >= 1 and block_m >= 1, f"top_k ({top_k}) and block_m ({block_m}) must be positive")
    _require(expert_numel * block_m >= sorted_numel,
             f"expert_ids has {expert_numel} blocks of {block_m}, too few for {sorted_numel} sorted_ids")
    _require(out_shape[0] >= m * top_k and out_shape[1] == n,
             f"out has shape {out_shape}, needs at least [{m * top_k}, {n}]")
    _require(out_dtype == torch.bfloat16 and out_stride[1] == 1, "out must be bfloat16 with unit stride along N")
    problem = IndexedProblem(n=n, k=k, num_experts=e, top_k=top_k, block_m=block_m)
    device_index = a_device.index if a_device.index is not None else torch.cuda.current_device()
    launch = select_indexed(problem, kernel_arch(device_index), family, tuning)
    kernel = load_kernel(launch.spec, device_index, launch.smem_bytes)
    grid = launch.grid(problem, expert_numel)
    return problem, launch, kernel, grid, launch.ctas_per_block(problem)


def indexed(a: torch.Tensor, packed: PackedW4A16, sorted_ids: torch.Tensor, expert_ids: torch.Tensor,
            num_tokens_padded: torch.Tensor, top_k: int, block_m: int, out: torch.Tensor | None = None,
            *, validate: bool | None = None) -> torch.Tensor:
    """W4A16 MoE GEMM over vLLM ``moe_align_block_size`` routing.

    ``out[r] = a[r // top_k] @ W[expert_ids[b]]^T`` for every route r listed in block b of
    ``sorted_ids`` before ``num_tokens_padded`` (a device int32 [1]); entries ``>= M*top_k`` are
    padding. Rows of ``out`` for routes not listed are left untouched. ``a`` [M, K] bf16;
    ``out`` [>= M*top_k, N] bf16 (allocated if None). ``validate`` (or
    ``CHORD_VALIDATE_ROUTING=1``) checks the routing first, with a host sync.
    """
    _require_mode(packed, "indexed")
    _require(a.dim() == 2, f"a must be [M, K], got shape {tuple(a.shape)}")
    m = a.shape[0]
    if out is None:
        out = torch.empty(m * top_k, packed.n, dtype=torch.bfloat16, device=a.device)
    for name, t in (("sorted_ids", sorted_ids), ("expert_ids", expert_ids), ("num_tokens_padded", num_tokens_padded)):
        _require(t.dtype == torch.int32 and t.device == a.device,
                 f"{name} must be int32 on {a.device}, got {t.dtype} on {t.device}")
    if routing.validation_enabled(validate):
        routing.validate_indexed(sorted_ids, expert_ids, num_tokens_padded, m * top_k, packed.num_experts, block_m)
    if a.device.type == "cpu":
        w = reference.dequantize_w4a16(packed)
        return reference.moe_indexed_reference(a, w, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out)
    _require(packed.device == a.device, f"weight is on {packed.device}, a on {a.device}")
    problem, launch, kernel, grid, ctas_per_block = _indexed_plan(
        tuple(a.shape), a.stride(), a.dtype, a.device, tuple(packed.qweight.shape), packed.block_k,
        sorted_ids.numel(), expert_ids.numel(), tuple(out.shape), out.stride(), out.dtype, top_k, block_m,
        indexed_family(), indexed_tuning())
    params = INDEXED_PARAMS.pack(
        a.data_ptr(), packed.qweight.data_ptr(), packed.scale.data_ptr(), out.data_ptr(),
        sorted_ids.data_ptr(), expert_ids.data_ptr(), num_tokens_padded.data_ptr(),
        a.stride(0), out.stride(0),
        m * top_k, problem.n, problem.k, top_k, problem.num_experts, block_m, expert_ids.numel(),
        ctas_per_block, sorted_ids.numel())
    _launch(kernel, launch, grid, params)
    return out


def _launch(kernel, launch: IndexedLaunch, grid, params: bytes) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    kernel.launch(grid, (launch.spec.threads, 1, 1), launch.smem_bytes, stream, params)


def contiguous(a: torch.Tensor, packed: PackedW4A16, m_indices: torch.Tensor) -> torch.Tensor:
    """Grouped prefill: rows grouped by expert, ``m_indices`` int32 [m] (-1 on padding rows)."""
    _require_mode(packed, "contiguous")
    if a.device.type != "cpu":
        raise NotImplementedError("the grouped contiguous SM90 kernel is not built yet (issue #5)")
    return reference.moe_contiguous_reference(a, reference.dequantize_w4a16(packed), m_indices)


def masked(a: torch.Tensor, packed: PackedW4A16, masked_m: torch.Tensor, expected_m: int) -> torch.Tensor:
    """Grouped decode: ``a`` [G*max_m, K] or [G, max_m, K]; ``masked_m`` int32 [G] is authoritative."""
    _require_mode(packed, "masked")
    _require(isinstance(expected_m, int) and expected_m > 0, f"expected_m must be a positive int, got {expected_m!r}")
    if a.device.type != "cpu":
        raise NotImplementedError("the grouped masked SM90 kernel is not built yet (issue #5)")
    return reference.moe_masked_reference(a, reference.dequantize_w4a16(packed), masked_m)
