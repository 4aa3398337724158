// Launch parameters shared by the indexed kernels (vLLM moe_align_block_size routing).
#pragma once

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace chord {

struct IndexedParams {
  const __nv_bfloat16* a;          // [M, K], row stride lda
  const int32_t* qweight;          // [E, N/16, K/BLOCK_K, 32, BLOCK_K/16]
  const __nv_bfloat16* scale;      // [E, K/32, N]
  __nv_bfloat16* out;              // [num_routes, N], row stride ldc
  const int32_t* sorted_ids;       // [>= num_blocks * block_m]
  const int32_t* expert_ids;       // [num_blocks]
  const int32_t* num_tokens_padded;  // [1], on the device
  int64_t lda;
  int64_t ldc;
  int32_t num_routes;  // M * top_k; also the padding sentinel
  int32_t n;
  int32_t k;
  int32_t top_k;
  int32_t num_experts;
  int32_t block_m;     // routing block size (moe_align_block_size)
  int32_t num_blocks;  // entries of expert_ids that may be read
  int32_t ctas_per_block;  // CTAs per routing block: ceil(block_m / routed rows per CTA)
  int32_t sorted_len;      // entries of sorted_ids that may be read (vLLM's may end mid-block)
};
// The host packs this struct by hand (chord_kernels/ops.py, INDEXED_PARAMS): keep them in step.
static_assert(sizeof(IndexedParams) == 112, "IndexedParams layout changed: update the host packer");
static_assert(offsetof(IndexedParams, lda) == 56 && offsetof(IndexedParams, num_routes) == 72,
              "IndexedParams layout changed: update the host packer");

}  // namespace chord
