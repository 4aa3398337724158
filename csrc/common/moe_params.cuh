// Launch parameters shared by every W4A16 MoE kernel family. One struct for all routings, so
// the host packs one layout (chord_kernels/ops.py, MOE_PARAMS) and each family reads its fields.
#pragma once

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

#include "common/tma_sm90.cuh"

namespace chord {

// The diagnostic builds (chord_kernels.jit.launch.diagnostic_spec; timing only, wrong outputs).
// Feed only (CHORD_DIAG_FEED_ONLY=1): every tile's `mma_stage` returns at once (no dequantization,
// no MMA), so a kernel takes as long as what feeds its k loop (producer, ring, memory, epilogue).
// No store (CHORD_DIAG_NO_STORE=1): every write to MoeParams::out is skipped (with the reads that
// feed it). Together they leave the loads alone; beside the normal build they say whether the k
// loop, the loads or the stores set a kernel's pace (docs/design/indexed-kernels.md v49).
#ifdef CHORD_DIAG_FEED_ONLY
constexpr bool kDiagFeedOnly = true;
#else
constexpr bool kDiagFeedOnly = false;
#endif
#ifdef CHORD_DIAG_NO_STORE
constexpr bool kDiagNoStore = true;
#else
constexpr bool kDiagNoStore = false;
#endif

// How a kernel finds its rows (the ROUTING template argument of the grouped family).
enum Routing : int {
  kIndexed = 0,        // vLLM moe_align_block_size: sorted_ids / expert_ids / num_tokens_padded
  kContiguousRows = 1,  // DeepGEMM contiguous: m_indices per row, -1 padding, aligned segments
  kContiguousOffsets = 2,  // vLLM grouped_contiguous: expert_offsets [E+1], no alignment
  kMasked = 3,         // [E, max_m] rows, masked_m valid per expert
};

struct MoeParams {
  const __nv_bfloat16* a;          // activations, row stride lda
  const int32_t* qweight;          // [E, N/16, K/BLOCK_K, 32, BLOCK_K/16]
  const __nv_bfloat16* scale;      // [E, K/32, N]
  __nv_bfloat16* out;              // row stride ldc
  const int32_t* sorted_ids;       // indexed: [sorted_len]
  const int32_t* expert_ids;       // indexed: [num_blocks]
  const int32_t* num_tokens_padded;  // indexed: [1], on the device
  const int32_t* m_indices;        // contiguous rows: [num_routes], expert per row, -1 = padding
  const int64_t* expert_offsets;   // contiguous offsets: [num_experts + 1]
  const int32_t* masked_m;         // masked: [num_experts], valid rows per expert
  int64_t lda;
  int64_t ldc;
  int32_t num_routes;  // indexed: M * top_k, also the padding sentinel; grouped: rows of a/out
  int32_t n;
  int32_t k;
  int32_t top_k;       // indexed: activation row = route / top_k
  int32_t num_experts;
  int32_t block_m;     // indexed: routing block size (moe_align_block_size)
  int32_t num_blocks;  // indexed: entries of expert_ids that may be read
  int32_t ctas_per_block;  // indexed: CTAs per routing block; masked: CTAs per expert
  int32_t sorted_len;      // indexed: entries of sorted_ids that may be read
  int32_t max_m;           // masked: rows reserved per expert
  // A pair of kernels launched back to back, of which one runs (the grouped offsets form's
  // 240-row tile and its short tile: chord_kernels.dispatch.pair_with_tall_tile; the masked form's
  // 16-row mma tile and the 256 x 24 tile loop: pair_narrow_mid_batch). Each counts the
  // call's row tiles in its own height and in the other's and runs only if its own cost less
  // (picked). pick_rows = 0: no pair, always run. One kernel holding two tile heights reads the
  // same fields for its taller one (GroupedMmaDecodeDual: pick_rows 16, pick_first 1).
  int32_t pick_rows;        // the other kernel's tile rows
  int32_t pick_cost;        // this kernel's cost a row tile (the dispatch's model units)
  int32_t pick_other_cost;  // the other kernel's
  int32_t pick_first;       // 1: this kernel runs on a tie
  // The mma tile (common/w4a16_mma_tile.cuh): the weight and scale loads mark their L2 lines
  // evict-first where the call's tiles (row tiles, counted on the device, x column tiles) are at
  // most this many (chord_kernels.dispatch.evict_first_tiles; 0: never). Other tiles ignore it.
  int32_t evict_first_tiles;
  float* workspace;        // stream-K: FP32 partials, [grid CTAs][2][threads][accumulators]
  int32_t* locks;          // stream-K: [grid CTAs]; the tile loop: [2] (next tile, CTAs done); zeros, every launch leaves them zero
};
// The host packs this struct by hand: keep them in step.
static_assert(sizeof(MoeParams) == 176, "MoeParams layout changed: update chord_kernels/ops.py");
static_assert(offsetof(MoeParams, lda) == 80 && offsetof(MoeParams, num_routes) == 96 &&
                  offsetof(MoeParams, workspace) == 160,
              "MoeParams layout changed: update chord_kernels/ops.py");

// The parameters of the kernels whose tile loads weights and scales by tensor map
// (WgmmaTile, every BLOCK_K): MoeParams first, then the two maps chord_kernels.tma encodes for the packed
// weight and the tile's rows. The kernel bodies see the MoeParams part (moe_params); the tile's
// producer finds the maps from it (tma_maps: `base` is the first member, so the two share an
// address).
struct MoeTmaParams {
  MoeParams base;
  TensorMap weight_map;  // qweight; box: one stage of the tile's n-tiles (WgmmaTile::tma_weights)
  TensorMap scale_map;   // scale as [E][K/32][N/2 bf16 pairs]; box: one stage's two groups of the tile's rows
};
static_assert(offsetof(MoeTmaParams, weight_map) == 192 && offsetof(MoeTmaParams, scale_map) == 320 &&
                  sizeof(MoeTmaParams) == 448,
              "MoeTmaParams layout changed: update chord_kernels/ops.py");

// The grouped tile loop's parameters (WgmmaTiles with TMA_ACTS): MoeTmaParams, then a map of the
// activations a [rows, K] (bf16, 128-byte swizzle), whose box is one 64-column stage of the tile's
// BN rows (chord_kernels.tma.activation_map_geometry). Encoded once per a's address by the host's plan.
struct MoeTmaActParams {
  MoeTmaParams tma;
  TensorMap act_map;
};
static_assert(offsetof(MoeTmaActParams, act_map) == 448 && sizeof(MoeTmaActParams) == 576,
              "MoeTmaActParams layout changed: update chord_kernels/ops.py");

// Whether this kernel of a pair runs (MoeParams::pick_rows): the call's row tiles cost less in
// its height (`tiles` of them) than in the other's (`other_tiles`). Both kernels compute the same
// two integers from the same routing, so exactly one of them runs.
__device__ __forceinline__ bool picked(const MoeParams& p, int tiles, int other_tiles) {
  const int64_t mine = (int64_t)tiles * p.pick_cost, other = (int64_t)other_tiles * p.pick_other_cost;
  return mine < other || (mine == other && p.pick_first);
}

// What a generated kernel (chord_kernels.jit.kernel) hands its body.
__device__ __forceinline__ const MoeParams& moe_params(const MoeParams& p) { return p; }
__device__ __forceinline__ const MoeParams& moe_params(const MoeTmaParams& p) { return p.base; }
__device__ __forceinline__ const MoeParams& moe_params(const MoeTmaActParams& p) { return p.tma.base; }

// The maps of a kernel declared with MoeTmaParams, from the MoeParams its body was given.
__device__ __forceinline__ const MoeTmaParams& tma_maps(const MoeParams& p) {
  return *reinterpret_cast<const MoeTmaParams*>(&p);
}
// The activation map of a kernel declared with MoeTmaActParams.
__device__ __forceinline__ const TensorMap& tma_act_map(const MoeParams& p) {
  return reinterpret_cast<const MoeTmaActParams*>(&p)->act_map;
}

}  // namespace chord
