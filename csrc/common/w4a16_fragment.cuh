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

}  // namespace chord
