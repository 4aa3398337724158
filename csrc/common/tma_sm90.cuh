// Tensor-map copies (the TMA unit, sm_90): one instruction moves a whole box of a tensor from
// global to shared memory and completes a byte count on an mbarrier.
//
// Why here: the wgmma tile's producer copied a stage's weights and scales as one 16-byte cp.async
// per chunk (8-10 a producer thread a stage, each with its own address); a box per stage is one
// instruction from one thread, so the producer's issue slots go to the gathered activation rows
// only (docs/design/indexed-kernels.md v22). The host encodes the maps
// (chord_kernels.tma, cuTensorMapEncodeTiled) and passes them inside the kernel's parameter
// struct (MoeTmaParams), where the TMA unit reads them.
#pragma once

#include <stdint.h>

#include "common/mbarrier_sm90.cuh"

namespace chord {

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned (what the hardware requires).
struct alignas(64) TensorMap {
  uint64_t opaque[16];
};

// Fetch the map into the TMA unit's descriptor cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
}

// One arrival on `bar` that also tells it `bytes` more are coming by TMA (its phase completes
// once every expected arrival came and those bytes landed).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// The box of `map` at coordinates c (innermost first) into shared memory at `dst` (128-byte
// aligned), completing its bytes on `bar`. Elements outside the tensor are filled with zeros
// and still count toward the bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap& map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap& map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(void* dst, const TensorMap& map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(void* dst, const TensorMap& map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
      "[%7];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(smem_addr(bar))
      : "memory");
}

}  // namespace chord
