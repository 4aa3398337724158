// Indexed W4A16 MoE GEMM on tensor cores (the mma family): vLLM moe_align_block_size routing.
//
// out[r, :] = a[r / top_k, :] @ dequant(W[expert_ids[b]])^T for every route r listed in routing
// block b before num_tokens_padded (read on the device: no host sync, CUDA-graph safe); entries
// >= num_routes are padding, and buffers may be over-allocated with anything in their tails.
// A block of up to 8*TT routes is one tile of common/w4a16_mma_tile.cuh; larger blocks take
// ctas_per_block CTAs.
#pragma once

#include "common/moe_params.cuh"
#include "common/w4a16_mma_tile.cuh"

namespace chord {

template <int NT, int TT, int STAGE_K, int STAGES>
struct IndexedMma {
  using Tile = MmaTile<NT, TT, STAGE_K, STAGES, 64>;  // the indexed layout's BLOCK_K

  __device__ static void run(const MoeParams& p) {
    auto& sm = Tile::smem();
    const int block = blockIdx.y / p.ctas_per_block;
    const int first = block * p.block_m + (blockIdx.y % p.ctas_per_block) * Tile::kTok;
    if (block >= p.num_blocks || block * p.block_m >= __ldg(p.num_tokens_padded)) return;
    const int expert = __ldg(p.expert_ids + block);
    if (expert < 0 || expert >= p.num_experts) return;  // never read outside the weights
    const int rows = min(min(Tile::kTok, (block + 1) * p.block_m - first), p.sorted_len - first);
    if (rows <= 0) return;
    if (threadIdx.x < Tile::kTok) {
      const int32_t r = threadIdx.x < rows ? __ldg(p.sorted_ids + first + threadIdx.x) : p.num_routes;
      const bool valid = r >= 0 && r < p.num_routes;
      sm.out_row[threadIdx.x] = valid ? r : -1;
      sm.a_row[threadIdx.x] = valid ? r / p.top_k : -1;
    }
    __syncthreads();
    Tile::run(p, sm, expert);
  }
};

}  // namespace chord
