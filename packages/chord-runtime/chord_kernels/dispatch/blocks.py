"""Routing block sizes: the block Chord asks the framework for (moe_align_block_size's
block_size) from the rows an expert is expected to get, by a small cost model of padding
against a tile's fixed cost. The grouped family cuts its tiles by the same rules."""

from __future__ import annotations

import functools
import math

from .. import env
from ..wave_model import expected_tiles, mean_row_tiles
from .launch import H200_SMS, wgmma_weight_rows
from .shapes import is_mid_batch_tile, wgmma_shape

# Routing blocks Chord asks vLLM for: up to 32 rows per expert the smallest of 8/16/32 holding
# them; above, the prefill block (56, 64, 96 or 128: the wgmma tile's N) of least expected cost
# (prefill_block_m).
DECODE_BLOCK_M_CHOICES = (8, 16, 32)
PREFILL_BLOCK_M_CHOICES = (56, 64, 96, 128)
INDEXED_BLOCK_M_CHOICES = DECODE_BLOCK_M_CHOICES + PREFILL_BLOCK_M_CHOICES


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
