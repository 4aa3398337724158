// The tile loop's split tail (common/w4a16_wgmma_tiles.cuh; docs/design/grouped-kernels.md v19).
// Host and device code: tests/test_wave_model.py compiles it on the host against its Python
// mirror, chord_kernels.wave_model.tail_split.
#pragma once

namespace chord {

// Whole tiles end a launch after ceil(tiles / grid) tile times; where the tiles are few (grouped
// mid batch: EP32 T=128 runs 192 tiles of 96 x 256 on 132 SMs, 1.45 waves for 2 tile times) the
// last wave runs mostly idle. When its `rem` tiles fill at most half the grid, they are cut
// along K into `split` pieces each, as many as the grid has CTAs for (rem x split <= grid: one
// round of pieces), at least kMinPieceStages stages long (a piece also pays its partial's store
// and, in the last one, the sum: about the time of a few stages) and at most kMaxSplit a tile
// (the finisher reads every piece's partial). The pieces are claimed after the whole tiles like
// tiles and added up through the workspace (SplitPartials): the units the CTAs claim are tiles
// [0, whole) whole, then `split` consecutive units per tail tile (claimed at about the same time
// by different CTAs; no piece waits for another: the last to finish adds them up).
// Measured (H200, v19): EP32 T=128 gate_up 192 tiles -20 %. Two rounds of pieces (rem x split
// up to 2 x grid, e.g. 76 tiles in thirds) did not pay: TP8 T=8192 gate_up +1.3 %.
// The indexed family's 4-warpgroup tiles (512 weight rows: mid batch) take pieces from 8 stages
// (min_piece_stages; IndexedRowTiles::kTailMinPieceStagesCwg4): over K=2048 (32 stages) a last
// wave of 12 tiles (indexed EP8 T=64/128 down: 672 tiles on 132 CTAs) then ends a quarter tile
// after the whole ones, not half (indexed-kernels.md v58, v71; H100: -2.0 / -3.1 % there under
// uniform routing). The grouped family's keep 16: its offsets downs with the same 12-tile wave
// read +3.7 / +5.2 / +3.9 % at 24 columns in quarters and -1.9 / -1.2 / +0.5 % at 32 (three H100
// ncu A/Bs, grouped-kernels.md v64, v65; unexplained). The wide 2-warpgroup tiles keep 16: their
// partials (up to 128 rows x 256) cost what the shorter piece saves (v58: +1.7 to +3.9 %).
struct TailSplit {
  static constexpr int kMinPieceStages = 16, kMaxSplit = 4;
  int whole, split, units;
  int steps, step;  // a tile's K steps (stages, or stage pairs) and the stages of one

  __host__ __device__ TailSplit(int tiles, int grid, int stages, int stage_step,
                                int min_piece_stages = kMinPieceStages)
      : steps(stages / stage_step), step(stage_step) {
    const int rem = tiles % grid;
    int s = rem == 0 ? 1 : grid / rem;
    s = s < kMaxSplit ? s : kMaxSplit;
    s = s < stages / min_piece_stages ? s : stages / min_piece_stages;
    split = s > 1 ? s : 1;
    whole = split > 1 ? tiles - rem : tiles;
    units = whole + (tiles - whole) * split;
  }

  // Unit u: tile `tile`, K stages [s0, s1); `piece` = the unit's index among the split ones (its
  // workspace slot; its tile's lock is piece / split), -1 for a whole tile.
  struct Unit {
    int tile, s0, s1, piece;
  };
  __host__ __device__ __forceinline__ Unit unit(int u) const {
    if (u < whole) return {u, 0, steps * step, -1};
    const int v = u - whole, t = v / split, q = v - t * split;
    return {whole + t, q * steps / split * step, (q + 1) * steps / split * step, v};
  }
};

}  // namespace chord
