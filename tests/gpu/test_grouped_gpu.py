"""The grouped kernels on the GPU against the fp32 reference: DeepGEMM contiguous (m_indices,
128-row aligned, -1 padding), vLLM contiguous (expert offsets, no alignment) and masked
(masked_m authoritative, expected_m a hint). Outputs poisoned first; padding rows and rows past
masked_m are never written into; graph capture with counts changed between replays."""

import pytest
import torch
from chord_kernels import contiguous, contiguous_offsets, layouts, masked, routing
from chord_kernels.int4 import GROUP_SIZE, dequantize_codes

pytestmark = pytest.mark.gpu
POISON = float("nan")


@pytest.fixture(params=["auto", "wgmma_sk"], autouse=True)
def tile_family(request, monkeypatch):
    """Every test runs with the dispatch's choice, and again with every tile forced onto the wgmma
    tile's stream-K schedule (grouped dispatch takes no env override: the test patches its rule
    where grouped_launch reads it, the module chord_kernels.dispatch.grouped)."""
    from chord_kernels import ops
    from chord_kernels.dispatch import grouped

    if request.param != "auto":
        monkeypatch.setattr(grouped, "auto_tile_family", lambda rows, k: request.param)
        monkeypatch.setattr(grouped, "mid_batch_family", lambda rows, n, k: None)
        monkeypatch.setattr(ops, "_grouped_plans", {})
    return request.param


def weights(e, n, k, mode, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    codes = torch.randint(0, 16, (e, n, k), generator=g, device="cuda", dtype=torch.uint8)
    scale = (torch.rand(e, n, k // GROUP_SIZE, generator=g, device="cuda") * 0.02 + 1e-3).to(torch.bfloat16)
    return codes, scale, layouts.pack_w4a16(codes, scale, mode)


def ref_rows(a, codes, scale, rows, experts):
    """fp32 a[rows] @ W[experts]^T, one expert at a time."""
    out = torch.empty(rows.numel(), codes.shape[1], device="cuda")
    for e in experts.unique().tolist():
        sel = experts == e
        out[sel] = a[rows[sel]].float() @ dequantize_codes(codes[e], scale[e]).float().t()
    return out


def check(got, want):
    assert torch.isfinite(got).all(), "NaN/Inf (or an unwritten poisoned row) in valid rows"
    if want.numel():
        rel = ((got.float() - want).norm() / want.norm()).item()
        assert rel <= 5e-3, f"relative Frobenius error {rel:.2e}"


SHAPES = {"ep8_gate_up": (48, 4096, 7168), "ep8_down": (48, 7168, 2048), "ep32_down": (12, 7168, 2048),
          "small": (5, 80, 384)}
EP32_GATE_UP = (12, 4096, 7168)  # the split tail's and the 256 x 24 tile's tests only (SHAPES' tests run every shape)


def counts_for(e, total, skew, seed):
    g = torch.Generator().manual_seed(seed)
    p = (-torch.log(torch.rand(e, generator=g))) if skew else torch.ones(e)
    picks = torch.multinomial(p, total, replacement=True, generator=g) if total else torch.empty(0, dtype=torch.long)
    return torch.bincount(picks, minlength=e)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("total,skew", [(0, False), (7, False), (150, True), (1500, False)])
def test_contiguous_m_indices(shape, total, skew):
    e, n, k = SHAPES[shape]
    codes, scale, packed = weights(e, n, k, "contiguous")
    counts = counts_for(e, total, skew, seed=total)
    aligned = ((counts + 127) // 128) * 128
    m = max(int(aligned.sum()), 128)
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    start = 0
    for ex, (c, a_) in enumerate(zip(counts.tolist(), aligned.tolist(), strict=True)):
        m_indices[start:start + c] = ex
        start += a_
    m_indices = m_indices.cuda()
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    out = torch.full((m, n), POISON, dtype=torch.bfloat16, device="cuda")
    contiguous(a, packed, m_indices, out, validate=True)
    torch.cuda.synchronize()
    rows = (m_indices >= 0).nonzero().flatten()
    check(out[rows], ref_rows(a, codes, scale, rows, m_indices[rows].long()))
    assert torch.isnan(out[m_indices < 0].float()).all(), "a padding (-1) row was written"


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("total,skew", [(1, False), (37, True), (576, True), (900, False), (4000, True)])
def test_contiguous_offsets_unaligned(shape, total, skew):
    e, n, k = SHAPES[shape]
    codes, scale, packed = weights(e, n, k, "contiguous")
    counts = counts_for(e, total, skew, seed=total + 1)
    offsets = routing.counts_to_offsets(counts.to(torch.int32)).cuda()
    m = total + 13  # vLLM's buffers are over-allocated: rows past offsets[-1] must stay untouched
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    out = torch.full((m, n), POISON, dtype=torch.bfloat16, device="cuda")
    contiguous_offsets(a, packed, offsets, out, expected_m=max(1, total // e), validate=True)
    torch.cuda.synchronize()
    experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
    rows = torch.arange(total, device="cuda")
    check(out[:total], ref_rows(a, codes, scale, rows, experts))
    assert torch.isnan(out[total:].float()).all(), "a row past expert_offsets[-1] was written"


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("skew", [False, True])
def test_tall_tile(skew, routing_name, tile_family, monkeypatch):
    """1358 rows an expert (EP32 T=2048's count) on the offsets and masked forms take the 240-row
    tile (WM 1, docs/design/grouped-kernels.md v27; masked since v30, its BLOCK_K-128 weights a
    stage a box) alone (from dispatch.TALL_TILE_UNPAIRED_ROWS; v29): 6-7 tiles an expert, the last
    partial, and the tile loop's split tail where the last wave is short."""
    from chord_kernels import dispatch, ops

    if tile_family != "auto":
        pytest.skip("the tall tile is the dispatch's own choice")
    monkeypatch.setattr(ops, "_grouped_plans", {})
    bufs = FormBuffers(routing_name, SHAPES["ep32_down"], 1536, 1358, seed=21)
    counts = counts_for(bufs.e, 1358 * bufs.e, skew, seed=22).clamp_max(bufs.seg)
    valid, experts = bufs.set_counts(counts)
    bufs.out.fill_(POISON)
    bufs.call()
    torch.cuda.synchronize()
    launch = next(iter(ops._grouped_plans.values()))[1]
    assert launch.rows_per_cta == dispatch.TALL_TILE_ROWS and launch.spec.config["WM"] == 1
    assert launch.pick is None
    # its epilogue on the store warps (~35 handoffs a CTA here, the split tail's pieces among them)
    assert launch.spec.config.get("DEFER_STORE") == 1
    check(bufs.out[valid], ref_rows(bufs.a, bufs.codes, bufs.scale, valid, experts))
    invalid = torch.ones(bufs.rows, dtype=torch.bool, device="cuda")
    invalid[valid] = False
    assert torch.isnan(bufs.out[invalid].float()).all(), "a row past the counts was written"


def _launch_one_of_pair(bufs, plan, second):
    """One kernel of a grouped pair (ops._grouped_cuda launches both), with the launch path's parameters."""
    from chord_kernels import ops

    kernel, launch, grid, block, *_, device_index, _, paired = plan
    params = ops._grouped_params(plan, bufs.a, bufs.packed, bufs.route, bufs.out)[int(second)]
    if second:
        launch, kernel, grid, _ = paired
        block = (launch.spec.threads, 1, 1)
    kernel.launch(grid, block, launch.smem_bytes, ops._current_stream(device_index), params)


def _check_pair_runs_exactly_one(bufs, graph, plan, count_draws, what):
    """A grouped pair (dispatch.Launch.pick) on each of ``count_draws``: the reference through graph
    replays with the counts changed; each kernel launched alone writes the output iff it is the
    picked one (its row tiles cost less on the actual counts; the first wins ties), and leaves the
    locks zero either way. Returns whether the first kernel ran, per draw."""
    from chord_kernels import ops

    launch = plan[1]
    other, cost, other_cost = launch.pick
    assert plan[-1][0] == other
    kept = ops._streamk_buffers[torch.cuda.current_device()]

    def locks_left():  # every scratch buffer kept: the two launches' may differ
        return any(locks.any() for _, locks in kept)

    ran = []
    for counts in count_draws:
        tiles = [int((-(-counts // rows)).sum()) for rows in (launch.rows_per_cta, other.rows_per_cta)]
        first_runs = tiles[0] * cost <= tiles[1] * other_cost  # the first wins ties (pick_first)
        ran.append(first_runs)
        valid, experts = bufs.set_counts(counts)
        bufs.check_runs(graph, valid, experts, what)
        assert not locks_left(), "the pair left a lock or the claim counters non-zero"
        for second in (False, True):
            bufs.out.fill_(POISON)
            _launch_one_of_pair(bufs, plan, second)
            torch.cuda.synchronize()
            if first_runs != second:
                check(bufs.out[valid], ref_rows(bufs.a, bufs.codes, bufs.scale, valid, experts))
            else:
                assert torch.isnan(bufs.out.float()).all(), "the unpicked kernel of the pair wrote the output"
            assert not locks_left(), "a kernel of the pair left a lock or the claim counters non-zero"
    return ran


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("shape", ["ep32_down", "ep8_gate_up"])
def test_tall_tile_pair_runs_exactly_one(shape, routing_name, tile_family, monkeypatch):
    """683 expected rows an expert (EP16 T=2048's count) on the offsets and masked forms launch the 240-row
    tile and the 256 x 128 tile as a pair (dispatch.Launch.pick, grouped-kernels.md v27): on each
    call the device runs the one whose row tiles cost less on the actual counts (row_tile_cost).
    Uniform 683 rows (the tall tile runs), 250 rows (two tall tiles pad 230: the short tile runs)
    and skewed counts with an empty expert (_check_pair_runs_exactly_one)."""
    from chord_kernels import dispatch, ops

    bufs, graph, launch = capture_dispatch_choice(tile_family, monkeypatch, "the pair", routing_name, SHAPES[shape],
                                                  1536, 683, seed=41)
    plan = next(iter(ops._grouped_plans.values()))
    assert launch.rows_per_cta == dispatch.TALL_TILE_ROWS and launch.pick[0].rows_per_cta == 128
    skewed = counts_for(bufs.e, 683 * bufs.e, skew=True, seed=42).clamp_max(bufs.seg)
    skewed[0] = 0  # an empty expert
    draws = (torch.full((bufs.e,), 683, dtype=torch.int64), torch.full((bufs.e,), 250, dtype=torch.int64), skewed)
    assert _check_pair_runs_exactly_one(bufs, graph, plan, draws, "the picked tile loop's sums")[:2] == [True, False]


@pytest.mark.parametrize("shape,hint", [(EP32_GATE_UP, 10)])
def test_masked_mma_pair_runs_exactly_one(shape, hint, tile_family, monkeypatch):
    """The masked form hinted one row under the 24-row tiles on EP32 gate_up launches its 16-row
    mma tile and the 256 x 24 tile loop as a pair (dispatch.pair_narrow_mid_batch,
    grouped-kernels.md v57). Every expert within one short tile (the mma tile runs), every expert
    over one (the loop runs), and skewed counts with an empty expert (_check_pair_runs_exactly_one)."""
    from chord_kernels import ops

    bufs, graph, launch = capture_dispatch_choice(tile_family, monkeypatch, "the pair", "masked", shape, 64, hint,
                                                  seed=43)
    plan = next(iter(ops._grouped_plans.values()))
    short, tall = launch.rows_per_cta, launch.pick[0].rows_per_cta
    assert launch.spec.family == "grouped_mma_sk" and (short, tall) == (16, 24)
    skewed = counts_for(bufs.e, hint * bufs.e, skew=True, seed=44).clamp_max(bufs.seg)
    skewed[0] = 0  # an empty expert
    draws = (torch.full((bufs.e,), short - 3, dtype=torch.int64), torch.full((bufs.e,), tall - 2, dtype=torch.int64),
             skewed)
    assert _check_pair_runs_exactly_one(bufs, graph, plan, draws, "the picked kernel's sums")[:2] == [True, False]


@pytest.mark.parametrize("shape", [EP32_GATE_UP, (24, 4096, 1024)])
def test_masked_decode_dual_runs_either_height(shape, tile_family, monkeypatch):
    """The masked form hinted one row under the 16-row tile runs the kernel holding the 8- and
    16-row tiles (dispatch.dual_decode_16, grouped-kernels.md v58): every expert within one 8-row
    tile (the 8-row height runs), every expert over one (the 16-row height), skewed counts with
    an empty expert and all experts empty, through graph replays with the counts changed; the
    stream-K locks left zero each time."""
    from chord_kernels import dispatch, ops

    hint = dispatch.DECODE_16_MIN_ROWS - 1
    bufs, graph, launch = capture_dispatch_choice(tile_family, monkeypatch, "the dual tile", "masked", shape, 64, hint,
                                                  seed=45)
    assert launch.dual == (16, *dispatch.DECODE_DUAL_COST)
    kept = ops._streamk_buffers[torch.cuda.current_device()]
    skewed = counts_for(bufs.e, hint * bufs.e, skew=True, seed=46).clamp_max(bufs.seg)
    skewed[0] = 0  # an empty expert
    for counts in (torch.full((bufs.e,), 5, dtype=torch.int64), torch.full((bufs.e,), 14, dtype=torch.int64),
                   skewed, torch.zeros(bufs.e, dtype=torch.int64)):
        valid, experts = bufs.set_counts(counts)
        bufs.check_runs(graph, valid, experts, "the dual tile's sums")
        assert not any(locks.any() for _, locks in kept), "the dual tile left a lock or the claim counters non-zero"


@pytest.mark.parametrize("total", [37, 4000])
def test_output_rows_not_16_byte_aligned(total):
    """An out view whose rows are not 16-byte aligned (row stride N + 12, start 8 bytes in): the
    staged epilogues fall back to 2-byte stores (decode: the mma tile; prefill: the wgmma tile);
    nothing lands outside the view."""
    e, n, k = SHAPES["ep8_down"]
    codes, scale, packed = weights(e, n, k, "contiguous", seed=5)
    counts = counts_for(e, total, True, seed=total + 2)
    offsets = routing.counts_to_offsets(counts.to(torch.int32)).cuda()
    a = torch.randn(total, k, device="cuda").to(torch.bfloat16)
    big = torch.full((total, n + 12), POISON, dtype=torch.bfloat16, device="cuda")
    out = big[:, 4:4 + n]
    contiguous_offsets(a, packed, offsets, out, expected_m=max(1, total // e))
    torch.cuda.synchronize()
    experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
    check(out, ref_rows(a, codes, scale, torch.arange(total, device="cuda"), experts))
    assert torch.isnan(big[:, :4].float()).all() and torch.isnan(big[:, 4 + n:].float()).all(), \
        "a store landed outside the out view's columns"


@pytest.mark.parametrize("shape", ["ep8_gate_up", "ep32_down", "small"])
@pytest.mark.parametrize("expected_m", [1, 9, 12, 40, 500])  # far below and far above the truth; 12: 24-row tiles
@pytest.mark.parametrize("three_d", [False, True])
def test_masked(shape, expected_m, three_d):
    e, n, k = SHAPES[shape]
    codes, scale, packed = weights(e, n, k, "masked")
    max_m = 64
    counts = counts_for(e, 9 * e, skew=True, seed=expected_m).clamp_max(max_m)
    counts[0] = 0  # an empty expert
    masked_m = counts.to(torch.int32).cuda()
    a3 = torch.randn(e, max_m, k, device="cuda").to(torch.bfloat16)
    out = torch.full((e * max_m, n), POISON, dtype=torch.bfloat16, device="cuda")
    masked(a3 if three_d else a3.reshape(e * max_m, k), packed, masked_m, expected_m, out, validate=True)
    torch.cuda.synchronize()
    valid = (torch.arange(max_m, device="cuda")[None, :] < masked_m[:, None]).reshape(-1)
    rows = valid.nonzero().flatten()
    check(out[rows], ref_rows(a3.reshape(-1, k), codes, scale, rows, rows // max_m))
    assert torch.isnan(out[~valid].float()).all(), "a row past masked_m was written"


def test_all_experts_empty_and_wrong_mode():
    e, n, k = SHAPES["small"]
    _, _, packed = weights(e, n, k, "masked")
    out = torch.full((e * 8, n), POISON, dtype=torch.bfloat16, device="cuda")
    masked(torch.randn(e * 8, k, device="cuda").to(torch.bfloat16), packed, torch.zeros(e, dtype=torch.int32, device="cuda"), 4, out)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all()
    with pytest.raises(ValueError, match="packed for mode 'masked'"):
        contiguous(torch.zeros(128, k, device="cuda", dtype=torch.bfloat16), packed,
                   torch.zeros(128, dtype=torch.int32, device="cuda"))


def test_graph_capture_counts_change_between_replays():
    e, n, k = SHAPES["ep32_down"]
    codes, scale, packed = weights(e, n, k, "masked")
    max_m = 32
    masked_m = torch.zeros(e, dtype=torch.int32, device="cuda")
    offsets = torch.zeros(e + 1, dtype=torch.int64, device="cuda")
    _, _, packed_c = weights(e, n, k, "contiguous")
    a = torch.randn(e * max_m, k, device="cuda").to(torch.bfloat16)
    out_m = torch.empty(e * max_m, n, dtype=torch.bfloat16, device="cuda")
    out_c = torch.empty(e * max_m, n, dtype=torch.bfloat16, device="cuda")
    masked(a, packed, masked_m, 8, out_m)  # warm up: compile + load outside the capture
    contiguous_offsets(a, packed_c, offsets, out_c, expected_m=8)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.graph(graph):
            masked(a, packed, masked_m, 8, out_m)
            contiguous_offsets(a, packed_c, offsets, out_c, expected_m=8)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for seed in (1, 2, 3):
        counts = counts_for(e, 8 * e, skew=True, seed=seed).clamp_max(max_m)
        masked_m.copy_(counts.to(torch.int32))
        offsets.copy_(routing.counts_to_offsets(counts.to(torch.int32)))
        out_m.fill_(POISON)
        out_c.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        valid = (torch.arange(max_m, device="cuda")[None, :] < masked_m[:, None]).reshape(-1)
        rows = valid.nonzero().flatten()
        check(out_m[rows], ref_rows(a, codes, scale, rows, rows // max_m))
        total = int(counts.sum())
        experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
        check(out_c[:total], ref_rows(a, codes, scale, torch.arange(total, device="cuda"), experts))


def test_tile_loop_graph_replays_and_counters_left_zero():
    """Prefill-sized contiguous-offsets calls run the wgmma tile loop (tiles claimed from the
    zeroed stream-K locks, re-zeroed by the last CTA): graph replays with the counts changed stay
    correct and leave the counters zero. EP32 down, ~200 rows an expert in a buffer 4x taller."""
    from chord_kernels import ops

    e, n, k = SHAPES["ep32_down"]
    codes, scale, packed = weights(e, n, k, "contiguous", seed=7)
    rows = 4 * 200 * e
    a = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
    offsets = torch.zeros(e + 1, dtype=torch.int64, device="cuda")
    out = torch.empty(rows, n, dtype=torch.bfloat16, device="cuda")
    contiguous_offsets(a, packed, offsets, out, expected_m=200)  # warm up: compile + load
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        contiguous_offsets(a, packed, offsets, out, expected_m=200)
    locks = ops._streamk_buffers[torch.cuda.current_device()][-1][1]
    for seed in (8, 9, 10):
        counts = counts_for(e, 200 * e, skew=seed != 8, seed=seed)
        offsets.copy_(routing.counts_to_offsets(counts.to(torch.int32)))
        out.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        total = int(counts.sum())
        experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
        check(out[:total], ref_rows(a, codes, scale, torch.arange(total, device="cuda"), experts))
        assert not locks.any(), "a tile-loop launch left its counters non-zero"


def test_streamk_decode_deterministic_and_locks_left_zero():
    """Decode-sized grouped calls run on the stream-K schedule (tiles split over CTAs, summed in
    a fixed order): the same inputs give the same bits, and each launch re-zeroes its locks."""
    from chord_kernels import ops

    e, n, k = SHAPES["ep8_gate_up"]
    codes, scale, packed = weights(e, n, k, "contiguous", seed=4)
    counts = counts_for(e, 5, False, seed=6)
    offsets = routing.counts_to_offsets(counts.to(torch.int32)).cuda()
    a = torch.randn(8, k, device="cuda").to(torch.bfloat16)
    first = contiguous_offsets(a, packed, offsets, expected_m=1)
    again = contiguous_offsets(a, packed, offsets, expected_m=1)
    assert torch.equal(first[:5], again[:5])
    experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
    check(first[:5], ref_rows(a, codes, scale, torch.arange(5, device="cuda"), experts))
    assert not ops._streamk_buffers[torch.cuda.current_device()][-1][1].any(), "a launch left a lock non-zero"


class FormBuffers:
    """One packed weight and vLLM-form buffers of `seg` rows an expert (the masked max_m; the
    offsets form's buffer holds the same rows), for calls with counts changed between them."""

    def __init__(self, routing_name, shape, seg, expected_m, seed):
        self.routing_name, self.seg, self.expected_m = routing_name, seg, expected_m
        self.e, n, k = shape
        self.codes, self.scale, self.packed = weights(self.e, n, k, "masked" if routing_name == "masked"
                                                      else "contiguous", seed=seed)
        self.rows = self.e * seg
        self.a = torch.randn(self.rows, k, device="cuda").to(torch.bfloat16)
        self.route = {"contiguous_offsets": torch.zeros(self.e + 1, dtype=torch.int64, device="cuda"),
                      "masked": torch.zeros(self.e, dtype=torch.int32, device="cuda")}[routing_name]
        self.out = torch.empty(self.rows, n, dtype=torch.bfloat16, device="cuda")

    def call(self):
        if self.routing_name == "contiguous_offsets":
            contiguous_offsets(self.a, self.packed, self.route, self.out, expected_m=self.expected_m)
        else:
            masked(self.a, self.packed, self.route, self.expected_m, self.out)

    def set_counts(self, counts):
        """The counts into the route tensor; returns the valid rows and their experts."""
        e, seg = self.e, self.seg
        if self.routing_name == "contiguous_offsets":
            self.route.copy_(routing.counts_to_offsets(counts.to(torch.int32)))
            total = int(counts.sum())
            return torch.arange(total, device="cuda"), torch.repeat_interleave(torch.arange(e), counts).cuda()
        self.route.copy_(counts.to(torch.int32))
        valid = (torch.arange(seg)[None, :] < counts[:, None]).reshape(-1).nonzero().flatten().cuda()
        return valid, valid // seg

    def check_runs(self, graph, valid, experts, what):
        """Captured, then eager: the reference on the valid rows, every other row left poisoned;
        then the same bits again (`what` names the sums that must not change)."""
        for replay in (graph.replay, self.call):
            self.out.fill_(POISON)
            replay()
            torch.cuda.synchronize()
            check(self.out[valid], ref_rows(self.a, self.codes, self.scale, valid, experts))
            invalid = torch.ones(self.rows, dtype=torch.bool, device="cuda")
            invalid[valid] = False
            assert torch.isnan(self.out[invalid].float()).all(), "a padding row or a row past the counts was written"
        first = self.out.clone()
        self.call()
        assert torch.equal(self.out[valid], first[valid]), f"{what} differ run to run"

    def check_count_draws(self, graph, seed, what):
        """check_runs on four count draws from ``seed`` on: uniform and skewed at expected_m rows an
        expert, skewed at 5 (few busy experts: long runs), 9 rows in all; each with an empty expert
        and the counts clamped to the buffer; the stream-K locks left zero after each."""
        from chord_kernels import ops

        for i, (total, skew) in enumerate(((self.expected_m * self.e, False), (self.expected_m * self.e, True),
                                           (5 * self.e, True), (9, False))):
            counts = counts_for(self.e, total, skew=skew, seed=seed + i).clamp_max(self.seg)
            counts[0] = 0  # an empty expert
            self.check_runs(graph, *self.set_counts(counts), what)
            assert not ops._streamk_buffers[torch.cuda.current_device()][-1][1].any(), "a launch left a lock non-zero"

    def capture(self):
        self.call()  # warm up: compile + load outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.call()
        return graph


def capture_dispatch_choice(tile_family, monkeypatch, what, routing_name, shape, seg, expected_m, *, seed):
    """FormBuffers for a rule's point, captured in a graph with this test's plan alone: (bufs,
    graph, the launch the dispatch chose). Only under the dispatch's own choice (tile_family
    "auto"): the forced families take another tile, so the test skips, naming `what`."""
    from chord_kernels import ops

    if tile_family != "auto":
        pytest.skip(f"{what} is the dispatch's own choice")
    monkeypatch.setattr(ops, "_grouped_plans", {})
    bufs = FormBuffers(routing_name, shape, seg, expected_m, seed=seed)
    graph = bufs.capture()
    return bufs, graph, next(iter(ops._grouped_plans.values()))[1]


@pytest.mark.parametrize("routing_name,expected_m", [("contiguous_offsets", 24), ("contiguous_offsets", 45),
                                                     ("masked", 24)])
@pytest.mark.parametrize("shape", ["ep8_gate_up", "ep32_down"])
def test_split_k_cluster(shape, routing_name, expected_m, tile_family, monkeypatch):
    """The one-CTA (4-warpgroup) tile, 512 x 32 and 512 x 56, with K split over a cluster of 2
    CTAs (forced by CHORD_GROUPED_SPLIT_K): the reference on skewed counts (an empty expert,
    experts over one tile), the same bits run to run (partials added in rank order), padding and
    rows past the counts never written, and graph replays with the counts changed."""
    from chord_kernels import ops

    if tile_family != "auto":
        pytest.skip("the K split is the one-CTA tile's")
    split = "2"
    monkeypatch.setenv("CHORD_GROUPED_SPLIT_K", split)
    bufs = FormBuffers(routing_name, SHAPES[shape], 2 * expected_m, expected_m, seed=11)
    graph = bufs.capture()
    plan = next(p for key, p in ops._grouped_plans.items() if key[-1] == split.encode())
    assert plan[1].split_k == int(split) and plan[2][2] == int(split)
    for seed in (21, 22):
        counts = counts_for(bufs.e, expected_m * bufs.e, skew=True, seed=seed).clamp_max(bufs.seg)
        counts[0] = 0  # an empty expert
        bufs.check_runs(graph, *bufs.set_counts(counts), "the K split's sums")


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("shape,busy,rows", [("ep32_gate_up", (12, 9), 85), ("ep32_down", (5, 2), 85),
                                             ("ep8_gate_up", (24, 20), 24)])
def test_tile_loop_split_tail(shape, busy, rows, routing_name, tile_family, monkeypatch):
    """The tile loop's split tail (csrc/common/tail_split.cuh): with a last wave at most half
    full, its tiles cut along K over several CTAs and added up through the workspace. `rows` rows
    on each of `busy` experts (the rest empty). 85: EP32 T=128's 96-row tiles, 192 gate_up tiles on
    132 SMs in two pieces each, 144 in four; 140 and 56 down tiles in two. 24: the 4-warpgroup
    512 x 32 tile on the loop, 192 tiles in two pieces, 160 in four. Graph replays switch between
    the two counts (the split is decided on the device). The reference, the same bits run to run,
    untouched padding and rows past the counts, locks and counters left zero."""
    from chord_kernels import ops, wave_model

    if tile_family != "auto":
        pytest.skip("the split tail is the tile loop's")
    monkeypatch.setattr(ops, "_grouped_plans", {})  # this test's plan alone
    bufs = FormBuffers(routing_name, EP32_GATE_UP if shape == "ep32_gate_up" else SHAPES[shape], -(-rows // 32) * 32,
                       rows, seed=13)

    def busy_counts(experts_busy):
        counts = torch.zeros(bufs.e, dtype=torch.int64)
        counts[:experts_busy] = rows
        return counts

    bufs.set_counts(busy_counts(busy[0]))
    graph = bufs.capture()
    _, launch, grid = next(iter(ops._grouped_plans.values()))[:3]
    assert launch.tile_loop and launch.rows_per_cta >= rows
    n, k = bufs.packed.n, bufs.packed.k
    step = 2 if bufs.packed.block_k == 128 else 1
    splits = [wave_model.tail_split(b * -(-n // launch.cols_per_cta), grid[0], k // 64, step)[1] for b in busy]
    if min(splits) < 2:
        pytest.skip(f"{grid[0]} CTAs: no split tail at these counts ({splits})")
    locks = ops._streamk_buffers[torch.cuda.current_device()][-1][1]
    for experts_busy in (busy[1], busy[0]):
        bufs.check_runs(graph, *bufs.set_counts(busy_counts(experts_busy)), "the split tiles' sums")
        assert not locks.any(), "a split tile's lock or the claim counters left non-zero"


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("expected_m", [2, 4])
@pytest.mark.parametrize("shape", ["ep8_gate_up", "ep8_down"])
def test_shallow_decode_ring(shape, expected_m, routing_name, tile_family, monkeypatch):
    """2 and 4 expected rows on 48 experts (EP8 T=8 and T=20) in the offsets and masked forms take
    the 8 x 128 decode tile on its 2-stage ring at 4 CTAs an SM (dispatch.shallow_decode;
    grouped-kernels.md v40, v43, v44; the wide tile keeps its one wave,
    test_decode_one_wave_of_whole_tiles): the reference on uniform and skewed counts (an empty
    expert, experts over one 8-row tile, few busy experts: long runs split over CTAs), the same bits
    run to run, rows past the counts never written, graph replays with the counts changed, the locks
    left zero."""
    bufs, graph, launch = capture_dispatch_choice(
        tile_family, monkeypatch, "the 2-stage decode ring", routing_name, SHAPES[shape], 24, expected_m, seed=51)
    assert (launch.spec.config["NT"], launch.spec.config["STAGES"], launch.spec.min_blocks_per_sm) == (2, 2, 4)
    bufs.check_count_draws(graph, 52, "the 2-stage ring's split sums")


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("shape", ["ep8_gate_up", "ep8_down"])
def test_sparse_decode_ring(shape, routing_name, tile_family, monkeypatch):
    """1 expected row on 48 experts (EP8 T=1) in the offsets and masked forms takes the 8 x 128
    decode tile on its 4-deep ring at 2 CTAs an SM (dispatch.sparse_decode; grouped-kernels.md v53):
    the reference, the same bits run to run, rows past the counts never written, graph replays with
    the counts changed, the locks left zero."""
    bufs, graph, launch = capture_dispatch_choice(
        tile_family, monkeypatch, "the 4-deep decode ring", routing_name, SHAPES[shape], 24, 1, seed=53)
    assert (launch.spec.config["NT"], launch.spec.config["STAGES"], launch.spec.min_blocks_per_sm) == (2, 4, 2)
    bufs.check_count_draws(graph, 54, "the 4-deep ring's split sums")


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("shape", [EP32_GATE_UP, SHAPES["ep32_down"]])
def test_few_wave_32_row_tile(shape, routing_name, tile_family, monkeypatch):
    """22 expected rows on 12 experts (EP32 T=32) in the offsets and masked forms take
    the 256 x 32 tile loop (dispatch.few_wave_32; grouped-kernels.md v48): the reference on
    uniform and skewed counts (an empty expert, experts over one 32-row tile, few busy experts:
    long runs, split tiles), the same bits run to run, rows past the counts never written, graph
    replays with the counts changed, the locks left zero."""
    from chord_kernels import dispatch

    bufs, graph, launch = capture_dispatch_choice(
        tile_family, monkeypatch, "the few-wave 32-row tile", routing_name, shape, 48, 22, seed=81)
    block_k = 128 if routing_name == "masked" else 64
    assert launch.spec.symbol == dispatch.grouped_few_wave_32(routing_name, shape[1], block_k).spec.symbol
    bufs.check_count_draws(graph, 82, "the few-wave 32-row tiles' split sums")


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
def test_narrow_mid_batch_24_row_tile(routing_name, tile_family, monkeypatch):
    """14 expected rows on 12 experts (EP32 T=20 gate_up) in the offsets and masked forms take the
    256 x 24 tile loop (dispatch.narrow_mid_batch; grouped-kernels.md v46): the reference on
    uniform and skewed counts (an empty expert, experts over one 24-row tile, few busy experts:
    fewer tiles than CTAs, split along K), the same bits run to run, rows past the counts never
    written, graph replays with the counts changed, the locks left zero."""
    bufs, graph, launch = capture_dispatch_choice(
        tile_family, monkeypatch, "the 256 x 24 tile loop", routing_name, EP32_GATE_UP, 32, 14, seed=61)
    cfg = launch.spec.config
    assert (launch.spec.family, cfg["CWG"], launch.rows_per_cta, launch.cols_per_cta) == ("grouped_wgmma", 2, 24, 256)
    bufs.check_count_draws(graph, 62, "the 256 x 24 tiles' split sums")


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
@pytest.mark.parametrize("shape", [(24, 4096, 7168), (24, 7168, 2048)])
def test_decode_16_row_tile(shape, routing_name, tile_family, monkeypatch):
    """7 expected rows on 24 experts (EP16 T=20) in the offsets and masked forms take the 16-row
    decode tile (dispatch.decode_16; grouped-kernels.md v47): the reference on uniform and skewed
    counts (an empty expert, experts over one 16-row tile, few busy experts: long runs split over
    CTAs), the same bits run to run, rows past the counts never written, graph replays with the
    counts changed, the locks left zero."""
    from chord_kernels.dispatch import DECODE_16_STAGES

    bufs, graph, launch = capture_dispatch_choice(
        tile_family, monkeypatch, "the 16-row decode tile", routing_name, shape, 32, 7, seed=71)
    cfg = launch.spec.config
    assert (launch.spec.family, cfg["TT"], cfg["NT"], cfg["STAGES"]) == ("grouped_mma_sk", 2, 2, DECODE_16_STAGES)
    bufs.check_count_draws(graph, 72, "the 16-row decode tile's split sums")


@pytest.mark.parametrize("routing_name", ["contiguous_offsets", "masked"])
def test_decode_one_wave_of_whole_tiles(routing_name, tile_family, monkeypatch):
    """EP32 decode (5 expected rows on 12 experts, down) takes the wide decode tile for one wave
    of whole tiles (dispatch.widen_decode, MMA_WHOLE_FILL). Under one graph the counts then give
    row tiles on both sides of the device's rule (streamk_schedule.cuh kMmaWholeTiles: tiles for
    3/4 to all of the CTAs run whole; fewer, or more than a wave, go stream-K): the reference, rows
    past the counts never written, the same bits run to run, the locks left zero."""
    from chord_kernels import ops

    bufs, graph, launch = capture_dispatch_choice(
        tile_family, monkeypatch, "the wide decode tile", routing_name, SHAPES["ep32_down"], 24, 5, seed=41)
    assert (launch.spec.config["NT"], launch.cols_per_cta) == (4, 256)
    ctas = launch.spec.min_blocks_per_sm * torch.cuda.get_device_properties(0).multi_processor_count
    col_tiles = -(-SHAPES["ep32_down"][1] // launch.cols_per_cta)
    g = torch.Generator().manual_seed(42)
    # row tiles for last waves ~5/8, 6/8 + 1 tile, 7/8, full, just over one wave, 1.3 waves
    wanted = sorted({max(1, ctas * f // (8 * col_tiles) + extra) for f, extra in ((5, 0), (6, 1), (7, 0), (8, 0), (8, 1), (10, 0))})
    for row_tiles in wanted:
        tiles_of = [row_tiles // bufs.e + (e < row_tiles % bufs.e) for e in range(bufs.e)]  # 8-row tiles
        counts = torch.tensor([8 * (t - 1) + int(torch.randint(1, 9, (1,), generator=g)) if t else 0 for t in tiles_of])
        assert int(counts.max()) <= bufs.seg
        bufs.check_runs(graph, *bufs.set_counts(counts), f"{row_tiles} row tiles' sums")
        assert not ops._streamk_buffers[torch.cuda.current_device()][-1][1].any(), "a launch left a lock non-zero"


@pytest.mark.parametrize("shape", ["ep8_gate_up", "small"])
@pytest.mark.parametrize("routing_name", ["contiguous", "contiguous_offsets", "masked"])
def test_rows_outside_the_tiles_hold_nan(shape, routing_name):
    """The tile loop loads a tile's activation rows as one box (dispatch.grouped_wgmma, TMA_ACTS):
    rows past a tile's own (padding, the next expert's, past offsets[-1] or masked_m) are read and
    computed but never stored. Those rows hold NaN here: the valid rows must match the reference
    and stay finite, and no row outside the experts is written."""
    e, n, k = SHAPES[shape]
    total = 3000 if shape != "small" else 300  # prefill: the tile loop
    counts = counts_for(e, total, True, seed=5)
    codes, scale, packed = weights(e, n, k, "masked" if routing_name == "masked" else "contiguous")
    if routing_name == "masked":
        max_m = int((counts.max().item() + 63) // 64 * 64)
        a = torch.full((e, max_m, k), float("nan"), device="cuda").to(torch.bfloat16)
        for ex, c in enumerate(counts.tolist()):
            a[ex, :c] = torch.randn(c, k, device="cuda").to(torch.bfloat16)
        out = torch.full((e * max_m, n), POISON, dtype=torch.bfloat16, device="cuda")
        masked(a, packed, counts.to(torch.int32).cuda(), int(counts.float().mean().item()) + 1, out=out)
        torch.cuda.synchronize()
        rows = torch.cat([torch.arange(c) + ex * max_m for ex, c in enumerate(counts.tolist())]).cuda()
        experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
        check(out[rows], ref_rows(a.reshape(-1, k), codes, scale, rows, experts))
        return
    if routing_name == "contiguous":
        aligned = ((counts + 127) // 128) * 128
        m = int(aligned.sum())
        m_indices = torch.full((m,), -1, dtype=torch.int32)
        starts = torch.cumsum(aligned, 0) - aligned
        for ex, (c, s) in enumerate(zip(counts.tolist(), starts.tolist(), strict=True)):
            m_indices[s:s + c] = ex
        m_indices = m_indices.cuda()
        valid = m_indices >= 0
    else:
        offsets = routing.counts_to_offsets(counts.to(torch.int32)).cuda()
        m = total + 200  # vLLM's over-allocated buffer
        valid = torch.arange(m, device="cuda") < total
    a = torch.full((m, k), float("nan"), device="cuda").to(torch.bfloat16)
    a[valid] = torch.randn(int(valid.sum()), k, device="cuda").to(torch.bfloat16)
    out = torch.full((m, n), POISON, dtype=torch.bfloat16, device="cuda")
    if routing_name == "contiguous":
        contiguous(a, packed, m_indices, out, validate=True)
        experts = m_indices[valid].long()
    else:
        contiguous_offsets(a, packed, offsets, out, expected_m=total // e, validate=True)
        experts = torch.repeat_interleave(torch.arange(e), counts).cuda()
    torch.cuda.synchronize()
    rows = valid.nonzero().flatten()
    check(out[rows], ref_rows(a, codes, scale, rows, experts))
    assert torch.isnan(out[~valid].float()).all(), "a row outside every expert was written"


def test_misaligned_activations_are_a_clear_error():
    """Every grouped kernel loads a's rows in 16-byte pieces (cp.async, the tile loop's TMA boxes):
    a view that starts mid-row of a bf16 buffer is refused before anything launches."""
    e, n, k = SHAPES["small"]
    _, _, packed = weights(e, n, k, "contiguous")
    counts = torch.full((e,), 200)
    offsets = routing.counts_to_offsets(counts.to(torch.int32)).cuda()
    base = torch.randn(1000 * k + 1, device="cuda").to(torch.bfloat16)
    a = base[1:].view(1000, k)  # starts 2 bytes past an aligned address
    out = torch.full((1000, n), POISON, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="16-byte aligned"):
        contiguous_offsets(a, packed, offsets, out, expected_m=200)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all()
