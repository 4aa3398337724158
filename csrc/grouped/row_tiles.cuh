// The grouped family's rows (the offsets and masked forms: where an expert's rows sit, the y-th
// tile of kTok rows, the count of tiles) and its row tiles for the stream-K schedule and the tile
// loop (GroupedRowTiles), apart from the kernels (grouped/w4a16_grouped_mma.cuh) so that
// tests/host_emu/grouped_tiles.cpp runs this integer logic on the CPU.
#pragma once

#include <stdint.h>

#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"
#include "common/tail_split.cuh"

namespace chord {

// Where an expert's rows sit: [first, first + count) of a and out (offsets and masked forms).
template <int ROUTING>
__device__ __forceinline__ void expert_rows(const MoeParams& p, int e, int64_t& first, int64_t& count) {
  if (ROUTING == kMasked) {
    first = (int64_t)e * p.max_m;
    count = max(min(__ldg(p.masked_m + e), p.max_m), 0);
  } else {
    first = __ldg(p.expert_offsets + e);
    count = max(__ldg(p.expert_offsets + e + 1) - first, (int64_t)0);
  }
}

// The y-th tile of kTok rows in expert order (each expert's rows cut into ceil(count / kTok)
// tiles), for the offsets and masked forms. Warp-collective: all 32 lanes call it with the same
// y and get the same answer; y past the last tile finds nothing. The scan takes 32 experts a step.
template <int ROUTING, int kTok>
__device__ Located find_tile_in_warp(const MoeParams& p, int y) {
  const int lane = threadIdx.x % 32;
  int base = 0;
  for (int e0 = 0; e0 < p.num_experts; e0 += 32) {
    const int e = e0 + lane;
    int64_t first = 0, count = 0;
    if (e < p.num_experts) expert_rows<ROUTING>(p, e, first, count);
    const int tiles = (int)((count + kTok - 1) / kTok);
    int incl = tiles;  // inclusive scan of tile counts over the lanes
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    const int excl = base + incl - tiles;
    const unsigned ballot = __ballot_sync(0xffffffffu, tiles > 0 && y >= excl && y < excl + tiles);
    if (ballot) {
      const int owner = __ffs(ballot) - 1;
      const int t = y - __shfl_sync(0xffffffffu, excl, owner);
      const int64_t start = __shfl_sync(0xffffffffu, first, owner) + (int64_t)t * kTok;
      const int64_t left = __shfl_sync(0xffffffffu, count, owner) - (int64_t)t * kTok;
      return {e0 + owner, (int)start, left < kTok ? (int)left : kTok};
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
  return {-1, 0, 0};
}

// Tiles of `tok` rows over all experts (offsets and masked forms). Warp-collective.
template <int ROUTING>
__device__ int count_tiles_in_warp(const MoeParams& p, int tok) {
  int total = 0;
  for (int e = threadIdx.x % 32; e < p.num_experts; e += 32) {
    int64_t first, count;
    expert_rows<ROUTING>(p, e, first, count);
    total += (int)((count + tok - 1) / tok);
  }
#pragma unroll
  for (int d = 16; d > 0; d /= 2) total += __shfl_xor_sync(0xffffffffu, total, d);
  return total;
}

// The routing's row tiles for the stream-K schedule (common/w4a16_mma_streamk.cuh); a row is the
// same row of a and out. DeepGEMM form: tile y is rows [y*kTok, (y+1)*kTok), of the expert of its
// first row (segments are aligned to the tile; rows of other experts, -1 padding, skipped).
template <int ROUTING>
struct GroupedRowTiles {
  template <int kTok>
  struct Of {
    static constexpr bool kCountByWarpScan = ROUTING != kContiguousRows;  // count_tiles_in_warp
    // The mma tile's L2 evict-first weight loads (MoeParams::evict_first_tiles), but not for the
    // DeepGEMM form: its 128-row aligned segments are prefill, and its NT 4 ring at 3 CTAs an SM
    // has no register to spare for the second copy of the loads.
    static constexpr bool kEvictFirstWeights = ROUTING != kContiguousRows;
    // The mma stream-K tile reads MoeParams::pick_rows (the masked form's narrow pair,
    // dispatch.pair_narrow_mid_batch); no other form's mma tile is ever paired.
    static constexpr bool kPairedMma = ROUTING == kMasked;
    // The tile loop's split tail on the 4-warpgroup tiles: the default pieces, not the indexed
    // family's 8-stage ones (common/tail_split.cuh says what each measured).
    static constexpr int kTailMinPieceStagesCwg4 = TailSplit::kMinPieceStages;
    __device__ static int count(const MoeParams& p) {
      if (ROUTING == kContiguousRows) return (p.num_routes + kTok - 1) / kTok;
      return count_tiles_in_warp<ROUTING>(p, kTok);
    }
    // The tile loop's pair (MoeParams::pick_rows; the host pairs only the offsets form's
    // tall tile): `tiles` is count(p). Warp-collective.
    __device__ static bool picked(const MoeParams& p, int tiles) {
      return p.pick_rows == 0 || chord::picked(p, tiles, count_tiles_in_warp<ROUTING>(p, p.pick_rows));
    }
    __device__ static Located locate(const MoeParams& p, int row_tile) {
      if (ROUTING == kContiguousRows) {
        const int first = row_tile * kTok;
        const int expert = __ldg(p.m_indices + first);
        return {expert >= 0 && expert < p.num_experts ? expert : -1, first, min(kTok, p.num_routes - first)};
      }
      const Located at = find_tile_in_warp<ROUTING, kTok>(p, row_tile);
      return {at.expert >= 0 && at.expert < p.num_experts ? at.expert : -1, at.first, at.rows};
    }
    __device__ static int32_t route(const MoeParams& p, const Located& at, int row) {
      if (row >= at.rows) return -1;
      // DeepGEMM form: rows of another expert (padding, -1) inside the tile are skipped.
      if (ROUTING == kContiguousRows && __ldg(p.m_indices + at.first + row) != at.expert) return -1;
      return at.first + row;
    }
    __device__ static int64_t a_row(const MoeParams&, int32_t route) { return route; }
  };
};

}  // namespace chord
