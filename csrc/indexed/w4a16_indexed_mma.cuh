// Indexed W4A16 MoE GEMM on tensor cores: vLLM moe_align_block_size routing.
//
// out[r, :] = a[r / top_k, :] @ dequant(W[expert_ids[b]])^T for every route r listed in routing
// block b before num_tokens_padded (read on the device: no host sync, CUDA-graph safe); entries
// >= num_routes are padding, and buffers may be over-allocated with anything in their tails.
// A block of up to kTok routes is one tile; larger blocks take ctas_per_block tiles. Kernels:
//   IndexedMma         common/w4a16_mma_tile.cuh, mma.sync, up to 64 rows, one CTA per tile
//   IndexedMmaStreamK  the same tile on persistent CTAs with stream-K (common/w4a16_mma_streamk.cuh;
//                      decode: no per-tile pipeline restart, no partly empty last wave)
//   IndexedMmaDecodeDual the stream-K mma tile of 8-row blocks holding a 16-row one over pairs of
//                      an expert's blocks (indexed/paired_blocks.cuh), run by the cheaper count
//   IndexedWgmma       common/w4a16_wgmma_tile.cuh, wgmma, 16-128 rows; with 2 consumer warpgroups
//                      whole tiles on at most one CTA an SM (common/w4a16_wgmma_tiles.cuh: the grid
//                      does not grow with the over-allocated routing buffers), with 4 one per tile
//   IndexedWgmmaStreamK the wgmma tile on persistent stream-K CTAs (common/w4a16_wgmma_streamk.cuh)
// The row tiles the stream-K and tile-loop kernels walk: indexed/row_tiles.cuh.
#pragma once

#include <type_traits>

#include "common/mma_decode_dual.cuh"
#include "common/moe_params.cuh"
#include "common/w4a16_mma_streamk.cuh"
#include "common/w4a16_mma_tile.cuh"
#include "common/w4a16_wgmma_streamk.cuh"
#include "common/w4a16_wgmma_tile.cuh"
#include "common/w4a16_wgmma_tiles.cuh"
#include "indexed/paired_blocks.cuh"
#include "indexed/row_tiles.cuh"

namespace chord {

constexpr int kIndexedBlockK = 64;  // the indexed layout's BLOCK_K

template <class Tile>
struct IndexedRows {
  __device__ static void run(const MoeParams& p) {
    auto& sm = Tile::smem();
    const int block = blockIdx.y / p.ctas_per_block;
    const int first = block * p.block_m + (blockIdx.y % p.ctas_per_block) * Tile::kTok;
    if (block >= p.num_blocks || block * p.block_m >= __ldg(p.num_tokens_padded)) return;
    const int expert = __ldg(p.expert_ids + block);
    if (expert < 0 || expert >= p.num_experts) return;  // never read outside the weights
    const int rows = min(min(Tile::kTok, (block + 1) * p.block_m - first), p.sorted_len - first);
    if (rows <= 0) return;
    for (int i = threadIdx.x; i < Tile::kTok; i += Tile::kThreads) {
      const int32_t r = i < rows ? __ldg(p.sorted_ids + first + i) : p.num_routes;
      const bool valid = r >= 0 && r < p.num_routes;
      sm.out_row[i] = valid ? r : -1;
      sm.a_row[i] = valid ? r / p.top_k : -1;
    }
    __syncthreads();
    Tile::run(p, sm, expert);
  }
};

template <int NT, int TT, int STAGE_K, int STAGES>
struct IndexedMmaStreamK : MmaStreamK<NT, TT, STAGE_K, STAGES, kIndexedBlockK, IndexedRowTiles> {};

template <int NT, int TT, int STAGE_K, int STAGES>
struct IndexedMma : IndexedRows<MmaTile<NT, TT, STAGE_K, STAGES, kIndexedBlockK>> {};

// The short-K decode tile on 8-row blocks (TT 1) and the same tile over pairs of an expert's blocks
// (TT 2, TALL_STAGES; indexed/paired_blocks.cuh) in one kernel (common/mma_decode_dual.cuh;
// chord_kernels.dispatch.paired_decode, indexed-kernels.md v83): each call runs the one whose tiles
// cost less. Dynamic shared memory is the larger tile's; the pair table is static.
template <int NT, int STAGE_K, int STAGES>
using IndexedMmaPairTile = MmaStreamK<NT, 2, STAGE_K, STAGES, kIndexedBlockK, IndexedPairedRowTiles>;

template <int NT, int TT, int STAGE_K, int STAGES, int TALL_STAGES>
struct IndexedMmaDecodeDual
    : MmaDecodeDual<IndexedMmaStreamK<NT, 1, STAGE_K, STAGES>, IndexedMmaPairTile<NT, STAGE_K, TALL_STAGES>> {
  static_assert(TT == 1, "8-row blocks, paired into 16-row tiles");
  static_assert(IndexedMmaPairTile<NT, STAGE_K, TALL_STAGES>::kThreads == IndexedPairedRowTiles<16>::kThreads,
                "the pair table's scan spans the CTA");
};

template <int WM, int BN, int STAGES, int CWG>
struct IndexedWgmmaStreamK : WgmmaStreamK<WM, BN, STAGES, kIndexedBlockK, IndexedRowTiles, CWG> {};

// LOOP: whole tiles claimed by at most one CTA an SM (always with 2 consumer warpgroups; the
// dispatch's choice with 4 since v34); LOOP 0 (4 only): one CTA per tile, reached only by
// dispatch.indexed_wgmma(..., loop=False) for experiments. DEFER_STORE (2 consumer warpgroups,
// the tile loop): the epilogue on producer warps 1-3, warp 0 gathering the rows alone
// (common/w4a16_wgmma_tiles.cuh; the short-K prefill tiles, indexed-kernels.md v51).
template <int WM, int BN, int STAGES, int CWG, int LOOP = (CWG == 2), int DEFER_STORE = 0>
struct IndexedWgmma
    : std::conditional_t<LOOP != 0,
                         WgmmaTiles<WM, BN, STAGES, kIndexedBlockK, IndexedRowTiles, CWG, /*TMA_ACTS=*/false,
                                    DEFER_STORE != 0>,
                         IndexedRows<WgmmaTile<WM, BN, STAGES, kIndexedBlockK, CWG>>> {
  static_assert(CWG == 4 || LOOP, "2 consumer warpgroups always loop");
  static_assert(!DEFER_STORE || (CWG == 2 && LOOP), "the deferred epilogue is the 2-warpgroup tile loop's");
};

}  // namespace chord
