// Output tiles through shared memory, for the swapped-operand tiles (weights on MMA-M, the tile's
// rows on MMA-N: common/w4a16_mma_tile.cuh, common/w4a16_wgmma_tile.cuh).
//
// Why: straight from the accumulators a lane holds output columns g and g + 8 of a row, so every
// 16 columns of a row take two 2-byte stores and each 32-byte sector is written in two halves
// (ncu, TP8 T=2048 down on the wgmma tile: 8x Humming's store instructions and 2x its L2 write
// sectors; staging it bought that down 19-31 %, docs/design/indexed-kernels.md v15, v15b). Here
// `stmatrix .trans` turns a fragment's M pairs into 16-byte row pieces of a [row][column] BF16
// tile in shared memory, and threads write those pieces to global memory 16 bytes at a time.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/moe_params.cuh"

namespace chord {

// Two 8x8 BF16 matrices from a warp's fragment registers to shared memory, transposed
// (stmatrix .x2 .trans, sm_90): lane l holds elements (l / 4, 2 (l % 4) + {0, 1}) of matrix i in
// r_i (low half first); column c of matrix i lands as 16 contiguous bytes at the address lane
// 8 i + c passes (lanes 16-31 pass nothing the instruction reads). For the swapped-operand
// accumulators that turns a fragment's M pairs into row pieces.
__device__ __forceinline__ void stmatrix_x2_trans(const void* row_addr, uint32_t r0, uint32_t r1) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r0), "r"(r1)
               : "memory");
}

// A lane's accumulator group of the swapped layout — 4 floats: weight row g = lane / 4 at tile
// rows 2 (lane % 4) + {0, 1}, then weight row g + 8 at the same rows — rounded to BF16 (as the
// direct stores round) into stage rows row8..row8+7, columns col16..col16+15. Warp-collective.
template <int STRIDE>
__device__ __forceinline__ void stage_accumulators(__nv_bfloat16 (*stage)[STRIDE], int row8, int col16,
                                                   const float* a) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a[0], a[1]), hi = __floats2bfloat162_rn(a[2], a[3]);
  const int r = threadIdx.x % 16;  // lanes 0-7 address matrix 0's rows (columns +0..7), 8-15 matrix 1's (+8..15)
  stmatrix_x2_trans(&stage[row8 + r % 8][col16 + 8 * (r / 8)], reinterpret_cast<const uint32_t&>(lo),
                    reinterpret_cast<const uint32_t&>(hi));
}

// 16-byte stores need out's row starts 16-byte aligned (vLLM's outputs are); otherwise 2-byte.
__device__ __forceinline__ bool out_rows_vectorizable(const MoeParams& p) {
  return p.ldc % 8 == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;
}

// Stage rows 0..ROWS-1, columns 0..COLS-1, to out[out_rows[r], col0 + c] (rows -1 skipped): THREADS
// threads (this one is `t` of them), COLS / 8 a row, one 16-byte piece each per pass. N is a
// multiple of 16, so an 8-column piece is wholly inside N or wholly past it.
// The passes go in batches of up to kBatch: every out row and staged piece of a batch is read
// before its first store. Why: through generic pointers the compiler cannot tell a store to `out`
// from the shared reads, so pass by pass it rereads both after each store, one shared-memory
// round trip a pass in series (ncu, grouped EP32 T=2048 down on the 256 x 128 tile: the epilogue
// was 9 % of the consumers' samples, most of it waiting on those reads). A batch holds 5 registers
// a pass (the widest tile, 256 x 128, has room for 8; a 256 x 160 one spilled 196 bytes at 8).
template <int ROWS, int COLS, int STRIDE, int THREADS>
__device__ __forceinline__ void store_staged_rows(const MoeParams& p, const __nv_bfloat16 (*stage)[STRIDE],
                                                  const int32_t* out_rows, int col0, int t, bool vec) {
  constexpr int kPiecesPerRow = COLS / 8;
  static_assert(COLS % 8 == 0 && THREADS % kPiecesPerRow == 0, "whole rows of 16-byte pieces per pass");
  constexpr int kRowStep = THREADS / kPiecesPerRow;
  constexpr int kPasses = (ROWS + kRowStep - 1) / kRowStep;
  constexpr int kBatch = kPasses < 8 ? kPasses : 8;
  const int piece = t % kPiecesPerRow, col = col0 + piece * 8;
  if (kDiagNoStore || col >= p.n) return;
  const int row0 = t / kPiecesPerRow;
#pragma unroll
  for (int b = 0; b < kPasses; b += kBatch) {
    int32_t out_row[kBatch];
    uint4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int row = row0 + (b + i) * kRowStep;
      const bool in_tile = row < ROWS;  // also false past the last pass (row0 < kRowStep)
      out_row[i] = in_tile ? out_rows[row] : -1;
      if (in_tile) v[i] = *reinterpret_cast<const uint4*>(&stage[row][piece * 8]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (out_row[i] < 0) continue;
      __nv_bfloat16* dst = p.out + (int64_t)out_row[i] * p.ldc + col;
      if (vec) {
        *reinterpret_cast<uint4*>(dst) = v[i];
      } else {
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v[i]);
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = e[j];
      }
    }
  }
}

}  // namespace chord
