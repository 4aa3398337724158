// Shared W4A16 primitives: the fragment-tiled INT4 format (format v1) and its dequantization.
//
// The layout is defined once in Python (chord_kernels/layouts.py, whose docstring is the
// spec); this header is its device-side reader. A 16x16 weight tile is one MMA A-operand
// fragment: lane l owns rows g = l/4 and g+8, columns c = 2*(l%4) + {0,1} and c+8+{0,1}; its
// eight codes are one int32 word with nibble order [e0,e2,e4,e6,e1,e3,e5,e7] over the fragment
// elements e = (a0.x, a0.y, a1.x, a1.y, a2.x, a2.y, a3.x, a3.y).
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace chord {

constexpr int kTile = 16;       // rows and columns of one fragment tile
constexpr int kGroupSize = 32;  // K elements per BF16 scale
constexpr int kCodeOffset = 8;  // offset-binary zero of the symmetric INT4 scheme

// Word index of (expert, n-tile, k-tile) for a lane in qweight [E, N/16, K/BK, 32, BK/16].
template <int BLOCK_K>
__device__ __forceinline__ int64_t fragment_word_index(int expert, int n_tile, int k_tile, int lane,
                                                       int n_tiles, int k_blocks) {
  constexpr int kTilesPerBlock = BLOCK_K / kTile;
  const int k_block = k_tile / kTilesPerBlock;
  const int k_in_block = k_tile % kTilesPerBlock;
  return ((((int64_t)expert * n_tiles + n_tile) * k_blocks + k_block) * 32 + lane) * kTilesPerBlock +
         k_in_block;
}

// Int32 word index of the 16-byte chunk a lane reads for (expert, n-tile, 64-wide K sub-block):
// its four consecutive fragment words (k tiles 4*sub .. 4*sub+3), as one LDS/cp.async of 16 B.
template <int BLOCK_K>
__device__ __forceinline__ int64_t fragment_chunk_word(int expert, int n_tile, int sub, int lane, int n_tiles,
                                                       int k_blocks) {
  constexpr int kSubsPerBlock = BLOCK_K / 64;
  return ((((int64_t)expert * n_tiles + n_tile) * k_blocks + sub / kSubsPerBlock) * 32 + lane) * (BLOCK_K / kTile) +
         (sub % kSubsPerBlock) * 4;
}

// Int32 words from a lane's chunk of sub-block 0 to its chunk of sub-block `sub` (same lane,
// n-tile and expert): whole BLOCK_K blocks of 32 lanes, then 4 words per sub-block inside one.
template <int BLOCK_K>
__device__ __forceinline__ int fragment_sub_offset(int sub) {
  constexpr int kSubsPerBlock = BLOCK_K / 64;
  return (sub / kSubsPerBlock) * 32 * (BLOCK_K / kTile) + (sub % kSubsPerBlock) * 4;
}

// Chunk c (16 bytes at byte 16·c) of one packed K block: sub-block `sub` (64 K columns) of lane
// `lane` (a K block is 32 lanes x BLOCK_K/64 chunks, lane-major). Kernels copy a block front to
// back, chunk c by lane c % 32 of the copying warp, into shared memory in the same order.
struct BlockChunk {
  int lane;
  int sub;
};

template <int BLOCK_K>
__device__ __forceinline__ BlockChunk block_chunk(int c) {
  constexpr unsigned kSubsPerBlock = BLOCK_K / 64;
  // c >= 0: unsigned division is a shift and a mask, with no sign to carry into the 64-bit index
  // math (signed, ptxas kept c and the quotient's sign in registers over the k loop: at 4 CTAs
  // an SM the BLOCK_K-128 decode kernel spilled both; grouped-kernels.md v44).
  const unsigned u = static_cast<unsigned>(c);
  return {static_cast<int>(u / kSubsPerBlock), static_cast<int>(u % kSubsPerBlock)};
}

// Position inside the 16x16 tile of the code held in nibble j of lane's word.
struct FragmentPos {
  int row;
  int col;
};

__device__ __forceinline__ FragmentPos fragment_position(int lane, int nibble) {
  const int element = nibble < 4 ? 2 * nibble : 2 * (nibble - 4) + 1;  // e index
  const int reg = element >> 1;                                          // a0..a3
  FragmentPos p;
  p.row = lane / 4 + 8 * (reg & 1);
  p.col = 2 * (lane % 4) + 8 * (reg >> 1) + (element & 1);
  return p;
}

// (u - 8) * scale rounded once to BF16: the exact product is representable in fp32, so this
// matches compressed-tensors' decompress bit for bit.
__device__ __forceinline__ __nv_bfloat16 dequantize_code(uint32_t code, float scale) {
  return __float2bfloat16_rn(static_cast<float>(static_cast<int>(code) - kCodeOffset) * scale);
}

// (w & 0x000F000F) | 0x43004300 as one LOP3: ptxas left alone emits an AND and an OR (a LOP3
// takes one 32-bit immediate), a quarter of the decode loop's dequant instructions.
__device__ __forceinline__ uint32_t nibbles_to_bf16x2(uint32_t w) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(w), "n"(0x000F000F), "r"(0x43004300));  // (a & b) | c
  return d;
}

// One fragment word -> the four BF16x2 A registers of mma.m16n8k16 holding 128 + u (exact):
// (w >> 4r) & 0x000F000F holds nibbles r and r+4 = register a_r's pair; OR-ing 0x4300 makes
// BF16 128+u. a0/a2 are row g, a1/a3 row g+8. Callers remove the 136 (128 + the zero point 8)
// by a subtraction (centered_fragment) or in the accumulator (kOffsetBiasBf16x2).
__device__ __forceinline__ void offset_fragment(uint32_t word, uint32_t (&a)[4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) a[r] = nibbles_to_bf16x2(word >> (4 * r));
}

// BF16x2 (-136, -136): an A fragment of it times the activations gives -136 x their K sums, the
// same in every weight row, which turns the products of 128 + u into those of u - 8.
constexpr uint32_t kOffsetBiasBf16x2 = 0xC308C308u;

// One fragment word -> the four BF16x2 A registers holding u - 8 (exact), unscaled.
__device__ __forceinline__ void centered_fragment(uint32_t word, uint32_t (&a)[4]) {
  const __nv_bfloat162 bias = __floats2bfloat162_rn(136.f, 136.f);
  offset_fragment(word, a);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a[r]), bias);
    a[r] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

// One fragment word -> the four BF16x2 A registers, scaled: centered_fragment, then one BF16
// multiply by the group scale (rounds once, RN): bit-identical to bf16((u-8)*s). a0/a2 are row g
// (scale s_lo), a1/a3 row g+8 (scale s_hi); all four share one K group.
__device__ __forceinline__ void dequantize_fragment(uint32_t word, __nv_bfloat162 s_lo, __nv_bfloat162 s_hi,
                                                    uint32_t (&a)[4]) {
  centered_fragment(word, a);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a[r]), (r & 1) ? s_hi : s_lo);
    a[r] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

}  // namespace chord
