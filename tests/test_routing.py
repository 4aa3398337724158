"""CPU tests of chord_kernels.routing: literal small cases, property tests against a
plain-Python reference, converter round trips, and the validators (accept helper output,
reject each kind of corruption). The no-host-sync guarantee is checked on CUDA in
tests/gpu/test_routing_gpu.py."""

from __future__ import annotations

import pytest
import torch
from chord_kernels import routing as R
from chord_kernels.routing import RoutingError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

I32 = torch.int32
I64 = torch.int64


def t32(values):
    return torch.tensor(values, dtype=I32)


def t64(values):
    return torch.tensor(values, dtype=I64)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.equal(actual, expected), f"\n{actual}\n!=\n{expected}"


# M=3, top_k=2, 4 experts. Routes r: 0->e2, 1->e0, 2->e0, 3->e3, 4->e2, 5->e2; e1 empty.
TOPK = t32([[2, 0], [0, 3], [2, 2]])
# keeps global experts 1 and 3 as local 0 and 1: only route 3 (global 3 -> local 1) survives
EMAP = t32([-1, 0, -1, 1])
S = 6  # sentinel = numel


# ---------------------------------------------------------------------------------------
# Hand-computed cases
# ---------------------------------------------------------------------------------------


def test_indexed_buffer_sizes_literal():
    assert R.indexed_buffer_sizes(6, 4, 4) == (18, 5)  # 6 + 4*3 = 18, ceil(18/4) = 5
    assert R.indexed_buffer_sizes(2, 4, 4) == (8, 2)  # fewer routes than experts: 2*4
    assert R.indexed_buffer_sizes(3, 4, 1) == (3, 3)
    assert R.indexed_buffer_sizes(0, 4, 64) == (0, 0)
    assert R.indexed_buffer_sizes(8 * 4, 384, 64) == (8 * 4 * 64, 32)
    assert R.indexed_buffer_sizes(1000, 384, 64) == (1000 + 384 * 63, 394)


def test_aligned_rows_literal():
    assert R.aligned_rows(6, 4, 4) == 20  # ceil(18/4)*4
    assert R.aligned_rows(0, 2, 128) == 256
    assert R.aligned_rows(1, 1, 128) == 128
    assert R.aligned_rows(6, 4, 1) == 6


def test_moe_align_literal():
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(TOPK, 4, 4, validate=True)
    assert_same(sorted_ids, t32([1, 2, S, S, 0, 4, 5, S, 3, S, S, S] + [S] * 6))
    assert_same(expert_ids, t32([0, 2, 3, 0, 0]))
    assert_same(ntp, t32([12]))


def test_moe_align_literal_block1_and_int64_ids():
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(TOPK.long(), 1, 4)
    assert_same(sorted_ids, t32([1, 2, 0, 4, 5, 3]))
    assert_same(expert_ids, t32([0, 0, 2, 2, 2, 3]))
    assert_same(ntp, t32([6]))


def test_moe_align_literal_expert_map():
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(TOPK, 4, 4, EMAP, validate=True)
    assert_same(sorted_ids, t32([3] + [S] * 17))
    assert_same(expert_ids, t32([1, 0, 0, 0, 0]))
    assert_same(ntp, t32([4]))


def test_moe_align_literal_fewer_routes_than_experts():
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(t32([[3], [1]]), 4, 8)
    assert_same(sorted_ids, t32([1, 2, 2, 2, 0, 2, 2, 2]))
    assert_same(expert_ids, t32([1, 3]))
    assert_same(ntp, t32([8]))


def test_moe_align_empty_batch():
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(torch.zeros(0, 8, dtype=I64), 16, 4)
    assert_same(sorted_ids, t32([]))
    assert_same(expert_ids, t32([]))
    assert_same(ntp, t32([0]))


def test_moe_align_invalid_ids_dropped():
    # -1 and 9 are not experts in [0, 4): dropped like non-local experts
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(t32([[-1, 1], [9, 1]]), 2, 4)
    assert_same(sorted_ids, t32([1, 3, 4, 4, 4, 4, 4, 4]))
    assert_same(expert_ids, t32([1, 0, 0, 0]))
    assert_same(ntp, t32([2]))


def test_contiguous_offsets_literal():
    offsets, inv_perm = R.contiguous_offsets(TOPK, 4, validate=True)
    assert_same(offsets, t64([0, 2, 2, 5, 6]))
    assert_same(inv_perm, t32([[2, 0], [1, 5], [3, 4]]))


def test_contiguous_offsets_literal_expert_map():
    offsets, inv_perm = R.contiguous_offsets(TOPK, 2, EMAP)
    assert_same(offsets, t64([0, 0, 1]))
    assert_same(inv_perm, t32([[-1, -1], [-1, 0], [-1, -1]]))


def test_contiguous_aligned_literal():
    m_indices, route_rows = R.contiguous_aligned(TOPK, 4, alignment=4, validate=True)
    assert_same(m_indices, t32([0, 0, -1, -1, 2, 2, 2, -1, 3] + [-1] * 11))
    assert_same(route_rows, t32([[4, 0], [1, 8], [5, 6]]))


def test_contiguous_aligned_literal_expert_map_default_alignment():
    m_indices, route_rows = R.contiguous_aligned(TOPK, 2, EMAP)
    # aligned_rows(6, 2) = ceil((6 + 2*127) / 128) * 128 = 384; empty expert 0 takes no rows
    assert_same(m_indices, t32([1] + [-1] * 383))
    assert_same(route_rows, t32([[-1, -1], [-1, 0], [-1, -1]]))


def test_masked_layout_literal():
    masked_m, slots = R.masked_layout(TOPK, 4, 2)
    assert_same(masked_m, t32([2, 0, 3, 1]))  # true counts: e2 overflows max_m=2
    assert_same(slots, t32([[4, 0], [1, 6], [5, -1]]))  # route 5 is e2's third: dropped


def test_masked_layout_literal_expert_map():
    masked_m, slots = R.masked_layout(TOPK, 2, 3, EMAP, validate=True)
    assert_same(masked_m, t32([0, 1]))
    assert_same(slots, t32([[-1, -1], [-1, 3], [-1, -1]]))


def test_converters_literal():
    offsets = t64([0, 2, 2, 5, 6])
    assert_same(R.offsets_to_counts(offsets), t32([2, 0, 3, 1]))
    assert_same(R.counts_to_offsets(t32([2, 0, 3, 1])), offsets)
    assert_same(R.offsets_to_m_indices(offsets, 8), t32([0, 0, 2, 2, 2, 3, -1, -1]))
    assert_same(R.m_indices_to_counts(t32([0, 0, -1, 2, 2, 2, 3, -1]), 4), t32([2, 0, 3, 1]))
    assert_same(R.align_offsets(offsets, 4), t64([0, 4, 4, 8, 12]))
    assert_same(R.aligned_row_of_rows(offsets, 8, 4), t32([0, 1, 4, 5, 6, 8, -1, -1]))
    assert_same(R.aligned_m_indices_from_offsets(offsets, 4, 14),
                t32([0, 0, -1, -1, 2, 2, 2, -1, 3, -1, -1, -1, -1, -1]))
    # int32 offsets are accepted too
    assert_same(R.offsets_to_counts(offsets.int()), t32([2, 0, 3, 1]))


def test_converters_empty():
    offsets = t64([0, 0, 0])
    assert_same(R.offsets_to_counts(offsets), t32([0, 0]))
    assert_same(R.offsets_to_m_indices(offsets, 3), t32([-1, -1, -1]))
    assert_same(R.aligned_row_of_rows(offsets, 0), t32([]))
    assert_same(R.m_indices_to_counts(t32([]), 2), t32([0, 0]))
    assert_same(R.counts_to_offsets(t32([])), t64([0]))


# ---------------------------------------------------------------------------------------
# Plain-Python reference and random routings
# ---------------------------------------------------------------------------------------


def ref_groups(topk: torch.Tensor, num_local: int, emap: torch.Tensor | None) -> list[list[int]]:
    """Route ids of each local expert, ascending (dropped routes omitted)."""
    groups: list[list[int]] = [[] for _ in range(num_local)]
    table = None if emap is None else emap.tolist()
    for r, g in enumerate(topk.reshape(-1).tolist()):
        e = g if table is None else (table[g] if 0 <= g < len(table) else -1)
        if 0 <= e < num_local:
            groups[e].append(r)
    return groups


def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


@st.composite
def routings(draw, max_m: int = 40):
    """(topk_ids, num_global_experts, expert_map or None, num_local)."""
    m = draw(st.integers(0, max_m))
    top_k = draw(st.integers(1, 8))
    n_exp = draw(st.integers(1, 16))
    kind = draw(st.sampled_from(["uniform", "one_expert", "skewed", "few_experts"]))
    if kind == "uniform":
        ids = draw(st.lists(st.integers(0, n_exp - 1), min_size=m * top_k, max_size=m * top_k))
    elif kind == "one_expert":
        ids = [draw(st.integers(0, n_exp - 1))] * (m * top_k)
    elif kind == "skewed":  # mostly expert 0, a few elsewhere
        ids = draw(st.lists(st.sampled_from([0] * 6 + list(range(n_exp))),
                            min_size=m * top_k, max_size=m * top_k))
    else:  # only a couple of experts used, the rest empty
        used = draw(st.lists(st.integers(0, n_exp - 1), min_size=1, max_size=2))
        ids = draw(st.lists(st.sampled_from(used), min_size=m * top_k, max_size=m * top_k))
    dtype = draw(st.sampled_from([I32, I64]))
    topk = torch.tensor(ids, dtype=dtype).reshape(m, top_k)
    emap = None
    num_local = n_exp
    if draw(st.booleans()):
        local_set = draw(st.lists(st.integers(0, n_exp - 1), unique=True, max_size=n_exp))
        table = [-1] * n_exp
        for i, g in enumerate(local_set):
            table[g] = i
        emap = t32(table)
        num_local = max(len(local_set), 1)
    return topk, n_exp, emap, num_local


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(routings(), st.sampled_from([1, 4, 8, 16, 64]))
def test_moe_align_matches_reference(case, block_m):
    topk, n_exp, emap, _ = case
    numel = topk.numel()
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(topk, block_m, n_exp, emap)

    max_padded, num_blocks = R.indexed_buffer_sizes(numel, n_exp, block_m)
    groups = ref_groups(topk, n_exp, emap)
    ref_sorted, ref_experts = [], []
    for e, rows in enumerate(groups):
        seg = rows + [numel] * (round_up(len(rows), block_m) - len(rows))
        ref_sorted += seg
        ref_experts += [e] * (len(seg) // block_m)
    assert len(ref_sorted) <= max_padded
    assert_same(ntp, t32([len(ref_sorted)]))
    assert_same(sorted_ids, t32(ref_sorted + [numel] * (max_padded - len(ref_sorted))))
    assert_same(expert_ids, t32(ref_experts + [0] * (num_blocks - len(ref_experts))))

    # invariants stated directly as well
    kept = [r for rows in groups for r in rows]
    real = [v for v in sorted_ids.tolist() if v != numel]
    assert sorted(real) == sorted(kept) and len(set(real)) == len(real)
    assert int(ntp) % block_m == 0
    R.validate_indexed(sorted_ids, expert_ids, ntp, numel, n_exp, block_m,
                       topk_ids=topk, expert_map=emap)


@PROPS
@given(routings())
def test_contiguous_offsets_matches_reference(case):
    topk, _, emap, num_local = case
    offsets, inv_perm = R.contiguous_offsets(topk, num_local, emap)
    groups = ref_groups(topk, num_local, emap)
    ref_inv = [-1] * topk.numel()
    row = 0
    for rows in groups:
        for r in rows:
            ref_inv[r] = row
            row += 1
    assert_same(offsets, R.counts_to_offsets(t32([len(g) for g in groups])))
    assert_same(inv_perm, t32(ref_inv).reshape(topk.shape))
    # destinations of kept routes are exactly 0..offsets[-1]-1, each once
    dest = sorted(v for v in inv_perm.flatten().tolist() if v >= 0)
    assert dest == list(range(int(offsets[-1])))
    R.validate_offsets(offsets, topk.numel())


@PROPS
@given(routings(), st.sampled_from([1, 4, 8, 128]))
def test_contiguous_aligned_matches_reference(case, alignment):
    topk, _, emap, num_local = case
    m_indices, route_rows = R.contiguous_aligned(topk, num_local, emap, alignment)
    groups = ref_groups(topk, num_local, emap)
    num_rows = R.aligned_rows(topk.numel(), num_local, alignment)
    ref_m, ref_rows = [], [-1] * topk.numel()
    for e, rows in enumerate(groups):
        for r in rows:
            ref_rows[r] = len(ref_m)
            ref_m.append(e)
        ref_m += [-1] * (round_up(len(rows), alignment) - len(rows))
    assert len(ref_m) <= num_rows and num_rows % alignment == 0
    assert_same(m_indices, t32(ref_m + [-1] * (num_rows - len(ref_m))))
    assert_same(route_rows, t32(ref_rows).reshape(topk.shape))
    # each route's row carries its expert
    flat = route_rows.flatten()
    kept = flat >= 0
    assert torch.equal(m_indices[flat[kept].long()],
                       R._local_experts(topk, num_local, emap)[kept].int())
    R.validate_m_indices(m_indices, num_local, alignment)


@PROPS
@given(routings(), st.integers(0, 12))
def test_masked_layout_matches_reference(case, max_m):
    topk, _, emap, num_local = case
    masked_m, slots = R.masked_layout(topk, num_local, max_m, emap)
    groups = ref_groups(topk, num_local, emap)
    ref_slots = [-1] * topk.numel()
    for e, rows in enumerate(groups):
        for rank, r in enumerate(rows[:max_m]):
            ref_slots[r] = e * max_m + rank
    assert_same(masked_m, t32([len(g) for g in groups]))
    assert_same(slots, t32(ref_slots).reshape(topk.shape))
    if all(len(g) <= max_m for g in groups):
        R.validate_masked(masked_m, num_local, max_m)
    else:
        with pytest.raises(RoutingError, match="masked_m"):
            R.validate_masked(masked_m, num_local, max_m)


@PROPS
@given(routings(), st.sampled_from([1, 4, 16, 128]), st.integers(0, 10))
def test_converters_round_trip(case, alignment, extra_rows):
    topk, _, emap, num_local = case
    offsets, inv_perm = R.contiguous_offsets(topk, num_local, emap)
    counts = R.offsets_to_counts(offsets)
    total = int(offsets[-1])
    assert_same(R.counts_to_offsets(counts), offsets)

    # offsets -> m_indices -> counts, with rows past the end
    num_rows = total + extra_rows
    m_rows = R.offsets_to_m_indices(offsets, num_rows)
    assert_same(R.m_indices_to_counts(m_rows, num_local), counts)
    assert (m_rows[total:] == -1).all()

    # the aligned row map agrees with contiguous_aligned, route by route
    m_aligned, route_rows = R.contiguous_aligned(topk, num_local, emap, alignment)
    row_map = R.aligned_row_of_rows(offsets, num_rows, alignment)
    assert (row_map[total:] == -1).all()
    kept = inv_perm >= 0
    assert torch.equal(row_map[inv_perm[kept].long()], route_rows[kept])
    assert_same(R.aligned_m_indices_from_offsets(offsets, alignment, m_aligned.numel()), m_aligned)
    assert_same(R.m_indices_to_counts(m_aligned, num_local), counts)
    # aligned segment starts are where each non-empty expert's rows begin
    starts = R.align_offsets(offsets, alignment)
    assert int(starts[-1]) <= m_aligned.numel()
    firsts = _segment_firsts(m_aligned, num_local)
    assert all(f == int(starts[e]) for e, f in enumerate(firsts) if f >= 0)

    # masked_m <-> offsets are the same converters
    masked_m, _ = R.masked_layout(topk, num_local, max(1, topk.numel()), emap)
    assert_same(R.counts_to_offsets(masked_m), offsets)


def _segment_firsts(m_indices: torch.Tensor, num_experts: int) -> list[int]:
    """First row of each expert in m_indices (-1 if absent), by a host loop."""
    firsts = [-1] * num_experts
    for i, e in enumerate(m_indices.tolist()):
        if e >= 0 and firsts[e] < 0:
            firsts[e] = i
    return firsts


def test_all_builders_agree_on_counts():
    topk = torch.randint(0, 7, (33, 5), generator=torch.Generator().manual_seed(0))
    offsets, _ = R.contiguous_offsets(topk, 7)
    masked_m, _ = R.masked_layout(topk, 7, 1000)
    m_indices, _ = R.contiguous_aligned(topk, 7)
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(topk, 1, 7)
    counts = R.offsets_to_counts(offsets)
    assert_same(masked_m, counts)
    assert_same(R.m_indices_to_counts(m_indices, 7), counts)
    assert_same(R.m_indices_to_counts(expert_ids[: int(ntp)], 7), counts)
    assert_same(counts.long(), torch.bincount(topk.flatten(), minlength=7))


# ---------------------------------------------------------------------------------------
# Validation switch
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("1", True), ("TRUE", True), ("yes", True), (" On ", True),
    ("0", False), ("false", False), ("", False), ("2", False),
])
def test_validation_enabled_env(monkeypatch, value, expected):
    monkeypatch.setenv("CHORD_VALIDATE_ROUTING", value)
    assert R.validation_enabled() is expected
    assert R.validation_enabled(True) is True
    assert R.validation_enabled(False) is False


def test_validation_enabled_unset(monkeypatch):
    monkeypatch.delenv("CHORD_VALIDATE_ROUTING", raising=False)
    assert R.validation_enabled() is False


def test_masked_overflow_reported_in_validation_mode(monkeypatch):
    monkeypatch.setenv("CHORD_VALIDATE_ROUTING", "1")
    with pytest.raises(RoutingError, match=r"masked_m\[2\] = 3: exceeds max_m 2"):
        R.masked_layout(TOPK, 4, 2)
    R.masked_layout(TOPK, 4, 2, validate=False)  # the explicit flag wins
    monkeypatch.setenv("CHORD_VALIDATE_ROUTING", "0")
    R.masked_layout(TOPK, 4, 2)


def test_builders_self_validate(monkeypatch):
    monkeypatch.setenv("CHORD_VALIDATE_ROUTING", "on")
    R.moe_align_block_size(TOPK, 4, 4, EMAP)
    R.contiguous_offsets(TOPK, 4)
    R.contiguous_aligned(TOPK, 4, alignment=4)
    R.masked_layout(TOPK, 4, 3)


# ---------------------------------------------------------------------------------------
# Validators: accept helper output, reject each kind of corruption
# ---------------------------------------------------------------------------------------


def _indexed():
    sorted_ids, expert_ids, ntp = R.moe_align_block_size(TOPK, 4, 4)
    return sorted_ids.clone(), expert_ids.clone(), ntp.clone()


def test_validate_indexed_accepts():
    R.validate_indexed(*_indexed(), S, 4, 4, topk_ids=TOPK)
    R.validate_indexed(*R.moe_align_block_size(TOPK, 4, 4, EMAP), S, 4, 4,
                       topk_ids=TOPK, expert_map=EMAP)


def _corrupt_ntp_not_multiple(s, e, n):
    n[0] = 10


def _corrupt_ntp_too_big(s, e, n):
    n[0] = 20


def _corrupt_ntp_negative(s, e, n):
    n[0] = -4


def _corrupt_id_out_of_range(s, e, n):
    s[5] = 7


def _corrupt_id_negative(s, e, n):
    s[0] = -1


def _corrupt_duplicate_route(s, e, n):
    s[2] = 1


def _corrupt_real_after_sentinel(s, e, n):
    s[4], s[7] = S, 0  # block 1 = [S, 4, 5, 0]


def _corrupt_expert_out_of_range(s, e, n):
    e[1] = 4


def _corrupt_expert_negative(s, e, n):
    e[2] = -1


@pytest.mark.parametrize("corrupt, message", [
    (_corrupt_ntp_not_multiple, r"num_tokens_padded\[0\] = 10: not a multiple of block_m 4"),
    (_corrupt_ntp_too_big, r"num_tokens_padded\[0\] = 20: outside the buffers"),
    (_corrupt_ntp_negative, r"num_tokens_padded\[0\] = -4: outside the buffers"),
    (_corrupt_id_out_of_range, r"sorted_ids\[5\] = 7: neither a route id"),
    (_corrupt_id_negative, r"sorted_ids\[0\] = -1: neither a route id"),
    (_corrupt_duplicate_route, r"sorted_ids\[2\] = 1: route appears more than once"),
    (_corrupt_real_after_sentinel, r"sorted_ids\[5\] = 4: real entry after a sentinel in block 1"),
    (_corrupt_expert_out_of_range, r"expert_ids\[1\] = 4: not an expert"),
    (_corrupt_expert_negative, r"expert_ids\[2\] = -1: not an expert"),
])
def test_validate_indexed_rejects(corrupt, message):
    s, e, n = _indexed()
    corrupt(s, e, n)
    with pytest.raises(RoutingError, match=message):
        R.validate_indexed(s, e, n, S, 4, 4)


def test_validate_indexed_rejects_wrong_block_expert():
    s, e, n = _indexed()
    e[1] = 1  # block 1 holds expert-2 routes
    R.validate_indexed(s, e, n, S, 4, 4)  # structurally fine without topk_ids
    with pytest.raises(RoutingError, match=r"sorted_ids\[4\] = 0: route of local expert 2 .*expert_ids\[1\] = 1"):
        R.validate_indexed(s, e, n, S, 4, 4, topk_ids=TOPK)


def test_validate_indexed_rejects_missing_route():
    s, e, n = _indexed()
    s[8] = S  # route 3 removed
    with pytest.raises(RoutingError, match=r"route 3 \(local expert 3\) is missing"):
        R.validate_indexed(s, e, n, S, 4, 4, topk_ids=TOPK)


def test_validate_indexed_rejects_bad_types_and_shapes():
    s, e, n = _indexed()
    with pytest.raises(RoutingError, match="sorted_ids must have an integer dtype"):
        R.validate_indexed(s.float(), e, n, S, 4, 4)
    with pytest.raises(RoutingError, match=r"num_tokens_padded must have shape \[1\]"):
        R.validate_indexed(s, e, t32([12, 0]), S, 4, 4)
    with pytest.raises(RoutingError, match="expert_ids must be 1-D"):
        R.validate_indexed(s, e.reshape(1, -1), n, S, 4, 4)
    with pytest.raises(RoutingError, match="topk_ids has 4 routes"):
        R.validate_indexed(s, e, n, S, 4, 4, topk_ids=TOPK[:2])


def test_validate_m_indices_accepts():
    R.validate_m_indices(R.contiguous_aligned(TOPK, 4, alignment=4)[0], 4, 4)
    R.validate_m_indices(R.contiguous_aligned(TOPK, 2, EMAP)[0], 2)
    R.validate_m_indices(t32([-1, -1, -1, -1]), 4, 2)
    R.validate_m_indices(t32([]), 4)


@pytest.mark.parametrize("m, message", [
    ([0, 0, -1, -1, 4, -1], r"m_indices\[4\] = 4: not an expert in \[0, 4\)"),
    ([0, -2, -1, -1], r"m_indices\[1\] = -2: not an expert"),
    ([2, 2, -1, -1, 1, -1], r"m_indices\[4\] = 1: experts must be grouped in ascending order"),
    ([0, -1, 0, -1], r"m_indices\[2\] = 0: expert 0 appears in two segments"),
    ([0, 0, 0, 2, -1, -1], r"m_indices\[3\] = 2: segment of expert 2 does not start on a multiple"),
    ([-1, 1, -1, -1], r"m_indices\[1\] = 1: segment of expert 1 does not start"),
])
def test_validate_m_indices_rejects(m, message):
    with pytest.raises(RoutingError, match=message):
        R.validate_m_indices(t32(m), 4, 2)


def test_validate_m_indices_rejects_float():
    with pytest.raises(RoutingError, match="m_indices must have an integer dtype"):
        R.validate_m_indices(torch.zeros(4), 4, 2)


def test_validate_offsets_accepts():
    R.validate_offsets(R.contiguous_offsets(TOPK, 4)[0], 6)
    R.validate_offsets(t64([0]), 0)
    R.validate_offsets(t32([0, 3, 3]), 5)


@pytest.mark.parametrize("off, num_rows, message", [
    ([1, 2, 3], 6, r"expert_offsets\[0\] = 1: must be 0"),
    ([0, 3, 2, 4], 6, r"expert_offsets\[2\] = 2: smaller than the previous offset"),
    ([0, 3, 7], 6, r"expert_offsets\[2\] = 7: exceeds num_rows 6"),
    ([], 6, r"expert_offsets must have E \+ 1 >= 1 entries"),
])
def test_validate_offsets_rejects(off, num_rows, message):
    with pytest.raises(RoutingError, match=message):
        R.validate_offsets(t64(off), num_rows)


def test_validate_offsets_rejects_shape():
    with pytest.raises(RoutingError, match="expert_offsets must be 1-D"):
        R.validate_offsets(t64([[0, 1]]), 6)


def test_validate_masked_accepts():
    R.validate_masked(R.masked_layout(TOPK, 4, 3)[0], 4, 3)
    R.validate_masked(t32([0, 0]), 2, 0)


@pytest.mark.parametrize("m, message", [
    ([1, 4, 2], r"masked_m\[1\] = 4: exceeds max_m 3"),
    ([1, -1, 2], r"masked_m\[1\] = -1: negative row count"),
    ([1, 2], r"masked_m must have shape \[3\], got \(2,\)"),
])
def test_validate_masked_rejects(m, message):
    with pytest.raises(RoutingError, match=message):
        R.validate_masked(t32(m), 3, 3)


def test_routing_error_is_value_error():
    assert issubclass(RoutingError, ValueError)
