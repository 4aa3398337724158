// Indexed W4A16 MoE GEMM on tensor cores, operands swapped (the decode profile, sm_80+ MMA).
//
// out[r, :] = a[r / top_k, :] @ dequant(W[expert_ids[b]])^T for every route r in routing block b
// (vLLM moe_align_block_size; contract as in w4a16_indexed_simple.cuh, same IndexedParams).
//
// Few tokens per expert make the problem weight-bandwidth bound, so the dequantized weights fill
// MMA-M: each warp owns NT 16-row tiles of W and runs mma.m16n8k16 with the CTA's tokens as the
// n8 side (TT tiles of 8 tokens). Weights (one 16-byte chunk per lane per 16x64 tile, the packed
// format's unit), the CTA's scales and the gathered activation rows all stream through one
// cp.async ring in shared memory, STAGES-1 stages ahead of the MMAs; several CTAs per SM keep
// enough bytes in flight to cover HBM latency.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/mma_sm80.cuh"
#include "common/w4a16_fragment.cuh"
#include "indexed/indexed_params.cuh"

namespace chord {

template <int NT, int TT, int STAGE_K, int STAGES>
struct IndexedMma {
  static constexpr int kBlockK = 64;  // the indexed layout's BLOCK_K: one 16 B lane load per tile
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = kWarps * NT * kTile;  // weight rows (output columns) per CTA
  static constexpr int kTok = 8 * TT;                // routed rows per CTA
  static constexpr int kBlocksPerStage = STAGE_K / kBlockK;
  static constexpr int kGroupsPerStage = STAGE_K / kGroupSize;
  static constexpr int kActStride = STAGE_K + 8;  // +16 B: B-fragment reads hit 32 banks
  static_assert(STAGE_K % kBlockK == 0, "STAGE_K must be a multiple of 64");

  // One ring of STAGES stages in dynamic shared memory (the host passes
  // chord_kernels.dispatch.IndexedLaunch.smem_bytes, which mirrors sizeof(Smem)). A stage holds
  // STAGE_K columns of everything the CTA reads: each lane's 16-byte weight fragments, the
  // scales of the CTA's rows, and the gathered activation rows. All of it moves by cp.async, so
  // STAGES-1 stages of weights (tens of KB per SM) are in flight while one is computed.
  struct Smem {
    uint4 w[STAGES][kBlocksPerStage][kWarps][NT][32];
    __nv_bfloat16 scale[STAGES][kGroupsPerStage][kRows];
    __nv_bfloat16 act[STAGES][kTok][kActStride];
    int32_t route[kTok];
  };

  __device__ static void run(const IndexedParams& p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    if (dynamic_smem_bytes() < sizeof(Smem)) __trap();  // host and device disagree: fail loudly
    const int block = blockIdx.y / p.ctas_per_block;
    const int first = block * p.block_m + (blockIdx.y % p.ctas_per_block) * kTok;
    if (block >= p.num_blocks || block * p.block_m >= __ldg(p.num_tokens_padded)) return;
    const int expert = __ldg(p.expert_ids + block);
    if (expert < 0 || expert >= p.num_experts) return;  // never read outside the weights
    const int rows = min(min(kTok, (block + 1) * p.block_m - first), p.sorted_len - first);
    if (rows <= 0) return;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (tid < kTok) {
      const int32_t r = tid < rows ? __ldg(p.sorted_ids + first + tid) : p.num_routes;
      sm.route[tid] = (r >= 0 && r < p.num_routes) ? r : -1;
    }
    __syncthreads();

    const int n_tiles = p.n / kTile;
    const int k_blocks = p.k / kBlockK;
    const int k_groups = p.k / kGroupSize;
    const int num_stages = p.k / STAGE_K;
    const int row0 = blockIdx.x * kRows;                        // first weight row of the CTA
    const int tile0 = row0 / kTile + warp * NT;                 // this warp's first n-tile

    auto load_stage = [&](int s) {
      if (s < num_stages) {
        const int slot = s % STAGES;
        // Weights: each lane fetches (and later reads back) its own 16-byte fragment chunks.
#pragma unroll
        for (int j = 0; j < kBlocksPerStage; ++j) {
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            const int tile = min(tile0 + t, n_tiles - 1);  // clamp: tiles past N compute, never store
            const int64_t word =
                ((((int64_t)expert * n_tiles + tile) * k_blocks + s * kBlocksPerStage + j) * 32 + lane) * 4;
            cp_async_16(&sm.w[slot][j][warp][t][lane], p.qweight + word, 16);
          }
        }
        // Scales of the CTA's rows for this stage's groups, 8 per 16-byte chunk (N % 16 == 0).
        constexpr int kScaleChunks = kGroupsPerStage * kRows / 8;
        for (int c = tid; c < kScaleChunks; c += kThreads) {
          const int grp = c / (kRows / 8), col = (c % (kRows / 8)) * 8;
          const bool valid = row0 + col < p.n;
          const __nv_bfloat16* src =
              p.scale + ((int64_t)expert * k_groups + s * kGroupsPerStage + grp) * p.n + (valid ? row0 + col : 0);
          cp_async_16(&sm.scale[slot][grp][col], src, valid ? 16 : 0);
        }
        // Activations: the CTA's gathered rows, 16 bytes at a time; padding rows read as zero.
        constexpr int kChunksPerRow = STAGE_K / 8;
        constexpr int kChunks = kTok * kChunksPerRow;
        for (int c = tid; c < kChunks; c += kThreads) {
          const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
          const int route = sm.route[row];
          const __nv_bfloat16* src = p.a + (route >= 0 ? (int64_t)(route / p.top_k) * p.lda : 0) +
                                     (int64_t)s * STAGE_K + col;
          cp_async_16(&sm.act[slot][row][col], src, route >= 0 ? 16 : 0);
        }
      }
      cp_async_commit();  // always commit, so group counting stays uniform
    };

    float acc[NT][TT][4] = {};
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) load_stage(s);

    for (int s = 0; s < num_stages; ++s) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage s landed for everyone; stage s-1's slot is free to refill
      load_stage(s + STAGES - 1);
      const int slot = s % STAGES;
      const __nv_bfloat16(*act)[kActStride] = sm.act[slot];
#pragma unroll
      for (int j = 0; j < kBlocksPerStage; ++j) {
        uint4 w[NT];
        __nv_bfloat162 s_lo[NT][2], s_hi[NT][2];  // per tile and scale group: rows g and g+8
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          w[t] = sm.w[slot][j][warp][t][lane];
          const int r = (warp * NT + t) * kTile + lane / 4;
#pragma unroll
          for (int grp = 0; grp < 2; ++grp) {
            s_lo[t][grp] = __bfloat162bfloat162(sm.scale[slot][j * 2 + grp][r]);
            s_hi[t][grp] = __bfloat162bfloat162(sm.scale[slot][j * 2 + grp][r + 8]);
          }
        }
#pragma unroll
        for (int kp = 0; kp < 2; ++kp) {  // pairs of 16-wide k tiles: one ldmatrix.x4 per 8 tokens
          uint32_t b[TT][4];  // b[tt][0..1]: k tile 2*kp, b[tt][2..3]: k tile 2*kp+1
#pragma unroll
          for (int tt = 0; tt < TT; ++tt) {
            const int quad = lane / 8;  // matrix this lane addresses: (tile, k half) of the pair
            ldmatrix_x4(b[tt], &act[tt * 8 + lane % 8][j * kBlockK + (2 * kp + quad / 2) * kTile + (quad % 2) * 8]);
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int kt = 2 * kp + h;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              const uint32_t word = kt == 0 ? w[t].x : kt == 1 ? w[t].y : kt == 2 ? w[t].z : w[t].w;
              uint32_t afrag[4];
              dequantize_fragment(word, s_lo[t][kp], s_hi[t][kp], afrag);
#pragma unroll
              for (int tt = 0; tt < TT; ++tt) mma_m16n8k16_bf16(acc[t][tt], afrag, b[tt][2 * h], b[tt][2 * h + 1]);
            }
          }
        }
      }
    }
    cp_async_wait<0>();

    // D fragment: d0,d1 = weight row g, tokens 2q, 2q+1; d2,d3 = row g+8 (q = lane % 4).
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int tile = tile0 + t;
      if (tile >= n_tiles) continue;
      const int col = tile * kTile + lane / 4;
#pragma unroll
      for (int tt = 0; tt < TT; ++tt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int route = sm.route[tt * 8 + 2 * (lane % 4) + (i & 1)];
          if (route >= 0) p.out[(int64_t)route * p.ldc + col + 8 * (i >> 1)] = __float2bfloat16_rn(acc[t][tt][i]);
        }
      }
    }
  }
};

}  // namespace chord
