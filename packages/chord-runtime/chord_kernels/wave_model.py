"""How many tiles a launch runs when each expert's rows are random, and how many waves they take.

The host knows an expected row count per expert (vLLM's ``expected_m``, rows / experts), never
the counts themselves (they stay on the device). Under uniform routing an expert's rows are
close to Poisson around that mean, so an expert's tiles of ``block`` rows, ceil(n / block), are a
small discrete distribution, and a launch's row tiles are the sum over its experts.

Waves matter where tiles are few: a schedule of whole tiles (one CTA per tile, or a tile loop on
the resident CTAs) ends when its fullest SM does, after ceil(tiles / slots) tiles. Under expert
parallelism a GPU holds 12-48 experts, so one expert past its tile's rows adds N / cols tiles and
can open a wave of its own (grouped-kernels.md v16: masked EP16 T=128 gate_up, 400 tiles of 56
rows on 132 SMs, the SMs that ran a fourth tile busy 4/3 as long as the rest).
"""

from __future__ import annotations

import functools
import math

# Probabilities below this are dropped from the distributions' tails (the wave counts they could
# change weigh less than this in any expectation).
TAIL = 1e-12


@functools.cache
def tiles_per_expert_pmf(rows_per_expert: float, block: int) -> tuple[float, ...]:
    """P(ceil(n / block) = y) for y = 0, 1, ... with n ~ Poisson(rows_per_expert)."""
    if rows_per_expert <= 0:
        return (1.0,)
    lam = float(rows_per_expert)
    # The Poisson pmf by its recurrence from the mode (exp(-lam) alone underflows past ~700 rows).
    mode = int(lam)
    log_p_mode = mode * math.log(lam) - lam - math.lgamma(mode + 1)
    span = int(12 * math.sqrt(lam) + 20)
    lo, hi = max(0, mode - span), mode + span
    pmf = [0.0] * (hi // block + 2)
    p = math.exp(log_p_mode)
    for i in range(mode, hi + 1):  # upwards from the mode
        if i > mode:
            p *= lam / i
        pmf[-(-i // block)] += p
    p = math.exp(log_p_mode)
    for i in range(mode - 1, lo - 1, -1):  # downwards
        p *= (i + 1) / lam
        pmf[-(-i // block)] += p
    while len(pmf) > 1 and pmf[-1] < TAIL:
        pmf.pop()
    total = sum(pmf)
    return tuple(x / total for x in pmf)


def expected_tiles(rows_per_expert: float, block: int) -> float:
    """E[ceil(n / block)] for n ~ Poisson(rows_per_expert): one expert's expected tiles."""
    return sum(y * p for y, p in enumerate(tiles_per_expert_pmf(rows_per_expert, block)))


def _convolve(a: tuple[int, list[float]], b: tuple[int, list[float]]) -> tuple[int, list[float]]:
    """Sum of two independent counts, each (offset, pmf from offset); tails below TAIL trimmed."""
    (oa, pa), (ob, pb) = a, b
    out = [0.0] * (len(pa) + len(pb) - 1)
    for i, x in enumerate(pa):
        if x:
            for j, y in enumerate(pb):
                out[i + j] += x * y
    start = next(i for i, x in enumerate(out) if x >= TAIL)
    end = max(i for i, x in enumerate(out) if x >= TAIL) + 1
    return oa + ob + start, out[start:end]


@functools.cache
def row_tiles_pmf(rows_per_expert: float, experts: int, block: int) -> tuple[int, tuple[float, ...]]:
    """The distribution of a launch's row tiles over ``experts`` independent experts: (offset,
    pmf) with pmf[i] = P(tiles = offset + i)."""
    one = (0, list(tiles_per_expert_pmf(rows_per_expert, block)))
    total: tuple[int, list[float]] = (0, [1.0])
    power, left = one, max(experts, 0)
    while left:  # binary powers: log2(experts) convolutions
        if left & 1:
            total = _convolve(total, power)
        left >>= 1
        if left:
            power = _convolve(power, power)
    return total[0], tuple(total[1])


def expected_waves(rows_per_expert: float, experts: int, block: int, tiles_per_row_tile: int,
                   slots: int) -> float:
    """E[ceil(row tiles x tiles_per_row_tile / slots)]: the waves of whole tiles a launch runs
    (tiles_per_row_tile: column tiles x CTAs a tile; slots: CTAs resident at once)."""
    offset, pmf = row_tiles_pmf(rows_per_expert, experts, block)
    return sum(p * -(-(offset + i) * tiles_per_row_tile // slots) for i, p in enumerate(pmf))


def mean_row_tiles(rows_per_expert: float, experts: int, block: int) -> float:
    """E[row tiles] of a launch (a balanced schedule's work: stream-K)."""
    return experts * expected_tiles(rows_per_expert, block)


# The tile loop's split tail (csrc/common/tail_split.cuh, mirrored; grouped-kernels.md v19): when
# the last wave of whole tiles fills at most half the grid, its tiles are cut along K into as many
# pieces as the grid has CTAs for, each at least TAIL_MIN_PIECE_STAGES long, at most
# TAIL_MAX_SPLIT a tile.
TAIL_MIN_PIECE_STAGES = 16
TAIL_MAX_SPLIT = 4


# The indexed family's 4-warpgroup tiles take shorter pieces (IndexedRowTiles::kTailMinPieceStagesCwg4,
# read by WgmmaTiles::kTailMinPieceStages); the grouped family's keep TAIL_MIN_PIECE_STAGES
# (csrc/common/tail_split.cuh says what each measured).
TAIL_MIN_PIECE_STAGES_INDEXED_CWG4 = 8


def tail_split(tiles: int, grid: int, stages: int, stage_step: int = 1,
               min_piece_stages: int = TAIL_MIN_PIECE_STAGES) -> tuple[int, int]:
    """(whole tiles, pieces a tail tile) of a tile loop of ``tiles`` tiles on ``grid`` CTAs, each
    ``stages`` K stages (taken ``stage_step`` at a time), pieces of at least ``min_piece_stages``:
    TailSplit's rule, which the kernel applies on the device to the routing's tile count."""
    rem = tiles % grid
    split = max(1, min(grid // rem if rem else 1, TAIL_MAX_SPLIT, stages // min_piece_stages))
    return (tiles - rem if split > 1 else tiles), split


def tail_pieces(tiles: int, grid: int, stages: int, stage_step: int = 1,
                min_piece_stages: int = TAIL_MIN_PIECE_STAGES) -> list[tuple[int, int, int, int]]:
    """Every unit the CTAs claim, as TailSplit::unit returns it: (tile, first stage, end stage,
    piece index or -1 for a whole tile)."""
    whole, split = tail_split(tiles, grid, stages, stage_step, min_piece_stages)
    steps = stages // stage_step
    units = [(t, 0, steps * stage_step, -1) for t in range(whole)]
    for v in range((tiles - whole) * split):
        t, q = divmod(v, split)
        units.append((whole + t, q * steps // split * stage_step, (q + 1) * steps // split * stage_step, v))
    return units


# A stream-K run grows by at most this many iterations to end on a tile boundary (the mirror of
# csrc/common/streamk_run.cuh, which says why: on short K an odd run cuts every other tile, and
# a cut tile's fix-up costs more than the iteration).
WHOLE_TILE_RUN_SLACK = 1


def streamk_run(tiles: int, stages: int, grid: int) -> int:
    """Iterations a CTA of a stream-K launch runs for ``tiles`` tiles of ``stages`` iterations on
    ``grid`` CTAs: equal runs, or whole tiles a run where that costs at most WHOLE_TILE_RUN_SLACK
    more (chord::streamk_run, which the kernels apply on the device to the routing's tiles)."""
    equal = -(-tiles * stages // grid)
    whole = -(-tiles // grid) * stages
    return whole if whole - equal <= WHOLE_TILE_RUN_SLACK else equal

