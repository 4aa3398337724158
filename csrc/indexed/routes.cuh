// The rows of a routing block's tile under vLLM moe_align_block_size routing, shared by the indexed
// row tiles (IndexedRowTiles in indexed/w4a16_indexed_mma.cuh, IndexedPairedRowTiles in
// indexed/paired_blocks.cuh): tile row `row` is sorted_ids[first + row] (the route, which is the
// out row; entries >= num_routes are padding), and its activation row is route / top_k.
#pragma once

#include <stdint.h>

#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"

namespace chord {

struct IndexedRoutes {
  __device__ static int32_t route(const MoeParams& p, const Located& at, int row) {
    const int32_t r = row < at.rows ? __ldg(p.sorted_ids + at.first + row) : -1;
    return r >= 0 && r < p.num_routes ? r : -1;
  }
  __device__ static int64_t a_row(const MoeParams& p, int32_t route) { return route / p.top_k; }
};

}  // namespace chord
