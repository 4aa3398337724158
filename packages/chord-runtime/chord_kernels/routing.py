"""MoE routing layouts in pure torch: same results on CPU and CUDA, no host sync.

Every builder turns ``topk_ids`` (``[M, top_k]`` global expert ids) into one of the row
layouts Chord's kernels consume. A *route* ``r = token * top_k + k`` indexes
``topk_ids.flatten()``; ``num_routes = M * top_k``. An optional ``expert_map`` (int32
``[num_experts_global]``) maps global -> local expert ids, ``-1`` for experts that live on
another rank; such routes are dropped. Ids outside ``[0, num_experts)`` are dropped too
(vLLM's ``ignore_invalid_experts=True``).

=======================================  =====================================================
builder                                  layout
=======================================  =====================================================
:func:`moe_align_block_size`             vLLM indexed: ``sorted_ids`` / ``expert_ids`` /
                                         ``num_tokens_padded``, segments padded to ``block_m``
:func:`contiguous_offsets`               vLLM grouped contiguous: ``expert_offsets`` +
                                         ``inv_perm``, no padding
:func:`contiguous_aligned`               DeepGEMM contiguous: ``m_indices`` (-1 padding),
                                         segments start on ``alignment`` rows
:func:`masked_layout`                    masked: ``masked_m`` + fixed ``max_m`` rows per expert
=======================================  =====================================================

All of them share one step, :func:`_rank_routes`: a stable sort of the routes by local
expert gives, for every route, its local expert, its rank among that expert's routes (in
ascending route id) and the exclusive prefix sum of the per-expert counts. A layout is
then "segment start of the expert + rank", computed with gathers and ``torch.where``.

"No host sync" (CUDA-graph safe): no ``.item()``/``.tolist()``/``.cpu()``, no boolean-mask
indexing, ``nonzero``, ``unique`` or ``bincount``, and every output shape is a function of
input *shapes* and Python ints only (hence the static buffer bounds
:func:`indexed_buffer_sizes` and :func:`aligned_rows`). The converters at the end move
between layouts on device under the same rules.

The ``validate_*`` functions are a debug aid and DO sync: they read tensors on the host and
raise :class:`RoutingError` naming the argument and the first bad index. The builders run
them on their own output when :func:`validation_enabled` says so (``validate=True`` or the
environment variable ``CHORD_VALIDATE_ROUTING=1``); this is how a masked-layout overflow
(``masked_m > max_m``) gets reported.
"""

from __future__ import annotations

import os

import torch

__all__ = [
    "RoutingError",
    "align_offsets",
    "aligned_m_indices_from_offsets",
    "aligned_row_of_rows",
    "aligned_rows",
    "contiguous_aligned",
    "contiguous_offsets",
    "counts_to_offsets",
    "indexed_buffer_sizes",
    "m_indices_to_counts",
    "masked_layout",
    "moe_align_block_size",
    "offsets_to_counts",
    "offsets_to_m_indices",
    "validate_indexed",
    "validate_m_indices",
    "validate_masked",
    "validate_offsets",
    "validation_enabled",
]

DEFAULT_ALIGNMENT = 128  # DeepGEMM's contiguous-layout row alignment (its BLOCK_M)
_ENV_VAR = "CHORD_VALIDATE_ROUTING"
_TRUTHY = {"1", "true", "yes", "on"}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------
# Static buffer sizes (Python ints only, so callers can allocate before routing is known)
# ---------------------------------------------------------------------------------------


def indexed_buffer_sizes(num_routes: int, num_experts: int, block_m: int) -> tuple[int, int]:
    """``(len(sorted_ids), len(expert_ids))`` exactly as vLLM's ``moe_align_block_size``.

    Worst case: every expert's segment wastes ``block_m - 1`` padding rows. With fewer
    routes than experts at most ``num_routes`` experts are used, each padding one route to
    at most ``block_m`` rows, hence the ``min``. ``num_experts`` is the GLOBAL count.
    """
    max_padded = num_routes + num_experts * (block_m - 1)
    if num_routes < num_experts:
        max_padded = min(num_routes * block_m, max_padded)
    return max_padded, _ceil_div(max_padded, block_m)


def aligned_rows(num_routes: int, num_local_experts: int, alignment: int = DEFAULT_ALIGNMENT) -> int:
    """Static row bound of the aligned contiguous layout.

    Each of the ``E`` segments is its count rounded up to ``alignment``, i.e. at most
    ``count + alignment - 1`` rows, so the total is at most
    ``num_routes + E * (alignment - 1)``; the used length is a multiple of ``alignment``, and
    rounding the bound up to one keeps the buffer a whole number of ``alignment`` blocks.
    """
    return _ceil_div(num_routes + num_local_experts * (alignment - 1), alignment) * alignment


# ---------------------------------------------------------------------------------------
# Shared internal steps
# ---------------------------------------------------------------------------------------


def _local_experts(topk_ids: torch.Tensor, num_local: int, expert_map: torch.Tensor | None) -> torch.Tensor:
    """Flat int64 local expert of each route; dropped routes get the bucket ``num_local``.

    Sending dropped routes to one extra bucket (instead of removing them) keeps every
    shape static; that bucket sorts last and is never part of any output.
    """
    ids = topk_ids.reshape(-1).long()
    if expert_map is not None:
        n_global = expert_map.numel()
        if n_global == 0:
            return torch.full_like(ids, num_local)
        in_range = (ids >= 0) & (ids < n_global)
        # clamp only so the gather stays in bounds; out-of-range ids are masked right after
        mapped = expert_map.long().gather(0, ids.clamp(0, n_global - 1))
        ids = torch.where(in_range, mapped, -1)
    kept = (ids >= 0) & (ids < num_local)
    return torch.where(kept, ids, num_local)


def _rank_routes(
    topk_ids: torch.Tensor, num_local: int, expert_map: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one grouping step behind every layout.

    Returns ``(local, rank, offsets)``: ``local`` int64 [numel] (``num_local`` = dropped),
    ``rank`` int64 [numel] = position of the route among its expert's routes in ascending
    route id, ``offsets`` int64 [num_local + 1] = exclusive prefix sum of kept counts.
    """
    local = _local_experts(topk_ids, num_local, expert_map)
    # stable sort: equal experts keep ascending route order, which is what fixes `rank`
    keys, perm = torch.sort(local, stable=True)
    # offsets[e] = number of routes with expert < e, found by binary search in the sorted
    # keys: a count per expert without bincount (which syncs on CUDA)
    buckets = torch.arange(num_local + 1, device=local.device)
    offsets = torch.searchsorted(keys, buckets)
    # offsets[num_local] (= kept count) is also the start of the dropped bucket, so the
    # gather below is in bounds for every key
    pos = torch.arange(keys.numel(), device=local.device)
    rank_sorted = pos - offsets.gather(0, keys)
    rank = torch.empty_like(rank_sorted).scatter_(0, perm, rank_sorted)
    return local, rank, offsets


def _place(local: torch.Tensor, rank: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Destination row ``starts[expert] + rank`` of each route, -1 if dropped (int64).

    ``starts`` has ``num_local + 1`` entries, so the dropped bucket gathers in bounds.
    """
    num_local = starts.numel() - 1
    return torch.where(local < num_local, starts.gather(0, local) + rank, -1)


def _segment_of(bounds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Index ``e`` with ``bounds[e] <= position < bounds[e + 1]`` (int64).

    ``right=True`` skips empty segments (repeated bounds); positions at or past
    ``bounds[-1]`` give ``len(bounds) - 1``, which callers mask.
    """
    return torch.searchsorted(bounds, positions, right=True) - 1


def _as_offsets(expert_offsets: torch.Tensor) -> torch.Tensor:
    return expert_offsets.long()


# ---------------------------------------------------------------------------------------
# Layout builders
# ---------------------------------------------------------------------------------------


def moe_align_block_size(
    topk_ids: torch.Tensor,
    block_m: int,
    num_experts: int,
    expert_map: torch.Tensor | None = None,
    *,
    validate: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's indexed layout: ``(sorted_ids, expert_ids, num_tokens_padded)``.

    ``sorted_ids`` int32 [max_padded]: route ids grouped by local expert ascending,
    ascending route id within an expert, each segment padded to a multiple of ``block_m``
    with the sentinel ``numel``; the tail past the used length is sentinel too.
    ``expert_ids`` int32 [num_blocks]: local expert of each block, 0 past the used range.
    ``num_tokens_padded`` int32 [1] on device. ``num_experts`` is the global count (it
    bounds the local ids and sizes the buffers, as in vLLM).
    """
    numel = topk_ids.numel()
    max_padded, num_blocks = indexed_buffer_sizes(numel, num_experts, block_m)
    local, rank, offsets = _rank_routes(topk_ids, num_experts, expert_map)
    padded = align_offsets(offsets, block_m)
    dest = _place(local, rank, padded)

    # one spare slot at the end swallows the writes of dropped routes, then is cut off
    buf = torch.full((max_padded + 1,), numel, dtype=torch.int32, device=topk_ids.device)
    routes = torch.arange(numel, dtype=torch.int32, device=topk_ids.device)
    buf.scatter_(0, torch.where(dest < 0, max_padded, dest), routes)
    sorted_ids = buf[:max_padded]

    block_starts = torch.arange(num_blocks, device=topk_ids.device) * block_m
    used = block_starts < padded[-1]
    expert_ids = torch.where(used, _segment_of(padded, block_starts), 0).to(torch.int32)
    num_tokens_padded = padded[-1:].to(torch.int32)

    if validation_enabled(validate):
        validate_indexed(sorted_ids, expert_ids, num_tokens_padded, numel, num_experts, block_m,
                         topk_ids=topk_ids, expert_map=expert_map)
    return sorted_ids, expert_ids, num_tokens_padded


def contiguous_offsets(
    topk_ids: torch.Tensor,
    num_local_experts: int,
    expert_map: torch.Tensor | None = None,
    *,
    validate: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's grouped-contiguous layout: ``(expert_offsets, inv_perm)``.

    ``expert_offsets`` int64 [E + 1], exclusive prefix sum of rows per local expert (no
    padding); ``inv_perm`` int32 [M, top_k], destination row of each route or -1 if dropped.
    """
    local, rank, offsets = _rank_routes(topk_ids, num_local_experts, expert_map)
    inv_perm = _place(local, rank, offsets).to(torch.int32).reshape(topk_ids.shape)
    if validation_enabled(validate):
        validate_offsets(offsets, topk_ids.numel())
    return offsets, inv_perm


def contiguous_aligned(
    topk_ids: torch.Tensor,
    num_local_experts: int,
    expert_map: torch.Tensor | None = None,
    alignment: int = DEFAULT_ALIGNMENT,
    *,
    validate: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepGEMM's contiguous layout: ``(m_indices, route_rows)``.

    ``m_indices`` int32 [aligned_rows(numel, E, alignment)]: local expert of each row, -1
    for padding rows and every row past the used range; each expert's segment starts on a
    multiple of ``alignment``. ``route_rows`` int32 [M, top_k]: row of each route, -1 if
    dropped.
    """
    local, rank, offsets = _rank_routes(topk_ids, num_local_experts, expert_map)
    num_rows = aligned_rows(topk_ids.numel(), num_local_experts, alignment)
    m_indices = aligned_m_indices_from_offsets(offsets, alignment, num_rows)
    route_rows = _place(local, rank, align_offsets(offsets, alignment))
    route_rows = route_rows.to(torch.int32).reshape(topk_ids.shape)
    if validation_enabled(validate):
        validate_m_indices(m_indices, num_local_experts, alignment)
    return m_indices, route_rows


def masked_layout(
    topk_ids: torch.Tensor,
    num_local_experts: int,
    max_m: int,
    expert_map: torch.Tensor | None = None,
    *,
    validate: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked layout: ``(masked_m, route_slots)``.

    ``masked_m`` int32 [E]: TRUE number of routes per local expert (may exceed ``max_m``;
    validation reports that). ``route_slots`` int32 [M, top_k]: ``e * max_m + rank``, or -1
    if the route is dropped or overflows (``rank >= max_m``).
    """
    local, rank, offsets = _rank_routes(topk_ids, num_local_experts, expert_map)
    kept = (local < num_local_experts) & (rank < max_m)
    route_slots = torch.where(kept, local * max_m + rank, -1)
    route_slots = route_slots.to(torch.int32).reshape(topk_ids.shape)
    masked_m = offsets_to_counts(offsets)
    if validation_enabled(validate):
        validate_masked(masked_m, num_local_experts, max_m)
    return masked_m, route_slots


# ---------------------------------------------------------------------------------------
# On-device converters (no sync)
# ---------------------------------------------------------------------------------------


def offsets_to_counts(expert_offsets: torch.Tensor) -> torch.Tensor:
    """int32 [E] rows per expert (also ``masked_m`` from offsets)."""
    off = _as_offsets(expert_offsets)
    return (off[1:] - off[:-1]).to(torch.int32)


def counts_to_offsets(counts: torch.Tensor) -> torch.Tensor:
    """int64 [E + 1] exclusive prefix sum, element 0 = 0 (also offsets from ``masked_m``)."""
    offsets = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=counts.device)
    offsets[1:] = counts.reshape(-1).cumsum(0, dtype=torch.int64)
    return offsets


def align_offsets(expert_offsets: torch.Tensor, alignment: int = DEFAULT_ALIGNMENT) -> torch.Tensor:
    """int64 [E + 1] segment starts when every count is rounded up to ``alignment``."""
    counts = offsets_to_counts(expert_offsets).long()
    return counts_to_offsets((counts + alignment - 1) // alignment * alignment)


def aligned_m_indices_from_offsets(
    expert_offsets: torch.Tensor, alignment: int, num_aligned_rows: int
) -> torch.Tensor:
    """int32 [num_aligned_rows] expert of each row of the aligned layout, -1 for padding.

    A row belongs to expert ``e`` if it lies in ``e``'s aligned segment and within its
    first ``count[e]`` rows; padding rows and rows past the end are -1.
    """
    off = _as_offsets(expert_offsets)
    starts = align_offsets(off, alignment)
    rows = torch.arange(num_aligned_rows, device=off.device)
    seg = _segment_of(starts, rows)  # in [0, E]; E only for rows past the end
    # pad counts with a 0 for the past-the-end segment so the gather stays in bounds
    counts = torch.cat([off[1:] - off[:-1], off.new_zeros(1)])
    real = rows - starts.gather(0, seg) < counts.gather(0, seg)
    return torch.where(real, seg, -1).to(torch.int32)


def offsets_to_m_indices(expert_offsets: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int32 [num_rows] expert of each unaligned row, -1 for rows >= ``offsets[-1]``."""
    return aligned_m_indices_from_offsets(expert_offsets, 1, num_rows)


def m_indices_to_counts(m_indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """int32 [E] number of rows per expert; -1 (and any out-of-range value) is not counted."""
    m = m_indices.reshape(-1).long()
    # invalid rows all land in one spare bucket that is cut off
    bucket = torch.where((m >= 0) & (m < num_experts), m, num_experts)
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=m.device)
    counts.scatter_add_(0, bucket, torch.ones_like(bucket))
    return counts[:num_experts].to(torch.int32)


def aligned_row_of_rows(
    expert_offsets: torch.Tensor, num_rows: int, alignment: int = DEFAULT_ALIGNMENT
) -> torch.Tensor:
    """int32 [num_rows]: for each unaligned row its row in the aligned layout, -1 past the end."""
    off = _as_offsets(expert_offsets)
    rows = torch.arange(num_rows, device=off.device)
    seg = _segment_of(off, rows)  # E (in bounds of both tables) for rows past the end
    aligned = align_offsets(off, alignment).gather(0, seg) + rows - off.gather(0, seg)
    return torch.where(rows < off[-1], aligned, -1).to(torch.int32)


# ---------------------------------------------------------------------------------------
# Validation (debug only; these functions DO sync with the host)
# ---------------------------------------------------------------------------------------


class RoutingError(ValueError):
    """A routing tensor breaks its layout's contract."""


def validation_enabled(flag: bool | None = None) -> bool:
    """``flag`` if given, else whether ``CHORD_VALIDATE_ROUTING`` is 1/true/yes/on."""
    if flag is not None:
        return bool(flag)
    return os.environ.get(_ENV_VAR, "").strip().lower() in _TRUTHY


def _host_ints(name: str, t: torch.Tensor, ndim: int = 1) -> list[int]:
    """Check ``t`` is an integer tensor of rank ``ndim`` and return its values (syncs)."""
    if not isinstance(t, torch.Tensor):
        raise RoutingError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise RoutingError(f"{name} must have an integer dtype, got {t.dtype}")
    if t.dim() != ndim:
        raise RoutingError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    return t.reshape(-1).tolist()


def _first_bad(name: str, values: list[int], ok, what: str, start: int = 0) -> None:
    """Raise for the first ``values[i]`` (i >= start) with ``not ok(i, v)``."""
    for i in range(start, len(values)):
        if not ok(i, values[i]):
            raise RoutingError(f"{name}[{i}] = {values[i]}: {what}")


def validate_offsets(expert_offsets: torch.Tensor, num_rows: int) -> None:
    """[E + 1], starts at 0, non-decreasing, last <= num_rows."""
    off = _host_ints("expert_offsets", expert_offsets)
    if not off:
        raise RoutingError("expert_offsets must have E + 1 >= 1 entries, got 0")
    if off[0] != 0:
        raise RoutingError(f"expert_offsets[0] = {off[0]}: must be 0")
    _first_bad("expert_offsets", off, lambda i, v: v >= off[i - 1],
               "smaller than the previous offset", start=1)
    if off[-1] > num_rows:
        raise RoutingError(f"expert_offsets[{len(off) - 1}] = {off[-1]}: exceeds num_rows {num_rows}")


def validate_masked(masked_m: torch.Tensor, num_experts: int, max_m: int) -> None:
    """Shape [E] and ``0 <= masked_m[e] <= max_m`` (larger means routes were dropped)."""
    m = _host_ints("masked_m", masked_m)
    if len(m) != num_experts:
        raise RoutingError(f"masked_m must have shape [{num_experts}], got {tuple(masked_m.shape)}")
    _first_bad("masked_m", m, lambda i, v: v >= 0, "negative row count")
    _first_bad("masked_m", m, lambda i, v: v <= max_m,
               f"exceeds max_m {max_m} (overflowing routes were dropped)")


def validate_m_indices(m_indices: torch.Tensor, num_experts: int, alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Values in [-1, E); experts in one ascending run each; each run starts on an aligned row."""
    m = _host_ints("m_indices", m_indices)
    _first_bad("m_indices", m, lambda i, v: -1 <= v < num_experts,
               f"not an expert in [0, {num_experts}) nor padding -1")
    prev = -1  # expert of the last non-padding row seen
    for i, v in enumerate(m):
        if v < 0 or (i > 0 and m[i - 1] == v):
            continue  # padding, or inside a run
        if v == prev:
            raise RoutingError(f"m_indices[{i}] = {v}: expert {v} appears in two segments")
        if v < prev:
            raise RoutingError(
                f"m_indices[{i}] = {v}: experts must be grouped in ascending order "
                f"(after expert {prev})")
        if i % alignment:
            raise RoutingError(
                f"m_indices[{i}] = {v}: segment of expert {v} does not start on a "
                f"multiple of alignment {alignment}")
        prev = v


def validate_indexed(
    sorted_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_tokens_padded: torch.Tensor,
    num_routes: int,
    num_experts: int,
    block_m: int,
    *,
    topk_ids: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
) -> None:
    """Check an indexed layout (sentinel = ``num_routes``) up to ``num_tokens_padded``.

    ``num_tokens_padded`` is a multiple of ``block_m`` inside both buffers; entries before
    it are route ids or the sentinel, each route at most once, and within a block the
    sentinels only follow the real entries; block experts before it are in [0, E).
    Given ``topk_ids`` (and ``expert_map``), also: every real entry's local expert is its
    block's expert, and every kept route appears.
    """
    ids = _host_ints("sorted_ids", sorted_ids)
    experts = _host_ints("expert_ids", expert_ids)
    ntp_list = _host_ints("num_tokens_padded", num_tokens_padded)
    if len(ntp_list) != 1:
        raise RoutingError(f"num_tokens_padded must have shape [1], got {tuple(num_tokens_padded.shape)}")
    ntp = ntp_list[0]
    if ntp < 0 or ntp > len(ids) or ntp > len(experts) * block_m:
        raise RoutingError(
            f"num_tokens_padded[0] = {ntp}: outside the buffers (sorted_ids has {len(ids)} "
            f"entries, expert_ids {len(experts)} blocks of {block_m})")
    if ntp % block_m:
        raise RoutingError(f"num_tokens_padded[0] = {ntp}: not a multiple of block_m {block_m}")

    used = ids[:ntp]
    _first_bad("sorted_ids", used, lambda i, v: 0 <= v <= num_routes,
               f"neither a route id in [0, {num_routes}) nor the sentinel {num_routes}")
    _first_bad("expert_ids", experts[: ntp // block_m], lambda i, v: 0 <= v < num_experts,
               f"not an expert in [0, {num_experts})")
    seen: set[int] = set()
    for i, v in enumerate(used):
        if v == num_routes:
            continue
        if v in seen:
            raise RoutingError(f"sorted_ids[{i}] = {v}: route appears more than once")
        if i % block_m and used[i - 1] == num_routes:
            raise RoutingError(f"sorted_ids[{i}] = {v}: real entry after a sentinel in block {i // block_m}")
        seen.add(v)
    if topk_ids is not None:
        _check_indexed_routes(used, experts, seen, topk_ids, expert_map, num_routes, num_experts, block_m)


def _check_indexed_routes(used, experts, seen, topk_ids, expert_map, num_routes, num_experts, block_m):
    """Real entries sit in their expert's blocks, and no kept route is missing."""
    if topk_ids.numel() != num_routes:
        raise RoutingError(f"topk_ids has {topk_ids.numel()} routes, expected num_routes = {num_routes}")
    local = _local_experts(topk_ids, num_experts, expert_map).tolist()
    for i, v in enumerate(used):
        if v != num_routes and local[v] != experts[i // block_m]:
            raise RoutingError(
                f"sorted_ids[{i}] = {v}: route of local expert {local[v]} in a block of "
                f"expert_ids[{i // block_m}] = {experts[i // block_m]}")
    for r, e in enumerate(local):
        if e < num_experts and r not in seen:
            raise RoutingError(f"sorted_ids: kept route {r} (local expert {e}) is missing")
