"""The indexed kernel on the GPU against the fp32 reference (the bar every kernel inherits).

Relative Frobenius error <= 5e-3 at Kimi K, no NaN/Inf, bit-exact on exactly representable
inputs, outputs poisoned first, routing tails filled with garbage, no host sync, graph capture.
"""

import itertools

import pytest
import torch
from chord_kernels import indexed, layouts, reference, routing

from .moe_problems import KIMI_SHAPES, align, make_problem, reference_fp32

pytestmark = pytest.mark.gpu
POISON = float("nan")


@pytest.fixture(params=["auto", "mma_sk", "wgmma_sk", "mma", "wgmma", "simple"], autouse=True)
def kernel_family(request, monkeypatch):
    """Every test runs on each indexed kernel family (auto = the dispatch's choice per block size;
    the tensor-core tiles forced at every block size; the simple one is the cross-check)."""
    monkeypatch.setenv("CHORD_W4A16_INDEXED_KERNEL", request.param)
    return request.param


def run_indexed(problem, sorted_ids, expert_ids, ntp, block_m):
    num_routes = problem.a.shape[0] * problem.top_k
    out = torch.full((num_routes, problem.packed.n), POISON, dtype=torch.bfloat16, device="cuda")
    indexed(problem.a, problem.packed, sorted_ids, expert_ids, ntp, problem.top_k, block_m, out)
    torch.cuda.synchronize()
    return out


def check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m, exact=False):
    ids, ref = reference_fp32(problem, sorted_ids, expert_ids, ntp, block_m)
    got = out[ids].float()
    assert torch.isfinite(got).all(), "NaN/Inf (or an unwritten poisoned row) in routed rows"
    if exact:
        assert torch.equal(out[ids], ref.bfloat16()), "not bit-exact on exactly representable inputs"
    elif ids.numel():  # (EP8 with one token may route nothing to this rank's experts)
        rel = ((got - ref).norm() / ref.norm()).item()
        assert rel <= 5e-3, f"relative Frobenius error {rel:.2e}"
    # Rows of routes that were not listed (dropped by the expert map) must stay poisoned.
    listed = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    listed[ids] = True
    assert torch.isnan(out[~listed].float()).all(), "a row that no route owns was written"


@pytest.mark.parametrize("shape", list(KIMI_SHAPES))
@pytest.mark.parametrize("tokens,skew", [(1, False), (8, False), (20, True), (64, False)])
def test_kimi_shapes_random_routing(shape, tokens, skew):
    problem = make_problem(shape, tokens, skew=skew, seed=tokens)
    for block_m in (8, 16, 24, 32, 64, 96, 128):
        sorted_ids, expert_ids, ntp = align(problem, block_m)
        out = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
        check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m)


@pytest.mark.parametrize("shape", list(KIMI_SHAPES))
def test_prefill_blocks_full_and_ragged(shape, kernel_family):
    """Prefill-sized routing (many full 64/96/128-row blocks plus each expert's ragged last block),
    skewed, where the dispatch picks the wgmma tile."""
    if kernel_family == "simple":
        pytest.skip("the FP32 cross-check kernel is covered at decode sizes")
    problem = make_problem(shape, 384, skew=True, seed=21)
    for block_m in (64, 96, 128):
        sorted_ids, expert_ids, ntp = align(problem, block_m)
        out = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
        check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m)


@pytest.mark.parametrize("shape", ["ep8_down", "tp8_gate_up"])
def test_bit_exact_on_representable_inputs(shape):
    problem = make_problem(shape, 16, exact=True, seed=3)
    for block_m in (16, 128):
        sorted_ids, expert_ids, ntp = align(problem, block_m)
        out = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
        check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m, exact=True)


def test_empty_routing_writes_nothing():
    problem = make_problem("tp8_down", 4, seed=5)
    sorted_ids, expert_ids, ntp = align(problem, 16)
    ntp.zero_()
    out = run_indexed(problem, sorted_ids, expert_ids, ntp, 16)
    assert torch.isnan(out.float()).all()


def test_all_routes_on_one_expert_and_odd_block_size():
    problem = make_problem("tp8_gate_up", 40, seed=6)
    problem.topk_ids[:, 0] = 7  # every token routes to expert 7 (plus its other 7 choices)
    for block_m in (1, 24, 48):
        sorted_ids, expert_ids, ntp = align(problem, block_m)
        out = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
        check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m)


def test_non_kimi_shapes_and_strided_input():
    g = torch.Generator().manual_seed(9)
    e, n, k = 6, 80, 384
    codes = torch.randint(0, 16, (e, n, k), generator=g, dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=g) * 0.05 + 1e-3).to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, "indexed").to("cuda")
    big = torch.randn(13, k + 64, generator=g).to(torch.bfloat16).to("cuda")
    a = big[:, 32:32 + k]  # row stride != K
    topk = torch.randint(0, e, (13, 2), generator=g).to(torch.int32).to("cuda")
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk, 8, e)
    out = indexed(a, packed, sorted_ids, expert_ids, ntp, 2, 8)
    ref = reference.moe_indexed_reference(a.cpu(), reference.dequantize_w4a16(packed.to("cpu")),
                                          sorted_ids.cpu(), expert_ids.cpu(), ntp.cpu(), 2, 8)
    torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)


def test_no_host_sync_and_deterministic():
    problem = make_problem("ep8_gate_up", 20, skew=True, seed=11)
    sorted_ids, expert_ids, ntp = align(problem, 16)
    first = run_indexed(problem, sorted_ids, expert_ids, ntp, 16)  # compiles and loads outside the check
    out = torch.empty_like(first)
    torch.cuda.set_sync_debug_mode("error")
    try:
        s2, e2, n2 = routing.moe_align_block_size(problem.topk_ids, 16, 384, problem.expert_map)
        indexed(problem.a, problem.packed, s2, e2, n2, problem.top_k, 16, out)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    ids = sorted_ids[: ntp.item()]
    ids = ids[ids < out.shape[0]].long()
    assert torch.equal(out[ids], first[ids])


def test_streamk_split_tiles_and_locks_left_zero(kernel_family):
    """Few long-K tiles spread over every resident CTA (each tile summed from many partials), then
    many short tiles per CTA, and TP8 down at T=2 and 4, whose runs grow to whole tiles
    (streamk_run.cuh); the fix-up locks are zero again after each launch."""
    from chord_kernels import ops

    if kernel_family not in ("mma_sk", "wgmma_sk"):
        pytest.skip("stream-K schedules only")
    for shape, tokens in (("tp8_gate_up", 1), ("ep8_gate_up", 1), ("tp8_down", 20), ("ep8_down", 64), ("tp8_down", 2),
                          ("tp8_down", 4)):
        problem = make_problem(shape, tokens, seed=31)
        for block_m in (8, 16, 64, 96):
            sorted_ids, expert_ids, ntp = align(problem, block_m)
            out = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
            check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m)
            again = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
            ids = reference_fp32(problem, sorted_ids, expert_ids, ntp, block_m)[0]
            assert torch.equal(again[ids], out[ids]), "stream-K result changed between runs"
            locks = ops._streamk_buffers[torch.cuda.current_device()][-1][1]
            assert not locks.any(), "a launch left a stream-K lock non-zero"


@pytest.mark.parametrize("tuning", ["", "CWG=4"])
def test_wgmma_streamk_nearly_full_last_wave(kernel_family, tuning, monkeypatch):
    """Long K, one tile per expert: a last wave 7/8 full or more runs every tile whole (the
    data-parallel part then is not a multiple of the grid), a little less splits the last two
    waves (streamk_schedule.cuh, kWgmmaWholeTiles). Both against the reference, twice, locks zero."""

    from .moe_problems import Problem

    if kernel_family != "wgmma_sk":
        pytest.skip("the wgmma stream-K schedule only")
    monkeypatch.setenv("CHORD_W4A16_TUNING", tuning)
    sms = torch.cuda.get_device_properties(0).multi_processor_count  # one CTA an SM: the grid
    g = torch.Generator().manual_seed(5)
    n, k = 256, 1024
    for experts in (sms + -(-7 * sms // 8), sms + 7 * sms // 8 - 12):
        codes = torch.randint(0, 16, (experts, n, k), generator=g, dtype=torch.uint8)
        scale = (torch.rand(experts, n, k // 32, generator=g) * 0.05).to(torch.bfloat16)
        packed = layouts.pack_w4a16(codes, scale, "indexed").to("cuda")
        a = torch.randn(experts, k, generator=g).to(torch.bfloat16).to("cuda")
        topk = torch.arange(experts, dtype=torch.int32).view(experts, 1)  # one row an expert: one tile each
        problem = Problem(a, codes.cuda(), scale.cuda(), packed, topk.cuda(), None, 1)
        sorted_ids, expert_ids, ntp = align(problem, 16)
        out = run_indexed(problem, sorted_ids, expert_ids, ntp, 16)
        check_against_reference(problem, out, sorted_ids, expert_ids, ntp, 16)
        again = run_indexed(problem, sorted_ids, expert_ids, ntp, 16)
        ids = reference_fp32(problem, sorted_ids, expert_ids, ntp, 16)[0]
        assert torch.equal(again[ids], out[ids]), "stream-K result changed between runs"
        assert_locks_zero("a lock left non-zero")


@pytest.mark.parametrize("tuning", ["CWG=4", "CWG=4,WM=1", "CWG=4,BN=56", "CWG=4,BN=48", "CWG=2,BN=56"])
def test_four_consumer_warpgroups(kernel_family, tuning, monkeypatch):
    """The wgmma tile with 4 consumer warpgroups (640 threads; 512 weight rows a CTA at WM=2; auto
    runs it one CTA per tile for 17-32-row blocks) on both schedules: Kimi shapes at 8-32-row
    blocks (BN 16, 24, 32; 64 at WM=1), and N = 336, which ends inside the tile (its last n-tiles are clamped
    copies that are never stored)."""
    if kernel_family not in ("wgmma", "wgmma_sk"):
        pytest.skip("the wgmma tile only")
    monkeypatch.setenv("CHORD_W4A16_TUNING", tuning)
    if kernel_family == "wgmma_sk" and tuning in ("CWG=4,BN=56", "CWG=4,BN=48"):
        pytest.skip("stream-K with 4 consumer warpgroups at BN 48/56 would spill (v14): one-CTA only")
    blocks = (8, 16, 24, 32) + ((64,) if "WM=1" in tuning else (48, 56) if "BN=56" in tuning else (48,) if "BN=48" in tuning else ())
    for shape in ("ep8_down", "tp8_down"):
        problem = make_problem(shape, 64, skew=True, seed=41)
        for block_m in blocks:
            sorted_ids, expert_ids, ntp = align(problem, block_m)
            out = run_indexed(problem, sorted_ids, expert_ids, ntp, block_m)
            check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m)
    g = torch.Generator().manual_seed(42)
    e, n, k, tokens, top_k = 5, 336, 1024, 40, 4
    codes = torch.randint(0, 16, (e, n, k), generator=g, dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=g) * 0.05 + 1e-3).to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, "indexed").to("cuda")
    a = torch.randn(tokens, k, generator=g).to(torch.bfloat16).to("cuda")
    topk = torch.randint(0, e, (tokens, top_k), generator=g).to(torch.int32).to("cuda")
    w = reference.dequantize_w4a16(packed.to("cpu"))
    for block_m in blocks:
        sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk, block_m, e)
        out = indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m)
        ref = reference.moe_indexed_reference(a.cpu(), w, sorted_ids.cpu(), expert_ids.cpu(), ntp.cpu(), top_k, block_m)
        torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)


def assert_locks_zero(message):
    """The newest stream-K scratch's locks (the tile loop's claim counters and split-tile locks
    too) are all zero: every kernel leaves them so for the next launch."""
    from chord_kernels import ops

    assert not ops._streamk_buffers[torch.cuda.current_device()][-1][1].any(), message


def replay_with_routing_changed(shape, tokens, block_m, seed, replays, after_each=lambda: None):
    """Capture one indexed call in a CUDA graph, then for each (seed, skew) in ``replays`` copy a
    fresh routing into the captured buffers, replay, check against the reference and call
    ``after_each``."""
    problem = make_problem(shape, tokens, seed=seed)
    s, e, n = align(problem, block_m, garbage_tail=False)
    static = [t.clone() for t in (s, e, n)]
    out = torch.full((problem.a.shape[0] * problem.top_k, problem.packed.n), POISON, dtype=torch.bfloat16,
                     device="cuda")
    indexed(problem.a, problem.packed, *static, problem.top_k, block_m, out)  # warm up: compile + load
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        indexed(problem.a, problem.packed, *static, problem.top_k, block_m, out)
    for other_seed, skew in replays:
        other = make_problem(shape, tokens, skew=skew, seed=other_seed)
        problem.topk_ids.copy_(other.topk_ids)
        s, e, n = align(problem, block_m, seed=other_seed)
        for dst, src in zip(static, (s, e, n), strict=True):
            dst.copy_(src)
        out.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(problem, out, s, e, n, block_m)
        after_each()


def test_cuda_graph_capture_with_routing_changed_between_replays():
    replay_with_routing_changed("tp8_gate_up", 24, 16, 12, [(13, True), (14, True), (15, True)])


def paired_tile_counts(expert_ids, ntp, block_m):
    """(8-row tiles, pair tiles) of a call as IndexedMmaDecodeDual counts them: every block before
    the count, and ceil(blocks / 2) an expert (csrc/indexed/paired_blocks.cuh)."""
    experts = expert_ids[: -(-int(ntp.item()) // block_m)].tolist()
    runs = [len(list(run)) for _, run in itertools.groupby(experts)]
    return len(experts), sum(-(-run // 2) for run in runs)


@pytest.mark.parametrize("tokens,skew,tuning", [(128, True, "PAIRED=1"), (128, False, "PAIRED=1"), (256, True, "PAIRED=1"),
                                                (256, False, "PAIRED=1"), (64, True, "PAIRED=2"), (20, True, "PAIRED=2")])
def test_paired_decode_tiles(tokens, skew, tuning, kernel_family, monkeypatch):
    """TP8 down on 8-row blocks (dispatch.paired_decode, CHORD_W4A16_TUNING PAIRED 1: its route
    rule; 2: any route count): the dual kernel pairs an expert's
    consecutive blocks into 16-row tiles where that saves 2+ % of the tiles, else runs the 8-row
    tile; both sides against the reference with garbage routing tails, twice (the same bits), the
    stream-K locks zero after each launch."""
    from chord_kernels import dispatch

    if kernel_family not in ("auto", "mma_sk"):
        pytest.skip("the short-K stream-K mma tile only")
    monkeypatch.setenv("CHORD_W4A16_TUNING", tuning)
    problem = make_problem("tp8_down", tokens, skew=skew, seed=41 + tokens)
    _, _, n, k, _ = KIMI_SHAPES["tp8_down"]
    routes = problem.a.shape[0]
    launch = dispatch.select_indexed(dispatch.IndexedProblem(n, k, 384, 1, 8, routes), tuning=tuning)
    assert launch.dual and launch.spec.body == "chord::IndexedMmaDecodeDual"
    sorted_ids, expert_ids, ntp = align(problem, 8)
    short, tall = paired_tile_counts(expert_ids, ntp, 8)
    out = run_indexed(problem, sorted_ids, expert_ids, ntp, 8)
    check_against_reference(problem, out, sorted_ids, expert_ids, ntp, 8)
    assert_locks_zero("the paired decode kernel left a stream-K lock non-zero")
    again = run_indexed(problem, sorted_ids, expert_ids, ntp, 8)
    ids = reference_fp32(problem, sorted_ids, expert_ids, ntp, 8)[0]
    assert torch.equal(again[ids], out[ids]), "paired decode result changed between runs"
    if (tokens, skew) == (256, True):
        assert 51 * tall < 50 * short, "this routing should run the pair tile"
    if (tokens, skew) == (128, False):
        assert 51 * tall >= 50 * short, "this routing should run the 8-row tile"


def test_paired_decode_graph_replays_both_sides(kernel_family, monkeypatch):
    """The dual kernel (CHORD_W4A16_TUNING PAIRED=1) captured once at TP8 T=256 down on 8-row blocks, replayed with skewed and
    uniform routings copied into the captured buffers: the side each CTA runs follows the routing
    on the device, and every replay matches the reference."""
    if kernel_family not in ("auto", "mma_sk"):
        pytest.skip("the short-K stream-K mma tile only")
    monkeypatch.setenv("CHORD_W4A16_TUNING", "PAIRED=1")
    replay_with_routing_changed("tp8_down", 256, 8, 43, [(44, True), (45, False), (46, True)],
                                lambda: assert_locks_zero("a replay left a stream-K lock non-zero"))


@pytest.mark.parametrize("shape,tokens", [("tp8_down", 64), ("ep8_down", 256)])
def test_output_rows_not_16_byte_aligned(shape, tokens, kernel_family):
    """An out view whose rows are not 16-byte aligned (row stride N + 12, start 8 bytes in): the
    staged epilogues fall back to 2-byte stores; nothing lands outside the view's columns."""
    problem = make_problem(shape, tokens, skew=True, seed=31)
    n, rows = problem.packed.n, problem.a.shape[0] * problem.top_k
    for block_m in (8, 32, 128):
        sorted_ids, expert_ids, ntp = align(problem, block_m)
        big = torch.full((rows, n + 12), POISON, dtype=torch.bfloat16, device="cuda")
        out = big[:, 4:4 + n]
        indexed(problem.a, problem.packed, sorted_ids, expert_ids, ntp, problem.top_k, block_m, out)
        torch.cuda.synchronize()
        check_against_reference(problem, out, sorted_ids, expert_ids, ntp, block_m)
        assert torch.isnan(big[:, :4].float()).all() and torch.isnan(big[:, 4 + n:].float()).all(), \
            "a store landed outside the out view's columns"


def test_tile_loop_graph_replays_and_counters_left_zero(kernel_family):
    """The wgmma tile with 2 consumer warpgroups runs on at most the resident CTAs, each claiming
    tiles from a device counter (the stream-K locks) that the last CTA zeroes: graph replays with
    the routing changed between them stay correct, and every launch leaves the counters zero.
    EP8 down at 128-row blocks: 28 column tiles a block, more tiles than resident CTAs."""

    if kernel_family != "wgmma":
        pytest.skip("one family: the wgmma tile")
    # warm-up allocated the locks: the newest pair is the one the captured launch uses
    replay_with_routing_changed("ep8_down", 384, 128, 21, [(22, False), (23, True), (24, True)],
                                lambda: assert_locks_zero("a tile-loop launch left its counters non-zero"))


def test_tile_loop_tail_in_quarters_over_k_2048(kernel_family):
    """EP8 down (K=2048, 32 stages) at 32-row blocks, the 4-warpgroup 32 x 512 tile on the tile
    loop: ~1000 routes on 48 experts make ~48 blocks x 14 column tiles, a last wave of a few
    tiles on the SMs, which the split tail cuts into four 8-stage pieces (the 4-warpgroup tiles'
    kTailMinPieceStages; indexed-kernels.md v71). The reference, the same bits run to run, the
    counters left zero."""
    from chord_kernels import ops, wave_model

    if kernel_family != "auto":
        pytest.skip("the dispatch's own choice")
    problem = make_problem("ep8_down", 1000, seed=61)
    sorted_ids, expert_ids, ntp = align(problem, 32)
    out = run_indexed(problem, sorted_ids, expert_ids, ntp, 32)
    check_against_reference(problem, out, sorted_ids, expert_ids, ntp, 32)
    launches = [plan[1] for plan in ops._indexed_plans.values() if plan[1].tile_loop]
    assert launches, "EP8 down at 32-row blocks runs the tile loop"
    blocks = int((expert_ids[: ntp.item() // 32] >= 0).sum())
    tiles = blocks * -(-problem.packed.n // launches[-1].cols_per_cta)
    grid = torch.cuda.get_device_properties(0).multi_processor_count
    split = wave_model.tail_split(tiles, grid, problem.packed.k // 64, 1, wave_model.TAIL_MIN_PIECE_STAGES_INDEXED_CWG4)[1]
    assert split == 4, (tiles, grid, split)
    again = run_indexed(problem, sorted_ids, expert_ids, ntp, 32)
    ids = reference_fp32(problem, sorted_ids, expert_ids, ntp, 32)[0]
    assert torch.equal(again[ids], out[ids]), "the split tail's sums changed between runs"
    assert_locks_zero("a launch left its counters non-zero")


def test_tile_loop_split_tail_graph_replays(kernel_family):
    """The 4-warpgroup tile loop's split tail under CUDA graphs: EP8 down at 32-row blocks, ~1000
    routes (a last wave of a few tiles, cut into pieces whose partials one CTA adds up), captured
    once and replayed with uniform and skewed routings in between (other tile counts, other
    splits). Every replay matches the reference and leaves the claim counters and the split
    tiles' locks zero."""

    if kernel_family != "auto":
        pytest.skip("the dispatch's own choice")

    replay_with_routing_changed("ep8_down", 1000, 32, 62, [(63, False), (64, True), (65, False), (66, True)],
                                lambda: assert_locks_zero("a launch left a counter or a split tile's lock non-zero"))


def test_short_k_deferred_store_graph_replays(kernel_family):
    """TP8 down prefill (K=256, 96-row blocks): the tile loop with its epilogue on the producer's
    store warps, warp 0 gathering the rows (DEFER_STORE, docs/design/indexed-kernels.md v51). 8192
    routes over 384 experts, ~21 rows a block: ~10.8 K tiles of 4 stages, ~80 handoffs a CTA, the
    two out-row sets alternating, most tile rows zero-filled; graph
    replays with the routing changed between them (uniform and skewed) stay correct, and every
    launch leaves the claim counters zero."""
    from chord_kernels import ops

    if kernel_family != "auto":
        pytest.skip("the dispatch's own choice")

    def deferred_and_counters_zero():
        launches = [plan[1] for plan in ops._indexed_plans.values() if plan[1].spec.config.get("DEFER_STORE")]
        assert launches and all(launch.tile_loop for launch in launches)
        assert_locks_zero("a tile-loop launch left its counters non-zero")

    replay_with_routing_changed("tp8_down", 1024, 96, 31, [(32, False), (33, True), (34, False)],
                                deferred_and_counters_zero)


def test_misaligned_activations_are_a_clear_error():
    """The kernels load a's rows in 16-byte pieces: an a that starts 2 bytes past an aligned address
    is refused before anything launches (not a misaligned-address fault on the device)."""
    problem = make_problem("tp8_down", 8, seed=5)
    m, k = problem.a.shape
    base = torch.empty(m * k + 8, dtype=torch.bfloat16, device="cuda")
    a = base[1:1 + m * k].view(m, k)
    a.copy_(problem.a)
    sorted_ids, expert_ids, ntp = align(problem, 16)
    out = torch.full((m * problem.top_k, problem.packed.n), POISON, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="16-byte aligned"):
        indexed(a, problem.packed, sorted_ids, expert_ids, ntp, problem.top_k, 16, out)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all()


def test_wrong_mode_is_an_error():
    problem = make_problem("tp8_down", 2, seed=1)
    codes, scale = layouts.unpack_w4a16(problem.packed.to("cpu"))
    wrong = layouts.pack_w4a16(codes, scale, "contiguous").to("cuda")
    s, e, n = align(problem, 16)
    with pytest.raises(ValueError, match="packed for mode 'contiguous'"):
        indexed(problem.a, wrong, s, e, n, problem.top_k, 16)
