// Shared-memory mbarriers and warpgroup register reallocation (sm_90): the pieces of a
// producer/consumer pipeline in one CTA.
//
// A ring slot has a "full" barrier (the producer's copies landed) and an "empty" barrier (the
// consumers are done reading). Each completes once per use of the slot, so a waiter tracks the
// phase parity: use u of a slot waits for parity u & 1.
#pragma once

#include <stdint.h>

namespace chord {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t expected_arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(expected_arrivals));
}

// Make the initialized barriers visible to the other threads and to the async proxy; follow
// with a CTA barrier before any thread uses them.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The barrier operations take the barrier as a shared-memory address (smem_addr) or a pointer.
// Hot loops pass addresses computed once (see WgmmaTile::Ring): from a pointer, ptxas rebuilt the
// shared window's base (S2UR SR_CgaCtaId and two ULEAs) at every use, on the consumers' critical
// path (ncu, docs/design/indexed-kernels.md v27).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) { mbarrier_arrive(smem_addr(bar)); }

// Arrive on `bar` once every cp.async this thread issued so far has landed (counts as one of
// the barrier's expected arrivals: .noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* bar) { cp_async_mbarrier_arrive(smem_addr(bar)); }

__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) { mbarrier_wait(smem_addr(bar), parity); }

// A CTA barrier over a subset of its warps (ID 1..15; 0 is __syncthreads'): THREADS threads,
// a multiple of 32, all of whole warps, must call it.
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_sync() {
  static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "named barrier id 1..15, whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}

// The same with the ID known only at run time (e.g. one barrier per warpgroup), uniform per warp.
template <int THREADS>
__device__ __forceinline__ void named_barrier_sync(int id) {
  static_assert(THREADS % 32 == 0, "whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}

// Arrive on a named barrier without waiting (the producer side of a turn-taking handoff: the
// barrier completes once THREADS threads, the waiters' bar.sync included, have arrived).
template <int THREADS>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  static_assert(THREADS % 32 == 0, "whole warps");
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}

// Hand registers between warpgroups (all warps of a warpgroup execute it; counts are per
// thread, multiples of 8 in 24..256).
template <int REGS>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

}  // namespace chord
