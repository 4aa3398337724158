"""Chord's entry points: ``indexed`` (vLLM moe_align_block_size routing), ``contiguous`` and
``masked`` (grouped routing, the seed's API) and ``contiguous_offsets`` (vLLM's grouped form).

CUDA tensors run Chord's kernels (SM90 only; any other GPU raises). CPU tensors run the
pure-PyTorch reference, so the same call works in CPU-only tests and tools. Argument checks
that depend only on shapes and dtypes are memoized per signature (with the kernel resolved and
loaded), and the CUDA path makes no host sync (routed counts stay on the device), so every
entry point can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
import struct

import torch

from . import env, reference, routing
from .device import kernel_arch
from .dispatch import (
    GroupedProblem,
    IndexedProblem,
    Launch,
    select_grouped,
    select_indexed,
)
from .jit.launch import LoadedKernel, load_kernel
from .layouts import PackedW4A16

# chord::MoeParams (csrc/common/moe_params.cuh): 10 pointers, 2 int64, 10 int32 = 136 bytes; the
# header static_asserts the same size and offsets.
MOE_PARAMS = struct.Struct("@10P2q10i")
_POINTERS = ("a", "qweight", "scale", "out", "sorted_ids", "expert_ids", "num_tokens_padded",
             "m_indices", "expert_offsets", "masked_m")
_INTS = ("num_routes", "n", "k", "top_k", "num_experts", "block_m", "num_blocks", "ctas_per_block",
         "sorted_len", "max_m")


def _params(lda: int, ldc: int, **fields) -> bytes:
    """Pack MoeParams; pointer fields take tensors (or are null), int fields default to 0."""
    ptrs = [fields[name].data_ptr() if name in fields else 0 for name in _POINTERS]
    return MOE_PARAMS.pack(*ptrs, lda, ldc, *(fields.get(name, 0) for name in _INTS))


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


def _require_int32(device: torch.device, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        _require(t.dtype == torch.int32 and t.device == device, f"{name} must be int32 on {device}, got {t.dtype} on {t.device}")


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _check_operands(a_shape, a_stride, a_dtype, k: int, out_shape, out_stride, out_dtype, rows: int, n: int) -> None:
    _require(a_dtype == torch.bfloat16, f"a must be bfloat16, got {a_dtype}")
    _require(a_stride[-1] == 1, f"a must have unit stride along K, got strides {a_stride}")
    _require(a_shape[-1] == k, f"a has K={a_shape[-1]}, the weight has K={k}")
    _require(out_dtype == torch.bfloat16 and out_stride[1] == 1, "out must be bfloat16 with unit stride along N")
    _require(out_shape[0] >= rows and out_shape[1] == n, f"out has shape {out_shape}, needs at least [{rows}, {n}]")




def _load(launch: Launch, device: torch.device) -> LoadedKernel:
    return load_kernel(launch.spec, _device_index(device), launch.smem_bytes)


# ----------------------------------------------------------------------------------- indexed


def _indexed_plan(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out, family, tuning):
    """Every check and decision that depends only on the call's signature, done once per
    signature (the dict in :func:`indexed` memoizes it): dtypes, devices, shapes, the problem,
    the kernel choice and its loaded function, and the launch grid."""
    _require_int32(a.device, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=num_tokens_padded)
    _require(packed.device == a.device and out.device == a.device,
             f"weight ({packed.device}), a ({a.device}) and out ({out.device}) must share a device")
    m, k = a.shape
    n = packed.n
    _check_operands(tuple(a.shape), a.stride(), a.dtype, packed.k, tuple(out.shape), out.stride(), out.dtype, m * top_k, n)
    _require(top_k >= 1 and block_m >= 1, f"top_k ({top_k}) and block_m ({block_m}) must be positive")
    num_blocks, sorted_len = expert_ids.numel(), sorted_ids.numel()
    _require(num_blocks * block_m >= sorted_len,
             f"expert_ids has {num_blocks} blocks of {block_m}, too few for {sorted_len} sorted_ids")
    problem = IndexedProblem(n=n, k=k, num_experts=packed.num_experts, top_k=top_k, block_m=block_m)
    launch = select_indexed(problem, kernel_arch(_device_index(a.device)), family, tuning)
    kernel = _load(launch, a.device)
    grid = launch.grid(problem, num_blocks)
    ints = dict(num_routes=m * top_k, n=n, k=k, top_k=top_k, num_experts=problem.num_experts, block_m=block_m,
                num_blocks=num_blocks, ctas_per_block=launch.ctas_per_block(problem), sorted_len=sorted_len)
    int_values = tuple(ints.get(name, 0) for name in _INTS)
    return kernel, launch, grid, (launch.spec.threads, 1, 1), int_values, _device_index(a.device)


_indexed_plans: dict = {}


def indexed(a: torch.Tensor, packed: PackedW4A16, sorted_ids: torch.Tensor, expert_ids: torch.Tensor,
            num_tokens_padded: torch.Tensor, top_k: int, block_m: int, out: torch.Tensor | None = None,
            *, validate: bool | None = None) -> torch.Tensor:
    """W4A16 MoE GEMM over vLLM ``moe_align_block_size`` routing.

    ``out[r] = a[r // top_k] @ W[expert_ids[b]]^T`` for every route r listed in block b of
    ``sorted_ids`` before ``num_tokens_padded`` (a device int32 [1]); entries ``>= M*top_k`` are
    padding. Rows of ``out`` for routes not listed are left untouched. ``a`` [M, K] bf16;
    ``out`` [>= M*top_k, N] bf16 (allocated if None). ``validate`` (or
    ``CHORD_VALIDATE_ROUTING=1``) checks the routing first, with a host sync.

    The CUDA path is the hot path (a few µs of host time per call): everything that depends
    only on the call's signature — shapes, strides, dtypes, devices, the packed weight's mode and
    shape, the env overrides — is checked and resolved once per signature.
    """
    _require_mode(packed, "indexed")
    _require(a.dim() == 2, f"a must be [M, K], got shape {tuple(a.shape)}")
    if out is None:
        out = torch.empty(a.shape[0] * top_k, packed.n, dtype=torch.bfloat16, device=a.device)
    if validate if validate is not None else env.flag(env.VALIDATE_ROUTING):
        _require_int32(a.device, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=num_tokens_padded)
        routing.validate_indexed(sorted_ids, expert_ids, num_tokens_padded, a.shape[0] * top_k, packed.num_experts, block_m)
    if not a.is_cuda:
        _require_int32(a.device, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=num_tokens_padded)
        w = reference.dequantize_w4a16(packed)
        return reference.moe_indexed_reference(a, w, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out)
    _indexed_cuda(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out)
    return out


def _indexed_cuda(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out) -> None:
    """The launch path: a plan lookup keyed on the call's signature, then pack and launch."""
    qw = packed.qweight
    key = (a.shape, a.stride(), a.dtype, a.get_device(), qw.shape, qw.get_device(), packed.block_k,
           sorted_ids.shape, sorted_ids.dtype, sorted_ids.get_device(), expert_ids.shape, expert_ids.dtype,
           expert_ids.get_device(), num_tokens_padded.dtype, num_tokens_padded.get_device(),
           out.shape, out.stride(), out.dtype, out.get_device(), top_k, block_m,
           env.get(env.INDEXED_KERNEL, "mma"), env.get(env.TUNING))
    plan = _indexed_plans.get(key)
    if plan is None:
        plan = _indexed_plans[key] = _indexed_plan(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k,
                                                   block_m, out, key[-2], key[-1])
    kernel, launch, grid, block, int_values, device_index = plan
    params = MOE_PARAMS.pack(a.data_ptr(), qw.data_ptr(), packed.scale.data_ptr(), out.data_ptr(),
                             sorted_ids.data_ptr(), expert_ids.data_ptr(), num_tokens_padded.data_ptr(), 0, 0, 0,
                             a.stride(0), out.stride(0), *int_values)
    kernel.launch(grid, block, launch.smem_bytes, _current_stream(device_index), params)


# torch's raw current-stream query (what Triton launches on) costs ~0.2 µs; the public
# torch.cuda.current_stream() builds a Stream object first.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(device_index: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


# ----------------------------------------------------------------------------------- grouped


@functools.lru_cache(maxsize=4096)
def _grouped_plan(routing_name, rows, a_shape, a_stride, a_dtype, a_device, w_shape, block_k,
                  out_shape, out_stride, out_dtype, rows_per_expert) -> tuple:
    e, n, k = w_shape[0], w_shape[1] * 16, w_shape[2] * block_k
    _check_operands(a_shape, a_stride, a_dtype, k, out_shape, out_stride, out_dtype, rows, n)
    problem = GroupedProblem(routing_name, n, k, e, max(1, rows_per_expert), block_k)
    launch = select_grouped(problem, kernel_arch(_device_index(a_device)))
    return problem, launch, _load(launch, a_device)


def _grouped_launch(routing_name: str, a2: torch.Tensor, packed: PackedW4A16, out: torch.Tensor,
                    rows_per_expert: int, grid_y, **fields) -> None:
    problem, launch, kernel = _grouped_plan(
        routing_name, a2.shape[0], tuple(a2.shape), a2.stride(), a2.dtype, a2.device, tuple(packed.qweight.shape),
        packed.block_k, tuple(out.shape), out.stride(), out.dtype, rows_per_expert)
    _require(packed.device == a2.device, f"weight is on {packed.device}, a on {a2.device}")
    tile = launch.rows_per_cta
    if routing_name == "masked":  # CTAs per expert: its max_m rows in tiles
        fields["ctas_per_block"] = -(-fields["max_m"] // tile)
    grid = (-(-problem.n // launch.cols_per_cta), grid_y(tile), 1)
    params = _params(a2.stride(0), out.stride(0), a=a2, qweight=packed.qweight, scale=packed.scale, out=out,
                     num_routes=a2.shape[0], n=problem.n, k=problem.k, num_experts=problem.num_experts, **fields)
    kernel.launch(grid, (launch.spec.threads, 1, 1), launch.smem_bytes, _current_stream(_device_index(a2.device)), params)


def contiguous(a: torch.Tensor, packed: PackedW4A16, m_indices: torch.Tensor, out: torch.Tensor | None = None,
               *, validate: bool | None = None) -> torch.Tensor:
    """Grouped GEMM, DeepGEMM contiguous form: ``a`` [m, K] rows grouped by expert, each expert's
    segment 128-row aligned; ``m_indices`` int32 [m] = expert of each row, -1 on padding rows.
    Returns ``out`` [m, N] with ``out[i] = a[i] @ W[m_indices[i]]^T``; padding rows unspecified."""
    _require_mode(packed, "contiguous")
    _require(a.dim() == 2 and m_indices.shape == (a.shape[0],),
             f"a must be [m, K] and m_indices [m]; got {tuple(a.shape)} and {tuple(m_indices.shape)}")
    _require_int32(a.device, m_indices=m_indices)
    if routing.validation_enabled(validate):
        routing.validate_m_indices(m_indices, packed.num_experts)
    if out is None:
        out = torch.empty(a.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
    if a.device.type == "cpu":  # the reference, writing only the rows the kernel writes
        valid = m_indices >= 0
        out[valid] = reference.moe_contiguous_reference(a, reference.dequantize_w4a16(packed), m_indices)[valid]
        return out
    rows_per_expert = a.shape[0] // max(packed.num_experts, 1)
    _grouped_launch("contiguous", a, packed, out, rows_per_expert, lambda tile: -(-a.shape[0] // tile),
                    m_indices=m_indices)
    return out


def contiguous_offsets(a: torch.Tensor, packed: PackedW4A16, expert_offsets: torch.Tensor,
                       out: torch.Tensor | None = None, *, expected_m: int | None = None,
                       validate: bool | None = None) -> torch.Tensor:
    """Grouped GEMM, vLLM grouped_contiguous form: rows ``[expert_offsets[e], expert_offsets[e+1])``
    of ``a`` [M, K] belong to expert e, no alignment; ``expert_offsets`` int64 [E+1] on the device
    (rows past ``expert_offsets[-1]`` are neither read nor written). ``expected_m`` (rows per
    expert, a host hint like vLLM's valid_shape_m / E) only steers the launch."""
    _require_mode(packed, "contiguous")
    e = packed.num_experts
    _require(a.dim() == 2, f"a must be [M, K], got shape {tuple(a.shape)}")
    _require(expert_offsets.dtype == torch.int64 and expert_offsets.shape == (e + 1,) and expert_offsets.device == a.device,
             f"expert_offsets must be int64 [{e + 1}] on {a.device}, got {expert_offsets.dtype} "
             f"{tuple(expert_offsets.shape)} on {expert_offsets.device}")
    if routing.validation_enabled(validate):
        routing.validate_offsets(expert_offsets, a.shape[0])
    if out is None:
        out = torch.empty(a.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
    if a.device.type == "cpu":
        m_indices = routing.offsets_to_m_indices(expert_offsets, a.shape[0])
        valid = m_indices >= 0
        out[valid] = reference.moe_contiguous_reference(a, reference.dequantize_w4a16(packed), m_indices)[valid]
        return out
    rows_per_expert = expected_m if expected_m else a.shape[0] // max(e, 1)
    # Tiles never straddle experts: at most ceil(M / tile) + E of them.
    _grouped_launch("contiguous_offsets", a, packed, out, rows_per_expert,
                    lambda tile: -(-a.shape[0] // tile) + e, expert_offsets=expert_offsets)
    return out


def masked(a: torch.Tensor, packed: PackedW4A16, masked_m: torch.Tensor, expected_m: int,
           out: torch.Tensor | None = None, *, validate: bool | None = None) -> torch.Tensor:
    """Grouped GEMM, masked form: ``a`` [G*max_m, K] or [G, max_m, K]; ``masked_m`` int32 [G] is
    authoritative (rows ``i < masked_m[g]`` of group g are computed); ``expected_m`` (a positive
    int) only steers the launch. Returns the flat ``out`` [G*max_m, N]; rows past masked_m[g] are
    unspecified (neither read nor written)."""
    _require_mode(packed, "masked")
    _require(isinstance(expected_m, int) and expected_m > 0, f"expected_m must be a positive int, got {expected_m!r}")
    g = packed.num_experts
    _require(a.dim() in (2, 3) and a.shape[0] * (a.shape[1] if a.dim() == 3 else 1) % g == 0
             and (a.dim() == 2 or a.shape[0] == g),
             f"a must be [G*max_m, K] or [G, max_m, K] with G={g}, got {tuple(a.shape)}")
    _require(masked_m.shape == (g,), f"masked_m must be [{g}], got {tuple(masked_m.shape)}")
    _require_int32(a.device, masked_m=masked_m)
    a2 = a.reshape(-1, a.shape[-1])
    max_m = a2.shape[0] // g
    if routing.validation_enabled(validate):
        routing.validate_masked(masked_m, g, max_m)
    if out is None:
        out = torch.empty(a2.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
    if a.device.type == "cpu":  # the reference, writing only the rows the kernel writes
        valid = (torch.arange(max_m)[None, :] < masked_m[:, None].long()).reshape(-1)
        out[valid] = reference.moe_masked_reference(a2, reference.dequantize_w4a16(packed), masked_m)[valid]
        return out
    _grouped_launch("masked", a2, packed, out, expected_m, lambda tile: g * -(-max_m // tile),
                    masked_m=masked_m, max_m=max_m)
    return out
