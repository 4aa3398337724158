// The W4A16 MoE tile for many rows per expert (prefill), on Hopper's warpgroup MMA. Same contract
// as common/w4a16_mma_tile.cuh (a family locates one expert and up to kTok rows, fills a_row /
// out_row; this computes out[rows, CTA's N range] = a[rows] @ dequant(W[expert])^T), but the MMA
// is wgmma.mma_async: mma.sync cannot feed Hopper's tensor cores at their full rate.
//
// Operands stay swapped: dequantized weights are the register A operand on WGMMA-M (each of the
// two warpgroups owns WM m64 tiles = 64*WM weight rows; warp w of a warpgroup reads n-tile 4m+w,
// so the packed per-lane fragment word is exactly its A fragment), the tile's rows are WGMMA-N
// (BN = 64 or 128) and come from shared memory, K-major in the 128-byte swizzle, through a
// descriptor. One cp.async ring (all threads load; each stage = 64 K columns of the lanes' weight
// chunks, the CTA rows' scales and the gathered activation rows) runs STAGES-2 stages ahead: one
// slot is being computed and one may still be read by the wgmma group in flight from the
// previous stage. Per 16-wide k step the warp dequantizes into one of two A register sets while
// the previous step's wgmma group runs (wait_group<1>), so dequantization overlaps the tensor
// cores, across stage boundaries too.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/mma_sm80.cuh"
#include "common/moe_params.cuh"
#include "common/w4a16_fragment.cuh"
#include "common/wgmma_sm90.cuh"

namespace chord {

template <int WM, int BN, int STAGES, int BLOCK_K>
struct WgmmaTile {
  static constexpr int kWarpgroups = 2;
  static constexpr int kWarps = 4 * kWarpgroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = kWarpgroups * WM * 64;  // weight rows (output columns) per CTA
  static constexpr int kTok = BN;                       // activation rows per CTA
  static constexpr int kStageK = 64;                    // one 128-byte swizzle row of BF16
  static constexpr int kGroupsPerStage = kStageK / kGroupSize;
  using Mma = WgmmaRS<BN>;
  static_assert(BN % 8 == 0 && BN <= 256, "BN must be a multiple of 8 (one swizzle atom), at most 256");
  static_assert(STAGES >= 3, "the ring needs a computing slot, a draining slot and one loading");
  static_assert(BLOCK_K % kStageK == 0, "the packed BLOCK_K must be a multiple of 64");

  // The host passes chord_kernels.dispatch wgmma_smem_bytes(), which mirrors sizeof(Smem).
  // act first: each stage is BN * 128 bytes, a multiple of the 1024-byte swizzle atom.
  struct Smem {
    __nv_bfloat16 act[STAGES][BN * kStageK];
    uint4 w[STAGES][kWarps][WM][32];
    __nv_bfloat16 scale[STAGES][kGroupsPerStage][kRows];
    int32_t a_row[kTok];
    int32_t out_row[kTok];
  };

  __device__ static Smem& smem() {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // Host and device disagree on the size, or the swizzled tiles are misaligned: fail loudly.
    if (dynamic_smem_bytes() < sizeof(Smem) || (__cvta_generic_to_shared(smem_raw) & 1023) != 0) __trap();
    return *reinterpret_cast<Smem*>(smem_raw);
  }

  // Requires sm.a_row / sm.out_row filled and a barrier after it.
  __device__ static void run(const MoeParams& p, Smem& sm, int expert) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wg = warp / 4, wi = warp % 4;  // warpgroup, warp within it (its 16 rows of an m64)
    const int n_tiles = p.n / kTile;
    const int k_blocks = p.k / BLOCK_K;
    const int k_groups = p.k / kGroupSize;
    const int num_stages = p.k / kStageK;
    const int row0 = blockIdx.x * kRows;  // first weight row of the CTA
    auto tile_of = [&](int m) { return row0 / kTile + (wg * WM + m) * 4 + wi; };

    auto load_stage = [&](int s) {
      if (s < num_stages) {
        const int slot = s % STAGES;
#pragma unroll
        for (int m = 0; m < WM; ++m) {  // each lane fetches (and later reads) its own chunks
          const int tile = min(tile_of(m), n_tiles - 1);  // clamp: tiles past N compute, never store
          cp_async_16(&sm.w[slot][warp][m][lane],
                      p.qweight + fragment_chunk_word<BLOCK_K>(expert, tile, s, lane, n_tiles, k_blocks), 16);
        }
        constexpr int kScaleChunks = kGroupsPerStage * kRows / 8;  // 8 scales per 16 bytes
        for (int c = tid; c < kScaleChunks; c += kThreads) {
          const int grp = c / (kRows / 8), col = (c % (kRows / 8)) * 8;
          const bool valid = row0 + col < p.n;
          const __nv_bfloat16* src =
              p.scale + ((int64_t)expert * k_groups + s * kGroupsPerStage + grp) * p.n + (valid ? row0 + col : 0);
          cp_async_16(&sm.scale[slot][grp][col], src, valid ? 16 : 0);
        }
        unsigned char* act = reinterpret_cast<unsigned char*>(sm.act[slot]);
        for (int c = tid; c < kTok * 8; c += kThreads) {  // missing rows read as zero
          const int row = c / 8, chunk = c % 8;
          const int a_row = sm.a_row[row];
          const __nv_bfloat16* src = p.a + (a_row >= 0 ? (int64_t)a_row * p.lda : 0) + s * kStageK + chunk * 8;
          cp_async_16(act + sw128_offset(row, chunk), src, a_row >= 0 ? 16 : 0);
        }
      }
      cp_async_commit();  // always commit, so group counting stays uniform
    };

    // No zeroing: the first wgmma runs with scale-d = 0 (D = A*B). Zeroing with ordinary moves
    // makes ptxas serialize every wgmma once a group stays in flight across the stage loop's
    // back edge (C7515, measured on the two-m64 tiles).
    float acc[WM][Mma::kAccRegs];
    uint32_t afrag[2][WM][4];  // two A register sets: one being dequantized, one being read

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) load_stage(s);

    for (int s = 0; s < num_stages; ++s) {
      cp_async_wait<STAGES - 3>();
      fence_proxy_async();  // this thread's cp.async bytes -> visible to the wgmma (async proxy)
      __syncthreads();      // stage s landed for all; every wgmma of stage s-2 has completed
      const int slot = s % STAGES;
      uint4 w[WM];
      __nv_bfloat162 s_lo[WM][kGroupsPerStage], s_hi[WM][kGroupsPerStage];
#pragma unroll
      for (int m = 0; m < WM; ++m) {
        w[m] = sm.w[slot][warp][m][lane];
        const int r = (wg * WM + m) * 64 + wi * kTile + lane / 4;
#pragma unroll
        for (int grp = 0; grp < kGroupsPerStage; ++grp) {
          s_lo[m][grp] = __bfloat162bfloat162(sm.scale[slot][grp][r]);
          s_hi[m][grp] = __bfloat162bfloat162(sm.scale[slot][grp][r + 8]);
        }
      }
      // The refill's address math and cp.async issue overlap the loads above and the wgmma group
      // still in flight from stage s-1 (it reads slot s-1; the refill writes slot s-2).
      load_stage(s + STAGES - 2);
      const uint64_t desc = sw128_kmajor_desc(sm.act[slot]);
#pragma unroll
      for (int kt = 0; kt < kStageK / kTile; ++kt) {
        const int buf = kt & 1;  // 4 k steps per stage: the parity carries across stages
#pragma unroll
        for (int m = 0; m < WM; ++m) {
          const uint32_t word = kt == 0 ? w[m].x : kt == 1 ? w[m].y : kt == 2 ? w[m].z : w[m].w;
          dequantize_fragment(word, s_lo[m][kt / 2], s_hi[m][kt / 2], afrag[buf][m]);
        }
#pragma unroll
        for (int m = 0; m < WM; ++m)
#pragma unroll
          for (int i = 0; i < Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
        wgmma_fence();
#pragma unroll
        for (int m = 0; m < WM; ++m) Mma::mma(acc[m], afrag[buf][m], desc + 2 * kt, (s | kt) != 0);  // +32 B per k step
        wgmma_commit_group();
#pragma unroll
        for (int m = 0; m < WM; ++m)
#pragma unroll
          for (int i = 0; i < Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
        wgmma_wait_group<1>();  // the previous k step's group is done: its A set may be rewritten
#pragma unroll
        for (int m = 0; m < WM; ++m)
#pragma unroll
          for (int i = 0; i < 4; ++i) fence_operand(afrag[buf ^ 1][m][i]);
      }
    }
    cp_async_wait<0>();
    wgmma_wait_group<0>();
#pragma unroll
    for (int m = 0; m < WM; ++m) {
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_operand(afrag[0][m][i]), fence_operand(afrag[1][m][i]);
#pragma unroll
      for (int i = 0; i < Mma::kAccRegs; ++i) fence_operand(acc[m][i]);  // no read before the wait
    }

    // Accumulator j-th n8 chunk: d[4j + {0,1}] = weight row g, tile rows 8j + 2t + {0,1};
    // d[4j + {2,3}] = weight row g + 8.
#pragma unroll
    for (int m = 0; m < WM; ++m) {
      const int tile = tile_of(m);
      if (tile >= n_tiles) continue;
      const int col = tile * kTile + lane / 4;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int out_row = sm.out_row[8 * j + 2 * (lane % 4) + (i & 1)];
          if (out_row >= 0) p.out[(int64_t)out_row * p.ldc + col + 8 * (i >> 1)] = __float2bfloat16_rn(acc[m][4 * j + i]);
        }
      }
    }
  }
};

}  // namespace chord
