// Warp-level tensor-core and async-copy primitives shared by the kernel families.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace chord {

// D += A(16x16, row) * B(16x8, col), BF16 inputs, FP32 accumulate (sm_80+).
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A(16x16, row) * B(16x8, col), BF16 inputs, FP32 result (a zero C operand: no moves to
// clear D).
__device__ __forceinline__ void mma_m16n8k16_bf16_zero_c(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

// D = A(16x16, row) * B(16x8, col) + C, BF16 inputs, FP32 (C kept: D and C are separate registers).
__device__ __forceinline__ void mma_m16n8k16_bf16_from(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                       uint32_t b1, const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// D = A(16x16) * B(16x32 as two k16 halves: b0, b1 then b2, b3) for A all `A_PAIR` (one BF16x2
// value in every register): a constant A times the activations, the same in every row of D. The
// constant lives in a register of this asm only (a 4-register A operand held across the caller's
// loop cost a kernel near its register cap a spill).
template <uint32_t A_PAIR>
__device__ __forceinline__ void mma_m16n8k32_bf16_const_a(float (&d)[4], uint32_t b0, uint32_t b1, uint32_t b2,
                                                          uint32_t b3) {
  asm volatile(
      "{\n.reg .b32 c;\n.reg .f32 z;\nmov.b32 c, %8;\nmov.f32 z, 0f00000000;\n"
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {c,c,c,c}, {%4,%5}, {z,z,z,z};\n"
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {c,c,c,c}, {%6,%7}, {%0,%1,%2,%3};\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(b0), "r"(b1), "r"(b2), "r"(b3), "n"(A_PAIR));
}

// Four 8x8 b16 matrices from shared memory: lane i supplies the row address of matrix i / 8 and
// receives, of each matrix, row (lane / 4) elements 2*(lane % 4) and +1 (the mma B/A layout).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// 16-byte global->shared copy; src_bytes = 0 zero-fills (used for padding rows).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}

// ptxas 13.1 to 13.3 can drop the createpolicy that feeds a cp.async's L2 cache hint and keep the
// copy, which then reads an unset uniform register as its policy: an illegal-instruction trap at
// run time (reported on sm_90 with 13.1 and 13.3.33; fixed in ptxas 13.4.59). Those compilers get
// the plain copy: the weights then take L2's normal policy, slower at T=1, never wrong. 13.0 is
// the toolchain our GPU suite and compute-sanitizer run with. -DCHORD_CP_ASYNC_CACHE_HINT=0/1
// overrides the choice (tests/test_jit.py compiles both).
#define CHORD_PTXAS_DROPS_CACHE_POLICY(major, minor) ((major) == 13 && (minor) >= 1 && (minor) <= 3)
#ifndef CHORD_CP_ASYNC_CACHE_HINT
#if defined(__CUDACC_VER_MAJOR__) && CHORD_PTXAS_DROPS_CACHE_POLICY(__CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__)
#define CHORD_CP_ASYNC_CACHE_HINT 0
#else
#define CHORD_CP_ASYNC_CACHE_HINT 1
#endif
#endif

// cp_async_16 whose L2 line is the first to be evicted: a weight stream read once a call then
// leaves L2 to what the kernels around it keep there, dirty lines among them, whose write-back
// would otherwise share this call's HBM time (indexed-kernels.md v67). The policy is made inside
// the asm (a uniform constant in SASS), so no 64-bit register lives across the loop. A plain
// cp_async_16 where the compiler miscompiles the hint (CHORD_CP_ASYNC_CACHE_HINT above).
__device__ __forceinline__ void cp_async_16_evict_first(void* smem, const void* gmem, int src_bytes) {
#if CHORD_CP_ASYNC_CACHE_HINT
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile(
      "{\n.reg .b64 policy;\ncreatepolicy.fractional.L2::evict_first.b64 policy, 1.0;\n"
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, policy;\n}\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
#else
  cp_async_16(smem, gmem, src_bytes);
#endif
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Streaming 16-byte load that does not pollute L1 (weights are read once per call).
__device__ __forceinline__ uint4 ldg_stream_16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Bytes of dynamic shared memory this launch was given.
__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
  uint32_t v;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(v));
  return v;
}

}  // namespace chord
