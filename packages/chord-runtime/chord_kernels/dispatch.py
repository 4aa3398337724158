"""Problem -> kernel configuration, as small pure functions (CPU tests cover them).

A *problem* is what the caller's shapes say (N, K, experts, top_k, routing block size); a
*kernel config* is how Chord runs it (family, tiles, launch shape). ``CHORD_PRINT_CONFIGS=1``
prints each distinct choice once, to stderr. Overrides for experiments and debugging (the default
is the heuristic below): ``CHORD_W4A16_INDEXED_KERNEL=auto|mma_sk|wgmma_sk|mma|wgmma|simple`` forces an indexed
kernel family, ``CHORD_W4A16_TUNING="NT=4,STAGES=4"`` overrides the chosen tensor-core kernel's
config (NT/TT/STAGE_K/STAGES for mma, WM/BN/STAGES for wgmma), and ``CHORD_W4A16_BLOCK_M`` the
routing block size Chord asks the framework for.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, replace

from . import env
from .jit.kernel import DEFAULT_ARCH, KernelSpec
from .layouts import BLOCK_K_BY_MODE
from .tma import STAGE_K, TMA_BLOCK_KS
from .wave_model import expected_tiles, expected_waves, mean_row_tiles

INDEXED_FAMILIES = ("auto", "mma_sk", "wgmma_sk", "mma", "wgmma", "simple")
H200_SMS = 132  # SMs of an H200 (H100 SXM too): the wave model's default; chord_kernels.ops passes the device's
MAX_TOKEN_TILES = 8  # n8 token tiles per CTA in the mma kernel (64 routed rows)
BLOCK_M_CHOICES = (8, 16, 32, 64)  # rows per tile of the mma kernels (grouped tiles too)
# Grouped tiles: powers of two (they divide the contiguous form's 128-row segment alignment).
GROUPED_TILE_ROWS = BLOCK_M_CHOICES + (128,)
# Routing blocks Chord asks vLLM for: up to 32 rows per expert the smallest of 8/16/32 holding
# them; above, the prefill block (56, 64, 96 or 128: the wgmma tile's N) of least expected cost
# (prefill_block_m).
DECODE_BLOCK_M_CHOICES = (8, 16, 32)
PREFILL_BLOCK_M_CHOICES = (56, 64, 96, 128)
INDEXED_BLOCK_M_CHOICES = DECODE_BLOCK_M_CHOICES + PREFILL_BLOCK_M_CHOICES
# The wgmma tile takes routing blocks past the stream-K mma range (33+ rows: the prefill blocks,
# 56 and up; auto_tile_family). On deep K whole tiles (one CTA per tile, since v16 claimed by
# at most the resident CTAs: the tile loop; v6 sweep, H200: from K=2048 it beats
# the mma tile, 1418 vs 1744 µs at EP8 down T=2048; v10: it also beats its own stream-K schedule
# there, 6187 vs 8924 µs at EP8 gate_up T=8192). On short K (TP8 down, K=256: 4 stages a tile)
# pipeline fill dominates a one-CTA tile, and the stream-K schedule's ring across tiles wins
# (v10: T=8192 1256 vs 1568 µs for the mma tile, T=2048 390 vs 405).
WGMMA_MIN_K = 1024
# Routing blocks up to this many rows run the mma tile on the stream-K schedule (persistent CTAs,
# one ring across tiles, balanced runs): decode and mid batch, where per-tile restarts and the
# last wave's idle slots cost most (docs/design/indexed-kernels.md, v9: faster or equal at every
# point with blocks of 8-32 rows; 2x slower with 128-row blocks, which belong to the wgmma tile).
STREAMK_MAX_BLOCK_M = 32
# Mid batch on deep K: the wgmma tile with 4 consumer warpgroups and 512 weight rows per CTA.
# Grouped (whole tiles, on the tile loop since grouped v23): tiles of 17-32 rows on N >= 2048
# (v13, H200, EP8 T=128, sum of gate_up and down: 523 -> 475 µs against the stream-K mma tile,
# skewed 561 -> 550; one CTA per 16-row tile lost, 269 -> 345 at EP8 T=64 gate_up). On the grouped
# routings the stream-K schedule of the same tile lost (grouped-kernels.md v14: masked EP8 T=128
# 461 -> 637 µs, offsets 434 -> 454). Indexed: blocks of 17-32 rows (v26 on the stream-K schedule,
# same-run sweeps: equal to 2.5 % slower where the tiles fill their waves, EP8 T=128; 3-6 % faster
# where they do not, skewed T=128-512; on the tile loop since v34) and, since v28, 16-row blocks
# (the 512 x 16 stream-K tile: EP8 T=64 432 -> 407 µs, skewed 412 -> 390; TP8 T=512 458 -> 443,
# skewed 510 -> 497, its gate_up at N 512 -5 %).
# Blocks of 56 take the same tile on deep K through wgmma_shape (v14).
# (lowest rows, highest rows, lowest N) per family
MID_BATCH_TILES = {"grouped": (17, 32, 2048), "indexed": (9, 32, 512)}
# Indexed mid-batch blocks up to this many rows (the 512 x 16 tile) stay on the stream-K schedule;
# 17-32 rows run the 512 x 32 tile on the tile loop with its split tail (indexed-kernels.md v34,
# ncu at base clock: EP8 T=128 gate_up -4 / -6 % skewed, down -6 / -8 %; the 512 x 16 tile on the
# loop was mixed, TP8 T=512 skewed gate_up +6 %, EP8 T=64 down -3 %).
MID_BATCH_STREAMK_MAX_ROWS = 16


def indexed_block_m(valid_shape_m: int, num_experts: int, n: int, k: int) -> int:
    """The routing block size (moe_align_block_size's block_size) Chord asks the framework for,
    for a projection of ``n`` x ``k`` (vLLM builds one table a layer: gate_up and down may differ).

    Decided by routed rows per expert ``tok_e = valid_shape_m / num_experts`` (vLLM's estimate of
    the rows this GPU computes), not total tokens: up to 32 the smallest block that holds a
    typical expert's rows (decode, mid batch: padding stays small and one CTA's dequantized
    weights serve the whole block), except that where 16 would hold them 24 may (mid_batch_rows:
    deep K, N >= 2048, 1.4 waves of 512 x 24 tiles on an H200's SMs, since the table is built
    without a device); above 32, prefill_block_m(ceil(tok_e)).
    """
    override = env.get(env.BLOCK_M)
    if override:
        return int(override)
    rows = max(valid_shape_m, 1) / max(num_experts, 1)
    return mid_batch_rows(block_for_rows(rows), math.ceil(rows), num_experts, n, k)


def block_for_rows(rows_per_expert: float) -> int:
    """The routing block (or per-expert tile) for an expert's expected rows: up to 32 the
    smallest of 8/16/32 holding them, above prefill_block_m(ceil(rows))."""
    if rows_per_expert <= DECODE_BLOCK_M_CHOICES[-1]:
        return next(b for b in DECODE_BLOCK_M_CHOICES if rows_per_expert <= b)
    return prefill_block_m(math.ceil(rows_per_expert))


# The prefill block-size model. An expert with n rows takes ceil(n / b) tiles of b rows; a tile
# costs its b rows of MMA plus a fixed part that does not shrink with b (its 256 weight rows'
# loads and dequantization over all of K) worth TILE_FIXED_ROWS rows. With n ~ Poisson(tok_e)
# (uniform routing), pick the b of least expected cost; a larger b within PREFILL_TOLERANCE of
# the best wins (fewer, fuller tiles; the model is not that precise). Past PREFILL_MODEL_MAX_ROWS
# rows per expert the padding is under an eighth of the work whatever the block: 128.
# TILE_FIXED_ROWS was fitted on the H200 (v11 sweep, docs/design/indexed-kernels.md: blocks of
# 64/96/128 forced at EP8 and TP8, T=512-8192): the measured ratios between block sizes give 50-150
# rows; 96 picks the fastest block at every measured point. Re-checked on the tile loop (v18: 96 vs
# 128 forced at 64-128 rows per expert, EP8 and TP8): the model's ranking was right at all 12 points.
TILE_FIXED_ROWS = 96
# Blocks of 56 run a faster tile on deep K (wgmma_shape: 4 consumer warpgroups, 512 weight rows;
# v14, H200, TP8 T=2048, 43 rows per expert: gate_up 407 -> 354 µs against 64-row blocks, down on
# the stream-K tile 382 -> 392; the layer 790 -> 746, where the padding model alone says 2 %).
# Their cost is scaled by the rest: 0.96. It picks 56 for about 33-45 rows per expert.
BLOCK_COST_SCALE = {56: 0.96}
# v18 (H200, tile loop): at 85 rows per expert (EP8 T=512, TP8 T=4096) the model rates 96 3 % under
# 128 and 96 measured 3-7 % faster, but a 5 % tolerance took 128. 2 % keeps the preference for
# fewer tiles only where the model cannot tell the blocks apart.
PREFILL_TOLERANCE = 0.02
PREFILL_MODEL_MAX_ROWS = 512


def least_cost_block(rows_per_expert: int, choices: tuple[int, ...]) -> int:
    """The block of ``choices`` of least expected cost for ``rows_per_expert`` (the model above:
    expected tiles x (block + TILE_FIXED_ROWS)); a larger one within PREFILL_TOLERANCE wins."""
    costs = {b: expected_tiles(rows_per_expert, b) * (b + TILE_FIXED_ROWS) * BLOCK_COST_SCALE.get(b, 1.0)
             for b in choices}
    best = min(costs.values())
    return max(b for b, cost in costs.items() if cost <= (1 + PREFILL_TOLERANCE) * best)


@functools.cache
def prefill_block_m(rows_per_expert: int) -> int:
    """The routing block for ``rows_per_expert`` (> 32) rows per expert: see the model above."""
    if rows_per_expert > PREFILL_MODEL_MAX_ROWS:
        return PREFILL_BLOCK_M_CHOICES[-1]
    return least_cost_block(rows_per_expert, PREFILL_BLOCK_M_CHOICES)


# Mid batch (9-16 rows per expert) on deep K and wide N: 16-row blocks (the 512 x 16 stream-K
# tile) or 24-row blocks (the 512 x 24 tile on the tile loop), by the same model (indexed-kernels.md
# v36, ncu at base clock, EP8 T=64, 11.5 rows per expert, two routings: the layer -1.2 / -5.1 %,
# skewed -2.5 / -4.8 %; the model rates 24 0.5 % cheaper there). It picks 24 from 11 rows; above
# 16 rows the rule's 32 stays (24 there: EP8 T=128, 21 rows, +15 %; skewed 16 rows +14 %).
MID_BATCH_BLOCK_CHOICES = (16, 24)
# N at least this: the wins were measured at N 4096 and 7168. TP8's gate_up (N 512) gained 2 % on
# 24-row blocks but its down (K 256, no mid-batch tile) keeps 16, and a second block size costs
# vLLM a second moe_align_block_size a step.
MID_BATCH_24_MIN_N = 2048
# And only where the 512 x 24 tiles make this many waves on the SMs: they run whole tiles on the
# tile loop, where the 16-row tiles they replace are balanced over every SM (the indexed 512 x 16
# tile on the stream-K schedule, the grouped stream-K mma tile). Grouped v25 (ncu, base clock,
# gate_up / down, contiguous and masked): EP8 T=64 (48 experts, 2.9 / 5.1 waves) -3 to -12 %;
# EP16 T=32 (24 experts, 1.45 / 2.5 waves) -3.3 and -1.0 / +1.7 and +1.5 %; EP32 T=20 (12 experts,
# 0.73 / 1.27 waves) +4 to +14 %. The bound sits between 1.27 (lost) and 1.45 (won).
MID_BATCH_24_MIN_WAVES = 1.4


def takes_24_row_blocks(n: int, k: int, experts: int, rows_per_expert: float, sms: int = H200_SMS) -> bool:
    """Whether ``experts`` with ``rows_per_expert`` expected rows on an n x k projection may take
    24-row blocks: deep K, N >= MID_BATCH_24_MIN_N, and MID_BATCH_24_MIN_WAVES waves of tiles."""
    rows = MID_BATCH_BLOCK_CHOICES[1]
    if not (is_mid_batch_tile(rows, n, k, "indexed") and n >= MID_BATCH_24_MIN_N):
        return False
    cfg = wgmma_shape(n, rows)
    col_tiles = -(-n // wgmma_weight_rows(cfg["WM"], cfg["CWG"]))
    return mean_row_tiles(rows_per_expert, experts, rows) * col_tiles >= MID_BATCH_24_MIN_WAVES * sms


def mid_batch_rows(rows: int, rows_per_expert: int, experts: int, n: int, k: int, sms: int = H200_SMS) -> int:
    """``rows`` (a 16-row block or tile by the smallest-holding rule), or 24 where
    takes_24_row_blocks and mid_batch_block_m say so; any other ``rows`` as it is."""
    if rows != MID_BATCH_BLOCK_CHOICES[0] or not takes_24_row_blocks(n, k, experts, rows_per_expert, sms):
        return rows
    return mid_batch_block_m(rows_per_expert)


@functools.cache
def mid_batch_block_m(rows_per_expert: int) -> int:
    """The routing block for ``rows_per_expert`` (9-16) rows per expert where the 512 x 24 tile
    runs (takes_24_row_blocks): 16 or 24, by the model above."""
    return least_cost_block(rows_per_expert, MID_BATCH_BLOCK_CHOICES)


def indexed_block_m_windows(num_experts: int, n: int, k: int) -> list[tuple[int, int, int]]:
    """indexed_block_m as ``(lower, upper, block)`` windows of valid_shape_m (``lower < M <=
    upper``; the last window's upper is None: any M), the form of the tuning table vLLM reads its
    block size from. The first window starts at -1 so an M of 0 (profiling runs) has one too.
    The rule depends on M only through ceil(M / experts), so windows end at multiples of experts."""
    e = max(num_experts, 1)
    windows: list[list[int]] = []
    lower = -1
    for upper in (t * e for t in range(1, PREFILL_MODEL_MAX_ROWS + 1)):
        block = indexed_block_m(upper, num_experts, n, k)
        if windows and windows[-1][2] == block:
            windows[-1][1] = upper
        else:
            windows.append([lower, upper, block])
        lower = upper
    last = indexed_block_m(lower + 1, num_experts, n, k)
    if windows[-1][2] == last:
        windows[-1][1] = None
    else:
        windows.append([lower, None, last])
    return [tuple(w) for w in windows]


@dataclass(frozen=True)
class IndexedProblem:
    n: int
    k: int
    num_experts: int
    top_k: int
    block_m: int  # routing block size used by moe_align_block_size
    num_routes: int = 0  # M x top_k of the call: at most this many routed rows (0: not known)


@dataclass(frozen=True)
class Launch:
    spec: KernelSpec
    rows_per_cta: int  # routed rows (tokens) one CTA covers
    cols_per_cta: int  # output columns (weight rows) one CTA covers
    smem_bytes: int = 0  # dynamic shared memory per CTA
    # Stream-K schedule: the grid is every CTA the GPU holds at once (chord_kernels.ops asks the
    # driver), each with a workspace of this many FP32 partials (0: one CTA per tile, grid below),
    # over iterations of this many K columns.
    partial_floats: int = 0
    iteration_k: int = 0
    # Whole tiles looped over by at most the resident CTAs (csrc/common/w4a16_wgmma_tiles.cuh):
    # the grid below is only the bound the loop may need, never launched as such.
    tile_loop: bool = False
    # One-CTA tiles: CTAs a tile, a cluster along grid z splitting K (WgmmaTile::run); 1: none.
    split_k: int = 1
    # The kernel takes chord::MoeTmaParams: its parameters end with the packed weight's tensor
    # maps for tiles of cols_per_cta rows (chord_kernels.tma.tensor_maps), with stage_boxes one
    # weight box a stage of a BLOCK_K-128 weight (wgmma_block_pairs false).
    tensor_maps: bool = False
    stage_boxes: bool = False
    # The kernel takes chord::MoeTmaActParams: after the weight's maps, a map of the call's
    # activations whose box is this many rows (chord_kernels.tma.activation_map); 0: none.
    act_map_rows: int = 0
    # A pair of tile loops (pair_with_tall_tile, TALL_TILE_ROWS): the other launch, this one's cost
    # a row tile and the other's (MoeParams::pick_*). Both run back to back; on the device each
    # counts the call's row tiles in both heights and only the cheaper does any work. This one
    # (launched first) wins a tie.
    pick: tuple[Launch, int, int] | None = None

    @property
    def persistent(self) -> bool:
        return self.partial_floats > 0

    def ctas_per_block(self, problem: IndexedProblem) -> int:
        return -(-problem.block_m // self.rows_per_cta)

    def grid(self, problem: IndexedProblem, num_blocks: int) -> tuple[int, int, int]:
        return (-(-problem.n // self.cols_per_cta), num_blocks * self.ctas_per_block(problem), self.split_k)


def indexed_simple(arch: str = DEFAULT_ARCH) -> Launch:
    """FP32-FMA kernel: the slow, obviously-correct baseline (kept for cross-checking)."""
    spec = KernelSpec(family="indexed_simple", header="indexed/w4a16_indexed_simple.cuh",
                      body="chord::IndexedSimple", params_type="chord::MoeParams",
                      template_args=(("BLOCK_K", BLOCK_K_BY_MODE["indexed"]),), threads=128, arch=arch)
    return Launch(spec, rows_per_cta=16, cols_per_cta=64)


SMEM_PER_SM = 227 * 1024  # usable shared memory per SM on H100/H200 (1 KB per CTA is reserved)


MMA_STAGED_EPILOGUE_MAX_TT = 4  # MmaTile::kStagedEpilogue: up to 32 rows the epilogue goes through shared memory


def mma_smem_bytes(nt: int, tt: int, stage_k: int, stages: int) -> int:
    """sizeof(MmaTile::Smem): per stage the lanes' weight chunks, the CTA rows' scales, the
    gathered activation rows (padded by 8 columns) and the stream-K schedule's row ids, then the
    epilogue's staging tile (up to 32 rows: the rows x the CTA's columns, padded by 8; else 16
    bytes), two int32 row indices per row and the stream-K finisher flag (padded to 16 bytes)."""
    rows, tokens = 64 * nt, 8 * tt
    weights = (stage_k // 64) * 4 * nt * 32 * 16
    scales = (stage_k // 32) * rows * 2
    acts = tokens * (stage_k + 8) * 2
    out_stage = tokens * (rows + 8) * 2 if tt <= MMA_STAGED_EPILOGUE_MAX_TT else 16
    return stages * (weights + scales + acts + tokens * 4) + out_stage + tokens * 2 * 4 + 16


def mma_register_estimate(nt: int, tt: int) -> int:
    """Registers per thread of IndexedMma, rounded up to the allocation granule of 8: the
    accumulators (4 per tile per 8 tokens), weight words and scales per tile, B fragments per
    8 tokens, and ~40 for addressing; +10 % margin. Fitted to ptxas -v on sm_90a (within 10 %)."""
    est = 40 + 4 * nt * tt + 8 * nt + 4 * tt
    return -(-int(est * 1.1) // 8) * 8


MAX_CTAS_PER_SM = 4  # the mma launches' occupancy cap


def mma_launch(family: str, header: str, body: str, template_args: tuple, nt: int, tt: int,
               stage_k: int, stages: int, arch: str, extra_regs: int = 0) -> Launch:
    """A tensor-core (common/w4a16_mma_tile.cuh) launch: 4 warps x ``nt`` 16-row weight tiles,
    8*``tt`` rows. CTAs per SM follow from shared memory and registers (at most 4; the kernel's
    own state beyond the tile's adds ``extra_regs``); __launch_bounds__ then caps registers to
    match, so ptxas must fit the occupancy asked for."""
    smem = mma_smem_bytes(nt, tt, stage_k, stages)
    by_smem = SMEM_PER_SM // (smem + 1024)
    by_regs = 65536 // (128 * (mma_register_estimate(nt, tt) + extra_regs))
    spec = KernelSpec(family=family, header=header, body=body, params_type="chord::MoeParams",
                      template_args=template_args, threads=128,
                      min_blocks_per_sm=max(1, min(MAX_CTAS_PER_SM, by_smem, by_regs)), arch=arch)
    return Launch(spec, rows_per_cta=8 * tt, cols_per_cta=4 * nt * 16, smem_bytes=smem)


# Registers the stream-K kernel holds beyond the tile's (per-tile copy sources, two schedule
# walks, the prefetched row indices): ptxas -v on sm_90a, 24-56 over the one-CTA-per-tile kernel;
# with less, the TT=4 configs spilled at the occupancy the tile's estimate alone allowed (40 held
# until the walk of v10; NT=2 TT=4 now runs 2 CTAs an SM, no benchmark point uses it).
STREAMK_EXTRA_REGS = 56


# Stream-K mma kernels that ptxas fits at more CTAs an SM than the register estimate allows,
# (family, NT, TT, STAGE_K, STAGES) -> CTAs an SM; test_jit holds them to no spill (the grouped
# kernel of the same shape spills 24 bytes at 3). See ONE_TILE_RING.
STREAMK_CTAS_PER_SM = {("indexed_mma_sk", 4, 2, 128, 2): 3}


def streamk_launch(family: str, header: str, body: str, template_args: tuple, nt: int, tt: int,
                   stage_k: int, stages: int, arch: str) -> Launch:
    """The mma tile on the stream-K schedule (csrc/common/w4a16_mma_streamk.cuh): persistent CTAs,
    each with two FP32 partial slots (its run's first and last tile) of 128 threads x NT*TT*4
    accumulators. A thread gathers one tile row, so the tile's rows (8*tt) must divide 128."""
    if tt not in (1, 2, 4, 8):
        raise ValueError(f"the stream-K mma kernel takes TT 1, 2, 4 or 8, got {tt}")
    launch = mma_launch(family, header, body, template_args, nt, tt, stage_k, stages, arch, STREAMK_EXTRA_REGS)
    ctas = STREAMK_CTAS_PER_SM.get((family, nt, tt, stage_k, stages))
    if ctas is not None:
        launch = replace(launch, spec=replace(launch.spec, min_blocks_per_sm=ctas))
    return replace(launch, partial_floats=2 * 128 * nt * tt * 4, iteration_k=stage_k)


def streamk_shape(n: int, k: int, rows: int) -> dict[str, int]:
    """mma_shape for the stream-K schedule: TT a power of two (rows divide 128), and narrow N
    (TP8 gate_up) keeps 2 weight tiles per warp, since the schedule fills the machine whatever
    the tile count (half the activation bytes and B-fragment loads per weight byte); wide N on
    short K takes 4 (256 weight rows a tile)."""
    cfg = mma_shape(n, k, rows)
    cfg["TT"] = 1 << (cfg["TT"] - 1).bit_length()
    if n >= 256:
        cfg["NT"] = max(cfg["NT"], 2)
    if n >= 2048 and k < WGMMA_MIN_K:
        # Short K (TP8 down, K=256: one 256-column stage a 128-row tile): 256 weight rows a tile
        # in two 128-column stages halve the per-tile work (row ids, partials, epilogue) per
        # weight byte and keep 2 CTAs an SM (v30, H200: TP8 down T=128 125 -> 118 µs, T=512
        # 186 -> 176, skewed 210 -> 197; T=20 equal). 256-column stages at NT 4 fit one CTA an
        # SM and lost 20 %; deep K lost 1-3 % (EP8 T=8-32).
        cfg["NT"], cfg["STAGE_K"] = 4, min(cfg["STAGE_K"], 128)
    return cfg


def indexed_mma_streamk(nt: int, tt: int, stage_k: int, stages: int = 3, arch: str = DEFAULT_ARCH) -> Launch:
    """Indexed routing on the mma tile, stream-K schedule."""
    return streamk_launch("indexed_mma_sk", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedMmaStreamK",
                          (("NT", nt), ("TT", tt), ("STAGE_K", stage_k), ("STAGES", stages)), nt, tt, stage_k,
                          stages, arch)


def indexed_mma(nt: int, tt: int, stage_k: int, stages: int = 3, arch: str = DEFAULT_ARCH) -> Launch:
    """Indexed routing on the mma tile (csrc/indexed/w4a16_indexed_mma.cuh)."""
    return mma_launch("indexed_mma", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedMma",
                      (("NT", nt), ("TT", tt), ("STAGE_K", stage_k), ("STAGES", stages)),
                      nt, tt, stage_k, stages, arch)


def wgmma_weight_rows(wm: int, cwg: int) -> int:
    """Weight rows (output columns) one wgmma CTA covers: ``cwg`` consumer warpgroups x ``wm``
    m64 tiles."""
    return cwg * 64 * wm


def wgmma_smem_bytes(wm: int, bn: int, stages: int, cwg: int = 2) -> int:
    """sizeof(WgmmaTile::Smem): per stage the swizzled activation rows (128 bytes each), the
    4*CWG consumer warps' weight chunks (WM x 512 bytes each), the CTA rows' two scale groups, the
    stream-K schedule's row ids and two mbarriers (full, empty); then the epilogue's staging rows
    (with 2 consumer warpgroups: BN rows of 64 + 8 BF16 each per warpgroup; else one row), two
    int32 row indices per row, the stream-K finisher flag, the tile loop's two claims and the
    stream-K schedule (6 int32; the struct pads to 16 bytes)."""
    rows = wgmma_weight_rows(wm, cwg)
    out_stage = (cwg * bn if cwg == 2 else 1) * (64 + 8) * 2
    tail = -(-(4 + 2 * 4 + 6 * 4) // 16) * 16
    return stages * (bn * 128 + 4 * cwg * wm * 512 + 2 * rows * 2 + bn * 4 + 16) + out_stage + bn * 2 * 4 + tail


WGMMA_STAGE_K = STAGE_K  # K columns per ring stage of the wgmma tile (one 128-byte swizzle row)
# Consumer warpgroups of the wgmma tile: 2 (384 threads), or 4 (640 threads, ~96-104 registers a
# thread) when the accumulators are small (WM * BN <= 64): twice the warps hide more of the
# dequant's latency (Humming's mid-batch kernel runs 4; docs/design/indexed-kernels.md v13).
WGMMA_CWG_CHOICES = (2, 4)


def wgmma_threads(cwg: int) -> int:
    return 128 * (1 + cwg)  # a producer warpgroup + the consumer warpgroups


def wgmma_block_pairs(block_k: int, weight_rows: int, whole_blocks: bool = True) -> bool:
    """WgmmaTile::kBlockPairs: a BLOCK_K-128 weight comes one box a K block (two ring slots) where
    the tile takes 256+ weight rows a stage and its schedule loads whole blocks (``whole_blocks``:
    the one-CTA tile and the tile loop, not stream-K); else one box a stage (grouped-kernels.md
    v30: stage boxes on 512-row mid-batch tiles +13 to +21 %, the 128-row tall tile needs them)."""
    return block_k == 2 * WGMMA_STAGE_K and whole_blocks and weight_rows >= 256


def wgmma_launch(family: str, header: str, body: str, template_args: tuple, wm: int, bn: int, stages: int,
                 arch: str, cwg: int = 2, split_k: int = 1, whole_blocks: bool = True, loop: bool = False) -> Launch:
    """A wgmma tile (csrc/common/w4a16_wgmma_tile.cuh) launch: a producer warpgroup and ``cwg``
    consumer warpgroups x ``wm`` m64 weight tiles, ``bn`` rows on WGMMA-N; one CTA per SM (its
    ring fills shared memory; with 2 consumer warpgroups they take 216 registers a thread, 200 on
    the stream-K schedule; with 4, 104 and 96). With 2 consumer warpgroups, or 4 and ``loop``,
    each CTA loops over whole tiles (csrc/common/w4a16_wgmma_tiles.cuh); else one CTA per tile, or
    with ``split_k`` > 1 one cluster of ``split_k`` CTAs per tile (grid z). ``template_args`` name
    BLOCK_K where it is not the indexed layout's 64 (the grouped family). The tile loads its weights
    and scales by tensor map (a weight box a K block or a stage, wgmma_block_pairs; chord_kernels.tma):
    its parameters carry the maps."""
    block_k = dict(template_args).get("BLOCK_K", BLOCK_K_BY_MODE["indexed"])
    if block_k not in TMA_BLOCK_KS:
        raise ValueError(f"the wgmma tile reads BLOCK_K {' or '.join(map(str, TMA_BLOCK_KS))} weights, not {block_k}")
    spec = KernelSpec(family=family, header=header, body=body, params_type="chord::MoeTmaParams",
                      template_args=template_args, threads=wgmma_threads(cwg), min_blocks_per_sm=1, arch=arch,
                      cluster_z=split_k)
    rows = wgmma_weight_rows(wm, cwg)
    return Launch(spec, rows_per_cta=bn, cols_per_cta=rows, smem_bytes=wgmma_smem_bytes(wm, bn, stages, cwg),
                  tile_loop=cwg == 2 or loop, split_k=split_k, tensor_maps=True,
                  stage_boxes=block_k != WGMMA_STAGE_K and not wgmma_block_pairs(block_k, rows, whole_blocks))


def wgmma_streamk_launch(family: str, header: str, body: str, template_args: tuple, wm: int, bn: int, stages: int,
                         arch: str, cwg: int = 2) -> Launch:
    """The wgmma tile on the stream-K schedule (csrc/common/w4a16_wgmma_streamk.cuh): persistent
    CTAs, each with two FP32 partial slots of 128*CWG consumer threads x WM*BN/2 accumulators."""
    launch = wgmma_launch(family, header, body, template_args, wm, bn, stages, arch, cwg, whole_blocks=False)
    return replace(launch, partial_floats=2 * 128 * cwg * wm * bn // 2, iteration_k=WGMMA_STAGE_K, tile_loop=False)


def loop_targs(loop: bool, cwg: int) -> tuple:
    """The LOOP template argument: named only where it differs from the kernel's default (2
    consumer warpgroups always loop), so those kernels keep their symbols."""
    return (("LOOP", 1),) if loop and cwg == 4 else ()


def indexed_wgmma(wm: int, bn: int, stages: int, arch: str = DEFAULT_ARCH, cwg: int = 2, loop: bool = False) -> Launch:
    """Indexed routing on the wgmma tile: whole tiles on at most one CTA an SM (2 consumer
    warpgroups, or 4 with ``loop``), else one CTA per tile."""
    targs = (("WM", wm), ("BN", bn), ("STAGES", stages), ("CWG", cwg)) + loop_targs(loop, cwg)
    return wgmma_launch("indexed_wgmma", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedWgmma", targs, wm, bn,
                        stages, arch, cwg, loop=loop)


def indexed_wgmma_streamk(wm: int, bn: int, stages: int, arch: str = DEFAULT_ARCH, cwg: int = 2) -> Launch:
    """Indexed routing on the wgmma tile, stream-K schedule."""
    return wgmma_streamk_launch("indexed_wgmma_sk", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedWgmmaStreamK",
                                (("WM", wm), ("BN", bn), ("STAGES", stages), ("CWG", cwg)), wm, bn, stages, arch,
                                cwg)


MMA_TUNABLE = ("NT", "TT", "STAGE_K", "STAGES")
WGMMA_TUNABLE = ("WM", "BN", "STAGES", "CWG")
TUNABLE = MMA_TUNABLE + ("WM", "BN", "CWG")


def parse_tuning(text: str) -> dict[str, int]:
    """``CHORD_W4A16_TUNING="NT=4,STAGES=4"`` -> {"NT": 4, "STAGES": 4} (experiments, debugging)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip().upper() not in TUNABLE or not value.strip().isdigit():
            raise ValueError(f"CHORD_W4A16_TUNING item {item!r}: expected KEY=INT with KEY in {', '.join(TUNABLE)}")
        out[key.strip().upper()] = int(value)
    return out


def mma_shape(n: int, k: int, rows: int) -> dict[str, int]:
    """Tile config of the mma kernels for ``rows`` activation rows per tile (a routing block or
    a grouped expert's expected rows), as measured on the H200 (docs/design/indexed-kernels.md)."""
    # Rows: cover the block in one CTA up to 64 rows (8 n8 tiles), so each dequantized weight
    # serves the whole block; bigger blocks are split over several CTAs, each re-streaming the
    # expert's weights (large prefill belongs to the wgmma kernel).
    tt = min(MAX_TOKEN_TILES, max(1, -(-rows // 8)))
    # Weight rows per warp: more 16-row tiles cut the activation bytes re-read per weight byte,
    # fewer make more CTAs. Measured (v5 sweep): 4 tiles win once the tile has 32+ rows, 2 at
    # decode; narrow N (TP8 gate_up, N=512) keeps 1 so the grid still fills the machine.
    nt = 1 if n < 2048 else 4 if rows >= 32 else 2
    # Stage width: 256 columns (fewer barriers, deeper bytes in flight) while the activation
    # rows are few; narrower stages for big row tiles keep 2+ CTAs per SM in shared memory.
    stage_k = 256 if k % 256 == 0 and tt <= 2 else 128 if k % 128 == 0 else 64
    return {"NT": nt, "TT": tt, "STAGE_K": stage_k, "STAGES": 3}


WGMMA_CWG2_STAGES = 6  # ring depth of the 2-warpgroup tile (depth made no difference in the v6 sweep)
WGMMA_BN_CHOICES = (16, 24, 32, 48, 56, 64, 96, 128)  # N of the wgmma: the block's rows (16, 24, 32 at mid batch)


def wgmma_shape(n: int, rows: int) -> dict[str, int]:
    """Tile config of the wgmma kernel for a routing block of ``rows``: N of the wgmma is the
    smallest of 16/24/32/48/56/64/96/128 holding the block; two m64 weight tiles per warpgroup (half
    the activation bytes re-read per weight byte of one) unless N is too narrow; up to 56 rows 4
    consumer warpgroups (512 weight rows, 8 stages; ``auto`` sends mid-batch tiles on deep K here,
    MID_BATCH_TILES: 17-32 rows since v13, indexed 16-row blocks since v28; 56-row blocks, v14),
    else 2 (256 weight rows, 6 stages: prefill, 64+ rows; the depth made no difference in the v6
    sweep)."""
    bn = next((b for b in WGMMA_BN_CHOICES if rows <= b), WGMMA_BN_CHOICES[-1])
    wm = 2 if n >= 256 else 1
    # Up to 56 rows the accumulators (WM * BN / 2 <= 56 a thread) fit 4 consumer warpgroups (512
    # weight rows; from 48 rows the tile loads its weight words per k step, v14), and their 8-deep
    # ring still fits (181-207 KB; v13: 6 -> 8 stages took EP8 T=128 490 -> 475 µs; v14: TP8
    # T=2048 gate_up 373 -> 354 at BN 56).
    cwg = 4 if wm == 2 and bn <= 56 else 2
    return {"WM": wm, "BN": bn, "STAGES": 8 if cwg == 4 else WGMMA_CWG2_STAGES, "CWG": cwg}


def wgmma_loads_operands_per_step(cfg: dict[str, int]) -> bool:
    """WgmmaTile::kOperandsPerStep: the 4-warpgroup tile with more than 64 accumulators a thread
    (WM * BN > 64, the 512 x 56 tile) has no registers to hold a stage's weight words, so each k
    step loads its own 4-byte word from shared memory (on the tile loop two steps' words a load:
    grouped-kernels.md v24)."""
    return cfg["CWG"] == 4 and cfg["WM"] * cfg["BN"] > 64


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


def deepest_wgmma_ring(wm: int, bn: int, most: int) -> int:
    """Stages of the deepest 2-warpgroup ring, up to ``most``, that fits an SM's shared memory."""
    per_stage = wgmma_smem_bytes(wm, bn, 2) - wgmma_smem_bytes(wm, bn, 1)
    fixed = wgmma_smem_bytes(wm, bn, 1) - per_stage
    return min(most, (SMEM_PER_SM - 1024 - fixed) // per_stage)


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


def wgmma_streamk_shape(n: int, rows: int) -> dict[str, int]:
    """wgmma_shape on the stream-K schedule: the ring as deep as shared memory allows, up to 8
    stages (the schedule pays its fill once per CTA, not per tile, so depth is only bytes in
    flight: 8 stages of 256 weight rows are 64 KB a SM, twice what covers HBM latency)."""
    # 2 consumer warpgroups off the mid batch (the 4-warpgroup tile is for 17-32-row blocks,
    # choose_indexed_wgmma_streamk; at BN 48/56 it would spill, v14).
    cfg = {**wgmma_shape(n, rows), "CWG": 2}
    cfg["STAGES"] = deepest_wgmma_ring(cfg["WM"], cfg["BN"], 8)
    return cfg


def apply_tuning(cfg: dict[str, int], k: int, tuning: str) -> dict[str, int]:
    """Overrides from CHORD_W4A16_TUNING for the keys this config has (an mma config takes
    NT/TT/STAGE_K/STAGES, a wgmma config WM/BN/STAGES; the other family's keys are for the
    other family's calls in the same run)."""
    cfg = {**cfg, **{key: v for key, v in parse_tuning(tuning).items() if key in cfg}}
    if "WM" in cfg:
        if cfg["WM"] not in (1, 2) or cfg["BN"] not in WGMMA_BN_CHOICES or not 2 <= cfg["STAGES"] <= 8 or k % 64:
            raise ValueError(f"tuning {cfg} does not fit K={k} (WM 1|2, BN 16|24|32|48|56|64|96|128, STAGES 2..8, "
                             "K a multiple of 64)")
        if cfg["CWG"] not in WGMMA_CWG_CHOICES or (cfg["CWG"] == 4 and cfg["WM"] * cfg["BN"] > 112):
            raise ValueError(f"tuning {cfg}: CWG is 2 or 4, and 4 consumer warpgroups need WM*BN <= 112 "
                             "(their accumulators must fit ~100 registers a thread)")
        if wgmma_smem_bytes(cfg["WM"], cfg["BN"], cfg["STAGES"], cfg["CWG"]) > SMEM_PER_SM - 1024:
            raise ValueError(f"tuning {cfg}: the ring needs more shared memory than an SM has")
    elif k % cfg["STAGE_K"] or cfg["STAGE_K"] % 64 or not 1 <= cfg["TT"] <= MAX_TOKEN_TILES:
        raise ValueError(f"tuning {cfg} does not fit K={k} (STAGE_K must divide K, multiple of 64; TT 1..8)")
    return cfg


def choose_indexed_mma(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    cfg = apply_tuning(mma_shape(problem.n, problem.k, problem.block_m), problem.k, tuning)
    return indexed_mma(cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"], arch=arch)


def decode_tiles(problem: IndexedProblem, launch: Launch) -> int | None:
    """The most tiles ``launch`` can have for the call: every routing block it can have (at most
    routes / block_m full ones plus one partial an expert with routes) times the block's tiles;
    None when the route count is not known."""
    routes = problem.num_routes
    if not routes:
        return None
    blocks = min(routes, routes // problem.block_m + min(problem.num_experts, routes))
    return blocks * launch.ctas_per_block(problem) * -(-problem.n // launch.cols_per_cta)


def resident_ctas(launch: Launch, sms: int = H200_SMS) -> int:
    return launch.spec.min_blocks_per_sm * sms


# A launch whose tiles cannot fill the resident CTAs (TP8 down at T=1: 8 routes x 28 tiles of 256
# weight rows for 396 CTAs) takes 128 weight rows a tile on short K: twice the tiles, every CTA busy
# (ncu, base clock: TP8 T=1 down 10.7 -> 9.75 µs; from T=8, 1792+ tiles, NT 4 stays: NT 2 +10-17 %,
# benchmarks/results/sweeps/2026-12-03_v36_tp8_t1_nt2/).
def one_wave_decode(problem: IndexedProblem, launch: Launch, sms: int = H200_SMS) -> bool:
    """Every routing block the call can have fits its tiles in ``launch``'s resident CTAs."""
    tiles = decode_tiles(problem, launch)
    return tiles is not None and tiles < resident_ctas(launch, sms)


# A launch with at most half as many tiles as resident CTAs splits every tile over 2+ CTAs (TP8
# gate_up at T=1: 32 tiles of 28 stages, ~12 CTAs a tile). A 4-deep ring (2 CTAs an SM where 3
# stages fit 3) makes a third fewer CTAs and so fewer contributors a split tile, each with a
# longer run (ncu, base clock, v39: TP8 gate_up T=1 -13.8 %, T=2 -9.2 %, T=4 -7.1 %; at T=8, 256
# tiles, +1.2 %; EP8 T=2/4 +3 to +6 %, which the host cannot tell from EP8 T=1's -10 %: its local
# routes are unknown, so it keeps 3, benchmarks/results/sweeps/2026-12-03_v39_decode_stages/).
FEW_TILES_STAGES = 4


def few_tiles_decode(problem: IndexedProblem, launch: Launch, sms: int = H200_SMS) -> bool:
    """``launch``'s tiles (decode_tiles) are at most half its resident CTAs."""
    tiles = decode_tiles(problem, launch)
    return tiles is not None and 2 * tiles <= resident_ctas(launch, sms)


# 16-row blocks on the short-K 256-row tile (TP8 down at T=512, K=256: 2 stages a tile) run a
# one-tile ring, 2 stages, which frees the registers for 3 CTAs an SM instead of 2 (168 a thread,
# STREAMK_CTAS_PER_SM): 12 warps an SM hide the stage's latency chain better than a deeper ring
# (ncu ABBA on the H200, indexed-kernels.md v45: TP8 T=512 down -8.0 / -8.4 %, skewed -7.7 %, at
# base and boost clock).
ONE_TILE_RING = {"NT": 4, "TT": 2, "STAGE_K": 128}


def choose_indexed_mma_streamk(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    cfg = apply_tuning(streamk_shape(problem.n, problem.k, problem.block_m), problem.k, tuning)
    tuned = parse_tuning(tuning)
    ring = cfg["STAGES"]  # streamk_shape's (or the override's) ring, for the NT 2 fallback below
    if "STAGES" not in tuned and all(cfg[key] == v for key, v in ONE_TILE_RING.items()) and problem.k < WGMMA_MIN_K:
        cfg["STAGES"] = 2
    launch = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"], arch=arch)
    if cfg["NT"] == 4 and problem.k < WGMMA_MIN_K and "NT" not in tuned and one_wave_decode(problem, launch):
        cfg["NT"], cfg["STAGES"] = 2, ring  # the one-tile ring is the 256-row tile's (ONE_TILE_RING)
        launch = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"], arch=arch)
    if "STAGES" not in tuned and few_tiles_decode(problem, launch):
        deeper = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], FEW_TILES_STAGES, arch=arch)
        if deeper.smem_bytes + 1024 <= SMEM_PER_SM:  # the deeper ring fits an SM (every decode tile's does)
            launch = deeper
    return launch


def choose_indexed_wgmma_streamk(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    """Mid-batch blocks (is_mid_batch_tile) take the 512-row tile with 4 consumer warpgroups
    (wgmma_shape), the rest wgmma_streamk_shape's 2-warpgroup tile."""
    if is_mid_batch_tile(problem.block_m, problem.n, problem.k, "indexed"):
        shape = wgmma_shape(problem.n, problem.block_m)
    else:
        shape = wgmma_streamk_shape(problem.n, problem.block_m)
    cfg = apply_tuning(shape, problem.k, tuning)
    return indexed_wgmma_streamk(cfg["WM"], cfg["BN"], cfg["STAGES"], arch=arch, cwg=cfg["CWG"])


def choose_indexed_wgmma(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    """The wgmma tile on the tile loop, 2 or 4 consumer warpgroups (the 4-warpgroup tiles since
    v34: TP8 T=2048 gate_up, 512 x 56, -2.5 % and -2.8 % skewed against one CTA per tile)."""
    cfg = apply_tuning(wgmma_shape(problem.n, problem.block_m), problem.k, tuning)
    return indexed_wgmma(cfg["WM"], cfg["BN"], cfg["STAGES"], arch=arch, cwg=cfg["CWG"], loop=True)


def indexed_family() -> str:
    return env.get(env.INDEXED_KERNEL, "auto")


def indexed_tuning() -> str:
    return env.get(env.TUNING)


def auto_tile_family(rows: int, k: int) -> str:
    """The ``auto`` kernel for tiles of ``rows`` (an indexed routing block, a grouped tile) on K,
    shared by both families: the mma tile on the stream-K schedule up to 32 rows (decode, mid
    batch; the wgmma tile there measured 10-50 % slower, v10); above (the 56+-row prefill blocks)
    the wgmma tile, whole tiles on deep K (the tile loop) and the stream-K schedule on short K. The
    one-CTA mma tile is reached only by CHORD_W4A16_INDEXED_KERNEL=mma."""
    if rows <= STREAMK_MAX_BLOCK_M:
        return "mma_sk"
    return "wgmma" if k >= WGMMA_MIN_K else "wgmma_sk"


def resolve_indexed_family(problem: IndexedProblem, family: str = "auto") -> str:
    if family not in INDEXED_FAMILIES:
        raise ValueError(f"CHORD_W4A16_INDEXED_KERNEL={family!r}; expected one of {', '.join(INDEXED_FAMILIES)}")
    if family != "auto":
        return family
    if is_mid_batch_tile(problem.block_m, problem.n, problem.k, "indexed"):
        # the 512-row tile (MID_BATCH_TILES): on the stream-K schedule, or on the tile loop
        return "wgmma_sk" if problem.block_m <= MID_BATCH_STREAMK_MAX_ROWS else "wgmma"
    return auto_tile_family(problem.block_m, problem.k)


def is_mid_batch_tile(rows: int, n: int, k: int, family: str) -> bool:
    """Mid-batch tiles on deep K and wide enough N (MID_BATCH_TILES[family]): the 512-row wgmma
    tile with 4 consumer warpgroups (wgmma_shape): whole tiles on the tile loop, or for indexed
    blocks up to MID_BATCH_STREAMK_MAX_ROWS the stream-K schedule."""
    lo, hi, min_n = MID_BATCH_TILES[family]
    return lo <= rows <= hi and k >= WGMMA_MIN_K and n >= min_n


def mid_batch_family(rows: int, n: int, k: int) -> str | None:
    """The grouped family's mid batch: "wgmma" (the tile loop) for is_mid_batch_tile, else
    None (auto_tile_family decides)."""
    return "wgmma" if is_mid_batch_tile(rows, n, k, "grouped") else None


def select_indexed(problem: IndexedProblem, arch: str = DEFAULT_ARCH, family: str = "auto",
                   tuning: str = "") -> Launch:
    launch = pick_indexed(problem, arch, family, tuning)
    report_choice(problem, launch.spec)
    return launch


def pick_indexed(problem: IndexedProblem, arch: str = DEFAULT_ARCH, family: str = "auto",
                 tuning: str = "") -> Launch:
    """select_indexed without CHORD_PRINT_CONFIGS's report (the precompile list probes hundreds
    of problems)."""
    family = resolve_indexed_family(problem, family)
    if family == "simple":
        launch = indexed_simple(arch)
    elif family == "wgmma":
        launch = choose_indexed_wgmma(problem, arch, tuning)
    elif family == "mma_sk":
        launch = choose_indexed_mma_streamk(problem, arch, tuning)
    elif family == "wgmma_sk":
        launch = choose_indexed_wgmma_streamk(problem, arch, tuning)
    else:
        launch = choose_indexed_mma(problem, arch, tuning)
    return launch


def indexed_profile_launches(n: int, k: int, arch: str = DEFAULT_ARCH) -> list[Launch]:
    """Every launch the heuristic can pick for a projection shape (every routing block size)."""
    seen: dict[str, Launch] = {}
    # The blocks the rule asks for, plus CHORD_W4A16_BLOCK_M sizes between them (the mma tile).
    # The decode rules (one_wave_decode, few_tiles_decode) depend on the call's block count only:
    # with an expert a route every count up to the most resident CTAs (past it neither holds)
    # reaches every branch; 0 is a call of unknown routes.
    for block_m in sorted(set(INDEXED_BLOCK_M_CHOICES) | {24, 40, 48, 56}):
        for routes in range(MAX_CTAS_PER_SM * H200_SMS + 1):
            launch = pick_indexed(IndexedProblem(n, k, max(routes, 1), 1, block_m, routes), arch)
            seen.setdefault(launch.spec.symbol, launch)
    return list(seen.values())


def indexed_reachable_launches(arch: str = DEFAULT_ARCH) -> list[Launch]:
    """Every indexed launch the dispatch can pick for any shape (CI compiles all of them):
    the heuristic's branches are N below/above 2048 (and 256 for the wgmma tile) and K a
    multiple of 256 or only of 64; the mma tile at 64-row blocks and the wgmma tile at 16/32-row
    blocks too (the family override)."""
    seen: dict[str, Launch] = {indexed_simple(arch).spec.symbol: indexed_simple(arch)}
    for n in (128, 512, 4096):
        for k in (256, 320, 2048):
            for launch in indexed_profile_launches(n, k, arch):
                seen.setdefault(launch.spec.symbol, launch)
            mma64 = choose_indexed_mma(IndexedProblem(n, k, 1, 1, 64), arch)
            seen.setdefault(mma64.spec.symbol, mma64)
            for block_m in (16, 32):  # the wgmma tile's BN 16/32 (family override)
                small = choose_indexed_wgmma(IndexedProblem(n, k, 1, 1, block_m), arch)
                seen.setdefault(small.spec.symbol, small)
            for block_m in INDEXED_BLOCK_M_CHOICES:  # the wgmma tile on the stream-K schedule (family override)
                sk = choose_indexed_wgmma_streamk(IndexedProblem(n, k, 1, 1, block_m), arch)
                seen.setdefault(sk.spec.symbol, sk)
    return list(seen.values())


# Grouped family: rows already grouped by expert. Routing names -> csrc Routing enum values.
GROUPED_ROUTINGS = {"contiguous": 1, "contiguous_offsets": 2, "masked": 3}


@dataclass(frozen=True)
class GroupedProblem:
    routing: str  # a key of GROUPED_ROUTINGS
    n: int
    k: int
    num_experts: int
    rows_per_expert: int  # expected rows per expert: expected_m, or rows / experts (a hint)
    block_k: int  # the packed weight's BLOCK_K (64 contiguous, 128 masked)


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


def grouped_wgmma(routing: str, wm: int, bn: int, stages: int, block_k: int, arch: str = DEFAULT_ARCH,
                  cwg: int = 2, split_k: int = 1, loop: bool = False) -> Launch:
    """Grouped routing on the wgmma tile (the indexed family's tile, same launch shape); the
    4-warpgroup tile one CTA a tile (optionally split over K by a cluster of ``split_k`` CTAs)
    or, with ``loop``, on the tile loop. Every tile loop loads its activation rows by tensor map,
    one box a stage (the rows of a grouped tile are contiguous in a; WgmmaTiles TMA_ACTS): its
    producer's 16-byte cp.async copies were ~400 M of 1963 M instructions at EP8 T=8192 gate_up;
    the boxes measured -0.9 to -5.2 % at prefill (grouped-kernels.md v35)."""
    if split_k != 1 and (cwg != 4 or loop or split_k not in SPLIT_K_CHOICES):
        raise ValueError(f"split_k={split_k}: the K split is {SPLIT_K_CHOICES} CTAs of the one-CTA 4-warpgroup tile")
    targs = (("ROUTING", GROUPED_ROUTINGS[routing]), ("WM", wm), ("BN", bn), ("STAGES", stages),
             ("BLOCK_K", block_k), ("CWG", cwg))
    acts_by_map = cwg == 2 or loop  # the tile loop
    if acts_by_map:  # template arguments are positional: SPLIT_K and LOOP come before TMA_ACTS
        targs += (("SPLIT_K", 1), ("LOOP", 1), ("TMA_ACTS", 1))
    elif split_k > 1 or loop_targs(loop, cwg):  # SPLIT_K comes before LOOP
        targs += (("SPLIT_K", split_k),) + loop_targs(loop, cwg)
    launch = wgmma_launch("grouped_wgmma", "grouped/w4a16_grouped_mma.cuh", "chord::GroupedWgmma", targs, wm, bn,
                          stages, arch, cwg, split_k, loop=loop)
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


def widen_decode(problem: GroupedProblem, launch: Launch, arch: str = DEFAULT_ARCH, sms: int = H200_SMS) -> Launch:
    """``launch``, or its wide decode tile (grouped_wide_decode) where the call's expected tiles
    of it (the experts' Poisson rows) fill WIDE_DECODE_TILES_PER_CTA per resident CTA, or one
    wave of whole tiles (MMA_WHOLE_FILL to 1 tile a resident CTA)."""
    if launch.spec.family != "grouped_mma_sk" or launch.spec.config["TT"] != 1 or launch.spec.config["NT"] != 2:
        return launch
    wide = grouped_wide_decode(problem.routing, problem.n, problem.k, problem.block_k, arch)
    if wide is None or problem.rows_per_expert < WIDE_DECODE_MIN_ROWS:
        return launch
    tiles = mean_row_tiles(problem.rows_per_expert, problem.num_experts, wide.rows_per_cta) * \
        -(-problem.n // wide.cols_per_cta)
    ctas = resident_ctas(wide, sms)
    return wide if tiles >= WIDE_DECODE_TILES_PER_CTA * ctas or MMA_WHOLE_FILL * ctas <= tiles <= ctas else launch


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
                             loop=split_k == 1)
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
                   split_override: str = "auto") -> Launch:
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
    wide = widen_decode(problem, launch, arch, sms)
    if wide is not launch:
        why += (f"; the wide decode tile ({WIDE_DECODE_TILES_PER_CTA}+ expected tiles a resident CTA, "
                f"or {MMA_WHOLE_FILL}-1: one wave of whole tiles)")
    if wide.pick:
        why += f"; paired with {wide.pick[0].spec.describe()} (the device picks)"
    report_choice(problem, wide.spec, why)
    return wide


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
    8-row tiles the wide decode tile (widen_decode)."""
    launch = grouped_launch(routing, n, k, rows, block_k, arch)
    splits = split_k_choices(k, block_k)[1:] if splits_k(launch) else ()
    wide = grouped_wide_decode(routing, n, k, block_k, arch) if rows == 8 else None
    return [launch] + [grouped_launch(routing, n, k, rows, block_k, arch, s) for s in splits] + ([wide] if wide else [])


def grouped_reachable_launches(arch: str = DEFAULT_ARCH) -> list[Launch]:
    """Every grouped launch the dispatch can pick (CI compiles all of them)."""
    seen: dict[str, Launch] = {}
    for routing in GROUPED_ROUTINGS:
        for block_k in (64, 128):
            for n in (128, 512, 4096):
                for k in (256, 320, 7168):
                    if k % block_k:
                        continue
                    for rows in grouped_tile_row_choices(routing):
                        for launch in grouped_launch_variants(routing, n, k, rows, block_k, arch):
                            seen.setdefault(launch.spec.symbol, launch)
    return list(seen.values())


_reported: set = set()


def report_choice(problem, spec: KernelSpec, why: str = "") -> None:
    """CHORD_PRINT_CONFIGS=1: the chosen kernel per problem, once, to stderr (with ``why``, the
    alternatives the dispatch weighed, where it weighs any)."""
    if env.get(env.PRINT_CONFIGS).lower() in ("", "0", "false", "no", "off"):
        return
    if (problem, spec) not in _reported:
        _reported.add((problem, spec))
        print(f"[chord] {problem} -> {spec.describe()}" + (f" ({why})" if why else ""), file=sys.stderr)
