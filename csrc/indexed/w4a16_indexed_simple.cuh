// A simple, correct indexed W4A16 MoE GEMM (the foundation kernel; the fast SM90 profiles
// replace it on the hot path). It consumes vLLM moe_align_block_size routing as is:
//   out[r, :] = a[r / top_k, :] @ dequant(W[expert_ids[b]])^T  for each route r listed in
//   sorted_ids[b*block_m .. (b+1)*block_m), b < num_tokens_padded / block_m, r < num_routes.
// num_tokens_padded is read on the device (no host sync; CUDA-graph safe); the buffers may be
// over-allocated and their tails hold anything: blocks at or past the count exit at once.
// One CTA computes up to kRowsPerCta routed rows x kColsPerCta output columns with fp32 FMAs,
// stepping K one scale group (32) at a time through shared memory.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/w4a16_fragment.cuh"
#include "common/moe_params.cuh"

namespace chord {

template <int BLOCK_K>
struct IndexedSimple {
  static constexpr int kThreads = 128;
  static constexpr int kRowsPerCta = 16;
  static constexpr int kColsPerCta = 64;
  static constexpr int kNTiles = kColsPerCta / kTile;
  static constexpr int kRowsPerThread = kRowsPerCta * kColsPerCta / kThreads;  // 8
  static constexpr int kWPad = kGroupSize + 1;  // odd stride: a warp's 32 columns hit 32 banks

  __device__ static void run(const MoeParams& p) {
    __shared__ float a_s[kRowsPerCta][kGroupSize];
    __shared__ float w_s[kColsPerCta][kWPad];
    __shared__ int32_t route_s[kRowsPerCta];

    const int block = blockIdx.y / p.ctas_per_block;
    const int sub = blockIdx.y % p.ctas_per_block;
    const int first = block * p.block_m + sub * kRowsPerCta;
    if (block >= p.num_blocks || block * p.block_m >= __ldg(p.num_tokens_padded)) return;
    const int expert = __ldg(p.expert_ids + block);
    if (expert < 0 || expert >= p.num_experts) return;  // never read outside the weights
    const int rows = min(min(kRowsPerCta, (block + 1) * p.block_m - first), p.sorted_len - first);
    if (rows <= 0) return;  // uniform across the CTA: nothing of this block is in the buffer

    const int tid = threadIdx.x;
    if (tid < kRowsPerCta) {
      int32_t r = tid < rows ? __ldg(p.sorted_ids + first + tid) : p.num_routes;
      route_s[tid] = (r >= 0 && r < p.num_routes) ? r : -1;
    }
    __syncthreads();

    const int n_tiles = p.n / kTile;
    const int k_blocks = p.k / BLOCK_K;
    const int n0 = blockIdx.x * kColsPerCta;
    const int my_col = tid % kColsPerCta;
    const int my_row0 = (tid / kColsPerCta) * kRowsPerThread;
    float acc[kRowsPerThread] = {};

    for (int k0 = 0; k0 < p.k; k0 += kGroupSize) {
      // Activations: 16 rows x 32 columns, 4 per thread; padding rows read as zero.
      {
        const int r = tid / 8, c = (tid % 8) * 4;
        const int route = route_s[r];
        const __nv_bfloat16* src = p.a + (int64_t)(route / p.top_k) * p.lda + k0 + c;
#pragma unroll
        for (int j = 0; j < 4; ++j) a_s[r][c + j] = route >= 0 ? __bfloat162float(src[j]) : 0.f;
      }
      // Weights: 4 n-tiles x 2 k-tiles of fragment words, one warp per n-tile.
      {
        const int warp = tid / 32, lane = tid % 32;
        const int n_tile = n0 / kTile + warp;
        if (n_tile < n_tiles) {
          const int k_group = k0 / kGroupSize;
          const __nv_bfloat16* srow = p.scale + ((int64_t)expert * (p.k / kGroupSize) + k_group) * p.n;
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            const uint32_t word = static_cast<uint32_t>(__ldg(
                p.qweight + fragment_word_index<BLOCK_K>(expert, n_tile, k0 / kTile + t, lane,
                                                         n_tiles, k_blocks)));
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const FragmentPos pos = fragment_position(lane, j);
              const float s = __bfloat162float(srow[n_tile * kTile + pos.row]);
              w_s[warp * kTile + pos.row][t * kTile + pos.col] =
                  __bfloat162float(dequantize_code((word >> (4 * j)) & 0xF, s));
            }
          }
        }
      }
      __syncthreads();
#pragma unroll 8
      for (int kk = 0; kk < kGroupSize; ++kk) {
        const float w = w_s[my_col][kk];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) acc[i] += a_s[my_row0 + i][kk] * w;
      }
      __syncthreads();
    }

    const int col = n0 + my_col;
    if (kDiagNoStore || col >= p.n) return;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int route = route_s[my_row0 + i];
      if (route >= 0) p.out[(int64_t)route * p.ldc + col] = __float2bfloat16_rn(acc[i]);
    }
  }
};

}  // namespace chord
