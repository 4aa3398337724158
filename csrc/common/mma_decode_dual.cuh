// Two stream-K mma tiles of one family in one kernel, of which each call runs one: every CTA
// counts the call's row tiles in both (Short::Rows::count, Tall::Rows::count) and runs the tile
// whose count costs less (MoeParams::pick_cost: a short row tile's, pick_other_cost: a tall one's;
// the short tile wins a tie). Both counts are uniform over the grid, so every CTA takes the same
// side. Shared memory and the stream-K partials are the larger tile's (the host sizes them:
// chord_kernels.dispatch.decode_dual_launch), and one occupancy serves both. Why one kernel and
// not two launches of which one exits: the launch that exits cost 3.5-5 µs a projection
// (grouped-kernels.md v57, v58).
#pragma once

#include "common/moe_params.cuh"

namespace chord {

template <class Short, class Tall>
struct MmaDecodeDual {
  __device__ static void run(const MoeParams& p) {
    const int short_tiles = Short::Rows::count(p), tall_tiles = Tall::Rows::count(p);
    if (picked(p, short_tiles, tall_tiles)) {
      Short::run_tiles(p, short_tiles);
    } else {
      Tall::run_tiles(p, tall_tiles);
    }
  }
};

}  // namespace chord
