// Grouped W4A16 MoE GEMM on tensor cores: rows already grouped by expert (expert-parallel
// serving). Three routings, all read on the device (no host sync, CUDA-graph safe):
//   kContiguousRows    DeepGEMM form: m_indices[row] = expert, -1 on padding rows; each expert's
//                      segment starts on a multiple of the tile (the 128-row alignment, kTok | 128).
//   kContiguousOffsets vLLM form: rows [expert_offsets[e], expert_offsets[e+1]) belong to e, no
//                      alignment; CTA y takes the y-th tile of the per-expert tile sequence.
//   kMasked            rows [e*max_m, e*max_m + min(masked_m[e], max_m)) belong to e; rows past
//                      masked_m are neither read nor written.
// out[row] = a[row] @ dequant(W[expert])^T (same row in and out). Two tiles, as in the indexed
// family: GroupedMma (common/w4a16_mma_tile.cuh, up to 64 rows) and GroupedWgmma
// (common/w4a16_wgmma_tile.cuh, 64 or 128 rows, prefill); BLOCK_K is the packed weight's (64
// contiguous, 128 masked).
#pragma once

#include "common/moe_params.cuh"
#include "common/w4a16_mma_tile.cuh"
#include "common/w4a16_wgmma_tile.cuh"

namespace chord {

template <int ROUTING, class Tile>
struct GroupedRows {
  static constexpr int kTok = Tile::kTok;
  static_assert(ROUTING == kContiguousRows || ROUTING == kContiguousOffsets || ROUTING == kMasked,
                "grouped routing");

  // Expert of the tile and its first row and row count, or expert -1 for a CTA with no work.
  struct Located {
    int expert, first, rows;
  };

  // `scratch` (3 ints of the tile's shared memory, rewritten after a barrier by the caller)
  // carries warp 0's answer to the CTA: no static shared memory, so the dynamic ring keeps the
  // 1024-byte alignment the wgmma tile's swizzle needs.
  __device__ static Located locate(const MoeParams& p, int32_t* scratch) {
    const int y = blockIdx.y;
    if (ROUTING == kContiguousRows) {
      const int first = y * kTok;
      if (first >= p.num_routes) return {-1, 0, 0};
      return {__ldg(p.m_indices + first), first, min(kTok, p.num_routes - first)};
    }
    if (ROUTING == kMasked) {
      const int e = y / p.ctas_per_block;
      const int first = (y % p.ctas_per_block) * kTok;
      if (e >= p.num_experts) return {-1, 0, 0};
      const int count = min(__ldg(p.masked_m + e), p.max_m);
      if (first >= count) return {-1, 0, 0};
      return {e, e * p.max_m + first, min(kTok, count - first)};
    }
    // kContiguousOffsets: warp 0 scans the per-expert tile counts 32 experts at a time.
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      int base = 0, hit = -1, first = 0, rows = 0;
      for (int e0 = 0; e0 < p.num_experts && hit < 0; e0 += 32) {
        const int e = e0 + lane;
        int64_t lo = 0, hi = 0;
        if (e < p.num_experts) lo = __ldg(p.expert_offsets + e), hi = __ldg(p.expert_offsets + e + 1);
        const int tiles = hi > lo ? (int)((hi - lo + kTok - 1) / kTok) : 0;
        int incl = tiles;  // inclusive scan of tile counts over the lanes
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, incl, d);
          if (lane >= d) incl += v;
        }
        const int excl = base + incl - tiles;
        const bool mine = tiles > 0 && y >= excl && y < excl + tiles;
        const unsigned ballot = __ballot_sync(0xffffffffu, mine);
        if (ballot) {
          const int owner = __ffs(ballot) - 1;
          const int t = y - __shfl_sync(0xffffffffu, excl, owner);
          const int64_t start = __shfl_sync(0xffffffffu, lo, owner) + (int64_t)t * kTok;
          const int64_t end = __shfl_sync(0xffffffffu, hi, owner);
          const int64_t left = end - start;
          hit = e0 + owner, first = (int)start, rows = left < kTok ? (int)left : kTok;
        }
        base += __shfl_sync(0xffffffffu, incl, 31);
      }
      if (lane == 0) scratch[0] = hit, scratch[1] = first, scratch[2] = rows;
    }
    __syncthreads();
    const Located at{scratch[0], scratch[1], scratch[2]};
    __syncthreads();  // everyone has read it before the rows overwrite the scratch
    return at;
  }

  __device__ static void run(const MoeParams& p) {
    auto& sm = Tile::smem();
    const Located at = locate(p, sm.out_row);
    if (at.expert < 0 || at.expert >= p.num_experts || at.rows <= 0) return;  // uniform per CTA
    for (int i = threadIdx.x; i < kTok; i += Tile::kThreads) {
      const int row = at.first + i;
      bool valid = i < at.rows;
      // DeepGEMM form: rows of another expert (padding, -1) inside the tile are skipped.
      if (ROUTING == kContiguousRows && valid) valid = __ldg(p.m_indices + row) == at.expert;
      sm.a_row[i] = valid ? row : -1;
      sm.out_row[i] = valid ? row : -1;
    }
    __syncthreads();
    Tile::run(p, sm, at.expert);
  }
};

template <int ROUTING, int NT, int TT, int STAGE_K, int STAGES, int BLOCK_K>
struct GroupedMma : GroupedRows<ROUTING, MmaTile<NT, TT, STAGE_K, STAGES, BLOCK_K>> {};

template <int ROUTING, int WM, int BN, int STAGES, int BLOCK_K>
struct GroupedWgmma : GroupedRows<ROUTING, WgmmaTile<WM, BN, STAGES, BLOCK_K>> {};

}  // namespace chord
