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
from typing import NoReturn

import torch

from . import env, reference, routing, tma
from .device import kernel_arch, memory_tbps
from .dispatch import (
    GroupedProblem,
    IndexedProblem,
    Launch,
    evict_first_tiles,
    select_grouped,
    select_indexed,
)
from .jit import fast_call
from .jit.launch import LoadedKernel, load_kernel
from .layouts import PackedW4A16

# chord::MoeParams (csrc/common/moe_params.cuh): 10 pointers, 2 int64, 15 int32, then the stream-K
# workspace and locks pointers (8-aligned) = 176 bytes; the header static_asserts the same size and offsets.
MOE_PARAMS = struct.Struct("@10P2q15i2P")
# The same bytes in two parts: the pointers change every call; the rest (leading dimensions, the
# problem's ints, the stream-K scratch) only with the call's signature, so a plan packs it once
# (~0.6 µs of Python a call: one short pack and a bytes concatenation instead of 24 fields).
_PARAMS_POINTERS = struct.Struct("@10P")
_PARAMS_TAIL = struct.Struct("@2q15i2P")
assert _PARAMS_POINTERS.size + _PARAMS_TAIL.size == MOE_PARAMS.size  # the tail starts 8-aligned
# chord::MoeTmaParams: MoeParams, padding to the 64-byte aligned maps at 192, the two maps (448).
_TMA_MAPS_OFFSET = 192
_TMA_PAD = bytes(_TMA_MAPS_OFFSET - MOE_PARAMS.size)

_POINTERS = ("a", "qweight", "scale", "out", "sorted_ids", "expert_ids", "num_tokens_padded",
             "m_indices", "expert_offsets", "masked_m")
_INTS = ("num_routes", "n", "k", "top_k", "num_experts", "block_m", "num_blocks", "ctas_per_block",
         "sorted_len", "max_m", "pick_rows", "pick_cost", "pick_other_cost", "pick_first", "evict_first_tiles")


def _tma_params_tail(packed: PackedW4A16, launch: Launch) -> bytes:
    """What a MoeTmaParams kernel takes after MoeParams: padding, then the weight's maps for the
    launch's tile rows and boxes (encoded once per weight, chord_kernels.tma)."""
    return _TMA_PAD + tma.tensor_maps(packed, launch.cols_per_cta, launch.stage_boxes)


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


def _fast_call(*args) -> bool:
    """The fast call (jit.fast_call: the launch path in C++), bound on the first CUDA call: it
    launches a call the Python path planned and launched before (True), else answers False and
    the Python path runs (and records its launch there). The arguments: the form, three ints of
    the signature, a, qweight, scale, out, then the form's routing tensors (up to 3)."""
    global _fast_call
    _fast_call = fast_call.entry()
    return _fast_call(*args)


def _unbind_fast_call() -> None:
    """The next CUDA call binds the fast call again (tests; CHORD_FAST_CALL read again)."""
    global _fast_call
    fast_call.reset()
    _fast_call = _FAST_CALL_BINDER


_FAST_CALL_BINDER = _fast_call
_INDEXED, _CONTIGUOUS, _OFFSETS, _MASKED = (fast_call.INDEXED, fast_call.CONTIGUOUS, fast_call.CONTIGUOUS_OFFSETS,
                                            fast_call.MASKED)


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _check_operands(a_shape, a_stride, a_dtype, k: int, out_shape, out_stride, out_dtype, rows: int, n: int) -> None:
    _require(a_dtype == torch.bfloat16, f"a must be bfloat16, got {a_dtype}")
    _require(a_stride[-1] == 1, f"a must have unit stride along K, got strides {a_stride}")
    _require(a_shape[-1] == k, f"a has K={a_shape[-1]}, the weight has K={k}")
    _require(out_dtype == torch.bfloat16 and out_stride[1] == 1, "out must be bfloat16 with unit stride along N")
    _require(out_shape[0] >= rows and out_shape[1] == n, f"out has shape {out_shape}, needs at least [{rows}, {n}]")
    # The kernels load a's rows in 16-byte pieces (cp.async, TMA boxes); out may be any bf16 view.
    _require(a_stride[-2] % 8 == 0, f"a's row stride ({a_stride[-2]} elements) must be a multiple of 8 (16 bytes)")


def _misaligned(a_ptr: int) -> NoReturn:
    """Checked per call, where a_ptr % 16 (an address is not part of a signature): the kernels'
    16-byte loads of a would fault on the device instead of raising here."""
    raise ValueError(f"a (at {a_ptr:#x}) must start 16-byte aligned: a view that starts mid-row is not "
                     "supported (copy it)")


MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (the kernels map row tiles to y)


def _check_grid(grid: tuple[int, int, int], what: str) -> None:
    """A launch the hardware cannot take is a clear error before anything runs, not a launch
    failure (the row-tile grids grow with the routing buffers' rows)."""
    _require(grid[1] <= MAX_GRID_Y,
             f"{what} needs {grid[1]} CTAs in grid y, over CUDA's {MAX_GRID_Y}: not supported (split the call)")


def _load(launch: Launch, device: torch.device) -> LoadedKernel:
    return load_kernel(launch.spec, _device_index(device), launch.smem_bytes)


# Stream-K scratch per device: FP32 partials and the zeroed locks (also the tile loop's two
# counters). Kernels leave the locks zero,
# so one pair serves every call on the device; like vLLM's `locks` for Humming, it assumes MoE
# GEMMs on one device do not run concurrently on two streams. Buffers only grow, and the old
# ones stay alive: plans keep raw pointers.
_streamk_buffers: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}


def _launch_grid(kernel: LoadedKernel, launch: Launch, device: torch.device, k: int, tiled: tuple[int, int, int],
                 what: str) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """(grid, (workspace, locks)): a stream-K launch's persistent grid and scratch, a tile loop's
    grid (the resident CTAs, or fewer when the buffers hold fewer tiles) and tile counter (the
    locks), or the one-CTA-per-tile grid (checked against CUDA's limits) and no scratch. ``tiled`` is the
    one-CTA-per-tile grid: (column tiles, row tiles the buffers can hold)."""
    if launch.tile_loop:
        # the kernel counts the units it claims (whole tiles, then up to one split piece a CTA) in
        # int32, and its claim counter runs one past the last unit per CTA
        resident = _resident_ctas(kernel, launch, device)
        tiles = tiled[0] * tiled[1]
        _require(tiles + 2 * resident < 2**31, f"{what}: up to {tiles} tiles, over 2^31: not supported")
        grid = max(1, min(tiles, resident))
        # its counters (next unit, CTAs done), then one lock per split tile, and a tile's FP32
        # partial per split piece (csrc/common/tail_split.cuh: at most one piece a CTA)
        return (grid, 1, 1), _streamk_scratch(device, grid * launch.cols_per_cta * launch.rows_per_cta, grid + 2)
    if launch.persistent:
        # the kernel counts (row tile, column tile, K stage) iterations in int32
        iterations = tiled[0] * tiled[1] * (k // launch.iteration_k)
        _require(iterations < 2**31, f"{what}: up to {iterations} stream-K iterations, over 2^31: not supported")
        grid = (_resident_ctas(kernel, launch, device), 1, 1)
        return grid, _streamk_scratch(device, grid[0] * launch.partial_floats, grid[0])
    _check_grid(tiled, what)
    return tiled, (0, 0)


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _resident_ctas(kernel: LoadedKernel, launch: Launch, device: torch.device) -> int:
    """A persistent grid: every CTA the GPU holds at once, as the driver computes it (shared
    memory can admit more CTAs per SM than the __launch_bounds__ target)."""
    per_sm = kernel.max_active_blocks(launch.spec.threads, launch.smem_bytes)
    _require(per_sm >= 1, f"{launch.spec.describe()} does not fit on an SM of {device}")
    return torch.cuda.get_device_properties(device).multi_processor_count * per_sm


def _streamk_scratch(device: torch.device, floats: int, locks: int) -> tuple[int, int]:
    """(workspace, locks) pointers: at least ``floats`` FP32 partials and ``locks`` zeroed int32."""
    kept = _streamk_buffers.setdefault(_device_index(device), [])
    have_floats, have_locks = (kept[-1][0].numel(), kept[-1][1].numel()) if kept else (0, 0)
    if have_floats < floats or have_locks < locks:
        _require(device.type != "cuda" or not torch.cuda.is_current_stream_capturing(),
                 "a stream-K or tile-loop call that needs more scratch cannot be the first inside CUDA-graph capture "
                 "(the scratch is allocated then): run the call once eagerly first, as vLLM's warmup does")
        kept.append((torch.empty(max(have_floats, floats), dtype=torch.float32, device=device),
                     torch.zeros(max(have_locks, locks), dtype=torch.int32, device=device)))
    workspace, locks = kept[-1]
    return workspace.data_ptr(), locks.data_ptr()


# ----------------------------------------------------------------------------------- indexed


A_MAX_BYTES = 16 << 32  # 64 GB: 2^32 16-byte units


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
    problem = IndexedProblem(n=n, k=k, num_experts=packed.num_experts, top_k=top_k, block_m=block_m,
                             num_routes=m * top_k)
    launch = select_indexed(problem, kernel_arch(_device_index(a.device)), family, tuning)
    # The deferred tile loop's loader warp keeps a's rows as 32-bit offsets in 16-byte units
    # (WarpRows); the other kernels address a in 64 bits. Checked before anything compiles.
    a_bytes = m * a.stride(0) * a.element_size()
    _require(not launch.spec.config.get("DEFER_STORE") or a_bytes <= A_MAX_BYTES,
             f"a spans {a_bytes} bytes; {launch.spec.symbol} addresses at most {A_MAX_BYTES}")
    kernel = _load(launch, a.device)
    grid, scratch = _launch_grid(kernel, launch, a.device, k, launch.grid(problem, num_blocks),
                                 f"indexed with {num_blocks} routing blocks of {block_m} rows "
                                 f"({launch.rows_per_cta} per CTA)")
    ints = dict(num_routes=m * top_k, n=n, k=k, top_k=top_k, num_experts=problem.num_experts, block_m=block_m,
                num_blocks=num_blocks, ctas_per_block=launch.ctas_per_block(problem), sorted_len=sorted_len,
                evict_first_tiles=evict_first_tiles(launch, k))
    if launch.dual:  # the 8-row tile holding the pair tile (dispatch.paired_decode): the device's pick
        tall_rows, cost, tall_cost = launch.dual
        ints.update(pick_rows=tall_rows, pick_cost=cost, pick_other_cost=tall_cost, pick_first=1)
    tail = _PARAMS_TAIL.pack(a.stride(0), out.stride(0), *(ints.get(name, 0) for name in _INTS), *scratch)
    # With tensor maps: the tail and the weight's maps by (qweight, scale) address (as _grouped_params).
    return kernel, launch, grid, (launch.spec.threads, 1, 1), tail, _device_index(a.device), \
        {} if launch.tensor_maps else None


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
    if a.dim() != 2:  # not _require: its message would be formatted on every call (~0.5 µs)
        raise ValueError(f"a must be [M, K], got shape {tuple(a.shape)}")
    if out is None:
        out = torch.empty(a.shape[0] * top_k, packed.n, dtype=torch.bfloat16, device=a.device)
    if validate if validate is not None else env.flag(env.VALIDATE_ROUTING):
        _require_int32(a.device, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=num_tokens_padded)
        routing.validate_indexed(sorted_ids, expert_ids, num_tokens_padded, a.shape[0] * top_k, packed.num_experts, block_m)
    if not a.is_cuda:
        _require_int32(a.device, sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=num_tokens_padded)
        w = reference.dequantize_w4a16(packed)
        return reference.moe_indexed_reference(a, w, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out)
    _indexed_launch(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out)
    return out


def _indexed_launch(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out) -> None:
    """The CUDA call: the fast call where it knows the call, else the Python path (which records
    its launch there, with these arguments)."""
    if not _fast_call(_INDEXED, top_k, block_m, packed.block_k, a, packed.qweight, packed.scale, out, sorted_ids,
                      expert_ids, num_tokens_padded):
        _indexed_cuda(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out)


def _indexed_cuda(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k, block_m, out) -> None:
    """The launch path: a plan lookup keyed on the call's signature, then pack and launch."""
    qw = packed.qweight
    key = (a.shape, a.stride(), a.dtype, a.get_device(), qw.shape, qw.get_device(), packed.block_k,
           sorted_ids.shape, sorted_ids.dtype, sorted_ids.get_device(), expert_ids.shape, expert_ids.dtype,
           expert_ids.get_device(), num_tokens_padded.dtype, num_tokens_padded.get_device(),
           out.shape, out.stride(), out.dtype, out.get_device(), top_k, block_m,
           env.raw(env.INDEXED_KERNEL), env.raw(env.TUNING))  # overrides: as jit.fast_call._FORM_ENV
    plan = _indexed_plans.get(key)
    if plan is None:
        plan = _indexed_plans[key] = _indexed_plan(a, packed, sorted_ids, expert_ids, num_tokens_padded, top_k,
                                                   block_m, out, env.text(key[-2], "auto"), env.text(key[-1]))
    kernel, launch, grid, block, tail, device_index, tails_by_weight = plan
    a_ptr, qw_ptr, scale_ptr = a.data_ptr(), qw.data_ptr(), packed.scale.data_ptr()
    if a_ptr % 16:
        _misaligned(a_ptr)
    params = _PARAMS_POINTERS.pack(a_ptr, qw_ptr, scale_ptr, out.data_ptr(), sorted_ids.data_ptr(),
                                   expert_ids.data_ptr(), num_tokens_padded.data_ptr(), 0, 0, 0)
    if tails_by_weight is None:
        params += tail
    else:
        key = (qw_ptr, scale_ptr)
        params += tails_by_weight.get(key) or _remember(tails_by_weight, key, lambda: tail + _tma_params_tail(packed, launch))
    kernel.launch(grid, block, launch.smem_bytes, _current_stream(device_index), params)
    if fast_call.recording:  # the next such call launches from C++ (the arguments as _indexed_launch passes them)
        fast_call.remember(_INDEXED, (top_k, block_m, packed.block_k), (a, qw, packed.scale, out),
                           (sorted_ids, expert_ids, num_tokens_padded), [(kernel, grid, block, launch.smem_bytes, params)],
                           device_index, () if tails_by_weight is None else (1, 2))  # the weight's maps


TAILS_KEPT = 4096  # a plan's address keys whose parameter tails it keeps (all, past it, are dropped)


def _remember(tails: dict, key: tuple, make):
    """A plan's parameters after the pointers for a new address key (make() builds them)."""
    if len(tails) >= TAILS_KEPT:
        tails.clear()
    value = tails[key] = make()
    return value


# torch's raw current-stream query (what Triton launches on) costs ~0.2 µs; the public
# torch.cuda.current_stream() builds a Stream object first.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(device_index: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


# ----------------------------------------------------------------------------------- grouped
#
# The same hot-path shape as ``indexed``: the CUDA path looks its plan up in one dict keyed on the
# call's signature (routing form, shapes, strides, dtypes and device indices of every tensor, the
# packed weight's BLOCK_K, the expected_m hint); the plan (built once per signature by
# :func:`_grouped_plan`, which runs every argument check) holds the loaded kernel, the grid and the
# int fields of MoeParams; per call only pointers and the leading dimensions are packed. The
# grouped family takes no environment overrides, so only CHORD_VALIDATE_ROUTING is read per call.

# MoeParams pointer slot of each form's routing tensor (m_indices, expert_offsets, masked_m).
_ROUTE_SLOT = {"contiguous": _POINTERS.index("m_indices"), "contiguous_offsets": _POINTERS.index("expert_offsets"),
               "masked": _POINTERS.index("masked_m")}


def _masked_shape_message(a, g: int) -> str:
    return f"a must be [G*max_m, K] or [G, max_m, K] with G={g}, got {tuple(a.shape)}"


def _grouped_checks(routing_name: str, a: torch.Tensor, packed: PackedW4A16, route: torch.Tensor) -> None:
    """The entry points' own checks of ``a`` and the routing tensor, with their messages."""
    e = packed.num_experts
    if routing_name == "contiguous":
        _require(a.dim() == 2 and route.shape == (a.shape[0],),
                 f"a must be [m, K] and m_indices [m]; got {tuple(a.shape)} and {tuple(route.shape)}")
        _require_int32(a.device, m_indices=route)
    elif routing_name == "contiguous_offsets":
        _require(a.dim() == 2, f"a must be [M, K], got shape {tuple(a.shape)}")
        _require(route.dtype == torch.int64 and route.shape == (e + 1,) and route.device == a.device,
                 f"expert_offsets must be int64 [{e + 1}] on {a.device}, got {route.dtype} "
                 f"{tuple(route.shape)} on {route.device}")
    elif routing_name == "masked":
        _require(a.dim() in (2, 3) and a.shape[0] * (a.shape[1] if a.dim() == 3 else 1) % e == 0
                 and (a.dim() == 2 or a.shape[0] == e), _masked_shape_message(a, e))
        _require(route.shape == (e,), f"masked_m must be [{e}], got {tuple(route.shape)}")
        _require_int32(a.device, masked_m=route)
    else:
        raise ValueError(f"unknown grouped routing {routing_name!r}")


def _grouped_plan(routing_name: str, a: torch.Tensor, packed: PackedW4A16, route: torch.Tensor,
                  out: torch.Tensor, expected_m, split_override: str = "auto") -> tuple:
    """Every check and decision that depends only on the call's signature, done once per
    signature (the dict in :func:`_grouped_cuda` memoizes it): the entry point's checks, the
    operand checks, devices, the problem, the kernel choice and its loaded function, the grid
    and MoeParams' int fields; for a pair of kernels (dispatch.Launch.pick) the same for the
    second launch, each with the other's height and costs."""
    _grouped_checks(routing_name, a, packed, route)
    e, n, k = packed.num_experts, packed.n, packed.k
    a2 = a.reshape(-1, a.shape[-1]) if a.dim() == 3 else a
    # A 3-D masked input that is not a view of [G*max_m, K] is copied flat on every call.
    flat_copy = a2.data_ptr() != a.data_ptr()
    rows = a2.shape[0]
    _check_operands(tuple(a2.shape), a2.stride(), a2.dtype, k, tuple(out.shape), out.stride(), out.dtype, rows, n)
    _require(packed.device == a.device, f"weight is on {packed.device}, a on {a.device}")
    _require(out.device == a.device, f"out is on {out.device}, a on {a.device}")
    if routing_name == "contiguous":
        rows_per_expert = rows // max(e, 1)
    elif routing_name == "contiguous_offsets":
        rows_per_expert = expected_m if expected_m else rows // max(e, 1)
    else:
        rows_per_expert = expected_m
    device_index = _device_index(a.device)
    problem = GroupedProblem(routing_name, n, k, e, max(1, rows_per_expert), packed.block_k)
    launch = select_grouped(problem, kernel_arch(device_index), _sm_count(device_index), split_override,
                            memory_tbps(device_index))
    # A flat copy (a 3-D input that is no view of [rows, K]) is contiguous: its row stride is K.
    lda = k if flat_copy else a2.stride(0)

    def prepare(launch: Launch, pick: dict) -> tuple:
        """(kernel, grid, the params' tail) of one launch."""
        kernel = _load(launch, a.device)
        tile = launch.rows_per_cta
        ints = dict(num_routes=rows, n=n, k=k, num_experts=e, evict_first_tiles=evict_first_tiles(launch, k), **pick)
        if routing_name == "contiguous":
            grid_y = -(-rows // tile)
        elif routing_name == "contiguous_offsets":
            grid_y = -(-rows // tile) + e  # tiles never straddle experts: at most ceil(M / tile) + E
        else:  # CTAs per expert: its max_m rows in tiles
            max_m = rows // e
            ints.update(ctas_per_block=-(-max_m // tile), max_m=max_m)
            grid_y = e * ints["ctas_per_block"]
        grid, scratch = _launch_grid(kernel, launch, a.device, k,
                                     (-(-n // launch.cols_per_cta), grid_y, launch.split_k),
                                     f"{routing_name} over {rows} rows of a in tiles of {tile} rows ({e} experts)")
        return kernel, grid, _PARAMS_TAIL.pack(lda, out.stride(0), *(ints.get(name, 0) for name in _INTS), *scratch)

    paired = None
    if launch.pick:  # two kernels back to back, of which the device runs one (dispatch.Launch.pick)
        other, cost, other_cost = launch.pick
        kernel, grid, tail = prepare(launch, dict(pick_rows=other.rows_per_cta, pick_cost=cost,
                                                  pick_other_cost=other_cost, pick_first=1))
        paired = (other, *prepare(other, dict(pick_rows=launch.rows_per_cta, pick_cost=other_cost,
                                              pick_other_cost=cost, pick_first=0)))
    elif launch.dual:  # one kernel holding two tile heights (dispatch.Launch.dual): the same pick, one launch
        tall_rows, cost, tall_cost = launch.dual
        kernel, grid, tail = prepare(launch, dict(pick_rows=tall_rows, pick_cost=cost, pick_other_cost=tall_cost,
                                                  pick_first=1))
    else:
        kernel, grid, tail = prepare(launch, {})
    # Launches with tensor maps (either of a pair: the mma tile and a tile loop pair up too): each
    # launch's parameters after the pointers, by (a, qweight, scale) address (_grouped_params); the
    # maps are encoded once per address, not looked up per call.
    tails = {} if launch.tensor_maps or (paired and paired[0].tensor_maps) else None
    return (kernel, launch, grid, (launch.spec.threads, 1, 1), flat_copy, _ROUTE_SLOT[routing_name], tail, device_index,
            tails, paired)


_grouped_plans: dict = {}
_GROUPED_FORMS = {"contiguous": _CONTIGUOUS, "contiguous_offsets": _OFFSETS, "masked": _MASKED}


def _grouped_cuda(routing_name: str, a: torch.Tensor, packed: PackedW4A16, route: torch.Tensor,
                  out: torch.Tensor, expected_m) -> None:
    """The launch path: a plan lookup keyed on the call's signature, then pack and launch."""
    qw = packed.qweight
    key = (routing_name, a.shape, a.stride(), a.dtype, a.get_device(), qw.shape, qw.get_device(), packed.block_k,
           route.shape, route.dtype, route.get_device(), out.shape, out.stride(), out.dtype, out.get_device(),
           expected_m, env.raw(env.GROUPED_SPLIT_K))  # overrides: as jit.fast_call._FORM_ENV
    plan = _grouped_plans.get(key)
    if plan is None:
        plan = _grouped_plans[key] = _grouped_plan(routing_name, a, packed, route, out, expected_m,
                                                   env.text(key[-1], "auto"))
    kernel, launch, grid, block, flat_copy, _, _, device_index, tails_by_address, paired = plan
    first, second = _grouped_params(plan, a, packed, route, out)
    stream = _current_stream(device_index)
    kernel.launch(grid, block, launch.smem_bytes, stream, first)
    launches = [(kernel, grid, block, launch.smem_bytes, first)]
    if paired:  # the pair's second kernel, on the same stream (graph-capturable): one of the two works
        other, kernel, grid, _ = paired
        kernel.launch(grid, (other.spec.threads, 1, 1), other.smem_bytes, stream, second)
        launches.append((kernel, grid, (other.spec.threads, 1, 1), other.smem_bytes, second))
    if fast_call.recording and not flat_copy:  # the next such call launches from C++ (a flat copy stays here)
        fast_call.remember(_GROUPED_FORMS[routing_name], (expected_m, packed.block_k, None),
                           (a, packed.qweight, packed.scale, out), (route,), launches, device_index,
                           () if tails_by_address is None else (0, 1, 2))  # a's and the weight's maps


def _grouped_launch(routing_name: str, a: torch.Tensor, packed: PackedW4A16, route: torch.Tensor,
                    out: torch.Tensor, expected_m) -> None:
    """The CUDA call: the fast call where it knows the call, else the Python path (which records
    its launch there, with these arguments)."""
    if not _fast_call(_GROUPED_FORMS[routing_name], expected_m, packed.block_k, None, a, packed.qweight, packed.scale,
                      out, route, None, None):
        _grouped_cuda(routing_name, a, packed, route, out, expected_m)


def _grouped_params(plan: tuple, a: torch.Tensor, packed: PackedW4A16, route: torch.Tensor,
                    out: torch.Tensor) -> tuple[bytes, bytes | None]:
    """A grouped call's parameters: its launch's, and the pair's second launch's (else None).
    Per call only pointers are packed; with tensor maps the rest (the ints, then the weight's and
    the activations' maps) is looked up by the addresses it encodes (a tensor map is a function of
    its address and the plan's shapes), so the maps are encoded once, not looked up per call."""
    _, launch, _, _, flat_copy, slot, tail, _, tails_by_address, paired = plan
    if flat_copy:
        a = a.reshape(-1, a.shape[-1])
    a_ptr, qw_ptr, scale_ptr, r = a.data_ptr(), packed.qweight.data_ptr(), packed.scale.data_ptr(), route.data_ptr()
    if a_ptr % 16:
        _misaligned(a_ptr)
    pointers = _PARAMS_POINTERS.pack(a_ptr, qw_ptr, scale_ptr, out.data_ptr(), 0, 0, 0,
                                     r if slot == 7 else 0, r if slot == 8 else 0, r if slot == 9 else 0)  # _ROUTE_SLOT
    if tails_by_address is None:  # no tensor maps in either launch (no such pair today: a tile loop has them)
        return pointers + tail, (pointers + paired[3] if paired else None)
    key = (a_ptr, qw_ptr, scale_ptr)
    tails = tails_by_address.get(key) or _remember(
        tails_by_address, key, lambda: (tail + _maps_tail(packed, a, launch),
                                        paired[3] + _maps_tail(packed, a, paired[0]) if paired else b""))
    return pointers + tails[0], (pointers + tails[1] if paired else None)


def _maps_tail(packed: PackedW4A16, a: torch.Tensor, launch: Launch) -> bytes:
    """The tensor maps a grouped launch's parameters end with: none, the weight's
    (MoeTmaParams), or those and the activations' (MoeTmaActParams, the tile loop)."""
    if not launch.tensor_maps:
        return b""
    tail = _tma_params_tail(packed, launch)
    return tail + tma.activation_map(a, launch.act_map_rows) if launch.act_map_rows else tail


def _validating(validate: bool | None) -> bool:
    return validate if validate is not None else env.flag(env.VALIDATE_ROUTING)


def contiguous(a: torch.Tensor, packed: PackedW4A16, m_indices: torch.Tensor, out: torch.Tensor | None = None,
               *, validate: bool | None = None) -> torch.Tensor:
    """Grouped GEMM, DeepGEMM contiguous form: ``a`` [m, K] rows grouped by expert, each expert's
    segment 128-row aligned; ``m_indices`` int32 [m] = expert of each row, -1 on padding rows.
    Returns ``out`` [m, N] with ``out[i] = a[i] @ W[m_indices[i]]^T``; padding rows unspecified."""
    _require_mode(packed, "contiguous")
    if a.is_cuda:  # the hot path: checks run once per signature, in the plan
        if out is None:
            _require(a.dim() == 2, f"a must be [m, K] and m_indices [m]; got {tuple(a.shape)} and "
                                   f"{tuple(m_indices.shape)}")
            out = torch.empty(a.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
        if _validating(validate):
            _grouped_checks("contiguous", a, packed, m_indices)
            routing.validate_m_indices(m_indices, packed.num_experts)
        _grouped_launch("contiguous", a, packed, m_indices, out, 0)
        return out
    _grouped_checks("contiguous", a, packed, m_indices)
    if _validating(validate):
        routing.validate_m_indices(m_indices, packed.num_experts)
    if out is None:
        out = torch.empty(a.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
    if a.device.type != "cpu":
        _grouped_cuda("contiguous", a, packed, m_indices, out, 0)
        return out
    valid = m_indices >= 0  # the reference, writing only the rows the kernel writes
    out[valid] = reference.moe_contiguous_reference(a, reference.dequantize_w4a16(packed), m_indices)[valid]
    return out


def contiguous_offsets(a: torch.Tensor, packed: PackedW4A16, expert_offsets: torch.Tensor,
                       out: torch.Tensor | None = None, *, expected_m: int | None = None,
                       validate: bool | None = None) -> torch.Tensor:
    """Grouped GEMM, vLLM grouped_contiguous form: rows ``[expert_offsets[e], expert_offsets[e+1])``
    of ``a`` [M, K] belong to expert e, no alignment; ``expert_offsets`` int64 [E+1] on the device
    (rows past ``expert_offsets[-1]`` are never written; the prefill tile loop may read them, within
    ``a``, as part of a tile's box, and never uses them). ``expected_m`` (rows per
    expert, a host hint like vLLM's valid_shape_m / E) only steers the launch."""
    _require_mode(packed, "contiguous")
    if a.is_cuda:  # the hot path: checks run once per signature, in the plan
        if out is None:
            _require(a.dim() == 2, f"a must be [M, K], got shape {tuple(a.shape)}")
            out = torch.empty(a.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
        if _validating(validate):
            _grouped_checks("contiguous_offsets", a, packed, expert_offsets)
            routing.validate_offsets(expert_offsets, a.shape[0])
        _grouped_launch("contiguous_offsets", a, packed, expert_offsets, out, expected_m)
        return out
    _grouped_checks("contiguous_offsets", a, packed, expert_offsets)
    if _validating(validate):
        routing.validate_offsets(expert_offsets, a.shape[0])
    if out is None:
        out = torch.empty(a.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
    if a.device.type != "cpu":
        _grouped_cuda("contiguous_offsets", a, packed, expert_offsets, out, expected_m)
        return out
    m_indices = routing.offsets_to_m_indices(expert_offsets, a.shape[0])
    valid = m_indices >= 0
    out[valid] = reference.moe_contiguous_reference(a, reference.dequantize_w4a16(packed), m_indices)[valid]
    return out


def masked(a: torch.Tensor, packed: PackedW4A16, masked_m: torch.Tensor, expected_m: int,
           out: torch.Tensor | None = None, *, validate: bool | None = None) -> torch.Tensor:
    """Grouped GEMM, masked form: ``a`` [G*max_m, K] or [G, max_m, K]; ``masked_m`` int32 [G] is
    authoritative (rows ``i < masked_m[g]`` of group g are computed); ``expected_m`` (a positive
    int) only steers the launch. Returns the flat ``out`` [G*max_m, N]; rows past masked_m[g] are
    unspecified (never written; the prefill tile loop may read them, within ``a``, as part of a
    tile's box, and never uses them)."""
    _require_mode(packed, "masked")
    if not (isinstance(expected_m, int) and expected_m > 0):  # the message only when it fails
        raise ValueError(f"expected_m must be a positive int, got {expected_m!r}")
    g = packed.num_experts
    if a.is_cuda:  # the hot path: checks run once per signature, in the plan
        if out is None:
            _require(a.dim() in (2, 3), _masked_shape_message(a, g))
            rows = a.shape[0] * (a.shape[1] if a.dim() == 3 else 1)
            out = torch.empty(rows, packed.n, dtype=torch.bfloat16, device=a.device)
        if _validating(validate):
            _grouped_checks("masked", a, packed, masked_m)
            routing.validate_masked(masked_m, g, a.shape[0] * (a.shape[1] if a.dim() == 3 else 1) // g)
        _grouped_launch("masked", a, packed, masked_m, out, expected_m)
        return out
    _grouped_checks("masked", a, packed, masked_m)
    a2 = a.reshape(-1, a.shape[-1])
    max_m = a2.shape[0] // g
    if _validating(validate):
        routing.validate_masked(masked_m, g, max_m)
    if out is None:
        out = torch.empty(a2.shape[0], packed.n, dtype=torch.bfloat16, device=a.device)
    if a.device.type != "cpu":
        _grouped_cuda("masked", a, packed, masked_m, out, expected_m)
        return out
    valid = (torch.arange(max_m)[None, :] < masked_m[:, None].long()).reshape(-1)  # only the rows the kernel writes
    out[valid] = reference.moe_masked_reference(a2, reference.dequantize_w4a16(packed), masked_m)[valid]
    return out
