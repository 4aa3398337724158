// Device code's integer logic run on the CPU: the row-tile tables and the stream-K schedule read
// routing on the device, where a wrong index is a wrong output and not a crash. This header lets
// a host program include the kernel headers unchanged (csrc/) and run one CTA at a time, each of
// its threads a fiber (ucontext) on one OS thread, switched at every CTA barrier and warp
// intrinsic, with shared memory emulated. Only integer code and plain loads and stores run here:
// the MMA, copy and asm wrappers compile but must never be called (their stand-ins abort).
// tests/test_device_logic_on_host.py builds and drives the programs beside it.
//
// Why fibers and not std::threads: a CTA's 128 threads on a 2-core CI machine spent minutes a
// case waking each other at every shuffle; fibers switch in user space, always in the same
// order (a run is deterministic), and a barrier that some threads never reach is reported as a
// deadlock instead of hanging.
//
// Include this before any kernel header (it defines the CUDA qualifiers before cuda_bf16.h does).
#pragma once

// Qualifiers: host functions; a __shared__ variable is one object shared by the running CTA's
// threads (only one CTA runs at a time).
#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __forceinline__ inline

#include <cuda_bf16.h>
#include <vector_types.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace host_emu {

[[noreturn]] inline void unreachable(const char* what) {
  std::fprintf(stderr, "host_emu: %s\n", what);
  std::abort();
}

enum Wait { kRunnable, kAtCtaBarrier, kAtWarpBarrier, kDone };

// The running CTA: a fiber a thread, the scheduler's context, and the lanes' exchange slots.
struct Cta {
  static constexpr size_t kStackBytes = 256 << 10;
  struct Fiber {
    ucontext_t context;
    std::vector<char> stack;
    Wait wait = kRunnable;
  };
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  int current = 0;
  std::vector<long long> lanes;
  const std::function<void()>* body = nullptr;
};
inline Cta* running = nullptr;
// The order the scheduler runs the threads in (a driver alternates it between cases): a missing
// barrier shows as a thread reading what a later-run thread has not written yet, in one order or
// the other.
inline bool reverse_order = false;

}  // namespace host_emu

// The running thread's coordinates (the scheduler sets them at every switch).
inline uint3 threadIdx{0, 0, 0};
inline uint3 blockIdx{0, 0, 0};
inline dim3 gridDim{1, 1, 1};
inline dim3 blockDim{1, 1, 1};

namespace host_emu {

// The running thread stops at a barrier of `kind` until the scheduler releases it.
inline void wait_at(Wait kind) {
  Cta::Fiber& me = running->fibers[running->current];
  me.wait = kind;
  swapcontext(&me.context, &running->scheduler);
}

// A full-warp exchange: every lane of the warp posts `mine`, then `read` sees all 32 lanes' values
// (the kernels call the warp intrinsics with every lane, mask 0xffffffff).
template <class Read>
inline auto warp_exchange(unsigned mask, long long mine, Read read) {
  if (mask != 0xffffffffu) unreachable("a warp intrinsic over part of a warp has no emulation");
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  running->lanes[threadIdx.x] = mine;
  wait_at(kAtWarpBarrier);
  const auto got = read(&running->lanes[warp * 32], lane);
  wait_at(kAtWarpBarrier);  // every lane has read before any posts again
  return got;
}

}  // namespace host_emu

inline void __syncthreads() { host_emu::wait_at(host_emu::kAtCtaBarrier); }

template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta) {
  return host_emu::warp_exchange(mask, static_cast<long long>(v), [&](const long long* lanes, unsigned lane) {
    return lane >= delta ? static_cast<T>(lanes[lane - delta]) : v;
  });
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src) {
  return host_emu::warp_exchange(mask, static_cast<long long>(v),
                                 [&](const long long* lanes, unsigned) { return static_cast<T>(lanes[src & 31]); });
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return host_emu::warp_exchange(mask, static_cast<long long>(v), [&](const long long* lanes, unsigned lane) {
    return static_cast<T>(lanes[(lane ^ lane_mask) & 31]);
  });
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return host_emu::warp_exchange(mask, predicate != 0, [](const long long* lanes, unsigned) {
    unsigned bits = 0;
    for (int l = 0; l < 32; ++l) bits |= lanes[l] ? 1u << l : 0u;
    return bits;
  });
}
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }

template <class T>
inline T __ldg(const T* p) { return *p; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

// CUDA's max/min overloads for the integer types the kernels mix.
inline int max(int a, int b) { return std::max(a, b); }
inline int min(int a, int b) { return std::min(a, b); }
inline long long max(long long a, long long b) { return std::max(a, b); }
inline long long min(long long a, long long b) { return std::min(a, b); }
inline int64_t max(int64_t a, int64_t b) { return std::max(a, b); }
inline int64_t min(int64_t a, int64_t b) { return std::min(a, b); }
inline unsigned max(unsigned a, unsigned b) { return std::max(a, b); }
inline unsigned min(unsigned a, unsigned b) { return std::min(a, b); }

// Stand-ins for what the integer logic never calls, so the kernel headers compile.
inline size_t __cvta_generic_to_shared(const void*) { host_emu::unreachable("__cvta_generic_to_shared: no emulation"); }
inline void __threadfence() { host_emu::unreachable("__threadfence: no emulation"); }
inline int atomicAdd(int*, int) { host_emu::unreachable("atomicAdd: no emulation"); }

// Cache-hinted global loads and stores: plain ones (the stream-K partials' slots).
inline void __stcg(float4* p, float4 v) { *p = v; }
inline float4 __ldcg(const float4* p) { return *p; }

namespace host_emu {

inline void fiber_entry() {
  (*running->body)();
  running->fibers[running->current].wait = kDone;  // then uc_link resumes the scheduler
}

// Runs `body` as CTA `block` of `grid`, `threads` threads, and returns when every thread has.
// Warp by warp (in reverse_order's order), each warp runs ahead as far as it can: its lanes run
// until they stop, and a warp barrier opens as soon as every live lane of the warp waits at it.
// Once no warp can go on, the CTA barrier opens if every live thread waits at it. So a warp reads
// shared memory before the warps after it have written it (their values come later), as a fast
// warp may on the GPU: a missing barrier shows. Threads that ended no longer count (where they
// diverged, a bug under test, the others go on to a wrong answer the test sees); a barrier that
// can never open aborts the program.
inline void run_cta(int block, int grid, int threads, const std::function<void()>& body) {
  Cta cta;
  cta.fibers.resize(threads);
  cta.lanes.resize((threads + 31) / 32 * 32);
  cta.body = &body;
  running = &cta;
  for (auto& f : cta.fibers) {
    f.stack.resize(Cta::kStackBytes);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.data();
    f.context.uc_stack.ss_size = f.stack.size();
    f.context.uc_link = &cta.scheduler;
    makecontext(&f.context, fiber_entry, 0);
  }
  blockIdx = {static_cast<unsigned>(block), 0, 0};
  gridDim = {static_cast<unsigned>(grid), 1, 1};
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  const int warps = (threads + 31) / 32;
  auto run_warp = [&](int w) {  // true if the warp moved
    const int lo = w * 32, hi = std::min(threads, lo + 32);
    bool moved = false;
    for (;;) {
      for (int i = lo; i < hi; ++i) {
        const int t = reverse_order ? lo + hi - 1 - i : i;
        if (cta.fibers[t].wait != kRunnable) continue;
        moved = true;
        cta.current = t;
        threadIdx = {static_cast<unsigned>(t), 0, 0};
        swapcontext(&cta.scheduler, &cta.fibers[t].context);
      }
      bool live = false, all_at_warp = true;
      for (int t = lo; t < hi; ++t) {
        if (cta.fibers[t].wait == kDone) continue;
        live = true;
        all_at_warp &= cta.fibers[t].wait == kAtWarpBarrier;
      }
      if (!live || !all_at_warp) return moved;
      for (int t = lo; t < hi; ++t)
        if (cta.fibers[t].wait == kAtWarpBarrier) cta.fibers[t].wait = kRunnable;
    }
  };
  for (;;) {
    bool moved = false;
    for (int i = 0; i < warps; ++i) moved |= run_warp(reverse_order ? warps - 1 - i : i);
    bool live = false, all_at_cta = true;
    for (auto& f : cta.fibers) {
      if (f.wait == kDone) continue;
      live = true;
      all_at_cta &= f.wait == kAtCtaBarrier;
    }
    if (!live) break;
    if (all_at_cta) {
      for (auto& f : cta.fibers) f.wait = f.wait == kAtCtaBarrier ? kRunnable : f.wait;
    } else if (!moved) {
      unreachable("deadlock: the CTA's threads wait at barriers that can never open");
    }
  }
  running = nullptr;
}

}  // namespace host_emu
