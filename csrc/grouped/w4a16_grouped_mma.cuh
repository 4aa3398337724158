// Grouped W4A16 MoE GEMM on tensor cores: rows already grouped by expert (expert-parallel
// serving). Three routings, all read on the device (no host sync, CUDA-graph safe):
//   kContiguousRows    DeepGEMM form: m_indices[row] = expert, -1 on padding rows; each expert's
//                      segment starts on a multiple of the tile (the 128-row alignment, kTok | 128).
//   kContiguousOffsets vLLM form: rows [expert_offsets[e], expert_offsets[e+1]) belong to e, no
//                      alignment; row tile y is the y-th of the per-expert tile sequence.
//   kMasked            rows [e*max_m, e*max_m + min(masked_m[e], max_m)) belong to e; rows past
//                      masked_m are never written (the tile loop's activation box may read them,
//                      within a, and never uses them).
// out[row] = a[row] @ dequant(W[expert])^T (same row in and out). Kernels, as in the indexed
// family: GroupedMmaStreamK (the mma tile on persistent stream-K CTAs, decode and mid batch, up to
// 32 rows), GroupedWgmma (common/w4a16_wgmma_tile.cuh, 17-128 rows; with 2 consumer warpgroups
// whole tiles on at most one CTA an SM, common/w4a16_wgmma_tiles.cuh, with 4 one CTA per tile;
// tiles of 56 and 96 rows for the offsets and masked forms only) and GroupedWgmmaStreamK (the
// wgmma tile on persistent stream-K CTAs); BLOCK_K is the packed weight's (64 contiguous, 128
// masked). Where each routing's rows and row tiles are: grouped/row_tiles.cuh.
#pragma once

#include <type_traits>

#include "common/mma_decode_dual.cuh"
#include "common/moe_params.cuh"
#include "common/w4a16_mma_streamk.cuh"
#include "common/w4a16_mma_tile.cuh"
#include "common/w4a16_wgmma_streamk.cuh"
#include "common/w4a16_wgmma_tile.cuh"
#include "common/w4a16_wgmma_tiles.cuh"
#include "grouped/row_tiles.cuh"

namespace chord {

// One CTA per tile (the 4-warpgroup wgmma tile, whose registers leave no room for a tile loop):
// CTA y locates row tile y itself; with SPLIT_K > 1, a cluster of SPLIT_K CTAs along z (the same
// x, y: the same tile, the same early exit) splits its K (WgmmaTile::run).
template <int ROUTING, class Tile, int SPLIT_K = 1>
struct GroupedRows {
  static constexpr int kTok = Tile::kTok;
  static_assert(ROUTING == kContiguousRows || ROUTING == kContiguousOffsets || ROUTING == kMasked,
                "grouped routing");

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
    // kContiguousOffsets: warp 0 finds the tile, the CTA reads its answer.
    if (threadIdx.x < 32) {
      const Located at = find_tile_in_warp<ROUTING, kTok>(p, y);
      if (threadIdx.x == 0) scratch[0] = at.expert, scratch[1] = at.first, scratch[2] = at.rows;
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
    Tile::template run<SPLIT_K>(p, sm, at.expert);
  }
};

template <int ROUTING, int NT, int TT, int STAGE_K, int STAGES, int BLOCK_K>
struct GroupedMmaStreamK
    : MmaStreamK<NT, TT, STAGE_K, STAGES, BLOCK_K, GroupedRowTiles<ROUTING>::template Of> {};

// The masked form's 8-row stream-K tile and its 16-row tile (TT 2, TALL_STAGES) in one kernel
// (common/mma_decode_dual.cuh; chord_kernels.dispatch.dual_decode_16, grouped-kernels.md v58):
// each call runs the one whose row tiles cost less. v57 launched the two as a pair instead.
template <int ROUTING, int NT, int TT, int STAGE_K, int STAGES, int BLOCK_K, int TALL_STAGES>
struct GroupedMmaDecodeDual : MmaDecodeDual<GroupedMmaStreamK<ROUTING, NT, 1, STAGE_K, STAGES, BLOCK_K>,
                                            GroupedMmaStreamK<ROUTING, NT, 2, STAGE_K, TALL_STAGES, BLOCK_K>> {
  static_assert(ROUTING == kMasked && TT == 1, "the masked form's 8-row tile holds the 16-row one");
};

template <int ROUTING, int WM, int BN, int STAGES, int BLOCK_K>
struct GroupedWgmmaStreamK : WgmmaStreamK<WM, BN, STAGES, BLOCK_K, GroupedRowTiles<ROUTING>::template Of> {};

// LOOP: whole tiles claimed by at most one CTA an SM (always with 2 consumer warpgroups; with 4
// unless split, v23); LOOP 0 (4 only): one CTA per tile, with SPLIT_K > 1 one cluster of SPLIT_K
// CTAs per tile (CHORD_GROUPED_SPLIT_K).
// TMA_ACTS 1 (the tile loop only): the tile's activation rows by tensor map (WgmmaTiles).
// DEFER_STORE 1 (with TMA_ACTS): the tile loop's epilogue on the producer's store warps (WgmmaTiles).
template <int ROUTING, int WM, int BN, int STAGES, int BLOCK_K, int CWG, int SPLIT_K = 1, int LOOP = (CWG == 2),
          int TMA_ACTS = 0, int DEFER_STORE = 0>
struct GroupedWgmma
    : std::conditional_t<LOOP != 0,
                         WgmmaTiles<WM, BN, STAGES, BLOCK_K, GroupedRowTiles<ROUTING>::template Of, CWG, TMA_ACTS != 0,
                                    DEFER_STORE != 0>,
                         GroupedRows<ROUTING, WgmmaTile<WM, BN, STAGES, BLOCK_K, CWG>, SPLIT_K>> {
  static_assert(CWG == 4 || LOOP, "2 consumer warpgroups always loop");
  static_assert(!LOOP || SPLIT_K == 1, "the K split is for the one-CTA tile");
  static_assert(LOOP || !TMA_ACTS, "activations by tensor map on the tile loop only");
  static_assert(TMA_ACTS || !DEFER_STORE, "store warps only beside a one-thread loader (activations by tensor map)");
};

}  // namespace chord
