// The W4A16 MoE tile shared by the tensor-core kernel families (indexed, grouped): once a family
// has located its tile (one expert, up to kTok rows with their activation and output rows), this
// computes out[rows, CTA's N range] = a[rows] @ dequant(W[expert])^T with operands swapped.
//
// Few rows per expert make the problem weight-bandwidth bound, so the dequantized weights fill
// MMA-M: each warp owns NT 16-row tiles of W and runs mma.m16n8k16 with the tile's rows as the
// n8 side (TT tiles of 8 rows). Weights (one 16-byte chunk per lane per 16x64 piece of the packed
// format), the CTA's scales and the gathered activation rows all stream through one cp.async ring
// in shared memory, STAGES-1 stages ahead of the MMAs; several CTAs per SM keep enough bytes in
// flight to cover HBM latency. Dequant: lop3 to BF16 128+u, subtract 136, multiply by the group
// scale (bit-identical to the reference's bf16((u-8)*s)); with one token tile (decode) the scale
// multiplies the FP32 products instead (kScaleProducts), which on 4 tiles a warp also absorb the
// 136 (kOffsetCodes).
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/mma_sm80.cuh"
#include "common/moe_params.cuh"
#include "common/staged_store.cuh"
#include "common/w4a16_fragment.cuh"

namespace chord {

template <int NT, int TT, int STAGE_K, int STAGES, int BLOCK_K>
struct MmaTile {
  static constexpr int kSubK = 64;  // K columns per lane chunk: 4 fragment words = 16 bytes
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = kWarps * NT * kTile;  // weight rows (output columns) per CTA
  static constexpr int kTok = 8 * TT;                // activation rows per CTA
  static constexpr int kSubsPerStage = STAGE_K / kSubK;
  static constexpr int kGroupsPerStage = STAGE_K / kGroupSize;
  static constexpr int kActStride = STAGE_K + 8;  // +16 B: ldmatrix rows hit distinct banks
  // The epilogue through shared memory (store) up to 32 rows: at 64 (TT 8, the family override's
  // mma tile at 64-row blocks) the staging tile would cost a CTA an SM.
  static constexpr bool kStagedEpilogue = TT <= 4;  // dispatch.MMA_STAGED_EPILOGUE_MAX_TT
  static constexpr int kOutStageStride = kStagedEpilogue ? kRows + 8 : 8;  // +16 B: stmatrix rows hit distinct banks
  static_assert(STAGE_K % kSubK == 0, "STAGE_K must be a multiple of 64");
  static_assert(BLOCK_K % kSubK == 0, "the packed BLOCK_K must be a multiple of 64");
  // Each stage's weights are whole packed K blocks, copied as they lie in memory (see Smem).
  static constexpr int kSubsPerBlock = BLOCK_K / kSubK;
  static constexpr int kBlocksPerStage = STAGE_K / BLOCK_K;
  static_assert(STAGE_K % BLOCK_K == 0, "a stage holds whole packed K blocks");

  // One ring of STAGES stages in dynamic shared memory (the host passes
  // chord_kernels.dispatch mma_smem_bytes(), which mirrors sizeof(Smem)). A stage holds STAGE_K
  // columns of everything the CTA reads: each lane's weight chunks, the scales of the CTA's
  // rows and the gathered activation rows. The family fills a_row / out_row (-1 = no row).
  // Weights: per K block and n-tile the block's 32 x BLOCK_K/64 16-byte chunks in memory order
  // (lane-major: lane o's chunk of sub-block h at o * BLOCK_K/64 + h), so a warp's copy of it is
  // a plain memcpy. Why (measured on the H200, masked decode at BLOCK_K 128): cp.async moves a
  // 32-byte sector to shared memory as one piece only when the lanes reading it write adjacent
  // shared bytes; splitting a lane's two chunks (one plane per sub-block) or copying each lane's
  // chunk of one sub-block (half a sector each) both doubled the L2 requests and the kernel's time.
  // The consumers' 16-byte reads of one sub-block are then 2-way bank conflicted at BLOCK_K 128.
  struct Smem {
    uint4 w[STAGES][kBlocksPerStage][kWarps][NT][32 * kSubsPerBlock];
    __nv_bfloat16 scale[STAGES][kGroupsPerStage][kRows];
    __nv_bfloat16 act[STAGES][kTok][kActStride];
    __nv_bfloat16 out_stage[kStagedEpilogue ? kTok : 1][kOutStageStride];  // the epilogue's tile (store)
    int32_t a_row[kTok];
    int32_t out_row[kTok];
    // Stream-K schedule only (common/w4a16_mma_streamk.cuh): each ring slot's tile rows (route
    // ids, -1 = none), written when the slot is loaded, read by the tile's epilogue; and the
    // CTA's "I finish this split tile" answer; and whether the weight loads go L2 evict-first.
    int32_t route[STAGES][kTok];
    int32_t finisher;
    int32_t evict_first;
  };

  __device__ static Smem& smem() {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    if (dynamic_smem_bytes() < sizeof(Smem)) __trap();  // host and device disagree: fail loudly
    return *reinterpret_cast<Smem*>(smem_raw);
  }

  // Where this thread's weight and scale copies for one (expert, CTA column tile) start: chunk
  // `lane` of K block 0 per n-tile of its warp (the warp copies a block front to back, 512 bytes
  // an instruction, and reads only its own blocks back, so no extra barrier), and its 16-byte
  // chunks of the CTA rows' scales at stage 0.
  // Built once per tile, so a stage's copies cost an add each (the 64-bit index math of
  // fragment_chunk_word per copy was a third of the decode loop's instructions).
  static constexpr int kScaleChunks = kGroupsPerStage * kRows / 8;  // 8 scales each (N % 16 == 0)
  static constexpr int kScaleCopies = (kScaleChunks + kThreads - 1) / kThreads;
  struct Sources {
    const int32_t* w[NT];
    const __nv_bfloat16* scale[kScaleCopies];
    int scale_bytes[kScaleCopies];  // 16, or 0: past N or past the chunks (zero-filled)
  };

  __device__ static Sources sources(const MoeParams& p, int expert, int row0) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int n_tiles = p.n / kTile;
    const int tile0 = row0 / kTile + warp * NT;  // this warp's first n-tile
    const BlockChunk first = block_chunk<BLOCK_K>(lane);  // the chunk this lane copies of each block
    Sources src;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int tile = min(tile0 + t, n_tiles - 1);  // clamp: tiles past N compute, never store
      src.w[t] = p.qweight + fragment_chunk_word<BLOCK_K>(expert, tile, first.sub, first.lane, n_tiles, p.k / BLOCK_K);
    }
#pragma unroll
    for (int i = 0; i < kScaleCopies; ++i) {
      const int c = tid + i * kThreads;
      const int grp = c / (kRows / 8), col = (c % (kRows / 8)) * 8;
      const bool valid = c < kScaleChunks && row0 + col < p.n;
      src.scale[i] = p.scale + ((int64_t)expert * (p.k / kGroupSize) + grp) * p.n + (valid ? row0 + col : 0);
      src.scale_bytes[i] = valid ? 16 : 0;
    }
    return src;
  }

  // Stage s of the weights and scales into ring slot `slot`; with `evict_first` their L2 lines
  // go first (MoeParams::evict_first_tiles). One branch around two copies of the loads, so that
  // each keeps the registers the loads had alone (a branch per copy spilled a 3-CTA ring).
  __device__ static void load_weights_scales(const MoeParams& p, Smem& sm, int slot, const Sources& src, int s,
                                             bool evict_first = false) {
    if (evict_first) {
      load_weights_scales_as<true>(p, sm, slot, src, s);
    } else {
      load_weights_scales_as<false>(p, sm, slot, src, s);
    }
  }
  template <bool kEvictFirst>
  __device__ static void load_weights_scales_as(const MoeParams& p, Smem& sm, int slot, const Sources& src, int s) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    auto copy = [](void* dst, const void* from, int bytes) {
      if constexpr (kEvictFirst) cp_async_16_evict_first(dst, from, bytes);
      else cp_async_16(dst, from, bytes);
    };
#pragma unroll
    for (int j = 0; j < kSubsPerStage; ++j) {  // chunks 32 i + lane of the stage's K block b
      const int b = j / kSubsPerBlock, i = j % kSubsPerBlock;
      const int offset = fragment_sub_offset<BLOCK_K>((s * kBlocksPerStage + b) * kSubsPerBlock) + i * 32 * 4;
#pragma unroll
      for (int t = 0; t < NT; ++t) copy(&sm.w[slot][b][warp][t][32 * i + lane], src.w[t] + offset, 16);
    }
    const int scale_offset = s * kGroupsPerStage * p.n;
#pragma unroll
    for (int i = 0; i < kScaleCopies; ++i) {
      const int c = tid + i * kThreads;
      if (kScaleChunks % kThreads == 0 || c < kScaleChunks)
        copy(&sm.scale[slot][c / (kRows / 8)][(c % (kRows / 8)) * 8], src.scale[i] + scale_offset, src.scale_bytes[i]);
    }
  }

  // One token tile (decode: every point up to ~8 rows an expert) scales the FP32 products, not
  // the weights: per K group and n-tile the two k steps' MMAs on the unscaled codes (u - 8, exact
  // in BF16) go into a zeroed partial, then 4 FFMAs add scale x partial to the accumulators. The
  // dequant loses its BF16 multiply (4 HMUL2 a fragment word, a quarter of decode's issue slots;
  // indexed-kernels.md "decode instruction budget") for 2 FFMAs a word. With 2+ token tiles the
  // FFMAs per partial grow with TT while the multiplies saved stay: those keep scaled weights.
  // Numerics: the scale is applied once in FP32 to the exact code products (the reference rounds
  // each bf16((u-8)*s) first): not bit-identical, closer to the exact product.
  static constexpr bool kScaleProducts = TT == 1;
  // kOffsetCodes (4 weight tiles a warp): the codes also skip the subtraction of 136 (4 HSUB2 a
  // word). The MMAs take BF16 128 + u as the LOP3 leaves it and each partial starts from -136 x
  // the group's activation sums: two MMAs a group and warp on a constant -136 fragment, shared by
  // the warp's NT tiles. The partial is sum((u-8) a) computed as sum((128+u) a) - 136 sum(a) in
  // FP32: 4 more bits cancel (136 / 8), ~2^-20 relative, far under BF16's output rounding (2^-9).
  // Measured (indexed-kernels.md v44, ncu ABBA on the H200): the stage's instructions -18 %, TP8
  // down T=8-128 (NT 4, K 256) -0.9 to -2.8 % at both clocks, the grouped NT 4 tiles even; at NT 2
  // (50 % more MMAs, not 25 %) +0.5 to +1 %, so NT 2 keeps the subtraction.
  static constexpr bool kOffsetCodes = kScaleProducts && NT >= 4;

  // acc += this warp's weight rows x the tile's rows over the STAGE_K columns in ring slot `slot`.
  __device__ static void mma_stage(const Smem& sm, int slot, float (&acc)[NT][TT][4]) {
    if constexpr (kDiagFeedOnly) return;  // common/moe_params.cuh
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const __nv_bfloat16(*act)[kActStride] = sm.act[slot];
#pragma unroll
    for (int j = 0; j < kSubsPerStage; ++j) {
      uint4 w[NT];
      __nv_bfloat162 s_lo[NT][2], s_hi[NT][2];  // per tile and scale group: rows g and g+8
      float f_lo[NT][2], f_hi[NT][2];          // the same as FP32 (kScaleProducts)
      // The scale of weight row g (hi: g + 8) of tile t in group grp of this sub-block.
      auto scale_of = [&](int t, int grp, bool hi) {
        return sm.scale[slot][j * 2 + grp][(warp * NT + t) * kTile + lane / 4 + (hi ? 8 : 0)];
      };
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        w[t] = sm.w[slot][j / kSubsPerBlock][warp][t][lane * kSubsPerBlock + j % kSubsPerBlock];
        // kOffsetCodes reads its scales where used (below): held from here, the 4-tile kernels spilled.
#pragma unroll
        for (int grp = 0; grp < 2; ++grp) {
          if constexpr (kScaleProducts && !kOffsetCodes) {
            f_lo[t][grp] = __bfloat162float(scale_of(t, grp, false));
            f_hi[t][grp] = __bfloat162float(scale_of(t, grp, true));
          } else if constexpr (!kScaleProducts) {
            s_lo[t][grp] = __bfloat162bfloat162(scale_of(t, grp, false));
            s_hi[t][grp] = __bfloat162bfloat162(scale_of(t, grp, true));
          }
        }
      }
#pragma unroll
      for (int kp = 0; kp < 2; ++kp) {  // pairs of 16-wide k tiles: one ldmatrix.x4 per 8 rows
        uint32_t b[TT][4];  // b[tt][0..1]: k tile 2*kp, b[tt][2..3]: k tile 2*kp+1
#pragma unroll
        for (int tt = 0; tt < TT; ++tt) {
          const int quad = lane / 8;  // matrix this lane addresses: (tile, k half) of the pair
          ldmatrix_x4(b[tt], &act[tt * 8 + lane % 8][j * kSubK + (2 * kp + quad / 2) * kTile + (quad % 2) * 8]);
        }
        auto word_of = [&](int t, int kt) { return kt == 0 ? w[t].x : kt == 1 ? w[t].y : kt == 2 ? w[t].z : w[t].w; };
        if constexpr (kScaleProducts) {  // k tiles 2kp, 2kp+1 are scale group kp of the sub-block
          // kOffsetCodes: -136 x the group's activation sums, per token (every weight row alike);
          // the partials start from it, so the codes go in as 128 + u with no subtraction.
          float bias[4] = {};
          if constexpr (kOffsetCodes)
            mma_m16n8k32_bf16_const_a<kOffsetBiasBf16x2>(bias, b[0][0], b[0][1], b[0][2], b[0][3]);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            float part[4];
            uint32_t afrag[4];
            if constexpr (kOffsetCodes) {
              offset_fragment(word_of(t, 2 * kp), afrag);
              mma_m16n8k16_bf16_from(part, afrag, b[0][0], b[0][1], bias);
              offset_fragment(word_of(t, 2 * kp + 1), afrag);
            } else {
              centered_fragment(word_of(t, 2 * kp), afrag);
              mma_m16n8k16_bf16_zero_c(part, afrag, b[0][0], b[0][1]);
              centered_fragment(word_of(t, 2 * kp + 1), afrag);
            }
            mma_m16n8k16_bf16(part, afrag, b[0][2], b[0][3]);
            // D fragment: part[0..1] weight row g, part[2..3] row g + 8
            const float lo = kOffsetCodes ? __bfloat162float(scale_of(t, kp, false)) : f_lo[t][kp];
            const float hi = kOffsetCodes ? __bfloat162float(scale_of(t, kp, true)) : f_hi[t][kp];
            acc[t][0][0] = fmaf(lo, part[0], acc[t][0][0]);
            acc[t][0][1] = fmaf(lo, part[1], acc[t][0][1]);
            acc[t][0][2] = fmaf(hi, part[2], acc[t][0][2]);
            acc[t][0][3] = fmaf(hi, part[3], acc[t][0][3]);
          }
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              uint32_t afrag[4];
              dequantize_fragment(word_of(t, 2 * kp + h), s_lo[t][kp], s_hi[t][kp], afrag);
#pragma unroll
              for (int tt = 0; tt < TT; ++tt) mma_m16n8k16_bf16(acc[t][tt], afrag, b[tt][2 * h], b[tt][2 * h + 1]);
            }
          }
        }
      }
    }
  }

  // Accumulator group i (weight tile t = i / TT, row tile tt = i % TT: the lane's 4 floats) to
  // out[out_rows[...], row0 + this warp's columns], rows -1 skipped. D fragment: v.x, v.y =
  // weight row g, tile rows 2q, 2q+1; v.z, v.w = weight row g+8.
  __device__ static void store4(const MoeParams& p, int row0, const int32_t* out_rows, int i, float4 v) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = i / TT, tt = i % TT;
    const int tile = row0 / kTile + warp * NT + t;
    if (kDiagNoStore || tile >= p.n / kTile) return;  // the clamped tiles past N
    const int col = tile * kTile + lane / 4;
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int out_row = out_rows[tt * 8 + 2 * (lane % 4) + (j & 1)];
      if (out_row >= 0) p.out[(int64_t)out_row * p.ldc + col + 8 * (j >> 1)] = __float2bfloat16_rn(e[j]);
    }
  }

  // The tile's outputs to out[out_rows[r], row0 + the CTA's columns], rows -1 skipped; up to 32
  // rows through sm.out_stage (why: common/staged_store.cuh): each warp stages its columns, then
  // the CTA writes 16-byte row pieces. All threads call it. One barrier: the stage is free on
  // entry (a CTA stores once, or, on the stream-K schedule, after at least one loop barrier since
  // the last tile's store read it).
  __device__ static void store(const MoeParams& p, Smem& sm, const float (&acc)[NT][TT][4], int row0,
                               const int32_t* out_rows) {
    if constexpr (kStagedEpilogue) {
      const int warp = threadIdx.x / 32;
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int tt = 0; tt < TT; ++tt)
          stage_accumulators(sm.out_stage, 8 * tt, (warp * NT + t) * kTile, acc[t][tt]);
      __syncthreads();
      store_staged_rows<kTok, kRows, kOutStageStride, kThreads>(p, sm.out_stage, out_rows, row0, threadIdx.x,
                                                                out_rows_vectorizable(p));
    } else {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int tt = 0; tt < TT; ++tt)
          store4(p, row0, out_rows, t * TT + tt, make_float4(acc[t][tt][0], acc[t][tt][1], acc[t][tt][2], acc[t][tt][3]));
    }
  }

  // One tile, non-persistent: requires sm.a_row / sm.out_row filled and a barrier after it.
  __device__ static void run(const MoeParams& p, Smem& sm, int expert) {
    const int tid = threadIdx.x;
    const int num_stages = p.k / STAGE_K;
    const int row0 = blockIdx.x * kRows;  // first weight row of the CTA

    const Sources src = sources(p, expert, row0);
    auto load_stage = [&](int s) {
      if (s < num_stages) {
        const int slot = s % STAGES;
        load_weights_scales(p, sm, slot, src, s);
        // Activations: the tile's gathered rows, 16 bytes at a time; missing rows read as zero.
        constexpr int kChunksPerRow = STAGE_K / 8;
        for (int c = tid; c < kTok * kChunksPerRow; c += kThreads) {
          const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
          const int a_row = sm.a_row[row];
          const __nv_bfloat16* src = p.a + (a_row >= 0 ? (int64_t)a_row * p.lda : 0) + (int64_t)s * STAGE_K + col;
          cp_async_16(&sm.act[slot][row][col], src, a_row >= 0 ? 16 : 0);
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
      mma_stage(sm, s % STAGES, acc);
    }
    cp_async_wait<0>();
    store(p, sm, acc, row0, sm.out_row);
  }
};

}  // namespace chord
