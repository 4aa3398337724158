// How many K iterations each CTA of a stream-K launch runs (common/streamk_schedule.cuh).
// Host and device code: tests/test_wave_model.py compiles it on the host against its Python
// mirror, chord_kernels.wave_model.streamk_run.
#pragma once

namespace chord {

// A run may grow by at most this many iterations to end on a tile boundary.
//
// Why: a tile cut by a run boundary is summed through the workspace (its contributors' FP32
// partials, a count on its lock, the last one's sum), about the time of a few short stages. Equal
// runs of ceil(iterations / grid) cut a tile at every boundary that is not a multiple of the
// tile's stages; on short K (TP8 down, K=256: a tile is 2 stages) an odd run cuts every other
// tile. One iteration more makes every run whole tiles, and no tile is cut. Measured (ncu, base
// clock, ABBA, docs/design/indexed-kernels.md v40): TP8 down T=2 (448 tiles of 2 stages on 396
// CTAs, runs of 3 -> 4) -11 %, T=4 -6.5 %, T=6 -5.7 %, T=20 -2.8 %, T=512 -2.5 %; EP8 and the
// grouped decode points (8-28 stages a tile) within noise. Deep K is where stream-K's cuts pay
// (a tile's stages shared by several CTAs; whole tiles would leave most of the grid idle), and
// the one-iteration bound rarely takes those.
constexpr int kWholeTileRunSlack = 1;

// Iterations per CTA for `tiles` tiles of `stages` iterations on `grid` CTAs: equal runs, or
// whole tiles a run where that costs at most kWholeTileRunSlack iterations more.
__host__ __device__ __forceinline__ int streamk_run(int tiles, int stages, int grid) {
  const int equal = (tiles * stages + grid - 1) / grid;
  const int whole = (tiles + grid - 1) / grid * stages;
  return whole - equal <= kWholeTileRunSlack ? whole : equal;
}

}  // namespace chord
