// Thread-block clusters (sm_90): the CTAs of a cluster run at once on SMs of one GPC and can read
// each other's shared memory (distributed shared memory). Used by the K split of the one-CTA
// wgmma tile (common/w4a16_wgmma_tile.cuh): the cluster's CTAs compute one tile over disjoint K
// ranges and add their FP32 accumulators through shared memory.
#pragma once

#include <stdint.h>

#include "common/mbarrier_sm90.cuh"

namespace chord {

__device__ __forceinline__ int cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return (int)rank;
}

// Every thread of every CTA of the cluster arrives, then waits for the rest: shared-memory
// writes before it (release) are visible to every CTA of the cluster after it (acquire).
// Not the .aligned form: the producer and consumer warpgroups reach it from different code.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// 16 bytes at `local` (this CTA's shared memory) as they are in CTA `rank` of the cluster: the
// same offset in that CTA's shared memory.
__device__ __forceinline__ float4 ld_shared_cluster_f4(const void* local, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

}  // namespace chord
