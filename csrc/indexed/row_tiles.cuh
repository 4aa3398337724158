// The indexed family's rows under vLLM moe_align_block_size routing, apart from the kernels so
// that tests/host_emu/ runs them on the CPU. IndexedRoutes: the rows of a routing block's tile,
// shared by the row tiles here (IndexedRowTiles) and the pair tiles (IndexedPairedRowTiles,
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

// The routing's row tiles for the stream-K schedule (common/streamk_schedule.cuh): every block
// before num_tokens_padded, cut into ctas_per_block tiles of kTok rows. Route = sorted id (the
// out row), activation row = route / top_k.
template <int kTok>
struct IndexedRowTiles : IndexedRoutes {  // route, a_row
  static constexpr bool kCountByWarpScan = false;  // from the parameters (WgmmaStreamK::run)
  static constexpr bool kEvictFirstWeights = true;  // MoeParams::evict_first_tiles
  static constexpr bool kPairedMma = false;         // MoeParams::pick_rows: never paired
  static constexpr int kTailMinPieceStagesCwg4 = 8;  // the tile loop's split tail (common/tail_split.cuh)
  __device__ static int count(const MoeParams& p) {
    const int64_t padded = max(__ldg(p.num_tokens_padded), 0);
    return (int)min((int64_t)p.num_blocks, (padded + p.block_m - 1) / p.block_m) * p.ctas_per_block;
  }
  __device__ static bool picked(const MoeParams&, int) { return true; }  // indexed launches are never paired
  __device__ static Located locate(const MoeParams& p, int row_tile) {
    const int block = row_tile / p.ctas_per_block;
    const int first = block * p.block_m + (row_tile % p.ctas_per_block) * kTok;
    const int rows = min(min(kTok, (block + 1) * p.block_m - first), p.sorted_len - first);
    const int expert = __ldg(p.expert_ids + block);
    return {expert >= 0 && expert < p.num_experts ? expert : -1, first, rows};  // never read outside the weights
  }
};

}  // namespace chord
