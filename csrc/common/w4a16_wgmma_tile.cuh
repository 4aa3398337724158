// The W4A16 MoE tile for many rows per expert (prefill), on Hopper's warpgroup MMA. Same contract
// as common/w4a16_mma_tile.cuh (a family locates one expert and up to kTok rows, fills a_row /
// out_row; this computes out[rows, CTA's N range] = a[rows] @ dequant(W[expert])^T), but the MMA
// is wgmma.mma_async: mma.sync cannot feed Hopper's tensor cores at their full rate.
//
// Operands stay swapped: dequantized weights are the register A operand on WGMMA-M (each of the
// two consumer warpgroups owns WM m64 tiles = 64*WM weight rows; warp w of a warpgroup reads
// n-tile 4m+w, so the packed per-lane fragment word is exactly its A fragment), the tile's rows
// are WGMMA-N (BN = 64 or 128) and come from shared memory, K-major in the 128-byte swizzle,
// through a descriptor.
//
// Warp-specialized: warpgroup 0 is the producer. It gathers each 64-column stage (the consumer
// lanes' weight chunks, the CTA rows' scales, the tile's activation rows) into a STAGES-deep
// ring with cp.async and signals the slot's "full" mbarrier when its copies land; it gives its
// registers to the consumers (setmaxnreg). Warpgroups 1 and 2 wait on "full", load their weight
// chunk and scales, dequantize k step i+1 into one of two A register sets while the wgmma group
// of step i runs (wait_group<1>), and release a slot on its "empty" mbarrier (one arrival per
// warp) once the group that read it has retired. No CTA-wide barrier in the main loop: the consumers never wait on each
// other or on load issue, only on data.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/mbarrier_sm90.cuh"
#include "common/mma_sm80.cuh"
#include "common/moe_params.cuh"
#include "common/w4a16_fragment.cuh"
#include "common/wgmma_sm90.cuh"

namespace chord {

template <int WM, int BN, int STAGES, int BLOCK_K>
struct WgmmaTile {
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kProducerThreads = 128;  // warpgroup 0
  static constexpr int kThreads = kProducerThreads + 32 * kConsumerWarps;
  static constexpr int kProducerRegs = 64;   // 128 x 64 + 256 x 216 <= 64K registers
  static constexpr int kConsumerRegs = 216;
  static constexpr int kRows = kConsumerWarpgroups * WM * 64;  // weight rows (output columns) per CTA
  static constexpr int kTok = BN;                               // activation rows per CTA
  static constexpr int kStageK = 64;                            // one 128-byte swizzle row of BF16
  static constexpr int kGroupsPerStage = kStageK / kGroupSize;
  using Mma = WgmmaRS<BN>;
  static_assert(BN % 8 == 0 && BN <= 256, "BN must be a multiple of 8 (one swizzle atom), at most 256");
  static_assert(STAGES >= 2, "the ring needs a slot being read and one being filled");
  static_assert(BLOCK_K % kStageK == 0, "the packed BLOCK_K must be a multiple of 64");

  // The host passes chord_kernels.dispatch wgmma_smem_bytes(), which mirrors sizeof(Smem).
  // act first: each stage is BN * 128 bytes, a multiple of the 1024-byte swizzle atom.
  struct Smem {
    __nv_bfloat16 act[STAGES][BN * kStageK];
    uint4 w[STAGES][kConsumerWarps][WM][32];
    __nv_bfloat16 scale[STAGES][kGroupsPerStage][kRows];
    int32_t a_row[kTok];
    int32_t out_row[kTok];
    uint64_t full[STAGES];   // the producer's copies of the slot landed (128 arrivals)
    uint64_t empty[STAGES];  // every consumer warp is done with the slot (8 arrivals)
  };

  __device__ static Smem& smem() {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // Host and device disagree on the size, or the swizzled tiles are misaligned: fail loudly.
    if (dynamic_smem_bytes() < sizeof(Smem) || (__cvta_generic_to_shared(smem_raw) & 1023) != 0) __trap();
    return *reinterpret_cast<Smem*>(smem_raw);
  }

  // Requires sm.a_row / sm.out_row filled and a barrier after it; all kThreads threads call it.
  __device__ static void run(const MoeParams& p, Smem& sm, int expert) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        mbarrier_init(&sm.full[s], kProducerThreads);
        mbarrier_init(&sm.empty[s], kConsumerWarps);
      }
      mbarrier_init_fence();
    }
    __syncthreads();  // the last CTA-wide barrier: from here the warpgroups sync by mbarrier
    if (threadIdx.x < kProducerThreads) {
      warpgroup_reg_dealloc<kProducerRegs>();
      produce(p, sm, expert);
    } else {
      warpgroup_reg_alloc<kConsumerRegs>();
      consume(p, sm);
    }
  }

  // n-tile of consumer warp `cwarp` (0..7), m64 tile m.
  __device__ static int tile_of(int cwarp, int m) {
    return blockIdx.x * (kRows / kTile) + ((cwarp / 4) * WM + m) * 4 + cwarp % 4;
  }

  // The producer's per-stage work is address arithmetic plus one cp.async per 16 bytes, on one
  // warp per scheduler, so everything that does not change along K is computed once: each
  // thread keeps the same activation rows, weight chunks and scale chunk for every stage and
  // only adds the stage's offset.
  static constexpr int kActPerThread = kTok * 8 / kProducerThreads;
  static constexpr int kWeightPerThread = kConsumerWarps * WM * 32 / kProducerThreads;
  static constexpr int kScaleChunks = kGroupsPerStage * kRows / 8;  // 8 scales per 16 bytes
  static_assert(kTok * 8 % kProducerThreads == 0 && kConsumerWarps * WM * 32 % kProducerThreads == 0,
                "producer threads divide the stage's chunks");
  static_assert(kScaleChunks <= kProducerThreads, "one scale chunk per producer thread at most");

  // Int32 words from a lane's chunk at stage 0 to its chunk at stage s (the same for every
  // n-tile and lane: the packed format stores a tile's K blocks in order).
  __device__ static int64_t stage_words(int s) {
    constexpr int kSubsPerBlock = BLOCK_K / kStageK;
    return (int64_t)(s / kSubsPerBlock) * 32 * (BLOCK_K / kTile) + (s % kSubsPerBlock) * 4;
  }

  __device__ static void produce(const MoeParams& p, Smem& sm, int expert) {
    const int tid = threadIdx.x;
    const int n_tiles = p.n / kTile;
    const int k_blocks = p.k / BLOCK_K;
    const int k_groups = p.k / kGroupSize;
    const int num_stages = p.k / kStageK;
    const int row0 = blockIdx.x * kRows;

    // Activations: thread tid copies chunk tid % 8 of rows tid / 8 + 16 i; the swizzled
    // destination of those rows is one offset apart (row % 8 is the same for all of them).
    const int chunk = tid % 8;
    int32_t act_row[kActPerThread];  // -1: no row (zero-filled)
#pragma unroll
    for (int i = 0; i < kActPerThread; ++i) act_row[i] = sm.a_row[tid / 8 + 16 * i];
    const __nv_bfloat16* act_base = p.a + chunk * 8;
    const uint32_t act_dst0 = sw128_offset(tid / 8, chunk);
    // Weights: chunk c = tid + 128 i is consumer warp c / (32 WM), m64 tile (c / 32) % WM, lane c % 32.
    // Int32 offsets inside the expert's weights (N*K/8 words) keep the producer's registers few.
    const int32_t* w_expert = p.qweight + fragment_chunk_word<BLOCK_K>(expert, 0, 0, 0, n_tiles, k_blocks);
    int32_t w_word[kWeightPerThread];
#pragma unroll
    for (int i = 0; i < kWeightPerThread; ++i) {
      const int c = tid + kProducerThreads * i;
      const int tile = min(tile_of(c / (WM * 32), (c / 32) % WM), n_tiles - 1);  // clamp: computed, never stored
      w_word[i] = (int32_t)fragment_chunk_word<BLOCK_K>(0, tile, 0, c % 32, n_tiles, k_blocks);
    }
    // Scales: thread tid < kScaleChunks copies 8 scales of group tid / (kRows / 8).
    const int s_grp = tid / (kRows / 8), s_col = (tid % (kRows / 8)) * 8;
    const bool s_valid = tid < kScaleChunks && row0 + s_col < p.n;
    const __nv_bfloat16* s_src = p.scale + ((int64_t)expert * k_groups + s_grp) * p.n + (s_valid ? row0 + s_col : 0);

    for (int s = 0; s < num_stages; ++s) {
      const int slot = s % STAGES;
      if (s >= STAGES) mbarrier_wait(&sm.empty[slot], ((s / STAGES) + 1) & 1);  // use s/STAGES - 1 released
      const int64_t w_off = stage_words(s);
#pragma unroll
      for (int i = 0; i < kWeightPerThread; ++i) {
        const int c = tid + kProducerThreads * i;
        cp_async_16(&sm.w[slot][c / (WM * 32)][(c / 32) % WM][c % 32], w_expert + w_word[i] + w_off, 16);
      }
      if (tid < kScaleChunks)
        cp_async_16(&sm.scale[slot][s_grp][s_col], s_src + (int64_t)s * kGroupsPerStage * p.n, s_valid ? 16 : 0);
      unsigned char* act = reinterpret_cast<unsigned char*>(sm.act[slot]) + act_dst0;
#pragma unroll
      for (int i = 0; i < kActPerThread; ++i)
        cp_async_16(act + i * 16 * 128, act_base + (act_row[i] >= 0 ? (int64_t)act_row[i] * p.lda : 0) + s * kStageK,
                    act_row[i] >= 0 ? 16 : 0);
      cp_async_mbarrier_arrive(&sm.full[slot]);
    }
    cp_async_wait<0>();
  }

  __device__ static void consume(const MoeParams& p, Smem& sm) {
    const int cwarp = threadIdx.x / 32 - kProducerThreads / 32, lane = threadIdx.x % 32;
    const int cwg = cwarp / 4, wi = cwarp % 4;  // consumer warpgroup, warp within it
    const int n_tiles = p.n / kTile;
    const int num_stages = p.k / kStageK;

    // No zeroing: the first wgmma runs with scale-d = 0 (D = A*B). Zeroing with ordinary moves
    // makes ptxas serialize every wgmma once a group stays in flight across the stage loop's
    // back edge (C7515, measured on the two-m64 tiles).
    float acc[WM][Mma::kAccRegs];
    uint32_t afrag[2][WM][4];  // two A register sets: one being dequantized, one being read

    for (int s = 0; s < num_stages; ++s) {
      const int slot = s % STAGES;
      mbarrier_wait(&sm.full[slot], (s / STAGES) & 1);
      fence_proxy_async();  // the cp.async bytes (generic proxy) -> visible to the wgmma reads
      uint4 w[WM];
      __nv_bfloat162 s_lo[WM][kGroupsPerStage], s_hi[WM][kGroupsPerStage];
#pragma unroll
      for (int m = 0; m < WM; ++m) {
        w[m] = sm.w[slot][cwarp][m][lane];
        const int r = (cwg * WM + m) * 64 + wi * kTile + lane / 4;
#pragma unroll
        for (int grp = 0; grp < kGroupsPerStage; ++grp) {
          s_lo[m][grp] = __bfloat162bfloat162(sm.scale[slot][grp][r]);
          s_hi[m][grp] = __bfloat162bfloat162(sm.scale[slot][grp][r + 8]);
        }
      }
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
      // Every group that read slot s-1 has retired (the last one at this stage's kt == 0), and
      // so have this warp's loads from it. Each warp releases its own reads (the producer
      // refills the slot after all 8 arrived); __syncwarp orders the lanes' loads before lane
      // 0's arrive. (Inside the k loop, the arrive makes ptxas serialize the wgmmas: C7513.)
      if (s > 0) {
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&sm.empty[(s - 1) % STAGES]);
      }
    }
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
      const int tile = tile_of(cwarp, m);
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
