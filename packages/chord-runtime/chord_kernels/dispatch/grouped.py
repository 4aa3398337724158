"""The grouped family (rows already grouped by expert: the DeepGEMM contiguous form, vLLM's
per-expert offsets, masked): its kernels, the tile height a wave model picks, the tall tile and
its pairing, the wide decode tile, and every launch it can pick. Grouped dispatch owns its layout
search: no block_m or tuning overrides."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..jit.kernel import DEFAULT_ARCH
from ..wave_model import expected_waves, mean_row_tiles
from .blocks import (
    BLOCK_COST_SCALE,
    INDEXED_BLOCK_M_CHOICES,
    MID_BATCH_24_MIN_WAVES,
    MID_BATCH_BLOCK_CHOICES,
    PREFILL_BLOCK_M_CHOICES,
    PREFILL_TOLERANCE,
    TILE_FIXED_ROWS,
    block_for_rows,
    mid_batch_block_m,
    mid_batch_rows,
    takes_24_row_blocks,
)
from .launch import (
    H200_MEMORY_TBPS,
    H200_SMS,
    WGMMA_STAGE_K,
    Launch,
    decode_dual_launch,
    deepest_wgmma_ring,
    evict_first_note,
    loop_targs,
    resident_ctas,
    streamk_launch,
    wgmma_block_pairs,
    wgmma_deferred_stages,
    wgmma_launch,
    wgmma_streamk_launch,
)
from .report import report_choice
from .shapes import (
    WGMMA_CWG2_STAGES,
    WGMMA_MIN_K,
    auto_tile_family,
    is_mid_batch_tile,
    streamk_shape,
    wgmma_loads_operands_per_step,
    wgmma_shape,
    wgmma_streamk_shape,
)

BLOCK_M_CHOICES = (8, 16, 32, 64)  # rows per tile of the mma kernels (grouped tiles too)
# Grouped tiles: powers of two (they divide the contiguous form's 128-row segment alignment).
GROUPED_TILE_ROWS = BLOCK_M_CHOICES + (128,)


# Routing names -> csrc Routing enum values (csrc/common/moe_params.cuh).
GROUPED_ROUTINGS = {"contiguous": 1, "contiguous_offsets": 2, "masked": 3}


@dataclass(frozen=True)
class GroupedProblem:
    routing: str  # a key of GROUPED_ROUTINGS
    n: int
    k: int
    num_experts: int
    rows_per_expert: int  # expected rows per expert: expected_m, or rows / experts (a hint)
    block_k: int  # the packed weight's BLOCK_K (64 contiguous, 128 masked)


def mid_batch_family(rows: int, n: int, k: int) -> str | None:
    """The grouped family's mid batch: "wgmma" (the tile loop) for is_mid_batch_tile, else
    None (auto_tile_family decides)."""
    return "wgmma" if is_mid_batch_tile(rows, n, k, "grouped") else None


# The grouped offsets form's tall tile (grouped-kernels.md v27): 240 rows on WGMMA-N at WM 1 (128
# weight rows, 120 accumulators a consumer thread; two m64 tiles would need 240), its ring as deep
# as shared memory allows (4 stages: 36 KB each, beside the epilogue's 69 KB of staging rows).
# It dequantizes each weight once per 240 rows instead of 128 (forced at equal padding, ~5 % less
# time a padded row) and pads less where an expert's rows sit just under a multiple of 240.
TALL_TILE_ROWS = 240
# Its cost a tile in grouped_launch_cost's units, against a 128-row tile's 1: fitted on the H200
# (v27, ncu at base clock, contiguous offsets T=2048, both projections): forced against the
# 256 x 128 tile it measured EP8 +18 %, EP16 -10 %, EP32 -2 to -4 %, where the unscaled model
# says -1 %, -23 % and -19 %; 1.18 puts all three within 2 %.
TALL_TILE_COST_SCALE = 1.18
# The forms that weigh it: the offsets form, and masked since its BLOCK_K-128 weights load a
# stage a box (v30; while they came a stage pair at a time, a 4-slot ring held two pairs: v27,
# forced at T=2048, +17 to +71 %). Not the DeepGEMM form: its tiles are powers of two inside
# 128-row segments.
TALL_TILE_ROUTINGS = ("contiguous_offsets", "masked")
# The mean rows an expert (the host's only hint) from which it is weighed: one tall tile. A
# skewed router's small experts pad a 240-row tile far more than a 128-row one, and the mean
# cannot tell: v27 measured it at EP16 T=2048 (683 rows) -9 % uniform but +7 % skewed, at EP16
# T=512 (171 rows) +4 % / +28 %; from EP32 T=2048 (1358 rows) up, -2 to -6 % uniform and -5 to
# +1 % skewed. So near the short tiles it runs only paired with one (TALL_TILE_PAIR_MARGIN), the
# device picking from the experts' actual rows; below one tall tile an expert (T=512 at EP8/16)
# it is not weighed at all (landed without the pair, 6778d58, this was 4 tall tiles).
TALL_TILE_MIN_ROWS = TALL_TILE_ROWS
# Under a skewed router the mean cannot tell which height pads less, so where the model rates
# the tall tile at most TALL_TILE_PAIR_MARGIN above the best short tile (or below it), the call
# launches both (Launch.pick) and the device picks from the experts' actual rows, by the same
# cost a row tile (row_tile_cost); one empty launch is the price (a few µs on calls of 0.5-2 ms).
# Rated further above it is never launched (EP8 T=2048: rated +17 %, measured +18 %).
TALL_TILE_PAIR_MARGIN = 0.10
# From 4 tall tiles an expert the tall tile runs alone: there skew costs it -5 to +1 % (v27) and
# the pair's unpicked launch and second count 0 to +1.7 % (v29, EP8/16/32 T=8192 and EP32 T=2048),
# so the pair would buy nothing.
TALL_TILE_UNPAIRED_ROWS = 4 * TALL_TILE_ROWS


def tall_wgmma_shape() -> dict[str, int]:
    """The tall tile's config: WM 1, BN TALL_TILE_ROWS, the deepest ring up to
    WGMMA_CWG2_STAGES that fits an SM."""
    return {"WM": 1, "BN": TALL_TILE_ROWS, "STAGES": deepest_wgmma_ring(1, TALL_TILE_ROWS, WGMMA_CWG2_STAGES),
            "CWG": 2}


def grouped_wgmma_shape(n: int, rows: int, block_k: int) -> dict[str, int]:
    """wgmma_shape for a grouped tile on a weight of ``block_k``. BLOCK_K-128 weights (masked) sit
    in shared memory in memory order, a lane's two stage chunks side by side (32-byte lane stride,
    grouped-kernels.md v6), so the per-k-step word loads of the 512 x 56 tile are 8-way bank
    conflicted (4-way on BLOCK_K 64): ncu, masked EP16 T=128 gate_up, short-scoreboard stalls 3.5
    per issue vs 1.1 on BLOCK_K 64, 268 vs 227 µs. Those tiles run 2 consumer warpgroups (256 weight
    rows, a stage's words loaded once): masked EP16 T=128 sum 394 -> 342 µs, EP32 T=64 223 -> 183
    (grouped-kernels.md v9). Still so with the tile loop's paired word loads (v24: 4 warpgroups
    there +11 % at masked EP32 T=64 gate_up), and with its weights a stage a box (the BLOCK_K-64
    layout, no conflicts; v30: +5 to +17 % at masked EP16 T=128 down and EP32 T=64: 16-byte box
    rows). Tiles of TALL_TILE_ROWS take tall_wgmma_shape."""
    if rows == TALL_TILE_ROWS:
        return tall_wgmma_shape()
    cfg = wgmma_shape(n, rows)
    if block_k == 128 and wgmma_loads_operands_per_step(cfg):
        cfg = {**cfg, "CWG": 2, "STAGES": WGMMA_CWG2_STAGES}
    return cfg


def grouped_tile_rows(rows_per_expert: int, routing: str = "contiguous") -> int:
    """Rows per tile. The DeepGEMM contiguous form: the smallest power of two in 8..128 holding an
    expert's expected rows (a power of two divides its 128-row segment alignment, so a tile never
    straddles two experts). The offsets and masked forms cut each expert's rows into tiles on the
    device, so they take the indexed family's routing blocks: 8/16/32 up to 32 rows, then
    prefill_block_m's 56/64/96/128 (least expected cost; 56 runs the 512 x 56 tile on deep K)."""
    if routing != "contiguous":
        return block_for_rows(rows_per_expert)
    return next((b for b in GROUPED_TILE_ROWS if rows_per_expert <= b), GROUPED_TILE_ROWS[-1])


def grouped_tile_row_choices(routing: str) -> tuple[int, ...]:
    """Every tile size select_grouped can give ``routing`` (precompile, reachable launches)."""
    if routing == "contiguous":
        return GROUPED_TILE_ROWS
    tall = (TALL_TILE_ROWS,) if routing in TALL_TILE_ROUTINGS else ()
    return INDEXED_BLOCK_M_CHOICES + MID_BATCH_BLOCK_CHOICES[1:] + tall


# The deferred epilogue (v42) takes a tile's epilogue off the consumers and costs a little in every
# stage (the staging handoff's bookkeeping), so it pays where tiles are short. ncu ABBA on an H100
# at base and boost clock (2026-12-05): the 128 x 240 tile (WM 1) over K=7168 (112 stages a tile)
# +0.3 to +1.3 % contiguous, +0.0 to +0.3 % masked; over K=2048 (32 stages) -0.0 to -4.0 %; the
# 256-row tiles (WM 2) gained over both K (-0.1 to -1.8 %; grouped-kernels.md v42).
DEFER_STORE_MAX_STAGES_WM1 = 64


def defers_store(wm: int, k: int) -> bool:
    """Whether a 2-warpgroup tile loop of ``wm`` m64 tiles over ``k`` hands its epilogue to the
    store warps (where the staging fits: wgmma_deferred_stages)."""
    return wm >= 2 or k // WGMMA_STAGE_K <= DEFER_STORE_MAX_STAGES_WM1


def grouped_wgmma(routing: str, wm: int, bn: int, stages: int, block_k: int, arch: str = DEFAULT_ARCH,
                  cwg: int = 2, split_k: int = 1, loop: bool = False, defer_store: bool = True) -> Launch:
    """Grouped routing on the wgmma tile (the indexed family's tile, same launch shape); the
    4-warpgroup tile one CTA a tile (optionally split over K by a cluster of ``split_k`` CTAs)
    or, with ``loop``, on the tile loop. Every tile loop loads its activation rows by tensor map,
    one box a stage (the rows of a grouped tile are contiguous in a; WgmmaTiles TMA_ACTS): its
    producer's 16-byte cp.async copies were ~400 M of 1963 M instructions at EP8 T=8192 gate_up;
    the boxes measured -0.9 to -5.2 % at prefill (grouped-kernels.md v35). A 2-warpgroup tile loop
    hands its epilogue to the producer's idle warps (DEFER_STORE, grouped-kernels.md v42) with
    ``defer_store`` (defers_store) at the ring depth wgmma_deferred_stages gives it (the 256 x 128
    tile: 5 stages, not 6, where it loads stage boxes; on stage pairs, BLOCK_K 128, no even depth
    fits and it keeps its epilogue)."""
    if split_k != 1 and (cwg != 4 or loop or split_k not in SPLIT_K_CHOICES):
        raise ValueError(f"split_k={split_k}: the K split is {SPLIT_K_CHOICES} CTAs of the one-CTA 4-warpgroup tile")
    acts_by_map = cwg == 2 or loop  # the tile loop
    pairs = wgmma_block_pairs(block_k, cwg * wm * 64)
    deferred_stages = wgmma_deferred_stages(wm, bn, stages, cwg, block_pairs=pairs) if acts_by_map and defer_store else 0
    deferred = deferred_stages > 0  # where the staging fits beside the ring
    stages = deferred_stages or stages
    targs = (("ROUTING", GROUPED_ROUTINGS[routing]), ("WM", wm), ("BN", bn), ("STAGES", stages),
             ("BLOCK_K", block_k), ("CWG", cwg))
    if acts_by_map:  # template arguments are positional: SPLIT_K and LOOP come before TMA_ACTS
        targs += (("SPLIT_K", 1), ("LOOP", 1), ("TMA_ACTS", 1)) + ((("DEFER_STORE", 1),) if deferred else ())
    elif split_k > 1 or loop_targs(loop, cwg):  # SPLIT_K comes before LOOP
        targs += (("SPLIT_K", split_k),) + loop_targs(loop, cwg)
    launch = wgmma_launch("grouped_wgmma", "grouped/w4a16_grouped_mma.cuh", "chord::GroupedWgmma", targs, wm, bn,
                          stages, arch, cwg, split_k, loop=loop, defer_store=deferred)
    if acts_by_map:
        launch = replace(launch, spec=replace(launch.spec, params_type="chord::MoeTmaActParams"), act_map_rows=bn)
    return launch


def grouped_wgmma_streamk(routing: str, wm: int, bn: int, stages: int, block_k: int,
                          arch: str = DEFAULT_ARCH) -> Launch:
    """Grouped routing on the wgmma tile, stream-K schedule."""
    return wgmma_streamk_launch("grouped_wgmma_sk", "grouped/w4a16_grouped_mma.cuh", "chord::GroupedWgmmaStreamK",
                                (("ROUTING", GROUPED_ROUTINGS[routing]), ("WM", wm), ("BN", bn), ("STAGES", stages),
                                 ("BLOCK_K", block_k)), wm, bn, stages, arch)


def grouped_mma_streamk(routing: str, nt: int, tt: int, stage_k: int, block_k: int, stages: int = 3,
                        arch: str = DEFAULT_ARCH) -> Launch:
    """Grouped routing on the mma tile, stream-K schedule."""
    return streamk_launch("grouped_mma_sk", "grouped/w4a16_grouped_mma.cuh", "chord::GroupedMmaStreamK",
                          (("ROUTING", GROUPED_ROUTINGS[routing]), ("NT", nt), ("TT", tt), ("STAGE_K", stage_k),
                           ("STAGES", stages), ("BLOCK_K", block_k)),
                          nt, tt, stage_k, stages, arch)


# Grouped decode on deep K (8-row tiles, the offsets and masked forms) takes 256 weight rows a tile
# in 128-column stages (NT 4; 3 CTAs an SM, as NT 2's 256-column stages) where the call expects at
# least WIDE_DECODE_TILES_PER_CTA such tiles a resident CTA: a warp then runs 4 independent MMA
# chains instead of 2 (the tile is latency-bound, indexed-kernels.md v41). Measured (ncu, base
# clock, ABBA; grouped-kernels.md v28): EP8 T=20/32 -1.7 to -6.5 % on both projections and both
# forms (1.9-3.3 tiles a CTA), EP16 T=20 -0.1 to -3.6 %; around 1 tile a CTA even (EP16 T=8
# gate_up), below it slower (EP32 T=8, 0.5-0.85: +2 to +5 %; T=1 +3 to +16 %: a tile split over
# more CTAs, more partials). A skewed router puts fewer experts' tiles behind the same hint: at 2-3
# expected rows (EP8/EP16 T=8) uniform won 2-4 % and skewed lost 2.3-4.7 %, so the rule starts at
# WIDE_DECODE_MIN_ROWS, half a tile an expert (skewed EP8 T=20: -2 to -3 % offsets, +0.3/+1.4 %
# masked). expected_m 1 also stands for a handful of routes on many experts (EP8 T=1: +11-13 %).
# At the clocks do_bench and serving see (ncu --clock-control none, v28b) the tiles a CTA decide:
# EP16 T=20 gate_up (1.2 tiles a CTA) +3.5 to +3.8 % where base clock read -1.2 to -2.5 %, while
# 1.9+ (EP8 T=20/32, EP16 T=20 down) stayed -0.4 to -5.1 %: the rule starts at 1.5 (it was 1.2).
# Below one tile a resident CTA the wide tile also wins where its tiles run whole (the device's
# one wave of whole tiles, streamk_schedule.cuh kMmaWholeTiles: 3/4 of the CTAs or more): EP32 T=8
# down, 336 wide tiles on 396 CTAs, -6.3 / -4.9 % at serving clocks (grouped-kernels.md v31, v32).
# Since v43/v44 the 2-stage ring (shallow_decode, tried first) takes every point of 1.5+ wide tiles
# a CTA in both forms (that is 2.25+ of its tiles a CTA, past its 2.0) where the weights' BLOCK_K
# is the form's own: the many-tiles branch here is left to other BLOCK_Ks; the one wave stays.
WIDE_DECODE_TILES_PER_CTA = 1.5
MMA_WHOLE_FILL = 6 / 8  # streamk_schedule.cuh kMmaWholeTiles.fill_eighths / 8
WIDE_DECODE_MIN_ROWS = 4
WIDE_DECODE_ROUTINGS = ("contiguous_offsets", "masked")  # measured; the DeepGEMM form is not


def grouped_wide_decode(routing: str, n: int, k: int, block_k: int, arch: str = DEFAULT_ARCH) -> Launch | None:
    """The 8-row decode tile at 256 weight rows (NT 4, 128-column stages), where ``routing`` on
    this K may take it (WIDE_DECODE_ROUTINGS, deep K); else None."""
    if routing not in WIDE_DECODE_ROUTINGS or k < WGMMA_MIN_K or k % 128:
        return None
    return grouped_mma_streamk(routing, 4, 1, 128, block_k, 3, arch)


def expected_launch_tiles(problem: GroupedProblem, launch: Launch) -> float:
    """The tiles ``launch`` expects for ``problem``: its row tiles over the experts' Poisson rows
    (wave_model.mean_row_tiles), times its column tiles over N."""
    return mean_row_tiles(problem.rows_per_expert, problem.num_experts, launch.rows_per_cta) * \
        -(-problem.n // launch.cols_per_cta)


def widen_decode(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH, sms: int = H200_SMS) -> Launch:
    """``launch``, or its wide decode tile (grouped_wide_decode) where the call's expected tiles
    of it (the experts' Poisson rows) fill WIDE_DECODE_TILES_PER_CTA per resident CTA, or one
    wave of whole tiles (MMA_WHOLE_FILL to 1 tile a resident CTA)."""
    if launch.spec.family != "grouped_mma_sk" or launch.spec.config["TT"] != 1 or launch.spec.config["NT"] != 2:
        return launch
    wide = grouped_wide_decode(problem.routing, problem.n, problem.k, problem.block_k, arch)
    if wide is None or problem.rows_per_expert < WIDE_DECODE_MIN_ROWS:
        return launch
    tiles = expected_launch_tiles(problem, wide)
    ctas = resident_ctas(wide, sms)
    return wide if tiles >= WIDE_DECODE_TILES_PER_CTA * ctas or MMA_WHOLE_FILL * ctas <= tiles <= ctas else launch


# Decode at 7+ expected rows an expert (grouped v47): an 8-row tile reads an expert's weights over
# the whole K once a row tile, and Poisson(7) rows pass 8 for ~27 % of the experts, so 8-row tiles
# read ~1.27x the weight bytes of 16-row tiles, which hold nearly every expert in one. Humming's
# EP16 T=20 kernel is a 16-row tile (256 x 16, whole tiles, 2 CTAs an SM). The 16-row tile of the
# stream-K mma kernel (NT 2, TT 2) on a 2-stage ring (3 CTAs an SM) takes the 8-row tile's place.
# Measured on the H200 (2026-12-06, both clocks): EP16 T=20 -1.5 to -17 % on both projections and
# forms; at a hint of 6 (EP8 T=32 and EP32 T=8, true mean 5.3 rows) +9 to +26 % slower, so the
# bound is 7 (the masked skewed EP16 T=20 call, hinted 6, keeps the 8-row tile). The 3-stage ring
# (2 CTAs an SM) won less at EP16 and lost more at 6 (grouped-kernels.md v47).
DECODE_16_MIN_ROWS = 7
DECODE_16_STAGES = 2


def grouped_decode_16(routing: str, block_k: int, arch: str = DEFAULT_ARCH) -> Launch:
    """The 16-row decode tile (NT 2, TT 2, 256-column stages) on its DECODE_16_STAGES ring."""
    return grouped_mma_streamk(routing, 2, 2, 256, block_k, DECODE_16_STAGES, arch)


def takes_decode_16(routing: str, k: int) -> bool:
    """Whether the 16-row decode tile may serve ``routing`` on K=``k``: the offsets and masked
    forms, deep K."""
    return routing in SHALLOW_DECODE_FORMS and k >= WGMMA_MIN_K


def decode_16(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH) -> Launch:
    """``launch``, or grouped_decode_16 where ``launch`` is the 8-row decode tile of a problem
    takes_decode_16 admits and the experts expect DECODE_16_MIN_ROWS+ rows."""
    if (launch.spec.family != "grouped_mma_sk" or launch.spec.config["TT"] != 1
            or not takes_decode_16(problem.routing, problem.k) or problem.rows_per_expert < DECODE_16_MIN_ROWS):
        return launch
    return grouped_decode_16(problem.routing, problem.block_k, arch)


# Just under that bound, the masked form's 8-row tile holds the 16-row one in the same kernel
# (GroupedMmaDecodeDual) and each CTA runs the height whose row tiles cost less on the actual
# counts (grouped-kernels.md v58). The masked hint is the mean count over all G experts, empty ones
# included: a skewed router leaves the touched experts more rows than that, and the mean cannot
# tell (masked EP16 skew T=20, hinted 6: the 16-row tile ran 15 % faster on both projections, H100,
# v57). v57 launched the two as a pair, and the launch that exits cost 3.5-5 µs a projection where
# the 8-row tile ran (EP32 T=8 +5.8 %, EP8 T=32 +2.1 %); one kernel pays only the second count.
# Costs 5 : 6 a row tile (the 16-row tile's 1.2x from v47's two ends: it won at 1.23x more 8-row
# tiles, EP16 T=20 uniform, and lost at 1.09x, EP8 T=32). The kernel's shared memory and stream-K
# partials are the 16-row tile's or more, at one occupancy: the 16-row ring (58 KB) does not fit
# 4 CTAs an SM, so where the 8-row tile had the 4-CTA ring (SHALLOW_DECODE_RING) it takes its
# 3-stage ring at 3 CTAs an SM (the ring before v43; grouped-kernels.md v43-v44: 1-3 % slower at T=8,
# level at T=32). The offsets form's hint comes from vLLM's padded row count, which the skewed call
# already lifts over the bound; it keeps its 8-row tile.
DECODE_DUAL_FORMS = ("masked",)
DECODE_DUAL_ROWS = 1  # hints this far under DECODE_16_MIN_ROWS
DECODE_DUAL_COST = (5, 6)  # a row tile of 8 rows, of 16 rows (MoeParams::pick_cost, pick_other_cost)
DECODE_DUAL_SHORT_STAGES = 3  # the 8-row ring beside the 16-row tile (3 CTAs an SM)


def grouped_decode_dual(routing: str, block_k: int, arch: str = DEFAULT_ARCH) -> Launch:
    """The 8-row decode tile (NT 2, 256-column stages, its DECODE_DUAL_SHORT_STAGES ring) holding
    grouped_decode_16 (GroupedMmaDecodeDual): one launch with the larger of the two tiles'
    shared memory and partials, at the occupancy both fit."""
    short = grouped_mma_streamk(routing, 2, 1, 256, block_k, DECODE_DUAL_SHORT_STAGES, arch)
    return decode_dual_launch(short, grouped_decode_16(routing, block_k, arch), "chord::GroupedMmaDecodeDual",
                              DECODE_DUAL_COST)


def dual_decode_16(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH) -> Launch:
    """grouped_decode_dual where ``launch`` is an 8-row, 2-lane decode tile (any ring) of a
    DECODE_DUAL_FORMS problem takes_decode_16 admits, hinted within DECODE_DUAL_ROWS under
    DECODE_16_MIN_ROWS; else ``launch``."""
    cfg = launch.spec.config
    if (launch.spec.family != "grouped_mma_sk" or cfg["TT"] != 1 or cfg["NT"] != 2 or cfg["STAGE_K"] != 256
            or launch.pick or problem.routing not in DECODE_DUAL_FORMS or not takes_decode_16(problem.routing, problem.k)
            or not DECODE_16_MIN_ROWS - DECODE_DUAL_ROWS <= problem.rows_per_expert < DECODE_16_MIN_ROWS):
        return launch
    return grouped_decode_dual(problem.routing, problem.block_k, arch)


# The 8 x 128 decode tile (NT 2, TT 1, STAGE_K 256) on a 2-stage ring at 4 CTAs an SM, the
# grouped form of indexed v47 (indexed.MANY_TILES_RING), where the call expects at least
# SHALLOW_DECODE_TILES_PER_CTA tiles a resident CTA from SHALLOW_DECODE_MIN_ROWS rows an expert,
# in place of the 3-stage ring and of the wide decode tile (grouped-kernels.md v43). Each CTA
# streams whole tiles, and a fourth CTA hides a tile's latency chain better than a third stage.
# The evidence: the H200 grids at 18e989a ran the same EP8 routing through both families in one
# session; the indexed 8 x 128 tile on this ring beat the grouped wide tile at T=20 by 2.7 / 3.1 %
# (gate_up / down, uniform) and 8.1 / 6.3 % (skewed, where the grouped point reads 0.95x), and
# the grouped 3-stage ring at T=8 by 2-3 %; at T=32 the two were level. gv40 (this ring at 1.25+
# tiles a CTA, H100 ncu ABBA) won 1-3 % at EP8 and EP16 T=8 but swung -6 / +8 % by routing at
# EP16 T=20 gate_up (1.45 tiles a CTA), which 2 excludes. At 1 expected row the mean cannot tell
# 5 routes on 4 experts from 48 busy experts (T=1: -13 to +11 %), so those keep theirs (sparse_decode
# gives them the 4-deep ring instead, grouped v53). The offsets
# form (BLOCK_K-64 weights; H100 ncu ABBA, v43: skewed EP8 T=20 -7 to -10 %) and the masked form
# (its BLOCK_K-128 weights, v44: 128 registers at 4 CTAs an SM, no spill since block_chunk divides
# unsigned). The DeepGEMM form was not measured. On the H200 (2026-12-06, ncu ABBA against the
# dispatch before v43, both clocks) the ring won at 2-4 expected rows under the skewed router (-1 to
# -6 %) and held at uniform T=20 (-1.4 to +3.6 %), but lost at 6 (EP8 T=32: +1.6 to +7.0 % on all
# eight points, where the H100 had gained 1-8 %): the H200's faster memory leaves the wide tile's
# longer stages the better feed there, so on memory of SHALLOW_DECODE_CAP_MIN_TBPS or more the
# ring stops at SHALLOW_DECODE_MAX_ROWS (v49); the H100 (3.35 TB/s) keeps it at every row count.
SHALLOW_DECODE_TILES_PER_CTA = 2.0
SHALLOW_DECODE_MIN_ROWS = 2
SHALLOW_DECODE_MAX_ROWS = 5
SHALLOW_DECODE_CAP_MIN_TBPS = 4.0
SHALLOW_DECODE_RING = {"NT": 2, "TT": 1, "STAGE_K": 256, "STAGES": 3}  # the tile it replaces
SHALLOW_DECODE_FORMS = {"contiguous_offsets": 64, "masked": 128}  # routing: the BLOCK_K of its weights


def grouped_decode_ring(routing: str, block_k: int, stages: int, arch: str = DEFAULT_ARCH) -> Launch | None:
    """The 8 x 128 decode tile (SHALLOW_DECODE_RING's) on a ring of ``stages``, where ``routing``
    and ``block_k`` may take another ring (SHALLOW_DECODE_FORMS), else None."""
    if SHALLOW_DECODE_FORMS.get(routing) != block_k:
        return None
    return grouped_mma_streamk(routing, 2, 1, 256, block_k, stages, arch)


def grouped_shallow_decode(routing: str, block_k: int, arch: str = DEFAULT_ARCH) -> Launch | None:
    """The 8 x 128 decode tile on its 2-stage ring (4 CTAs an SM), where ``routing`` and
    ``block_k`` may take it."""
    return grouped_decode_ring(routing, block_k, 2, arch)


def replaces_decode_ring(launch: Launch) -> bool:
    """``launch`` is the 3-stage decode tile that grouped_shallow_decode may replace."""
    cfg = launch.spec.config
    return launch.spec.family == "grouped_mma_sk" and all(cfg.get(key) == v for key, v in SHALLOW_DECODE_RING.items())


def shallow_decode_max_rows(memory_tbps: float) -> float:
    """The most expected rows an expert at which the 2-stage decode ring applies on memory of
    ``memory_tbps`` (SHALLOW_DECODE_MAX_ROWS on H200-class memory, no bound below it)."""
    return SHALLOW_DECODE_MAX_ROWS if memory_tbps >= SHALLOW_DECODE_CAP_MIN_TBPS else float("inf")


def shallow_decode(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH, sms: int = H200_SMS,
                   memory_tbps: float = H200_MEMORY_TBPS) -> Launch:
    """``launch``, or the 2-stage ring of its 8 x 128 decode tile (grouped_shallow_decode) where
    the call's expected tiles of it fill SHALLOW_DECODE_TILES_PER_CTA per resident CTA, from
    SHALLOW_DECODE_MIN_ROWS rows an expert to shallow_decode_max_rows."""
    if not replaces_decode_ring(launch):
        return launch
    shallow = grouped_shallow_decode(problem.routing, problem.block_k, arch)
    if (shallow is None
            or not SHALLOW_DECODE_MIN_ROWS <= problem.rows_per_expert <= shallow_decode_max_rows(memory_tbps)):
        return launch
    tiles = expected_launch_tiles(problem, shallow)
    return shallow if tiles >= SHALLOW_DECODE_TILES_PER_CTA * resident_ctas(shallow, sms) else launch


# At one expected row an expert or fewer on deep K (EP8/EP16/EP32 at one token a rank), the 3-stage
# decode ring goes 4 deep instead (2 CTAs an SM): the grouped form of indexed v65. There the experts
# with rows are few (EP8 T=1: ~5 routes on ~4 of 48 experts) and their tiles split over fewer CTAs
# with a longer run each (ncu ABBA at boost clock, H100, grouped-kernels.md v53, both forms):
# EP8 T=1 gate_up -8.5 / -10.0 %, down -17.0 / -13.6 %; EP32 T=1 down -13.8 / -13.4 %, gate_up
# -1.9 / -0.2 %; EP16 T=1 gate_up -3.7 / -4.5 %, down +3.2 / +0.3 %. The offsets and masked forms
# (SHALLOW_DECODE_FORMS) only: the DeepGEMM form was not measured.
SPARSE_DECODE_MAX_ROWS = 1
SPARSE_DECODE_STAGES = 4


def grouped_sparse_decode(routing: str, block_k: int, arch: str = DEFAULT_ARCH) -> Launch | None:
    """The 8 x 128 decode tile on its 4-deep ring (2 CTAs an SM), where ``routing`` and
    ``block_k`` may take it."""
    return grouped_decode_ring(routing, block_k, SPARSE_DECODE_STAGES, arch)


def sparse_decode(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH) -> Launch:
    """``launch``, or its 4-deep ring (grouped_sparse_decode) where ``launch`` is the 3-stage
    decode tile, the experts expect at most SPARSE_DECODE_MAX_ROWS rows and K is deep."""
    if (not replaces_decode_ring(launch) or problem.rows_per_expert > SPARSE_DECODE_MAX_ROWS
            or problem.k < WGMMA_MIN_K):
        return launch
    return grouped_sparse_decode(problem.routing, problem.block_k, arch) or launch


# Mid batch on few experts and deep K (grouped-kernels.md v45, v46): where an expert's expected rows
# take 24-row tiles by padding (mid_batch_block_m: 11-16 rows) but the 512 x 24 tile loop leaves
# SMs idle (takes_24_row_blocks: under MID_BATCH_24_MIN_WAVES; v25 measured it +4 to +14 % at
# EP32 T=20), the 16-row stream-K mma tile reads a second tile of every expert past 16 rows
# (Poisson(14): ~27 % of them), each over the whole K. The 256 x 24 tile on the tile loop (2
# consumer warpgroups: twice the 512 x 24 tile's tiles, 1.45 a CTA at EP32 T=20 gate_up) holds
# them in one tile. Humming's EP32 T=20 kernel is the same 256 x 24 tile (whole tiles, 2 CTAs an
# SM). H100 ncu ABBA, EP32 T=20 gate_up (K 7168), boost / base clock: offsets form -12.9 / -6.0 %,
# skewed -5.1 / -11.4 %, masked -12.7 / -1.6 % (H200: -6.9 / -6.3, -11.2 / -11.5, -2.9 / -1.4 %).
# Down (K 2048, 2.5 tiles a CTA of 32 stages) lost +4.9 to +10.8 % on the H100, so the rule
# starts between 32 and 112 stages of K. On the stream-K schedule instead (v45) the same tile lost
# on down (+13 %) and on the masked form's BLOCK_K-128 weights (+33 to +69 %).
NARROW_MID_BATCH_ROWS = 24
NARROW_MID_BATCH_MIN_K = 4096


def grouped_narrow_mid_batch(routing: str, n: int, block_k: int, arch: str = DEFAULT_ARCH) -> Launch:
    """The 256 x 24 wgmma tile on the tile loop (2 consumer warpgroups; narrow_mid_batch's tile)."""
    cfg = wgmma_streamk_shape(n, NARROW_MID_BATCH_ROWS)  # the 2-warpgroup tile, its deepest ring
    return grouped_wgmma(routing, cfg["WM"], cfg["BN"], cfg["STAGES"], block_k, arch, cwg=2, loop=True)


def takes_narrow_mid_batch(routing: str, n: int, k: int) -> bool:
    """Whether ``routing`` on an n x k weight may take grouped_narrow_mid_batch: the offsets and
    masked forms (tiles cut on the device), a mid-batch shape, K of NARROW_MID_BATCH_MIN_K+."""
    return (routing != "contiguous" and k >= NARROW_MID_BATCH_MIN_K
            and is_mid_batch_tile(NARROW_MID_BATCH_ROWS, n, k, "grouped"))


def narrow_mid_batch(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH, sms: int = H200_SMS) -> Launch:
    """``launch``, or grouped_narrow_mid_batch where ``launch`` is the 16-row stream-K mma tile, the
    weight takes it (takes_narrow_mid_batch) and the experts' expected rows take 24-row tiles
    (mid_batch_block_m) but too few 512 x 24 tiles for the tile loop (takes_24_row_blocks)."""
    em = problem.rows_per_expert
    if (launch.spec.family != "grouped_mma_sk" or launch.rows_per_cta != 16
            or not takes_narrow_mid_batch(problem.routing, problem.n, problem.k)
            or mid_batch_block_m(em) != NARROW_MID_BATCH_ROWS
            or takes_24_row_blocks(problem.n, problem.k, problem.num_experts, em, sms)):
        return launch
    return grouped_narrow_mid_batch(problem.routing, problem.n, problem.block_k, arch)


# Just under the 256 x 24 tile loop, the masked form launches its 16-row mma tile and the loop as a
# pair (Launch.pick) and the device runs the one whose row tiles cost less on the actual counts
# (grouped-kernels.md v57). Its hint is the mean count over all G experts, empty ones included: a
# skewed router leaves the touched experts more rows than that, and the mean cannot tell (masked
# EP32 skew T=20, hinted 10, runs the 16-row tile where the hint one higher, 11, would take the
# loop: on the same routing the offsets form, hinted 14, runs the loop's gate_up at 79.1 µs against
# 91.9, H100). A row tile of the loop costs NARROW_PAIR_COST[1] / [0] = 1.1 of the 16-row tile's,
# from v46's EP32 T=20 (the loop -2 to -13 % at 1.17x as many 16-row tiles; so 1.03-1.15). The
# same pair of the 8- and 16-row decode tiles one row under DECODE_16_MIN_ROWS was measured and
# rejected (v57): the launch that exits costs ~4 µs a projection, more than the uniform decode
# points (EP32 T=8, EP8 T=32) can give.
NARROW_PAIR_FORMS = ("masked",)  # the offsets form's hint already counts the padded rows
NARROW_PAIR_COST = (10, 11)  # a row tile of the 16-row mma tile, of the 256 x 24 tile loop


def pair_narrow_mid_batch(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH,
                          sms: int = H200_SMS) -> Launch:
    """``launch`` paired with grouped_narrow_mid_batch (Launch.pick) where it is the 16-row mma
    tile of a NARROW_PAIR_FORMS problem whose hint one row higher takes the tile loop
    (narrow_mid_batch); else ``launch``. The mma tile is launched first (it wins a tie)."""
    if (launch.pick or problem.routing not in NARROW_PAIR_FORMS or launch.spec.family != "grouped_mma_sk"
            or launch.rows_per_cta != 16):
        return launch
    taller = narrow_mid_batch(replace(problem, rows_per_expert=problem.rows_per_expert + 1), launch, arch, sms)
    return launch if taller is launch else replace(launch, pick=(taller, *NARROW_PAIR_COST))


# Mid batch of 17-32 expected rows an expert on few experts (grouped v48). Those tiles ran the
# 512 x 32 tile (4 consumer warpgroups) on the tile loop whatever its waves: at EP32 T=32 (22 rows
# on 12 experts) 96 tiles for gate_up (0.73 waves on 132 SMs) and 168 for down (1.27). Where the
# 512 x 32 tiles make under MID_BATCH_24_MIN_WAVES waves, the 256 x 32 tile loop (2 consumer
# warpgroups, the deepest ring wgmma_streamk_shape gives it, twice the tiles: 1.45 / 2.5 waves)
# takes them. Measured on the H200 (2026-12-06, both clocks): EP32 T=32 gate_up -6 to -11 %, down
# -2 to -6 % (masked uniform down at base clock +0.8 %, within its runs' spread); the 32-row
# stream-K mma tile in its place lost by 20-41 % (grouped-kernels.md v48).
FEW_WAVE_32_ROWS = 32


def grouped_few_wave_32(routing: str, n: int, block_k: int, arch: str = DEFAULT_ARCH) -> Launch:
    """The 256 x 32 tile loop for 32-row tiles of the offsets and masked forms on n weight rows."""
    cfg = wgmma_streamk_shape(n, FEW_WAVE_32_ROWS)  # the 2-warpgroup tile, its deepest ring
    return grouped_wgmma(routing, cfg["WM"], cfg["BN"], cfg["STAGES"], block_k, arch, cwg=2, loop=True)


def is_mid_batch_32(routing: str, launch: Launch) -> bool:
    """``launch`` is the offsets or masked form's 512 x 32 tile loop (4 consumer warpgroups; not a
    K split that CHORD_GROUPED_SPLIT_K forced)."""
    return (routing != "contiguous" and launch.spec.family == "grouped_wgmma" and launch.spec.config["CWG"] == 4
            and launch.tile_loop and launch.rows_per_cta == FEW_WAVE_32_ROWS)


def few_wave_32(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH, sms: int = H200_SMS) -> Launch:
    """``launch``, or grouped_few_wave_32 where ``launch`` is the 512 x 32 tile (is_mid_batch_32)
    and its expected tiles make under MID_BATCH_24_MIN_WAVES waves on ``sms``."""
    if not is_mid_batch_32(problem.routing, launch):
        return launch
    if expected_launch_tiles(problem, launch) >= MID_BATCH_24_MIN_WAVES * sms:
        return launch
    return grouped_few_wave_32(problem.routing, problem.n, problem.block_k, arch)


# The K split of the one-CTA 4-warpgroup tile over a cluster (grouped-kernels.md v10): since the
# 4-warpgroup tile runs on the tile loop, whose split tail covers a short last wave, only
# CHORD_GROUPED_SPLIT_K picks it (the loop measured 4-12 % faster than the auto split at EP16
# T=64 gate_up, v23). Clusters of 4 were slower than 2 at 10 of 11 points measured.
SPLIT_K_CHOICES = (1, 2)
SPLIT_K_MIN_STAGES = 8  # K stages (64 columns) a CTA at least (what the kernel is tested with)
# A tile's cost beyond its K stages, in stages (~0.8-1 µs each): the ring's fill and the
# epilogue (with a K split, also the partials' exchange); fitted on EP16 T=64 gate_up (v10).
SPLIT_K_FIXED_STAGES = 8


def split_k_choices(k: int, block_k: int) -> tuple[int, ...]:
    """The K splits a weight allows: every CTA at least SPLIT_K_MIN_STAGES whole stages, whole
    BLOCK_K-128 blocks (the split tile, 512 weight rows, copies a block's two stages as a pair:
    wgmma_block_pairs)."""
    stages = k // WGMMA_STAGE_K
    unit = 2 if block_k == 128 else 1
    return tuple(s for s in SPLIT_K_CHOICES
                 if s == 1 or (stages % (s * unit) == 0 and stages // s >= SPLIT_K_MIN_STAGES))


def grouped_launch(routing: str, n: int, k: int, rows: int, block_k: int, arch: str = DEFAULT_ARCH,
                   split_k: int = 1) -> Launch:
    """The grouped kernel for a tile of ``rows`` (grouped_tile_rows), by the indexed family's
    rules (mid_batch_family, then auto_tile_family) and shapes. The wgmma tile runs on the tile
    loop (2 or 4 consumer warpgroups, grouped-kernels.md v7 and v23), or with ``split_k`` > 1 one
    CTA per tile, a cluster of ``split_k`` per tile (the 4-warpgroup tile, grouped_split_k)."""
    # 17-32-row tiles on the 4-warpgroup tile: EP8 T=128 contiguous 526 -> 456 µs, masked
    # 754 -> 595 (docs/design/grouped-kernels.md v4).
    family = mid_batch_family(rows, n, k) or auto_tile_family(rows, k)
    if family == "wgmma":
        cfg = grouped_wgmma_shape(n, rows, block_k)
        return grouped_wgmma(routing, cfg["WM"], cfg["BN"], cfg["STAGES"], block_k, arch, cfg["CWG"], split_k,
                             loop=split_k == 1, defer_store=defers_store(cfg["WM"], k))
    if split_k != 1:
        raise ValueError(f"split_k={split_k}: only the 4-warpgroup wgmma tile splits K ({rows}-row tiles run {family})")
    if family == "wgmma_sk":
        # At most 64 rows a tile: with 128, the offsets/masked producer (its warp scan for the tile
        # plus two row tiles' indices) spilled. Short K only; no Kimi EP shape reaches it.
        cfg = wgmma_streamk_shape(n, min(rows, 64))
        return grouped_wgmma_streamk(routing, cfg["WM"], cfg["BN"], cfg["STAGES"], block_k, arch)
    if family == "mma_sk":
        cfg = streamk_shape(n, k, rows)
        return grouped_mma_streamk(routing, cfg["NT"], cfg["TT"], cfg["STAGE_K"], block_k, cfg["STAGES"], arch)
    # Grouped tiles (grouped_row_candidates) are 8-32 rows (the stream-K mma tile) or 33+ (the
    # wgmma tile), so the rule never asks for the one-CTA mma tile here; that kernel is indexed-only.
    raise ValueError(f"grouped tiles of {rows} rows: no grouped kernel (grouped_row_candidates gives 8-{TALL_TILE_ROWS})")


def splits_k(launch: Launch) -> bool:
    """The 4-warpgroup tile: the launches CHORD_GROUPED_SPLIT_K may run as one-CTA clusters."""
    return launch.spec.family == "grouped_wgmma" and launch.spec.config["CWG"] == 4


def grouped_split_k(problem: GroupedProblem, launch: Launch, override: str = "auto") -> int:
    """CTAs a tile for ``launch`` (unsplit): the CHORD_GROUPED_SPLIT_K override (any split the
    kernel and K allow), else 1 (the tile loop's split tail, decided on the device, replaced the
    dispatch's own K split: grouped-kernels.md v23)."""
    choices = split_k_choices(problem.k, problem.block_k) if splits_k(launch) else (1,)
    if override in ("", "auto"):
        return 1
    if not override.isdigit() or int(override) not in choices:
        raise ValueError(f"CHORD_GROUPED_SPLIT_K={override!r}: {launch.spec.describe()} on K={problem.k} takes "
                         f"auto or one of {', '.join(map(str, choices))}")
    return int(override)


def grouped_launch_cost(problem: GroupedProblem, rows: int, launch: Launch, split: int, sms: int) -> float:
    """Expected time of ``launch`` on tiles of ``rows`` split over ``split`` CTAs, in model units:
    waves x a tile's cost. Waves (wave_model): whole tiles on ``sms`` slots, the row tiles drawn
    from the experts' Poisson rows; a stream-K schedule is balanced (its mean tiles over the
    slots). A tile costs its weight rows x (rows + TILE_FIXED_ROWS) (prefill_block_m's model) x
    its K stages plus SPLIT_K_FIXED_STAGES. 192 tiles of 112 stages on 132 SMs: 2 waves x 120 unsplit,
    3 x 64 split in two (-20 %; measured -11 to -15 %, v10). The tile loop's split tail
    (wave_model.tail_split, decided on the device) is left out: modeled, it moved tile heights
    that measured slower (grouped-kernels.md v19)."""
    col_tiles = -(-problem.n // launch.cols_per_cta)
    em, experts = problem.rows_per_expert, problem.num_experts
    if launch.persistent:
        waves = mean_row_tiles(em, experts, rows) * col_tiles * split / sms
    else:
        waves = expected_waves(em, experts, rows, col_tiles * split, sms)
    stages = problem.k // WGMMA_STAGE_K
    return waves * tile_stage_cost(rows, launch) * (stages / split + SPLIT_K_FIXED_STAGES)


def tile_stage_cost(rows: int, launch: Launch) -> float:
    """A K stage of one tile of ``rows`` rows in grouped_launch_cost's units: its weight rows x
    (rows + TILE_FIXED_ROWS), scaled for the tiles that cost more than their rows say."""
    # BLOCK_COST_SCALE is the 4-warpgroup 512 x 56 tile's; a 56-row tile on 2 warpgroups (BLOCK_K
    # 128) costs what its rows say (v16: masked 56 -> 64-row tiles, 62 -> 66 µs a tile wave, +7 %).
    scale = BLOCK_COST_SCALE.get(rows, 1.0) if launch.spec.config.get("CWG") == 4 else 1.0
    if rows == TALL_TILE_ROWS:
        scale = TALL_TILE_COST_SCALE
    return launch.cols_per_cta * (rows + TILE_FIXED_ROWS) * scale


def grouped_row_candidates(problem: GroupedProblem, sms: int = H200_SMS) -> tuple[int, ...]:
    """Tile heights select_grouped weighs: grouped_tile_rows, and for the offsets and masked forms
    (tiles cut on the device, any height) 24 in place of 16 where the indexed rule would take it
    (mid_batch_rows) and past 32 rows every larger prefill block too, so a taller tile may trade
    padding for a wave (grouped_launch_cost). The DeepGEMM form keeps its power of two (a tile
    never straddles two 128-row aligned segments). The offsets form on deep K weighs the tall
    tile (TALL_TILE_ROWS) too, from TALL_TILE_MIN_ROWS rows an expert (select_grouped may pair it
    with the best short tile: pair_with_tall_tile)."""
    rows = grouped_tile_rows(problem.rows_per_expert, problem.routing)
    if problem.routing == "contiguous":
        return (rows,)
    rows = mid_batch_rows(rows, problem.rows_per_expert, problem.num_experts, problem.n, problem.k, sms)
    if rows not in PREFILL_BLOCK_M_CHOICES:
        return (rows,)
    tall = (TALL_TILE_ROWS,) if (problem.routing in TALL_TILE_ROUTINGS and problem.k >= WGMMA_MIN_K
                                 and problem.rows_per_expert >= TALL_TILE_MIN_ROWS) else ()
    return tuple(b for b in PREFILL_BLOCK_M_CHOICES if b >= rows) + tall


def select_grouped(problem: GroupedProblem, arch: str = DEFAULT_ARCH, sms: int = H200_SMS,
                   split_override: str = "auto", memory_tbps: float = H200_MEMORY_TBPS) -> Launch:
    """Grouped dispatch owns its layout search: no block_m or tuning overrides (by design). The
    tile height comes from a wave model (grouped_launch_cost): a taller tile than
    grouped_tile_rows wins only by more than PREFILL_TOLERANCE (near-ties keep the shorter tile:
    at ~85 rows on 48 experts 128 comes within 2 % of 96, which measured 3-7 % faster, indexed
    v18). A one-CTA K split only by CHORD_GROUPED_SPLIT_K (``split_override``), for experiments.

    A taller tile may be another kind of tile (the 256 x 64 tile in place of the 512 x 56 tile at
    33-46 expected rows on the offsets form). From v16 to v19 only the same kind
    competed: the loop's short last wave lost 12 % to the one-CTA tile under a skewed router on
    two routing draws of three. Since the loop splits its last wave along K (v19) it measured
    17-27 % faster at 7 of 8 such points over two routing draws, 6 % slower at one
    (grouped-kernels.md v21)."""
    if problem.routing not in GROUPED_ROUTINGS:
        raise ValueError(f"unknown grouped routing {problem.routing!r}")
    best, weighed = None, []
    candidates = [(rows, grouped_launch(problem.routing, problem.n, problem.k, rows, problem.block_k, arch))
                  for rows in grouped_row_candidates(problem, sms)]
    if split_override not in ("", "auto"):
        # A forced split weighs only the heights whose kernel splits (the 4-warpgroup tile); with
        # none, grouped_split_k names the kernel that cannot.
        candidates = [c for c in candidates if splits_k(c[1])] or candidates[:1]
    for rows, launch in candidates:
        split = grouped_split_k(problem, launch, split_override)
        cost = grouped_launch_cost(problem, rows, launch, split, sms)
        weighed.append(f"{rows} rows x{split}: {cost / (best or (cost,))[0]:.3f}")
        if best is None or cost < (1 - PREFILL_TOLERANCE) * best[0]:
            best = (cost, rows, launch, split)
    _, rows, launch, split = best
    if split > 1:
        launch = grouped_launch(problem.routing, problem.n, problem.k, rows, problem.block_k, arch, split)
    elif problem.routing in TALL_TILE_ROUTINGS:
        launch = pair_with_tall_tile(problem, launch, candidates, sms)
    why = "wave model, cost against the first: " + "; ".join(weighed)
    d16 = decode_16(problem, launch, arch)  # (before the rings: where it applies, none of them does)
    if d16 is not launch:
        launch = d16
        why += f"; the 16-row decode tile ({DECODE_16_MIN_ROWS}+ expected rows an expert)"
    chosen = shallow_decode(problem, launch, arch, sms, memory_tbps)  # (the decode ring first: where it fills, it wins)
    narrow = narrow_mid_batch(problem, launch, arch, sms)
    if narrow is not launch:
        chosen = narrow
        why += f"; the 256 x {NARROW_MID_BATCH_ROWS} tile loop (too few 512 x 24 tiles for the loop)"
    elif chosen is not launch:
        why += (f"; the 2-stage decode ring ({SHALLOW_DECODE_TILES_PER_CTA}+ expected tiles a resident CTA at 4 an SM, "
                f"{SHALLOW_DECODE_MIN_ROWS} to {shallow_decode_max_rows(memory_tbps)} expected rows an expert "
                f"on {memory_tbps} TB/s)")
    else:
        chosen = widen_decode(problem, launch, arch, sms)
        if chosen is not launch:
            why += (f"; the wide decode tile ({WIDE_DECODE_TILES_PER_CTA}+ expected tiles a resident CTA, "
                    f"or {MMA_WHOLE_FILL}-1: one wave of whole tiles)")
    sparse = sparse_decode(problem, chosen, arch)  # (only the 3-stage decode ring: where another rule took it, not)
    if sparse is not chosen:
        chosen = sparse
        why += f"; the 4-deep decode ring ({SPARSE_DECODE_MAX_ROWS} expected row an expert or fewer, deep K)"
    few = few_wave_32(problem, chosen, arch, sms)  # (only the 512 x 32 tile loop: no other rule takes it)
    if few is not chosen:
        chosen = few
        why += f"; the 256 x 32 tile loop (under {MID_BATCH_24_MIN_WAVES} waves of 512 x 32 tiles)"
    dual = dual_decode_16(problem, chosen, arch)
    if dual is not chosen:
        chosen = dual
        why += f"; holding the 16-row tile (under {DECODE_16_MIN_ROWS} rows by {DECODE_DUAL_ROWS}: the device picks)"
    chosen = pair_narrow_mid_batch(problem, chosen, arch, sms)
    if chosen.pick:
        why += f"; paired with {chosen.pick[0].spec.describe()} (the device picks)"
    note = evict_first_note(chosen, problem.k)
    if note:
        why += "; " + note
    report_choice(problem, chosen.spec, why)
    return chosen


def row_tile_cost(problem: GroupedProblem, launch: Launch) -> int:
    """A row tile's cost over all of N in grouped_launch_cost's units (K's stages left out: the
    same for both tiles of a pair), as the integer the device compares (MoeParams::pick_cost)."""
    return round(-(-problem.n // launch.cols_per_cta) * tile_stage_cost(launch.rows_per_cta, launch))


def pair_with_tall_tile(problem: GroupedProblem, best: Launch, candidates: list, sms: int = H200_SMS) -> Launch:
    """``best`` with the other of (the tall tile, the best short tile) as its pair (Launch.pick)
    when both are 2-warpgroup tile loops and the model rates the tall tile at most
    TALL_TILE_PAIR_MARGIN above the best short one (rated below it, it is paired too: the mean
    cannot tell a skewed call) and the experts average under TALL_TILE_UNPAIRED_ROWS rows; else
    ``best``. The first launch is the model's choice."""
    if problem.rows_per_expert >= TALL_TILE_UNPAIRED_ROWS:
        return best
    tall = dict(candidates).get(TALL_TILE_ROWS)
    # 2-warpgroup tile loops only: the 4-warpgroup tile does not read the pick (WgmmaTiles::kPairable)
    pairable = [(rows, launch) for rows, launch in candidates if launch.tile_loop and launch.spec.config.get("CWG") == 2]
    short = [(grouped_launch_cost(problem, rows, launch, 1, sms), launch) for rows, launch in pairable
             if rows != TALL_TILE_ROWS]
    if tall is None or not short:
        return best
    short_cost, short_launch = min(short, key=lambda c: c[0])
    if grouped_launch_cost(problem, TALL_TILE_ROWS, tall, 1, sms) > (1 + TALL_TILE_PAIR_MARGIN) * short_cost:
        return best
    first, second = (tall, short_launch) if best is tall else (best, tall)
    if not any(first is launch for _, launch in pairable):
        return best
    return replace(first, pick=(second, row_tile_cost(problem, first), row_tile_cost(problem, second)))


def grouped_launch_variants(routing: str, n: int, k: int, rows: int, block_k: int,
                            arch: str = DEFAULT_ARCH) -> list[Launch]:
    """grouped_launch and every K split of it that select_grouped can pick on this K, and for
    8-row tiles the wide decode tile (widen_decode), the 2-stage ring (shallow_decode) and the
    4-deep ring (sparse_decode), the 16-row tile (decode_16) and the kernel holding both heights
    (dual_decode_16), for 16-row tiles the 256 x 24 tile loop (narrow_mid_batch)."""
    launch = grouped_launch(routing, n, k, rows, block_k, arch)
    splits = split_k_choices(k, block_k)[1:] if splits_k(launch) else ()
    wide = grouped_wide_decode(routing, n, k, block_k, arch) if rows == 8 else None
    d16 = grouped_decode_16(routing, block_k, arch) if rows == 8 and takes_decode_16(routing, k) else None
    dual = (grouped_decode_dual(routing, block_k, arch)
            if d16 is not None and routing in DECODE_DUAL_FORMS else None)
    shallow = grouped_shallow_decode(routing, block_k, arch) if replaces_decode_ring(launch) else None
    sparse = grouped_sparse_decode(routing, block_k, arch) if replaces_decode_ring(launch) and k >= WGMMA_MIN_K else None
    narrow = grouped_narrow_mid_batch(routing, n, block_k, arch) if rows == 16 and takes_narrow_mid_batch(routing, n, k) else None
    few = grouped_few_wave_32(routing, n, block_k, arch) if is_mid_batch_32(routing, launch) else None
    return [launch] + [grouped_launch(routing, n, k, rows, block_k, arch, s) for s in splits] + \
        [d for d in (wide, shallow, sparse, narrow, few, d16, dual) if d is not None]


def grouped_reachable_launches(arch: str = DEFAULT_ARCH) -> list[Launch]:
    """Every grouped launch the dispatch can pick (CI compiles all of them)."""
    seen: dict[str, Launch] = {}
    for routing in GROUPED_ROUTINGS:
        for block_k in (64, 128):
            for n in (128, 512, 4096):
                for k in (256, 320, 2048, 7168):  # 2048: the 128-row tile defers its store on short K only
                    if k % block_k:
                        continue
                    for rows in grouped_tile_row_choices(routing):
                        for launch in grouped_launch_variants(routing, n, k, rows, block_k, arch):
                            seen.setdefault(launch.spec.symbol, launch)
    return list(seen.values())
