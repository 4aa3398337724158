"""Dispatch as pure functions: which kernel each problem gets, overrides, printing, device checks."""

import itertools
import math

import pytest
import torch
from chord_kernels import device, dispatch
from chord_kernels.dispatch import GroupedProblem, IndexedProblem
from chord_kernels.profiles import profile_specs


@pytest.mark.parametrize(
    "n,k,block_m,want",
    [
        (4096, 7168, 8, {"NT": 2, "TT": 1, "STAGE_K": 256}),  # EP8 gate_up decode
        (7168, 2048, 8, {"NT": 2, "TT": 1, "STAGE_K": 256}),  # EP8 down decode
        (512, 7168, 8, {"NT": 2, "TT": 1, "STAGE_K": 256}),  # TP8 gate_up: stream-K keeps 2 tiles a warp
        (7168, 256, 8, {"NT": 4, "TT": 1, "STAGE_K": 128}),  # TP8 down decode: short K takes 256 weight rows
        (7168, 256, 16, {"NT": 4, "TT": 2, "STAGE_K": 128}),  # TP8 down, 16-row blocks (short K)
        (7168, 256, 32, {"NT": 4, "TT": 4, "STAGE_K": 128}),  # TP8 down, mid batch
        (160, 320, 5, {"NT": 1, "TT": 1, "STAGE_K": 64}),  # not Kimi: K only a multiple of 64
    ],
)
def test_indexed_choice(n, k, block_m, want):
    launch = dispatch.select_indexed(IndexedProblem(n, k, 8, 8, block_m))
    # Decode blocks, and mid-batch blocks on short K, run the mma tile on the stream-K schedule.
    assert launch.spec.family == "indexed_mma_sk" and launch.persistent
    assert {key: launch.spec.config[key] for key in want} == want
    assert launch.rows_per_cta == 8 * want["TT"] and launch.cols_per_cta == 64 * want["NT"]
    assert launch.ctas_per_block(IndexedProblem(n, k, 8, 8, block_m)) == -(-block_m // launch.rows_per_cta)


@pytest.mark.parametrize(
    "n,block_m,want",
    [
        (4096, 128, {"WM": 2, "BN": 128}),  # EP8 gate_up prefill: 256 weight rows x 128 rows
        (7168, 64, {"WM": 2, "BN": 64}),  # 64-row blocks: N of the wgmma is 64
        (512, 64, {"WM": 2, "BN": 64}),  # TP8 gate_up
        (160, 128, {"WM": 1, "BN": 128}),  # not Kimi: N narrower than two m64 tiles per warpgroup
    ],
)
def test_indexed_prefill_choice_is_the_wgmma_tile(n, block_m, want):
    problem = IndexedProblem(n, 7168, 48, 8, block_m)
    launch = dispatch.select_indexed(problem)
    assert launch.spec.family == "indexed_wgmma" and launch.spec.threads == 384
    assert {key: launch.spec.config[key] for key in want} == want
    assert launch.rows_per_cta == want["BN"] and launch.cols_per_cta == 128 * want["WM"]
    assert launch.ctas_per_block(problem) == 1
    # WgmmaTile::Smem: STAGES x (BN rows x 128 B, 8 warps x WM x 512 B, 2 groups x 128*WM bf16,
    # BN stream-K row ids, 2 mbarriers) + the epilogue's staging (2 warpgroups x BN rows x 72
    # bf16) + 2 x BN int32 + the finisher flag, two claims and the stream-K schedule (padded: 48 B)
    cfg = launch.spec.config
    assert launch.smem_bytes == cfg["STAGES"] * (cfg["BN"] * 128 + 8 * cfg["WM"] * 512 + 2 * 128 * cfg["WM"] * 2
                                                 + 4 * cfg["BN"] + 16) + 2 * cfg["BN"] * 72 * 2 + 8 * cfg["BN"] + 48
    assert launch.smem_bytes <= 227 * 1024


@pytest.mark.parametrize("block_m,bn,stages", [(96, 96, 7), (128, 128, 5)])
def test_short_k_prefill_is_the_deferred_tile_loop(block_m, bn, stages):
    """TP8 down (K=256) prefill blocks of 96+ rows: 4 stages a tile, so the ring runs across tiles
    (the tile loop), and a tile's output, ~40 % of its bytes, goes out on the producer's store
    warps while the consumers run the next tile (DEFER_STORE; indexed-kernels.md v51). The ring as
    deep as fits beside the staging of both m64 tiles and the second set of out rows."""
    launch = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 8, block_m))
    assert block_m >= dispatch.SHORT_K_LOOP_MIN_ROWS
    assert launch.spec.family == "indexed_wgmma" and launch.tile_loop
    assert launch.spec.config == {"WM": 2, "BN": bn, "STAGES": stages, "CWG": 2, "LOOP": 1, "DEFER_STORE": 1}
    assert launch.smem_bytes == dispatch.wgmma_smem_bytes(2, bn, stages, 2, defer_store=True)
    assert launch.smem_bytes <= dispatch.WGMMA_SMEM_LIMIT
    # the stream-K schedule of the short-K tile stays reachable by CHORD_W4A16_INDEXED_KERNEL=wgmma_sk
    sk = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 8, block_m), family="wgmma_sk")
    assert sk.spec.family == "indexed_wgmma_sk" and sk.spec.config == {"WM": 2, "BN": bn, "STAGES": 8 if bn < 128 else 7,
                                                                        "CWG": 2}


@pytest.mark.parametrize("block_m", [48, 56, 64])
def test_short_k_prefill_below_96_rows_is_the_stream_k_tile(block_m):
    """Short-K blocks past the stream-K mma tile's 32 rows and under SHORT_K_LOOP_MIN_ROWS (56
    from the block model at TP8 T=2048, 48 and 64 by override) keep the wgmma tile on the stream-K
    schedule: there the deferred tile loop measured +10 / +27 % (TP8 T=2048 down, base / boost
    clock, v51), its k loop too short to hide the store warps' write of the tile before."""
    launch = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 8, block_m))
    assert launch.spec.family == "indexed_wgmma_sk" and launch.persistent
    # the ring as deep as fits next to the epilogue's staging rows; 2 consumer warpgroups (4 would spill)
    assert launch.spec.config == {"WM": 2, "BN": block_m, "STAGES": 8, "CWG": 2}
    if block_m == 64:
        return
    # 48 and 56 rows on deep K: one CTA per tile with 4 consumer warpgroups, the 512 x BN tile
    # (v14), on the tile loop (v34)
    deep = dispatch.select_indexed(IndexedProblem(512, 7168, 384, 8, block_m))
    assert deep.spec.family == "indexed_wgmma" and deep.spec.config == {"WM": 2, "BN": block_m, "STAGES": 8, "CWG": 4,
                                                                        "LOOP": 1}
    assert deep.tile_loop and deep.cols_per_cta == 512 and deep.smem_bytes <= 227 * 1024


def test_mid_batch_blocks():
    """Blocks of 8 rows stay on the stream-K mma kernel under ``auto``; 16-32 rows on deep K and
    N >= 512 take the 512-row wgmma tile with 4 consumer warpgroups: 16 rows on the stream-K
    schedule (v28), 17-32 on the tile loop (v34); short K the stream-K mma kernel; the family
    override runs every block on the wgmma tile loop with N = 16, 24 or 32."""
    for block_m, bn in ((8, 16), (16, 16), (20, 24), (24, 24), (32, 32)):
        problem = IndexedProblem(4096, 7168, 48, 8, block_m)
        launch = dispatch.select_indexed(problem)
        if block_m <= 8:
            assert launch.spec.family == "indexed_mma_sk"
        elif block_m <= dispatch.MID_BATCH_STREAMK_MAX_ROWS:
            assert launch.spec.family == "indexed_wgmma_sk" and launch.spec.config == {"WM": 2, "BN": bn,
                                                                                     "STAGES": 8, "CWG": 4}
            assert launch.spec.threads == 640 and launch.cols_per_cta == 512
        else:
            assert launch.spec.family == "indexed_wgmma" and launch.spec.config == {"WM": 2, "BN": bn, "STAGES": 8,
                                                                                  "CWG": 4, "LOOP": 1}
            assert launch.spec.threads == 640 and launch.cols_per_cta == 512 and launch.tile_loop
        launch = dispatch.select_indexed(problem, family="wgmma")
        assert launch.spec.config["BN"] == bn and launch.rows_per_cta == bn and launch.ctas_per_block(problem) == 1
    # TP8 gate_up (N 512) takes it too; TP8 down (short K) and N under 512 keep the mma kernel.
    assert dispatch.select_indexed(IndexedProblem(512, 7168, 384, 8, 16)).spec.config["CWG"] == 4
    for n, k in ((7168, 256), (384, 7168)):
        assert dispatch.select_indexed(IndexedProblem(n, k, 384, 8, 32)).spec.family == "indexed_mma_sk"
    # The grouped family's one-CTA mid batch stays at 17-32 rows on N >= 2048.
    assert dispatch.mid_batch_family(16, 4096, 7168) is None and dispatch.mid_batch_family(32, 512, 7168) is None
    assert dispatch.mid_batch_family(32, 4096, 7168) == "wgmma"
    # Off the mid batch the stream-K schedule keeps 2 consumer warpgroups (56-row blocks, short K).
    for n, k, block_m in ((4096, 7168, 56), (7168, 256, 32)):
        assert dispatch.select_indexed(IndexedProblem(n, k, 48, 8, block_m), family="wgmma_sk").spec.config["CWG"] == 2


def test_grid_covers_n_and_every_routing_block():
    problem = IndexedProblem(n=4096, k=7168, num_experts=48, top_k=8, block_m=32)
    launch = dispatch.select_indexed(problem)
    assert launch.grid(problem, num_blocks=10) == (4096 // 512, 10, 1)
    narrow = IndexedProblem(n=160, k=7168, num_experts=48, top_k=8, block_m=32)
    assert dispatch.select_indexed(narrow, family="wgmma").grid(narrow, num_blocks=10) == (2, 10, 1)
    big = IndexedProblem(n=4096, k=7168, num_experts=48, top_k=8, block_m=128)
    assert dispatch.select_indexed(big, family="mma").grid(big, num_blocks=10) == (4096 // 256, 10 * 2, 1)
    assert dispatch.select_indexed(big).grid(big, num_blocks=10) == (4096 // 256, 10, 1)


@pytest.mark.parametrize("valid_shape_m,experts,want", [(1, 48, 8), (400, 48, 16), (1500, 48, 32),
                                                         (1537, 48, 56), (2600, 48, 64), (10**6, 48, 128),
                                                         (0, 384, 8),
                                                         # the Kimi grid's prefill points (rows per expert)
                                                         (4096, 48, 96),      # EP8 T=512: 85.3 (96 measured faster, v18)
                                                         (3500, 48, 96),      # 73
                                                         (16384, 48, 128),    # EP8 T=2048: 341
                                                         (16384, 384, 56),    # TP8 T=2048: 43
                                                         (65536, 384, 96)])   # TP8 T=8192: 171
def test_block_m_follows_rows_per_expert(valid_shape_m, experts, want):
    n, k = (4096, 7168) if experts == 48 else (512, 7168)  # EP8 / TP8 gate_up
    assert dispatch.indexed_block_m(valid_shape_m, experts, n, k) == want


EP8_GATE_UP, EP8_DOWN, TP8_GATE_UP, TP8_DOWN = (4096, 7168), (7168, 2048), (512, 7168), (7168, 256)


@pytest.mark.parametrize("valid_shape_m,experts,shape,want", [
    (554, 48, EP8_GATE_UP, 24), (554, 48, EP8_DOWN, 24),  # EP8 T=64: 11.5 rows (v36)
    (480, 48, EP8_GATE_UP, 16), (481, 48, EP8_GATE_UP, 24),  # 10 rows: 16; 11: 24
    (768, 48, EP8_DOWN, 24), (769, 48, EP8_DOWN, 32),  # above 16 rows the 32-row block stays
    (384, 48, EP8_GATE_UP, 8),  # decode keeps the smallest block
    (4096, 384, TP8_GATE_UP, 16), (4096, 384, TP8_DOWN, 16),  # TP8 T=512: N 512, and K 256
    (554, 48, (4096, 512), 16)])  # short K: no mid-batch tile
def test_mid_batch_24_row_blocks(valid_shape_m, experts, shape, want):
    assert dispatch.indexed_block_m(valid_shape_m, experts, *shape) == want
    assert dispatch.wgmma_shape(shape[0], 24)["BN"] == 24


@pytest.mark.parametrize("experts,rows,shape,want,grouped_family", [
    (48, 12, EP8_GATE_UP, 24, "grouped_wgmma"), (48, 12, EP8_DOWN, 24, "grouped_wgmma"),  # EP8 T=64: 2.9 / 5.1 waves
    (24, 11, EP8_GATE_UP, 24, "grouped_wgmma"), (24, 11, EP8_DOWN, 24, "grouped_wgmma"),  # EP16 T=32: 1.45 / 2.5
    # EP32 T=20: 0.73 / 1.27 waves of 512 x 24 tiles (the loop lost, grouped v25): indexed blocks of
    # 16; gate_up's grouped tiles 24 rows on the 256 x 24 tile loop (grouped v46), down's 16
    (12, 14, EP8_GATE_UP, 16, "grouped_wgmma"), (12, 14, EP8_DOWN, 16, "grouped_mma_sk")])
def test_24_row_tiles_only_where_they_make_waves(experts, rows, shape, want, grouped_family):
    from chord_kernels.dispatch import GroupedProblem

    assert dispatch.indexed_block_m(experts * rows, experts, *shape) == want
    for routing, block_k in (("contiguous_offsets", 64), ("masked", 128)):
        launch = dispatch.select_grouped(GroupedProblem(routing, *shape, experts, rows, block_k))
        rows_per_tile = 16 if grouped_family == "grouped_mma_sk" else 24
        assert (launch.spec.family, launch.rows_per_cta) == (grouped_family, rows_per_tile), (routing, launch.spec.symbol)


@pytest.mark.parametrize("routes,nt", [(8, 2), (14, 2), (15, 4), (64, 4), (0, 4)])
def test_short_k_decode_one_wave_takes_128_row_tiles(routes, nt):
    # TP8 down (N 7168, K 256) at 8-row blocks: 8 routes make 8 x 28 tiles of 256 weight rows for
    # 3 x 132 resident CTAs (8 routes: at most 8 blocks); 15 routes may make 15 blocks,
    # 420 tiles (0: the route count is not known). Few experts with many routes: many blocks.
    launch = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 1, 8, routes))
    assert launch.spec.family == "indexed_mma_sk" and launch.spec.config["NT"] == nt
    deep = dispatch.select_indexed(IndexedProblem(7168, 2048, 48, 1, 8, routes))  # deep K: NT as before
    assert deep.spec.config["NT"] == dispatch.streamk_shape(7168, 2048, 8)["NT"]
    assert dispatch.select_indexed(IndexedProblem(7168, 256, 384, 1, 8, routes), tuning="NT=4").spec.config["NT"] == 4
    assert dispatch.select_indexed(IndexedProblem(7168, 256, 3, 1, 8, max(routes, 1) * 100)).spec.config["NT"] == 4


@pytest.mark.parametrize("routes,stages", [(8, 4), (16, 4), (32, 4), (49, 4), (50, 3), (64, 3), (0, 3)])
def test_few_tiles_decode_takes_a_4_deep_ring(routes, stages):
    # TP8 gate_up (N 512, K 7168) at 8-row blocks: a route is at most one block of 4 tiles of 128
    # weight rows; up to 198 tiles (half of 3 x 132 resident CTAs) the ring is 4 deep (2 CTAs an SM).
    launch = dispatch.select_indexed(IndexedProblem(512, 7168, 384, 8, 8, routes))
    assert launch.spec.family == "indexed_mma_sk" and launch.spec.config["STAGES"] == stages
    assert launch.spec.config["NT"] == 2 and (launch.spec.min_blocks_per_sm == 2) == (stages == 4)
    tuned = dispatch.select_indexed(IndexedProblem(512, 7168, 384, 8, 8, routes), tuning="STAGES=3")
    assert tuned.spec.config["STAGES"] == 3  # an override wins
    # EP8 (48 experts): 128 routes may make 64 blocks of 32 tiles; TP8 down's 8 routes 448 tiles.
    assert dispatch.select_indexed(IndexedProblem(4096, 7168, 48, 8, 8, 128)).spec.config["STAGES"] == 3
    assert dispatch.select_indexed(IndexedProblem(7168, 256, 384, 8, 8, 8)).spec.config["STAGES"] == 3


@pytest.mark.parametrize("n,k,experts,top_k,routes,stages", [
    (4096, 7168, 48, 8, 64, 4),     # EP8 T=1 gate_up: 64 routes, ~8 of them local
    (7168, 2048, 48, 1, 64, 4),     # EP8 T=1 down
    (7168, 2048, 48, 1, 66, 4),     # one route for every two of 132 SMs
    (7168, 2048, 48, 1, 67, 3),     # more: the 3-stage ring
    (4096, 7168, 48, 8, 128, 3),    # EP8 T=2 gate_up (the 4-deep ring lost 5.9 % there)
    (2048, 7168, 96, 8, 64, 3),     # 16 tiles a route: not a wide weight
    (512, 7168, 384, 8, 64, 3),     # TP8 T=8 gate_up: 4 tiles a route (256 tiles, over few_tiles_decode's 198)
    (4096, 7168, 48, 8, 0, 3),      # routes unknown
])
def test_sparse_routes_on_a_wide_weight_take_the_4_deep_ring(n, k, experts, top_k, routes, stages):
    # dispatch.sparse_routes_decode: the host's tile bound cannot see that ~8 of EP8 T=1's 64 routes
    # are the rank's; an override of STAGES wins.
    launch = dispatch.select_indexed(IndexedProblem(n, k, experts, top_k, 8, routes))
    cfg = launch.spec.config
    assert (cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"]) == (2, 1, 256, stages), launch.spec.symbol
    assert launch.spec.min_blocks_per_sm == {3: 3, 4: 2}[stages]
    assert dispatch.select_indexed(IndexedProblem(n, k, experts, top_k, 8, routes), tuning="STAGES=3").spec.config[
        "STAGES"] == 3
    short_k = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 1, 8, routes))  # TP8 down: its own rings
    assert short_k.spec.config["STAGES"] == 3 and short_k.spec.config["NT"] == (4 if routes >= 15 or not routes else 2)


@pytest.mark.parametrize("n,k,experts,top_k,routes,stages", [
    (4096, 7168, 48, 8, 512, 2),    # EP8 T=8 gate_up: up to 112 blocks x 32 tiles, 6.8 a CTA at 4 an SM
    (7168, 2048, 48, 1, 512, 2),    # EP8 T=8 down: 56 tiles a block
    (4096, 7168, 48, 8, 128, 3),    # EP8 T=2 gate_up: 1792 tiles, under 4 a CTA
    (7168, 2048, 48, 1, 128, 3),    # EP8 T=2 down: 4032 tiles by the bound, but fewer routes than SMs
    (7168, 2048, 48, 1, 256, 2),    # EP8 T=4 down
    (512, 7168, 384, 8, 160, 3),    # TP8 T=20 gate_up: 640 tiles (the 2-stage ring lost 8 % there)
    (512, 7168, 384, 8, 1024, 3),   # TP8 T=128 gate_up: 2048 tiles, just under 2112
    (4096, 7168, 48, 8, 0, 3),      # routes unknown: the 3-stage ring
])
def test_many_tiles_decode_takes_the_2_stage_ring(n, k, experts, top_k, routes, stages):
    # The 8 x 128 decode tile with 4+ tiles a resident CTA runs 2 stages at 4 CTAs an SM
    # (dispatch.MANY_TILES_RING); an override of STAGES wins.
    launch = dispatch.select_indexed(IndexedProblem(n, k, experts, top_k, 8, routes))
    cfg = launch.spec.config
    assert (cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"]) == (2, 1, 256, stages), launch.spec.symbol
    assert launch.spec.min_blocks_per_sm == {2: 4, 3: 3}[stages]
    assert launch.smem_bytes * launch.spec.min_blocks_per_sm + launch.spec.min_blocks_per_sm * 1024 <= dispatch.SMEM_PER_SM
    tuned = dispatch.select_indexed(IndexedProblem(n, k, experts, top_k, 8, routes), tuning="STAGES=3")
    assert tuned.spec.config["STAGES"] == 3


@pytest.mark.parametrize("n,k,experts,top_k,routes,row_tiles,evict_first", [
    # the H100 measurements behind EVICT_FIRST_MAX_BYTES (indexed-kernels.md v67), by the tiles the
    # device counts: routing blocks of 8 (about the experts touched) x column tiles
    (4096, 7168, 48, 8, 64, 5, True),      # EP8 T=1 gate_up: ~4 experts (-11 %)
    (4096, 7168, 48, 8, 512, 30, False),   # EP8 T=8 gate_up: 30 experts (+1.3 % evict-first)
    (7168, 2048, 48, 1, 512, 30, True),    # EP8 T=8 down (-2.5 %)
    (512, 7168, 384, 8, 160, 140, True),   # TP8 T=20 gate_up (-2 %)
    (512, 7168, 384, 8, 1024, 370, False),  # TP8 T=128 gate_up: 359 experts (+1 % evict-first)
    (7168, 256, 384, 1, 1024, 370, True),  # TP8 T=128 down (-2 %)
])
def test_short_weight_streams_load_evict_first(n, k, experts, top_k, routes, row_tiles, evict_first):
    launch = dispatch.select_indexed(IndexedProblem(n, k, experts, top_k, 8, routes))
    tiles = row_tiles * -(-n // launch.cols_per_cta)
    bound = dispatch.evict_first_tiles(launch, k)  # MoeParams::evict_first_tiles; the kernel compares
    assert (tiles <= bound) == evict_first
    assert bound * dispatch.mma_tile_weight_bytes(launch, k) <= dispatch.EVICT_FIRST_MAX_BYTES


def test_only_the_mma_stream_k_tiles_load_evict_first():
    decode = dispatch.select_grouped(GroupedProblem("masked", 7168, 2048, 12, 1, 128))
    prefill = dispatch.select_indexed(IndexedProblem(4096, 7168, 48, 8, 128))
    one_cta = dispatch.select_indexed(IndexedProblem(4096, 7168, 48, 8, 8), family="mma")
    assert decode.spec.family == "grouped_mma_sk" and dispatch.evict_first_tiles(decode, 2048) == 2844
    assert dispatch.evict_first_tiles(prefill, 7168) == dispatch.evict_first_tiles(one_cta, 7168) == 0
    deepgemm = dispatch.grouped_mma_streamk("contiguous", 4, 1, 128, 128)  # kEvictFirstWeights: never
    assert dispatch.evict_first_tiles(deepgemm, 2048) == 0


@pytest.mark.parametrize("routes", [4096, 0])
def test_16_row_short_k_tiles_take_the_one_tile_ring(routes):
    # TP8 down (N 7168, K 256) at T=512: 16-row blocks on the 256-row tile run 2 stages (one tile)
    # at 3 CTAs an SM (indexed-kernels.md v45); an override of STAGES keeps the estimate's 2.
    launch = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 8, 16, routes))
    cfg = launch.spec.config
    assert (cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"]) == (4, 2, 128, 2)
    assert launch.spec.min_blocks_per_sm == 3 and dispatch.resident_ctas(launch) == 3 * dispatch.H200_SMS
    assert launch.smem_bytes * 3 + 3 * 1024 <= dispatch.SMEM_PER_SM
    tuned = dispatch.select_indexed(IndexedProblem(7168, 256, 384, 8, 16, routes), tuning="STAGES=3")
    assert tuned.spec.config["STAGES"] == 3 and tuned.spec.min_blocks_per_sm == 2
    # deep K keeps its ring; a one-wave call falls back to 128-row tiles on the 3-stage ring
    deep = dispatch.select_indexed(IndexedProblem(7168, 2048, 48, 8, 16, routes)).spec
    assert deep.config.get("STAGES") != 2
    few = dispatch.select_indexed(IndexedProblem(2048, 384, 3, 2, 16, 300))
    assert few.spec.config["NT"] == 2 and few.spec.config["STAGES"] == 3
    # the grouped kernel of that shape would spill at 3 CTAs an SM: the grouped family keeps 3 stages
    assert dispatch.grouped_launch("contiguous_offsets", 7168, 256, 16, 64).spec.config["STAGES"] == 3


def test_decode_launches_are_compiled_ahead():
    # The precompile list (every launch the heuristic reaches) holds the decode variants.
    symbols = {launch.spec.symbol for launch in dispatch.indexed_profile_launches(512, 7168)}
    assert {"chord_indexed_mma_sk_NT2_TT1_STAGE_K256_STAGES3", "chord_indexed_mma_sk_NT2_TT1_STAGE_K256_STAGES4"} <= symbols
    assert "chord_indexed_mma_sk_NT2_TT1_STAGE_K128_STAGES3" in {
        launch.spec.symbol for launch in dispatch.indexed_profile_launches(7168, 256)}


def test_precompile_probes_do_not_print_configs(monkeypatch, capsys):
    # CHORD_PRINT_CONFIGS reports the calls' choices, not the hundreds of problems the list probes.
    monkeypatch.setenv("CHORD_PRINT_CONFIGS", "1")
    dispatch.indexed_profile_launches(512, 7168)
    assert capsys.readouterr().err == ""
    dispatch.select_indexed(IndexedProblem(512, 7168, 384, 8, 8, 8))
    assert "indexed_mma_sk" in capsys.readouterr().err


def test_mid_batch_block_model():
    # 16 or 24 by the prefill model's expected cost: 24 from 11 rows an expert.
    assert [dispatch.mid_batch_block_m(t) for t in range(9, 17)] == [16, 16] + [24] * 6


def test_expected_tiles_is_the_poisson_mean_of_ceil():
    # Brute force: E[ceil(n / b)] summed over the Poisson pmf.
    for lam, b in ((0.5, 64), (40.0, 64), (85.0, 96), (171.0, 128), (500.0, 96)):
        p, want = math.exp(-lam), 0.0
        for n in range(1, int(lam * 3) + 200):
            p *= lam / n
            want += p * -(-n // b)
        assert dispatch.expected_tiles(lam, b) == pytest.approx(want, rel=1e-9, abs=1e-12), (lam, b)


def test_prefill_block_pads_least():
    # 70 rows: one tile of 96 (rarely a second) beats one of 128 and two of 64.
    assert dispatch.prefill_block_m(70) == 96 and dispatch.prefill_block_m(50) == 64
    # 33-45 rows: the 56-row block (its deep-K tile is faster: BLOCK_COST_SCALE); TP8 T=2048 has 43.
    assert dispatch.prefill_block_m(33) == dispatch.prefill_block_m(43) == 56
    # 171: two tiles of 96 (192 rows) beat two of 128 (256); 341: three of 128 (384) hold it.
    assert dispatch.prefill_block_m(171) == 96 and dispatch.prefill_block_m(341) == 128
    # 86 (EP8 T=512): 96 measured 3-7 % faster than 128 (v18); 96-128 rows: one tile of 128.
    assert dispatch.prefill_block_m(86) == 96
    assert all(dispatch.prefill_block_m(t) == 128 for t in (96, 107, 128))
    assert all(dispatch.prefill_block_m(t) == 128 for t in (513, 2000, 10**6))
    assert {dispatch.prefill_block_m(t) for t in range(33, 600)} == set(dispatch.PREFILL_BLOCK_M_CHOICES)


@pytest.mark.parametrize("shape", [EP8_GATE_UP, TP8_DOWN])
@pytest.mark.parametrize("experts", [1, 8, 48, 384])
def test_block_m_windows_match_the_rule(experts, shape):
    windows = dispatch.indexed_block_m_windows(experts, *shape)
    assert windows[0][0] == -1 and windows[-1][1] is None
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in itertools.pairwise(windows))  # contiguous, merged
    for m in list(range(0, 40 * experts, 7)) + [w[0] + d for w in windows[1:] for d in (0, 1)] + [10**7]:
        hit = [bm for lo, hi, bm in windows if lo < m and (hi is None or m <= hi)]
        assert hit == [dispatch.indexed_block_m(m, experts, *shape)], m


def test_smem_bytes_mirror_the_kernel_struct():
    # MmaTile::Smem = STAGES x (weights [4 blocks][4 warps][NT][32 lanes] x 16 B, scales
    # [8 groups][64*NT rows] bf16, activations [64 rows][256+8] bf16) + 2 x 64 int32 row indices.
    launch = dispatch.indexed_mma(nt=1, tt=8, stage_k=256, stages=3)
    # Plus, for the stream-K schedule, [STAGES][64] int32 row ids and a flag (padded to 16 B);
    # the epilogue's staging tile is 16 bytes at 64 rows (TT 8: not staged).
    assert launch.smem_bytes == 3 * (4 * 4 * 1 * 32 * 16 + 8 * 64 * 2 + 64 * 264 * 2 + 64 * 4) + 16 + 2 * 64 * 4 + 16
    # Up to 32 rows it stages: + rows x (64 NT + 8) BF16.
    small = dispatch.indexed_mma(nt=2, tt=4, stage_k=256, stages=3)
    assert small.smem_bytes == (3 * (4 * 4 * 2 * 32 * 16 + 8 * 128 * 2 + 32 * 264 * 2 + 32 * 4) + 32 * 136 * 2
                                + 2 * 32 * 4 + 16)
    # The kernel checks it on the device (a trap); the host derives CTAs per SM from it (and
    # from the register estimate).
    assert launch.spec.min_blocks_per_sm == 227 * 1024 // (launch.smem_bytes + 1024)
    assert dispatch.indexed_mma(nt=4, tt=8, stage_k=64).spec.min_blocks_per_sm == 2  # registers bind


def test_streamk_launch_is_persistent_with_a_workspace():
    launch = dispatch.select_indexed(IndexedProblem(4096, 7168, 48, 8, 8))
    assert launch.spec.config == {"NT": 2, "TT": 1, "STAGE_K": 256, "STAGES": 3}
    # each resident CTA owns two partial slots of 128 threads x NT*TT*4 floats
    assert launch.persistent and launch.partial_floats == 2 * 128 * 2 * 1 * 4
    # a thread gathers one tile row: tiles of 24 rows round up to 32 (TT 4)
    odd = dispatch.select_indexed(IndexedProblem(1024, 2048, 8, 8, 24), family="mma_sk")
    assert odd.spec.config["TT"] == 4
    with pytest.raises(ValueError, match="TT 1, 2, 4 or 8"):
        dispatch.indexed_mma_streamk(1, 3, 256)
    assert not dispatch.select_indexed(IndexedProblem(7168, 2048, 48, 8, 64)).persistent  # deep K, 64 rows


@pytest.mark.parametrize("block_m,bn", [(8, 16), (16, 16), (32, 32), (64, 64), (128, 128)])
def test_wgmma_streamk_launch(block_m, bn):
    """The wgmma tile on the stream-K schedule: persistent, two partial slots of the consumer
    threads (256, or 512 for the mid-batch 4-warpgroup tile at 9-32 rows) x WM*BN/2 floats per
    CTA, 64-column iterations, the ring as deep as fits (<= 8; 7 at BN 128 next to the epilogue's
    staging rows)."""
    problem = IndexedProblem(4096, 7168, 48, 8, block_m)
    launch = dispatch.select_indexed(problem, family="wgmma_sk")
    cfg = launch.spec.config
    consumers = 512 if block_m in (16, 32) else 256
    assert launch.spec.family == "indexed_wgmma_sk" and launch.spec.threads == 128 + consumers
    assert cfg["BN"] == bn and cfg["WM"] == 2 and cfg["STAGES"] == (8 if bn < 128 else 7)
    assert launch.persistent and launch.partial_floats == 2 * consumers * 2 * bn // 2 and launch.iteration_k == 64
    assert launch.smem_bytes + 1024 <= 227 * 1024
    narrow = dispatch.select_indexed(IndexedProblem(128, 256, 8, 8, block_m), family="wgmma_sk")
    assert narrow.spec.config["WM"] == 1 and narrow.cols_per_cta == 128


def test_family_override_and_bad_value():
    problem = IndexedProblem(512, 7168, 8, 8, 16)
    assert dispatch.select_indexed(problem, family="simple").spec.family == "indexed_simple"
    with pytest.raises(ValueError, match="CHORD_W4A16_INDEXED_KERNEL='fast'"):
        dispatch.select_indexed(problem, family="fast")


def test_print_configs_reports_each_choice_once(monkeypatch, capsys):
    monkeypatch.setenv("CHORD_PRINT_CONFIGS", "1")
    problem = IndexedProblem(1024, 2048, 5, 3, 24)
    dispatch.select_indexed(problem)
    dispatch.select_indexed(problem)
    err = capsys.readouterr().err
    assert err.count("[chord] IndexedProblem(n=1024, k=2048") == 1 and "indexed_wgmma[WM=2, BN=24, STAGES=8, CWG=4, LOOP=1]" in err
    assert "evict-first" not in err  # the wgmma tile never loads evict-first
    dispatch.select_indexed(IndexedProblem(4096, 7168, 48, 8, 8, 64))  # EP8 T=1: the mma stream-K tile
    assert "weights L2 evict-first at up to 812 tiles" in capsys.readouterr().err


def test_profiles_cover_the_heuristic():
    from chord_kernels.profiles import all_default_specs, profile_specs

    reachable = {s.symbol for s in all_default_specs()}
    for name in ("h200_ep8", "h200_tp8"):
        assert {s.symbol for s in profile_specs(name)} <= reachable
    symbols = {s.symbol for s in all_default_specs()}
    assert {"chord_indexed_mma_NT4_TT8_STAGE_K128_STAGES3", "chord_indexed_mma_sk_NT2_TT1_STAGE_K256_STAGES3",
            "chord_indexed_simple_BLOCK_K64", "chord_indexed_wgmma_WM2_BN128_STAGES6_CWG2",
            "chord_indexed_wgmma_WM2_BN64_STAGES6_CWG2", "chord_indexed_wgmma_WM2_BN32_STAGES8_CWG4_LOOP1"} <= symbols
    ep8 = {s.symbol for s in profile_specs("h200_ep8")}
    assert {"chord_indexed_wgmma_WM2_BN128_STAGES6_CWG2", "chord_indexed_wgmma_WM2_BN32_STAGES8_CWG4_LOOP1",
            "chord_indexed_wgmma_sk_WM2_BN16_STAGES8_CWG4"} <= ep8


def test_non_sm90_gpu_is_a_clear_error(monkeypatch):
    device.kernel_arch.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA A100")
    with pytest.raises(device.UnsupportedDeviceError, match="A100 .compute capability 8.0.*no fallback"):
        device.kernel_arch(0)
    device.kernel_arch.cache_clear()


def test_memory_bandwidth_by_device_name(monkeypatch):
    """The dispatch's memory class comes from the device's name (dispatch.MEMORY_TBPS_BY_NAME): the
    H100 below the H200; a name not listed takes the H200's, the GPU Chord is tuned on."""
    assert dispatch.memory_tbps_of("NVIDIA H200") == dispatch.H200_MEMORY_TBPS
    assert dispatch.memory_tbps_of("NVIDIA H100 80GB HBM3") == 3.35
    assert dispatch.memory_tbps_of("NVIDIA H100 PCIe") == 3.35
    assert dispatch.memory_tbps_of("NVIDIA GH200 480GB") == dispatch.H200_MEMORY_TBPS
    device.memory_tbps.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3")
    assert device.memory_tbps(0) == 3.35
    device.memory_tbps.cache_clear()


def test_tuning_override(monkeypatch):
    problem = IndexedProblem(4096, 7168, 48, 8, 8)
    launch = dispatch.choose_indexed_mma(problem, tuning="NT=4, stages=4")
    assert launch.spec.config == {"NT": 4, "TT": 1, "STAGE_K": 256, "STAGES": 4}
    with pytest.raises(ValueError, match="expected KEY=INT"):
        dispatch.choose_indexed_mma(problem, tuning="BM=64")
    with pytest.raises(ValueError, match="STAGE_K must divide K"):
        dispatch.choose_indexed_mma(IndexedProblem(4096, 320, 48, 8, 8), tuning="STAGE_K=256")
    # One override string serves both tensor-core families: each takes its own keys.
    wg = dispatch.choose_indexed_wgmma(IndexedProblem(4096, 7168, 48, 8, 128), tuning="NT=4,BN=64,STAGES=4")
    assert wg.spec.config == {"WM": 2, "BN": 64, "STAGES": 4, "CWG": 2}
    with pytest.raises(ValueError, match="WM 1.2.4, BN 16.24.32.48.56.64.96.128, STAGES 2..8"):
        dispatch.choose_indexed_wgmma(IndexedProblem(4096, 7168, 48, 8, 128), tuning="BN=80")
    with pytest.raises(ValueError, match="WM.BN <= 112"):
        dispatch.choose_indexed_wgmma(IndexedProblem(4096, 7168, 48, 8, 128), tuning="CWG=4")
    wg4 = dispatch.choose_indexed_wgmma(IndexedProblem(4096, 7168, 48, 8, 64), tuning="CWG=4,WM=1")
    assert wg4.spec.threads == 640 and wg4.cols_per_cta == 256 and wg4.smem_bytes <= 227 * 1024
    # The 512-row mid-batch tile on 2 consumer warpgroups of WM 4 (v61's experiment), and the
    # WM 4 tiles the kernel cannot hold.
    mid = IndexedProblem(4096, 7168, 48, 8, 32)
    wm4 = dispatch.choose_indexed_wgmma(mid, tuning="WM=4,CWG=2")
    assert wm4.spec.config == {"WM": 4, "BN": 32, "STAGES": 8, "CWG": 2} and wm4.cols_per_cta == 512
    assert wm4.spec.threads == 384 and wm4.smem_bytes <= 227 * 1024
    with pytest.raises(ValueError, match="WM.BN <= 112"):
        dispatch.choose_indexed_wgmma(mid, tuning="WM=4")  # the mid-batch tile's 4 warpgroups
    with pytest.raises(ValueError, match="WM 4 runs on 2 consumer warpgroups"):
        dispatch.choose_indexed_wgmma(IndexedProblem(4096, 7168, 48, 8, 16), tuning="WM=4,CWG=4")
    with pytest.raises(ValueError, match="WM 4 runs on 2 consumer warpgroups"):
        dispatch.choose_indexed_wgmma(IndexedProblem(4096, 7168, 48, 8, 128), tuning="WM=4")  # BN 128
    monkeypatch.setenv("CHORD_W4A16_BLOCK_M", "24")
    assert dispatch.indexed_block_m(10, 48, 4096, 7168) == 24


@pytest.mark.parametrize("routing,rows,want", [("contiguous", 3, {"TT": 1}), ("contiguous_offsets", 10, {"TT": 2}),
                                               ("contiguous", 12, {"TT": 2}),
                                               ("contiguous_offsets", 12, {"WM": 2, "BN": 24, "CWG": 4}),
                                               ("masked", 16, {"WM": 2, "BN": 24, "CWG": 4}),
                                               ("contiguous_offsets", 20, {"WM": 2, "BN": 32, "CWG": 4}),
                                               ("masked", 30, {"WM": 2, "BN": 32, "CWG": 4}),
                                               ("contiguous", 40, {"WM": 2, "BN": 64, "CWG": 2}),
                                               ("masked", 40, {"WM": 2, "BN": 56, "CWG": 2, "STAGES": 6}),
                                               ("contiguous_offsets", 40, {"WM": 2, "BN": 56, "CWG": 4}),
                                               ("contiguous_offsets", 83, {"WM": 2, "BN": 96}),
                                               ("contiguous", 83, {"WM": 2, "BN": 128}),
                                               ("contiguous_offsets", 100, {"WM": 2, "BN": 128}),
                                               ("masked", 5000, {"WM": 1, "BN": 240})])
def test_grouped_choice(routing, rows, want):
    from chord_kernels.dispatch import GroupedProblem

    block_k = 128 if routing == "masked" else 64
    launch = dispatch.select_grouped(GroupedProblem(routing, 4096, 7168, 48, rows, block_k))
    cfg = launch.spec.config
    # The same tile rule as indexed: wgmma from 33-row tiles (one CTA per tile on deep K), the
    # 4-warpgroup wgmma tile at 17-32 rows and at 56 on deep K, the mma tile on the stream-K
    # schedule below; the offsets and masked forms take the indexed blocks (56, 96), the
    # DeepGEMM contiguous form powers of two (a tile never straddles a 128-aligned segment).
    # BLOCK_K-128 weights (masked) keep the 512 x 56 tile off 4 warpgroups (its per-step word
    # loads are 8-way bank conflicted there): 2 consumer warpgroups.
    assert launch.spec.family == ("grouped_wgmma" if "WM" in want else "grouped_mma_sk")
    assert launch.persistent == (launch.spec.family == "grouped_mma_sk")
    assert {key: cfg[key] for key in want} == want and cfg["BLOCK_K"] == block_k
    assert cfg["ROUTING"] == dispatch.GROUPED_ROUTINGS[routing]
    if routing == "contiguous":
        assert 128 % launch.rows_per_cta == 0
    short_k = dispatch.select_grouped(GroupedProblem(routing, 7168, 256, 384, rows, 64 if block_k == 64 else 128))
    assert short_k.spec.family == ("grouped_wgmma_sk" if rows > 32 else "grouped_mma_sk") and short_k.persistent
    with pytest.raises(ValueError, match="unknown grouped routing"):
        dispatch.select_grouped(GroupedProblem("sorted", 4096, 7168, 48, rows, block_k))


def test_grouped_block_k_128_avoids_per_step_operand_loads():
    # Every 4-warpgroup tile the grouped dispatch can reach on BLOCK_K 128 holds a stage's weight
    # words in registers (the pair layout's per-step loads are 8-way bank conflicted).
    for launch in dispatch.grouped_reachable_launches():
        cfg = launch.spec.config
        if launch.spec.family == "grouped_wgmma" and cfg["BLOCK_K"] == 128:
            assert not dispatch.wgmma_loads_operands_per_step(cfg), launch.spec.symbol


@pytest.mark.parametrize("experts,rows,n,k", [(24, 21, 4096, 7168),  # EP16 T=64 gate_up (split in two until v23)
                                              (48, 21, 4096, 7168),  # EP8 T=128 (EP32 T=32: few_wave_32)
                                              (48, 21, 7168, 2048)])  # EP8 T=128 down
def test_grouped_4_warpgroup_tiles_loop(experts, rows, n, k):
    # the 512 x 32 tile on the tile loop (its split tail, on the device, takes a short last wave);
    # the dispatch no longer splits K over a cluster by itself (v23)
    for routing, block_k in (("contiguous_offsets", 64), ("masked", 128), ("contiguous", 64)):
        launch = dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, block_k))
        assert launch.tile_loop and launch.split_k == 1 and launch.spec.cluster_z == 1
        assert launch.spec.config["BN"] == 32 and launch.spec.config["CWG"] == 4 and launch.spec.config["LOOP"] == 1


@pytest.mark.parametrize("experts,rows,n,k,stages", [(48, 1365, 7168, 2048, 4),  # EP8 T=8192 down: the tall tile
                                                     (12, 1365, 4096, 7168, 0),  # EP32 T=2048 gate_up: WM 1, long K
                                                     (48, 85, 7168, 2048, 6),  # EP8 T=512: 256 x 96
                                                     (48, 341, 7168, 2048, 5),  # EP8 T=2048: 256 x 128, a stage less
                                                     (48, 21, 4096, 7168, 0)])  # 4 warpgroups: no staging
def test_grouped_tile_loops_defer_their_store(experts, rows, n, k, stages):
    """The 2-warpgroup tile loops hand their epilogue to the producer's store warps (DEFER_STORE):
    the staging of every m64 tile and a second set of out rows fit beside their ring, which the
    256 x 128 tile shortens from 6 stages to 5 for it (DEFER_STORE_MIN_STAGES) and no tile below
    that; the 4-warpgroup tiles store unstaged and keep their epilogue, and so do the 128-row tiles
    (WM 1) over long K (defers_store: 112 stages a tile at gate_up, where it measured slower)."""
    for routing, block_k in (("contiguous_offsets", 64), ("masked", 128), ("contiguous", 64)):
        launch = dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, block_k))
        cfg = launch.spec.config
        # A tile that loads stage pairs (BLOCK_K 128, 256+ weight rows) takes even rings only: the
        # masked 256 x 128 tile keeps its 6 stages and its epilogue.
        odd_pairs = dispatch.wgmma_block_pairs(block_k, cfg["CWG"] * cfg["WM"] * 64) and stages % 2 == 1
        want = 0 if odd_pairs else stages
        if routing != "contiguous":  # the DeepGEMM form tiles by powers of two (256 x 128 past 64 rows)
            assert cfg.get("DEFER_STORE", 0) == (want > 0) and (not want or cfg["STAGES"] == want), cfg
        deferred = cfg["CWG"] == 2 and launch.tile_loop and not odd_pairs and dispatch.defers_store(cfg["WM"], k)
        assert ("DEFER_STORE" in cfg) == deferred, (routing, cfg)
        assert launch.smem_bytes == dispatch.wgmma_smem_bytes(cfg["WM"], cfg["BN"], cfg["STAGES"], cfg["CWG"],
                                                              "DEFER_STORE" in cfg)
        assert launch.smem_bytes <= dispatch.WGMMA_SMEM_LIMIT
    assert dispatch.wgmma_deferred_stages(2, 128, 6, 2) == 5 and dispatch.wgmma_deferred_stages(1, 240, 4, 2) == 4
    assert dispatch.wgmma_deferred_stages(2, 128, 6, 2, block_pairs=True) == 0  # 5 would wrap a pair
    assert dispatch.wgmma_deferred_stages(2, 96, 6, 2, block_pairs=True) == 6
    assert dispatch.wgmma_deferred_stages(2, 32, 8, 4) == 0  # 4 consumer warpgroups store unstaged
    assert dispatch.defers_store(1, 2048) and not dispatch.defers_store(1, 7168) and dispatch.defers_store(2, 7168)
    # the indexed family defers only on short K (its loader warp gathers the rows by cp.async)
    for launch in dispatch.indexed_reachable_launches():
        cfg = launch.spec.config
        if "DEFER_STORE" in cfg:
            assert launch.spec.family == "indexed_wgmma" and cfg["CWG"] == 2 and launch.tile_loop


def test_split_k_choices():
    assert dispatch.split_k_choices(7168, 128) == (1, 2)
    assert dispatch.split_k_choices(2048, 64) == (1, 2)
    assert dispatch.split_k_choices(1024, 128) == (1, 2)  # 8 stages a CTA: the least allowed
    assert dispatch.split_k_choices(192, 64) == (1,)  # 3 stages
    assert dispatch.split_k_choices(9 * 64 * 2, 128) == (1,)  # 9 blocks of 2 stages: no even split


@pytest.mark.parametrize("routing,block_k", [("contiguous_offsets", 64), ("masked", 128)])
def test_grouped_split_k_choice(routing, block_k):
    # EP16 T=64 gate_up: 24 experts x 1 row tile (21 rows -> 32) x 8 column tiles of the 512 x 32
    # tile on 132 SMs: the tile loop unless CHORD_GROUPED_SPLIT_K asks for one-CTA clusters of 2
    problem = GroupedProblem(routing, 4096, 7168, 24, 21, block_k)
    assert dispatch.select_grouped(problem).split_k == 1
    launch = dispatch.select_grouped(problem, split_override="2")
    assert launch.split_k == 2 and launch.spec.cluster_z == 2 and launch.spec.config["SPLIT_K"] == 2
    assert not launch.tile_loop and "LOOP" not in launch.spec.config
    assert launch.spec.config["BN"] == 32 and launch.spec.config["CWG"] == 4
    assert "__cluster_dims__(1, 1, 2)" in launch.spec.source()
    assert launch.grid(dispatch.IndexedProblem(4096, 7168, 24, 8, 32), 1)[2] == 2
    assert dispatch.select_grouped(problem, split_override="1").split_k == 1
    assert dispatch.select_grouped(GroupedProblem(routing, 7168, 2048, 12, 21, block_k),
                                   split_override="2").split_k == 2  # K 2048 too
    # every split the dispatch (or the override) can pick is compiled (CI) and in the EP profiles
    reachable = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    assert launch.spec.symbol in reachable
    assert launch.spec.symbol in {spec.symbol for spec in profile_specs("h200_ep16")}


def test_split_k_only_on_the_4_warpgroup_tile():
    # the 512 x 56 tile (per-step operand loads) loops too
    bn56 = dispatch.select_grouped(GroupedProblem("contiguous_offsets", 4096, 7168, 12, 40, 64))
    assert bn56.spec.config["BN"] == 56 and bn56.spec.config["CWG"] == 4 and bn56.split_k == 1 and bn56.tile_loop
    # a forced split weighs only the heights that can split: at 45 rows on 48 experts the wave
    # model's 256 x 64 tile (2 warpgroups) cannot, so the 512 x 56 tile runs split
    offsets45 = GroupedProblem("contiguous_offsets", 4096, 7168, 48, 45, 64)
    assert dispatch.select_grouped(offsets45).spec.config["CWG"] == 2
    forced = dispatch.select_grouped(offsets45, split_override="2")
    assert forced.split_k == 2 and forced.spec.config["BN"] == 56 and forced.spec.config["CWG"] == 4
    # the masked form runs 2 consumer warpgroups there (v9): no one-CTA variant to split
    masked = GroupedProblem("masked", 4096, 7168, 24, 43, 128)
    assert dispatch.select_grouped(masked).split_k == 1
    with pytest.raises(ValueError, match="CHORD_GROUPED_SPLIT_K='2'.*auto or one of 1$"):
        dispatch.select_grouped(masked, split_override="2")
    with pytest.raises(ValueError, match="only the 4-warpgroup wgmma tile splits K"):
        dispatch.grouped_launch("masked", 4096, 7168, 8, 128, split_k=2)
    with pytest.raises(ValueError, match="the K split is"):
        dispatch.grouped_wgmma("masked", 2, 32, 8, 128, cwg=4, split_k=4)
    with pytest.raises(ValueError, match="the K split is"):
        dispatch.grouped_wgmma("masked", 2, 32, 8, 128, cwg=4, split_k=2, loop=True)


def test_grouped_taller_tile_for_a_wave():
    # masked EP16 T=128 gate_up: 43 expected rows on 24 experts. 56-row tiles open a 4th wave
    # whenever one expert passes 56 rows; 64-row tiles (the same 256-row, 2-warpgroup tile) do
    # not: measured 248 -> 199 µs (grouped-kernels.md v16).
    masked = dispatch.select_grouped(GroupedProblem("masked", 4096, 7168, 24, 43, 128))
    assert masked.rows_per_cta == 64 and masked.spec.config["CWG"] == 2
    assert dispatch.grouped_row_candidates(GroupedProblem("masked", 4096, 7168, 24, 43, 128)) == (56, 64, 96, 128)
    # its down (28 column tiles: 672 tiles are 6 waves of either height) keeps the shorter tile
    assert dispatch.select_grouped(GroupedProblem("masked", 7168, 2048, 24, 43, 128)).rows_per_cta == 56
    # the offsets form at the same point: the taller tile is another kind of tile (the 256 x 64
    # loop in place of the 512 x 56 one-CTA tile), 18 % faster uniform, 27 % / -6 % skewed (v21)
    offsets = dispatch.select_grouped(GroupedProblem("contiguous_offsets", 4096, 7168, 24, 43, 64))
    assert offsets.rows_per_cta == 64 and offsets.cols_per_cta == 256
    # decode and mid-batch tiles and the DeepGEMM form's powers of two are not searched
    assert dispatch.grouped_row_candidates(GroupedProblem("masked", 4096, 7168, 24, 21, 128)) == (32,)
    assert dispatch.grouped_row_candidates(GroupedProblem("contiguous", 4096, 7168, 24, 43, 64)) == (64,)
    # many experts: the waves are many and the rounding small, the padding model decides
    assert dispatch.select_grouped(GroupedProblem("masked", 4096, 7168, 48, 86, 128)).rows_per_cta == 96


ACTS_BY_MAP = {"SPLIT_K": 1, "LOOP": 1, "TMA_ACTS": 1}  # every grouped tile loop (dispatch.grouped_wgmma)
# the store warps' staging (DEFER_STORE) takes the 256 x 128 tile's sixth stage
SHORT_128 = {"ROUTING": 2, "WM": 2, "BN": 128, "STAGES": 5, "BLOCK_K": 64, "CWG": 2, **ACTS_BY_MAP, "DEFER_STORE": 1}
SHORT_96 = {**SHORT_128, "BN": 96, "STAGES": 6}
TALL = {"ROUTING": 2, "WM": 1, "BN": 240, "STAGES": 4, "BLOCK_K": 64, "CWG": 2, **ACTS_BY_MAP}  # gate_up: its epilogue
TALL_DEFERRED = {**TALL, "DEFER_STORE": 1}  # down (K=2048): the store warps' (dispatch.defers_store)


@pytest.mark.parametrize("n,k", [(4096, 7168), (7168, 2048)])
@pytest.mark.parametrize("experts,rows,first,paired", [
    (48, 344, SHORT_128, None),  # EP8 T=2048: the tall tile rated +17 %, never launched
    (24, 683, TALL, SHORT_128),  # EP16 T=2048: -9 % uniform, +7 % skewed: the device picks
    (12, 932, TALL, SHORT_128),  # EP32 skewed T=2048's mean: under 4 tall tiles, paired
    # EP32 T=2048 and every EP at T=8192: from 4 tall tiles alone (the pair measured 0 to +1.7 %)
    (12, 1358, TALL, None),
    (48, 1365, TALL, None),
    (24, 2731, TALL, None),
    (12, 5461, TALL, None),
    (24, 171, SHORT_96, None),  # EP16 T=512 (+4 % / +28 % skewed): under one tall tile, not weighed
    (48, 86, SHORT_96, None),  # EP8 T=512
])
def test_grouped_tall_tile_pairs(n, k, experts, rows, first, paired):
    """The offsets form's 240-row tile (WM 1, grouped-kernels.md v27) is weighed from
    TALL_TILE_MIN_ROWS (one tall tile) expected rows an expert and, rated at most
    TALL_TILE_PAIR_MARGIN above the best short tile, launched as a pair with it (Launch.pick:
    the device runs the one whose row tiles cost less on the call's actual counts), the model's
    choice first, up to TALL_TILE_UNPAIRED_ROWS; from there alone."""
    problem = GroupedProblem("contiguous_offsets", n, k, experts, rows, 64)
    launch = dispatch.select_grouped(problem)
    tall = first is TALL
    if tall and dispatch.defers_store(1, k):
        first = TALL_DEFERRED
    assert launch.spec.config == first and launch.tile_loop
    assert launch.rows_per_cta == (dispatch.TALL_TILE_ROWS if tall else first["BN"])
    if paired is None:
        assert launch.pick is None
        return
    other, cost, other_cost = launch.pick
    assert other.spec.config == paired and other.tile_loop and other.pick is None
    assert {launch.rows_per_cta, other.rows_per_cta} == {dispatch.TALL_TILE_ROWS, 128}
    assert (cost, other_cost) == (dispatch.row_tile_cost(problem, launch), dispatch.row_tile_cost(problem, other))
    # the device's integers: a tall row tile over N costs 1.18 x 336 / 224 of a 256 x 128 one
    assert cost == round(n * 336 * dispatch.TALL_TILE_COST_SCALE) and other_cost == n * 224
    assert launch.smem_bytes + 1024 <= dispatch.SMEM_PER_SM and other.smem_bytes + 1024 <= dispatch.SMEM_PER_SM


def test_grouped_tall_tile_where_it_is_weighed_and_paired():
    """The offsets and masked forms weigh the tall tile (masked since its BLOCK_K-128 weights load
    a stage a box, v30), the DeepGEMM form and short K never; every pair is two 2-warpgroup tile
    loops, one of them the tall tile (the 4-warpgroup tile does not read the pick:
    WgmmaTiles::kPairable)."""
    def pick(routing, experts, rows, n=4096, k=7168):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 64 if routing != "masked" else 128))

    for routing in dispatch.TALL_TILE_ROUTINGS:
        paired, alone = pick(routing, 24, 683), pick(routing, 12, 1358)  # EP16 and EP32 T=2048
        assert {paired.rows_per_cta, paired.pick[0].rows_per_cta} == {dispatch.TALL_TILE_ROWS, 128}
        assert alone.rows_per_cta == dispatch.TALL_TILE_ROWS and alone.pick is None
        assert alone.stage_boxes == (routing == "masked")  # its BLOCK_K-128 weights a stage a box
    assert dispatch.TALL_TILE_ROWS not in dispatch.grouped_tile_row_choices("contiguous")
    assert dispatch.TALL_TILE_MIN_ROWS == dispatch.TALL_TILE_ROWS
    assert dispatch.TALL_TILE_ROWS in dispatch.grouped_row_candidates(GroupedProblem("contiguous_offsets", 4096, 7168,
                                                                                     48, 344, 64))
    for experts, rows in ((24, 171), (48, 239)):
        assert dispatch.TALL_TILE_ROWS not in dispatch.grouped_row_candidates(
            GroupedProblem("contiguous_offsets", 4096, 7168, experts, rows, 64))
    # short K has no tile loop to put it on
    assert dispatch.TALL_TILE_ROWS not in dispatch.grouped_row_candidates(GroupedProblem("contiguous_offsets", 7168,
                                                                                         256, 384, 1358, 64))
    assert pick("contiguous_offsets", 24, 683, 7168, 256).pick is None
    assert all(dispatch.TALL_TILE_ROWS in dispatch.grouped_tile_row_choices(r) for r in dispatch.TALL_TILE_ROUTINGS)
    pairs, symbols = 0, set()
    for experts, rows, (n, k), (routing, block_k) in itertools.product(
            (12, 24, 48), range(33, 3000, 7), ((4096, 7168), (7168, 2048)), (("contiguous_offsets", 64), ("masked", 128))):
        problem = GroupedProblem(routing, n, k, experts, rows, block_k)
        launch = dispatch.select_grouped(problem)
        if rows < dispatch.TALL_TILE_MIN_ROWS:
            assert launch.pick is None and launch.rows_per_cta != dispatch.TALL_TILE_ROWS
        if rows >= dispatch.TALL_TILE_UNPAIRED_ROWS:
            assert launch.pick is None
        if launch.pick is None:
            continue
        pairs += 1
        both = (launch, launch.pick[0])
        symbols |= {b.spec.symbol for b in both}
        assert sorted(b.rows_per_cta == dispatch.TALL_TILE_ROWS for b in both) == [False, True]
        assert all(b.tile_loop and b.spec.config["CWG"] == 2 for b in both)
        assert launch.pick[1:] == (dispatch.row_tile_cost(problem, launch),
                                   dispatch.row_tile_cost(problem, launch.pick[0]))
    assert pairs > 100
    # both kernels of every pair are compiled by CI (and precompile_points compiles both)
    assert symbols <= {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}


def test_grouped_pair_is_reported(monkeypatch, capsys):
    monkeypatch.setenv("CHORD_PRINT_CONFIGS", "1")
    monkeypatch.setattr(dispatch.report, "_reported", set())
    dispatch.select_grouped(GroupedProblem("contiguous_offsets", 4096, 7168, 24, 683, 64))
    err = capsys.readouterr().err
    assert "BN=240" in err and "; paired with " in err and "(the device picks)" in err, err


def test_grouped_cost_model_prefers_fewer_waves_and_fewer_rows():
    p = GroupedProblem("masked", 4096, 7168, 24, 43, 128)
    l56 = dispatch.grouped_launch("masked", 4096, 7168, 56, 128)
    l64 = dispatch.grouped_launch("masked", 4096, 7168, 64, 128)
    c56 = dispatch.grouped_launch_cost(p, 56, l56, 1, 132)
    c64 = dispatch.grouped_launch_cost(p, 64, l64, 1, 132)
    assert c64 < 0.95 * c56
    # on a GPU with twice the SMs both fit one wave and the shorter tile is cheaper
    assert dispatch.grouped_launch_cost(p, 56, l56, 1, 528) < dispatch.grouped_launch_cost(p, 64, l64, 1, 528)


def test_grouped_choice_prints_what_it_weighed(monkeypatch, capsys):
    monkeypatch.setenv("CHORD_PRINT_CONFIGS", "1")
    dispatch.select_grouped(GroupedProblem("masked", 4096, 7168, 24, 44, 128))
    err = capsys.readouterr().err
    assert "BN=64" in err and "56 rows x1: 1.000; 64 rows x1: 0.899" in err, err
    dispatch.select_grouped(GroupedProblem("contiguous_offsets", 4096, 7168, 24, 44, 64))
    err = capsys.readouterr().err
    assert "BN=64" in err and "CWG=2" in err and "56 rows x1: 1.000; 64 rows x1: 0." in err, err


def test_grouped_wide_decode_tile_where_tiles_fill_the_ctas():
    """8-row decode tiles on deep K take 256 weight rows in 128-column stages (NT 4) where the
    call expects WIDE_DECODE_TILES_PER_CTA of them a resident CTA (grouped-kernels.md v28): EP8
    T=20-32 and EP16 T=20 down; or one wave of whole tiles (3/4 to 1 tile a resident CTA, v32):
    EP32 T=8 down. Not EP16 T=20 gate_up (1.2 tiles a CTA: slower at boost clock, v28b), not EP32
    gate_up (half the CTAs), not below 4 expected rows (EP8/EP16 T=8: a skewed router lost
    there), not the DeepGEMM form. EP8 and EP16 down take the 2-stage 8 x 128 ring instead (the
    offsets form since v43, the masked form since v44;
    test_grouped_shallow_decode_ring_where_tiles_fill_the_ctas), which leaves the wide tile its
    one wave of whole tiles."""
    def pick(routing, experts, rows, n, k=7168):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    wide = {"NT": 4, "TT": 1, "STAGE_K": 128, "STAGES": 3}
    for routing in dispatch.WIDE_DECODE_ROUTINGS:
        for experts, rows, n, k in ((12, 5, 7168, 2048),):  # one wave of whole tiles (6 rows: decode_16)
            launch = pick(routing, experts, rows, n, k)
            assert {key: launch.spec.config[key] for key in wide} == wide, (routing, experts, rows, n)
            assert (launch.rows_per_cta, launch.cols_per_cta) == (8, 256)
            assert launch.spec.min_blocks_per_sm == 3
        for experts, rows, n, k in ((48, 1, 4096, 7168), (48, 2, 7168, 2048), (24, 3, 7168, 2048), (24, 7, 4096, 7168),
                                    (12, 6, 4096, 7168), (12, 3, 7168, 2048)):
            assert pick(routing, experts, rows, n, k).spec.config["NT"] == 2, (routing, experts, rows, n)
        # short K keeps its own rule (NT 4 from streamk_shape); 16-row tiles are not decode
        assert pick(routing, 48, 12, 4096).rows_per_cta != 8
    assert pick("contiguous", 48, 4, 4096).spec.config["NT"] == 2
    # precompile and CI's compile reach it
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    for routing in dispatch.WIDE_DECODE_ROUTINGS:
        assert dispatch.grouped_wide_decode(routing, 4096, 7168, 64).spec.symbol in symbols


def test_grouped_shallow_decode_ring_where_tiles_fill_the_ctas():
    """The 8 x 128 decode tile of the offsets and masked forms takes a 2-stage ring at 4 CTAs an SM
    where the call expects SHALLOW_DECODE_TILES_PER_CTA of its tiles a resident CTA at 2-5 rows an
    expert, in place of the 3-stage ring and of the wide tile (grouped-kernels.md v43, v44, v49):
    EP8 T=8/20 both projections, EP16 T=8/20 down. Not EP16 gate_up (1.4 tiles a CTA), not at 1
    expected row (T=1), not at 6 on H200-class memory (EP8 T=32: the wide tile, v49; the H100 keeps
    the ring there, but for the masked form's kernel holding the 16-row tile, v58), not EP32; not
    the DeepGEMM form (not measured)."""
    def pick(routing, experts, rows, n, k):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    shallow = {"NT": 2, "TT": 1, "STAGE_K": 256, "STAGES": 2}
    for routing in dispatch.SHALLOW_DECODE_FORMS:
        for experts, rows, n, k in ((48, 2, 4096, 7168), (48, 2, 7168, 2048), (48, 4, 4096, 7168), (48, 4, 7168, 2048),
                                    (48, 5, 4096, 7168), (48, 5, 7168, 2048), (24, 3, 7168, 2048), (24, 5, 7168, 2048)):
            launch = pick(routing, experts, rows, n, k)
            assert {key: launch.spec.config[key] for key in shallow} == shallow, (routing, experts, rows, n)
            assert launch.spec.min_blocks_per_sm == 4 and (launch.rows_per_cta, launch.cols_per_cta) == (8, 128)
        for experts, rows, n, k in ((24, 3, 4096, 7168), (24, 5, 4096, 7168), (12, 5, 4096, 7168)):
            launch = pick(routing, experts, rows, n, k)
            assert (launch.spec.config["NT"], launch.spec.config["STAGES"], launch.spec.min_blocks_per_sm) == (2, 3, 3)
        assert pick(routing, 12, 5, 7168, 2048).spec.config["NT"] == 4  # the wide tile, one wave whole
        for n, k in ((4096, 7168), (7168, 2048)):  # 6 rows: the wide tile again on the H200 (v49), not the H100
            launch = pick(routing, 48, 6, n, k)
            assert (launch.spec.config["NT"], launch.spec.config["STAGES"], launch.cols_per_cta) == (4, 3, 256), (routing, n)
            h100 = dispatch.select_grouped(GroupedProblem(routing, n, k, 48, 6, 128 if routing == "masked" else 64),
                                           memory_tbps=dispatch.memory_tbps_of("NVIDIA H100 80GB HBM3"))
            # the masked form's 8-row tile there holds the 16-row one, on its 3-stage ring (v58)
            ring = dict(shallow, STAGES=dispatch.DECODE_DUAL_SHORT_STAGES) if routing == "masked" else shallow
            assert {key: h100.spec.config[key] for key in shallow} == ring, (routing, n)
            assert (h100.dual is not None) == (routing == "masked"), (routing, n)
    assert pick("contiguous", 48, 2, 4096, 7168).spec.config["STAGES"] == 3
    # precompile and CI's compile (and its no-spill test) reach it
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    for routing, block_k in dispatch.SHALLOW_DECODE_FORMS.items():
        assert dispatch.grouped_shallow_decode(routing, block_k).spec.symbol in symbols
    assert dispatch.grouped_shallow_decode("masked", 64) is None
    assert dispatch.grouped_shallow_decode("contiguous_offsets", 128) is None


def test_grouped_sparse_decode_ring_at_one_expected_row():
    """At one expected row an expert or fewer on deep K (EP8/EP16/EP32 T=1) the offsets and masked
    forms' 3-stage decode ring goes 4 deep, 2 CTAs an SM (grouped-kernels.md v53). Not from 2
    rows (EP8 T=8: the 2-stage ring), not on short K, not the DeepGEMM form (not measured)."""
    def pick(routing, experts, rows, n, k):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    sparse = {"NT": 2, "TT": 1, "STAGE_K": 256, "STAGES": 4}
    for routing in dispatch.SHALLOW_DECODE_FORMS:
        for experts in (48, 24, 12):
            for n, k in ((4096, 7168), (7168, 2048)):
                launch = pick(routing, experts, 1, n, k)
                assert {key: launch.spec.config[key] for key in sparse} == sparse, (routing, experts, n)
                assert launch.spec.min_blocks_per_sm == 2 and (launch.rows_per_cta, launch.cols_per_cta) == (8, 128)
        assert pick(routing, 48, 2, 4096, 7168).spec.config["STAGES"] == 2  # the 2-stage ring from 2 rows
        assert pick(routing, 48, 1, 7168, 256).spec.config["STAGES"] != 4  # short K keeps its rings
    assert pick("contiguous", 48, 1, 4096, 7168).spec.config["STAGES"] != 4
    # precompile and CI's compile (and its no-spill test) reach it
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    for routing, block_k in dispatch.SHALLOW_DECODE_FORMS.items():
        assert dispatch.grouped_sparse_decode(routing, block_k).spec.symbol in symbols
    assert dispatch.grouped_sparse_decode("masked", 64) is None


def test_grouped_few_wave_32_row_tiles():
    """17-32 expected rows an expert where the 512 x 32 tiles make under MID_BATCH_24_MIN_WAVES
    waves (EP32 T=32: 22 rows on 12 experts, both projections) take the 256 x 32 tile loop in the
    offsets and masked forms (grouped-kernels.md v48). Not where the waves suffice (EP16 T=64: 1.45 waves of gate_up), not the
    DeepGEMM form. Precompile reaches it."""
    def pick(routing, experts, rows, n, k):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    for routing in ("contiguous_offsets", "masked"):
        block_k = 128 if routing == "masked" else 64
        for n, k in ((4096, 7168), (7168, 2048)):
            for rows in (17, 22, 24):
                launch = pick(routing, 12, rows, n, k)
                assert launch.spec.symbol == dispatch.grouped_few_wave_32(routing, n, block_k).spec.symbol, (routing, n, rows)
                assert launch.rows_per_cta == 32
            launch = pick(routing, 24, 22, n, k)
            assert (launch.spec.family, launch.spec.config["CWG"], launch.rows_per_cta) == ("grouped_wgmma", 4, 32)
    assert pick("contiguous", 12, 22, 4096, 7168).spec.config["CWG"] == 4
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    for routing, block_k in (("contiguous_offsets", 64), ("masked", 128)):
        for n in (4096, 7168):
            assert dispatch.grouped_few_wave_32(routing, n, block_k).spec.symbol in symbols


def test_grouped_narrow_mid_batch_where_512_x_24_tiles_are_too_few_for_the_loop():
    """11-16 expected rows an expert take 24-row tiles by padding (mid_batch_block_m); where the
    512 x 24 tile loop makes too few waves (takes_24_row_blocks), the offsets and masked forms on
    deep K take the 256 x 24 tile loop (2 consumer warpgroups) in place of the 16-row stream-K mma
    tile (grouped-kernels.md v46): EP32 T=20 gate_up (14 rows on 12 experts). Not down (K 2048:
    slower), not where the loop's waves suffice (EP16 T=32, EP8 T=64: the 512 x 24 tile), not at
    9-10 rows (skewed EP32 T=20 masked: 16 rows pad less), not the DeepGEMM form."""
    def pick(routing, experts, rows, n, k):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    for routing in ("contiguous_offsets", "masked"):
        for rows in (11, 14, 16):
            launch = pick(routing, 12, rows, 4096, 7168)
            cfg = launch.spec.config
            assert (launch.spec.family, cfg["CWG"], cfg["WM"], cfg["LOOP"]) == ("grouped_wgmma", 2, 2, 1), (routing, rows)
            assert (launch.rows_per_cta, launch.cols_per_cta) == (24, 256)
            assert pick(routing, 12, rows, 7168, 2048).spec.family == "grouped_mma_sk", (routing, rows)
        assert pick(routing, 12, 10, 4096, 7168).spec.family == "grouped_mma_sk"
        for experts, rows in ((24, 11), (48, 12)):
            launch = pick(routing, experts, rows, 4096, 7168)
            assert (launch.spec.family, launch.rows_per_cta, launch.spec.config["CWG"]) == ("grouped_wgmma", 24, 4)
    assert pick("contiguous", 12, 14, 4096, 7168).rows_per_cta == 16
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    for routing, block_k in (("contiguous_offsets", 64), ("masked", 128)):
        assert dispatch.grouped_narrow_mid_batch(routing, 4096, block_k).spec.symbol in symbols


def test_grouped_decode_16_row_tile_from_7_rows():
    """From DECODE_16_MIN_ROWS expected rows an expert the offsets and masked forms on deep K run
    the 16-row decode tile (NT 2, TT 2) on DECODE_16_STAGES stages in place of the 8-row tile and
    its rings (grouped-kernels.md v47): EP16 T=20 (7 rows) and beyond. Not at 6 rows or fewer
    (EP8 T=32 and EP32 T=8, where it measured slower), not the DeepGEMM form."""
    def pick(routing, experts, rows, n, k):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    for routing in dispatch.SHALLOW_DECODE_FORMS:
        for experts, rows in ((48, 7), (24, 7), (12, 7)):
            for n, k in ((4096, 7168), (7168, 2048)):
                cfg = pick(routing, experts, rows, n, k).spec.config
                assert (cfg["NT"], cfg["TT"], cfg["STAGES"]) == (2, 2, dispatch.DECODE_16_STAGES), (routing, experts, rows, n)
        for experts, rows in ((48, 6), (24, 6), (12, 6), (24, 3)):
            for n, k in ((4096, 7168), (7168, 2048)):
                assert pick(routing, experts, rows, n, k).spec.config["TT"] == 1, (routing, experts, rows, n)
    assert pick("contiguous", 24, 7, 4096, 7168).spec.config["TT"] == 1
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    for routing, block_k in dispatch.SHALLOW_DECODE_FORMS.items():
        assert dispatch.grouped_decode_16(routing, block_k).spec.symbol in symbols


def test_masked_decode_dual_one_row_under_the_16_row_bound():
    """The masked form hinted DECODE_DUAL_ROWS under DECODE_16_MIN_ROWS on deep K, where the 8-row
    2-lane tile serves it, runs the kernel that holds the 16-row tile as well
    (GroupedMmaDecodeDual, dual_decode_16; grouped-kernels.md v58): one launch, the pick's
    parameters, the larger tile's shared memory and partials at the occupancy both fit. Never the
    offsets form, short K, other hints or the wide tile; never paired as well."""
    assert list(range(dispatch.DECODE_16_MIN_ROWS - dispatch.DECODE_DUAL_ROWS, dispatch.DECODE_16_MIN_ROWS)) == [6]
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    duals = 0
    for routing, experts, rows, (n, k), memory in itertools.product(
            ("masked", "contiguous_offsets", "contiguous"), (12, 24, 48, 96), range(1, 12),
            ((4096, 7168), (7168, 2048), (7168, 256), (512, 7168)), (3.35, 4.8)):
        launch = dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64),
                                         memory_tbps=memory)
        if launch.dual is None:
            assert not (routing == "masked" and rows == 6 and k >= dispatch.WGMMA_MIN_K
                        and launch.spec.family == "grouped_mma_sk" and launch.spec.config["NT"] == 2
                        and launch.rows_per_cta == 8), (routing, experts, rows, n, k, memory)
            continue
        assert routing == "masked" and rows == 6 and k >= dispatch.WGMMA_MIN_K and launch.pick is None
        assert launch == dispatch.grouped_decode_dual("masked", 128) and launch.spec.symbol in symbols
        duals += 1
    assert duals >= 4
    short = dispatch.grouped_mma_streamk("masked", 2, 1, 256, 128, dispatch.DECODE_DUAL_SHORT_STAGES)
    tall = dispatch.grouped_decode_16("masked", 128)
    dual = dispatch.grouped_decode_dual("masked", 128)
    assert dual.spec.body == "chord::GroupedMmaDecodeDual" and dual.spec.family == "grouped_mma_sk"
    assert dual.spec.template_args == short.spec.template_args + (("TALL_STAGES", tall.spec.config["STAGES"]),)
    assert dual.rows_per_cta == 8 and dual.cols_per_cta == tall.cols_per_cta == short.cols_per_cta
    assert dual.smem_bytes == max(short.smem_bytes, tall.smem_bytes)
    assert dual.partial_floats == max(short.partial_floats, tall.partial_floats) == tall.partial_floats
    assert dual.spec.min_blocks_per_sm == min(short.spec.min_blocks_per_sm, tall.spec.min_blocks_per_sm) == 3
    assert dual.dual == (16, *dispatch.DECODE_DUAL_COST)


def test_masked_narrow_pair_one_row_under_the_24_row_tiles():
    """The masked form hinted one row under the 24-row tiles (mid_batch_block_m) on few experts and
    K of NARROW_MID_BATCH_MIN_K+ launches the 16-row mma tile first, paired with the 256 x 24 tile
    loop that the hint one higher takes (pair_narrow_mid_batch, grouped-kernels.md v57): EP32
    gate_up at 10 rows. Not where the hint one higher takes the 4-warpgroup 512 x 24 tile (it does
    not read the pick), not on short K or the other forms; both kernels read the pick."""
    def pick(routing, experts, rows, n=4096, k=7168):
        return dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))

    assert dispatch.mid_batch_block_m(10) == 16 and dispatch.mid_batch_block_m(11) == dispatch.NARROW_MID_BATCH_ROWS
    launch = pick("masked", 12, 10)
    other, cost, other_cost = launch.pick
    assert (cost, other_cost) == dispatch.NARROW_PAIR_COST
    assert other == dispatch.grouped_narrow_mid_batch("masked", 4096, 128) == pick("masked", 12, 11)
    assert launch.spec.family == "grouped_mma_sk" and launch.rows_per_cta == 16
    assert launch.spec.config["TT"] == 2 and launch.spec.config["STAGES"] <= 3  # MmaStreamK::kReadsPick
    assert other.tile_loop and other.spec.config["CWG"] == 2  # WgmmaTiles::kPairable
    assert pick("masked", 12, 9).pick is None and pick("masked", 12, 11).pick is None
    assert pick("masked", 24, 10).pick is None  # 11 rows on 24 experts: the 512 x 24 tile
    assert pick("masked", 12, 10, 7168, 2048).pick is None  # down: short of NARROW_MID_BATCH_MIN_K
    assert pick("contiguous_offsets", 12, 10).pick is None and pick("contiguous", 12, 10).pick is None
    symbols = {launch.spec.symbol for launch in dispatch.grouped_reachable_launches()}
    assert {launch.spec.symbol, other.spec.symbol} <= symbols


def test_narrow_pair_reads_the_pick_only_in_its_mma_tiles():
    """MmaStreamK::kReadsPick, the mma kernels that count the pair's tiles, is the masked form's rows
    (GroupedRowTiles kPairedMma) at TT 2 and STAGES 3 or less: the 16-row tiles
    pair_narrow_mid_batch pairs and no other (the count costs ~300 instructions a kernel); no
    other pair leads with an mma tile."""
    import re

    from chord_kernels.jit.paths import csrc_dir

    streamk = (csrc_dir() / "common" / "w4a16_mma_streamk.cuh").read_text()
    assert re.search(r"kReadsPick = Rows::kPairedMma && TT == 2 && STAGES <= 3;", streamk)
    grouped = (csrc_dir() / "grouped" / "row_tiles.cuh").read_text()
    assert re.search(r"kPairedMma = ROUTING == kMasked;", grouped)
    assert dispatch.NARROW_PAIR_FORMS == ("masked",)
    for routing, experts, rows, (n, k) in itertools.product(
            ("masked", "contiguous_offsets", "contiguous"), (12, 24, 48, 96), range(1, 40),
            ((4096, 7168), (7168, 2048), (7168, 256), (512, 7168))):
        launch = dispatch.select_grouped(GroupedProblem(routing, n, k, experts, rows, 128 if routing == "masked" else 64))
        if launch.pick and launch.spec.family == "grouped_mma_sk":
            assert routing == "masked" and launch.rows_per_cta == 16, (routing, experts, rows, n, k)
            assert launch.spec.config["TT"] == 2 and launch.spec.config["STAGES"] <= 3


def test_wide_decode_whole_fill_mirrors_the_device_rule():
    """dispatch.MMA_WHOLE_FILL is the fill from which the mma tile's stream-K schedule runs one
    wave of whole tiles (csrc/common/streamk_schedule.cuh kMmaWholeTiles): widen_decode takes the
    wide tile there only because the device then runs every tile whole."""
    import re

    from chord_kernels.jit.paths import csrc_dir

    text = (csrc_dir() / "common" / "streamk_schedule.cuh").read_text()
    eighths, max_waves = map(int, re.search(r"kMmaWholeTiles\{(\d+), (\d+)\}", text).groups())
    assert (eighths / 8, max_waves) == (dispatch.MMA_WHOLE_FILL, 0)


def test_grouped_family_rule_is_patchable_where_grouped_launch_reads_it(monkeypatch):
    """The grouped GPU tests force every tile onto the wgmma stream-K schedule by patching the rule
    in chord_kernels.dispatch.grouped (tests/gpu/test_grouped_gpu.py, tile_family): the patch must
    reach select_grouped, or those tests would silently run the dispatch's own choice."""
    from chord_kernels.dispatch import grouped

    problem = GroupedProblem("contiguous_offsets", 4096, 7168, 48, 3, 64)
    assert dispatch.select_grouped(problem).spec.family == "grouped_mma_sk"
    monkeypatch.setattr(grouped, "auto_tile_family", lambda rows, k: "wgmma_sk")
    monkeypatch.setattr(grouped, "mid_batch_family", lambda rows, n, k: None)
    assert dispatch.select_grouped(problem).spec.family == "grouped_wgmma_sk"


def test_paired_decode_tile_by_tuning_only():
    """The short-K decode tile holding the tile over pairs of an expert's 8-row blocks
    (IndexedMmaDecodeDual, paired_decode; indexed-kernels.md v83): not by default (it has not run on
    a GPU); CHORD_W4A16_TUNING PAIRED=1 takes it from 2 routes an expert, PAIRED=2 at any count; only
    the 8-row short-K tile of PAIRED_SHORT_TILE on at most PAIRED_BLOCKS_CAPACITY blocks; one launch
    with the pick's costs, the larger tile's shared memory and partials at 3 CTAs an SM."""
    assert dispatch.PAIRED_DEFAULT == 0

    def tp8_down(tokens, **kw):
        return dispatch.select_indexed(IndexedProblem(7168, 256, 384, 1, 8, 8 * tokens), **kw)

    plain = tp8_down(128)
    assert plain.dual is None and plain.spec.config == dispatch.PAIRED_SHORT_TILE
    dual = dispatch.indexed_mma_decode_dual(4, 128, 3, 2)
    for tokens in (96, 128, 256):
        assert tp8_down(tokens, tuning="PAIRED=1") == dual
        assert tp8_down(tokens, tuning="PAIRED=0") == plain
    for tokens in (20, 64, 95):
        assert tp8_down(tokens, tuning="PAIRED=1").dual is None
        assert tp8_down(tokens, tuning="PAIRED=2") == dual
    assert tp8_down(1, tuning="PAIRED=2").dual is None  # one wave: the 128-row tile (NT 2)
    # not deep K, not the gate_up, not 16-row blocks, not past the table's blocks
    for problem in (IndexedProblem(7168, 2048, 48, 1, 8, 8 * 128), IndexedProblem(512, 7168, 384, 8, 8, 8 * 128),
                    IndexedProblem(7168, 256, 384, 1, 16, 8 * 512), IndexedProblem(7168, 256, 1024, 1, 8, 8 * 256)):
        assert dispatch.select_indexed(problem, tuning="PAIRED=2").dual is None, problem
    with pytest.raises(ValueError, match="PAIRED=3"):
        tp8_down(128, tuning="PAIRED=3")
    short = dispatch.indexed_mma_streamk(4, 1, 128, 3)
    tall = dispatch.indexed_mma_streamk(4, 2, 128, 2)
    assert dual.spec.body == "chord::IndexedMmaDecodeDual" and dual.spec.family == "indexed_mma_sk"
    assert dual.spec.template_args == short.spec.template_args + (("TALL_STAGES", 2),)
    assert dual.rows_per_cta == 8 and dual.cols_per_cta == tall.cols_per_cta == short.cols_per_cta == 256
    assert dual.smem_bytes == max(short.smem_bytes, tall.smem_bytes) == short.smem_bytes
    assert dual.partial_floats == tall.partial_floats > short.partial_floats
    assert dual.spec.min_blocks_per_sm == short.spec.min_blocks_per_sm == tall.spec.min_blocks_per_sm == 3
    assert 3 * (dual.smem_bytes + dispatch.PAIRED_TABLE_BYTES + 1024) <= dispatch.SMEM_PER_SM
    assert dual.dual == (16, *dispatch.PAIRED_COST) and dispatch.evict_first_tiles(dual, 256) > 0
    symbols = {launch.spec.symbol for launch in dispatch.indexed_reachable_launches()}
    assert dual.spec.symbol in symbols  # CI compiles it (and holds it to no spill)
