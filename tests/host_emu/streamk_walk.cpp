// The stream-K schedule (csrc/common/streamk_schedule.cuh) on the CPU: every CTA's StreamKWork
// and its walks as the mma tile's loader and consumer (common/w4a16_mma_streamk.cuh) and the
// wgmma tile's consumer (common/w4a16_wgmma_streamk.cuh) step them. One case a line on stdin:
//   row_tiles col_tiles stages k grid fill_eighths max_waves
// Out, a line a CTA: "cta iterations" then its tiles as tile:s0:s1:owns:c0:c1:slot (the fix-up's
// contributors c0..c1 and workspace slot, StreamKFixup's, where the CTA does not own the tile).
// Each such part writes (its stages, tile, 1, cta) as its partial through StreamKFixup::partial;
// once every CTA has run, each split tile's finisher sum (StreamKFixup::store_sum) is a line
// "S tile stages tile*parts parts sum-of-ctas" where the slots are right. Then "." ends the case.
// A walk that disagrees with another or with itself prints "E what" (the test fails on it).
#include "cuda_on_host.h"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>

#include "common/streamk_schedule.cuh"

namespace {

constexpr int kRing = 3;  // the ring's slots do not change the walk; any count serves
using Walk = chord::StreamKWalk<kRing>;
using Fixup = chord::StreamKFixup<1, 4>;  // one thread, one float4 of partials a CTA slot

// On a line of its own (it may come in the middle of the CTA's line).
void error(int cta, const char* what) { std::printf("\nE cta %d: %s\n", cta, what); }

void run_cta(int cta, const chord::StreamKWork& w, const chord::MoeParams& p, std::vector<int>& split_firsts) {
  const int iterations = w.iterations();
  std::printf("%d %d", cta, iterations);
  if (iterations == 0) return void(std::printf("\n"));  // the kernels return before any walk

  // The loader (the mma tile's): its row tile's indices come from RowTilesAhead, read one row
  // tile ahead; they must be the row tile it loads at every iteration, and every row tile read
  // ahead must be one it reaches (a row tile past the run may be past the routing's blocks).
  Walk ld(w);
  std::vector<int> fetched, visited;
  auto fetch = [&](int row_tile) { return fetched.push_back(row_tile), row_tile; };
  chord::RowTilesAhead<int> rows(ld, w, fetch);
  std::vector<int> loaded;  // tile * stages + stage, a load
  for (int left = iterations; left > 0;) {
    if (rows.cur != ld.row_tile) error(cta, "loader's row tile is not the one read ahead");
    if (ld.row_tile * w.col_tiles + ld.col != ld.tile) error(cta, "loader's row tile and column are not its tile's");
    visited.push_back(ld.row_tile);
    loaded.push_back(ld.tile * w.stages + ld.s);
    ld.step();
    if (--left > 0 && ld.segment_done()) {
      ld.next_segment(w);
      rows.on_segment(ld, w, fetch);
    }
  }
  for (int f : fetched)
    if (std::find(visited.begin(), visited.end(), f) == visited.end())
      error(cta, "a row tile read ahead is never loaded");

  // The mma tile's consumer: `iterations` steps, a finish at each segment end.
  Walk at(w);
  std::vector<int> consumed;
  std::vector<int> finished_mma;
  for (int it = 0; it < iterations; ++it) {
    consumed.push_back(at.tile * w.stages + at.s);
    at.step();
    if (at.segment_done()) {
      finished_mma.push_back(at.first_iteration(w));
      if (it + 1 < iterations) at.next_segment(w);
    }
  }
  if (consumed != loaded) error(cta, "the mma consumer's iterations are not the loader's");

  // The wgmma tile's consumer: no count, the walk alone says when the run ends.
  Walk wg(w);
  std::vector<int> finished_wgmma;
  int steps = 0, s0 = wg.s;  // s0: the segment's first stage
  for (;;) {
    if (++steps > iterations) return void(error(cta, "the wgmma consumer runs past the CTA's iterations"));
    wg.step();
    if (wg.segment_done()) {
      const int first = wg.first_iteration(w);
      finished_wgmma.push_back(first);
      const bool owns = w.owns(first);  // the kernels ask for the fix-up's CTAs only where not
      const int c0 = owns ? -1 : Fixup::first_cta(w, first), c1 = owns ? -1 : Fixup::last_cta(w, first);
      const int slot = owns ? -1 : Fixup::slot(w, first);
      std::printf(" %d:%d:%d:%d:%d:%d:%d", wg.tile, s0, wg.s_end, owns ? 1 : 0, c0, c1, slot);
      if (!owns) {
        __stcg(Fixup::partial(p, cta, slot, 0), make_float4(wg.s_end - s0, wg.tile, 1, cta));
        if (c0 == cta) split_firsts.push_back(first);
      }
      if (!wg.next_segment(w)) break;
      s0 = wg.s;
    }
  }
  if (steps != iterations) error(cta, "the wgmma consumer stops before the CTA's iterations");
  if (finished_wgmma != finished_mma) error(cta, "the two consumers finish different tiles");
  std::printf("\n");
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    int row_tiles, col_tiles, stages, k, grid, fill_eighths, max_waves;
    if (!(in >> row_tiles >> col_tiles >> stages >> k >> grid >> fill_eighths >> max_waves)) return 3;
    std::vector<float> workspace(grid * 2 * 4, -1e9f);  // [CTA][slot][1 thread][4]
    chord::MoeParams p{};
    p.workspace = workspace.data();
    std::vector<int> split_firsts;
    gridDim = {static_cast<unsigned>(grid), 1, 1};
    for (int cta = 0; cta < grid; ++cta) {
      blockIdx = {static_cast<unsigned>(cta), 0, 0};
      run_cta(cta, chord::StreamKWork(row_tiles, col_tiles, stages, k, {fill_eighths, max_waves}), p, split_firsts);
    }
    // The finishers' sums, once every partial is in (store_sum reads only the grid-wide schedule).
    blockIdx = {0, 0, 0};
    const chord::StreamKWork w(row_tiles, col_tiles, stages, k, {fill_eighths, max_waves});
    for (int first : split_firsts)
      Fixup::store_sum<4>(p, w, first, 0, [&](int, float4 v) {
        std::printf("S %d %.0f %.0f %.0f %.0f\n", first / stages, v.x, v.y, v.z, v.w);
      });
    std::printf(".\n");
  }
  return 0;
}
