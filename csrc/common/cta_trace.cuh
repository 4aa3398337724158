// Per-CTA timing of one launch, for the diagnostic builds only (chord_kernels/cta_trace.py:
// CHORD_CTA_TRACE=1 compiles every kernel with these hooks around its body; a normal build never
// includes this file, so its kernels are untouched instruction for instruction).
//
// Why: ncu reports an SM balance (min / avg / max active cycles) but not which SM or CTA was
// slow, and a stream-K launch gives every CTA its own run of the work (docs/design: skewed EP8
// T=20 gate_up, 7 % over the average on the slowest SM with equal runs). One record a CTA says
// where it ran and when it started and ended: the host lines those up with the schedule.
//
// Each CTA's thread 0 writes its SM and start stamps at entry; every warp's lane 0 raises the
// end stamps to the warp's exit time (atomicMax: the CTA ends with its last warp). The host zeroes
// the records before the launch it wants (cta_trace.clear_all), so a record with valid = 0 is a
// CTA that did not run, or one past kCtaTraceCapacity.
#pragma once

#include <stdint.h>

struct ChordCtaRecord {
  uint32_t smid;
  uint32_t valid;         // 1 once the CTA started
  uint64_t clock_start;   // clock64() of the SM it ran on: durations within one SM only
  uint64_t clock_end;
  uint64_t time_start;    // %globaltimer, ns: one clock for every SM (coarse ticks)
  uint64_t time_end;
  // The stream-K schedule's view of this CTA (cta_trace_schedule; zeros in other kernels):
  int32_t iterations, sk0, sk1, stages, dp_tiles, tiles, col_tiles, unused;
};

constexpr int kCtaTraceCapacity = 8192;  // CTAs a launch recorded (the persistent grids hold 132-528)

// C linkage: the host finds the array by this name (cuModuleGetGlobal). Zero at module load.
extern "C" {
__device__ ChordCtaRecord chord_cta_trace[kCtaTraceCapacity];
}

namespace chord {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ int64_t cta_linear_index() {
  return blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
}

__device__ __forceinline__ void cta_trace_begin() {
  const int64_t cta = cta_linear_index();
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || cta >= kCtaTraceCapacity) return;
  ChordCtaRecord& r = chord_cta_trace[cta];
  r.smid = sm_id();
  r.clock_start = clock64();
  r.time_start = global_timer_ns();
  r.valid = 1;
}

// Every thread of the CTA calls it once, after the kernel's body returned (no thread exits
// inside the body), so the warp can meet before its lane 0 stamps the warp's end.
__device__ __forceinline__ void cta_trace_end() {
  const int64_t cta = cta_linear_index();
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  __syncwarp();
  if (thread % 32 != 0 || cta >= kCtaTraceCapacity) return;
  ChordCtaRecord& r = chord_cta_trace[cta];
  atomicMax(reinterpret_cast<unsigned long long*>(&r.clock_end), (unsigned long long)clock64());
  atomicMax(reinterpret_cast<unsigned long long*>(&r.time_end), (unsigned long long)global_timer_ns());
}

// A stream-K kernel's CTA notes its share of the work (StreamKWork): the host lines the CTAs'
// times up with it (segments, split tiles, row tiles) without re-deriving the device's row-tile
// count. Every thread calls it (row_tiles may be warp-collective), thread 0 writes; under
// #ifdef CHORD_CTA_TRACE (the traced build defines it).
template <class Work>
__device__ __forceinline__ void cta_trace_schedule(const Work& w, int row_tiles) {
  const int64_t cta = cta_linear_index();
  if (threadIdx.x != 0 || cta >= kCtaTraceCapacity) return;
  ChordCtaRecord& r = chord_cta_trace[cta];
  r.iterations = w.iterations(), r.sk0 = w.sk0, r.sk1 = w.sk1, r.stages = w.stages, r.dp_tiles = w.dp_tiles;
  r.tiles = row_tiles * w.col_tiles, r.col_tiles = w.col_tiles;
}

}  // namespace chord
