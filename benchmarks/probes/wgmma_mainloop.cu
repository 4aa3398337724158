// The wgmma consumers' k loop alone: how many SM cycles a 64-column stage costs each production
// tile shape when nothing else runs. No producer, no ring barriers, no global memory: every
// consumer thread loops over kSlots ring slots whose contents (random codes, scales and
// activations, written once) never change.
//
// Why: the short-K and mid-batch points (TP8 T=2048 down at 0.83 µs a stage against ~0.23 µs of
// tensor work, TP8 T=2048 gate_up at ~0.95 µs against ~0.45) do not say whether the time goes to
// the consumers' own instruction stream (dequantization, wgmma issue and waits) or to what feeds
// them (the producer, the ring, memory). This measures the first in isolation, and splits it:
//   production  Tile::mma_stage as the kernels run it (paired words where the tile loop uses them)
//   both        this file's copy of that loop (dequantize + wgmma, DEPTH groups left in flight)
//   mma_only    the wgmmas on fixed A fragments: the tensor pipe's rate for the tile shape
//   dequant     the dequantization alone (no wgmma runs; one is compiled in: kept_wgmmas)
// "both" at DEPTH 1 should read as "production" (the copy is faithful); DEPTH 2 and 3 keep more
// wgmma groups in flight (4 A register sets, one a k step of the stage), to see whether the wait
// on the previous group is what a k step waits for.
// Why "both" costs about dequant + half of mma_only on the 512 x 32 tile (1084 cycles against 813
// and 512; indexed-kernels.md v49/v60), where two pipes should overlap, three variants more:
//   pingpong       "both" with the consumer warpgroups in two teams that take turns to issue
//                  their k step's wgmmas (named barriers, as FlashAttention-3 orders its GEMMs):
//                  does staggering the teams let one dequantize while the other's wgmmas run?
//   split          half the warpgroups run mma_only's k loop, the other half dequant's, at once:
//                  near the slower of split_mma / split_dequant (each half alone, the other idle)
//                  says the SM overlaps the two kinds of work across warps, so "both" loses its
//                  overlap inside each warp; near their sum says the two contend for the SM's
//                  issue slots or register file whichever warp runs them.
// Split contends (indexed-kernels.md v62), so which half of the dequantization is it: the same split
// with the dequantizing half running one instruction class only, and each such half alone:
//   split_int, split_int_alone   the integer half (SHF + LOP3: offset_fragment, folded by LOP3)
//   split_fp, split_fp_alone     the BF16 half (HSUB2 + HMUL2 by the scales), each register's
//                                result the next k step's input, so nothing folds away
//
// Build and run on the device: benchmarks/probes/run_mainloop.sh (JSON lines, one a kernel and
// grid, and a markdown table). CPU CI compiles it (tests/test_probes.py: no spill, no serialized
// wgmma) so it keeps up with the headers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/w4a16_wgmma_tile.cuh"

namespace probe {

using namespace chord;

constexpr int kSlots = 4;  // ring slots the loop cycles through

enum Work : int {
  kProduction = 0,
  kBoth = 1,
  kMmaOnly = 2,
  kDequantOnly = 3,
  kPingPong = 4,
  kSplit = 5,
  kSplitMma = 6,
  kSplitDequant = 7,
  kSplitInt = 8,
  kSplitIntAlone = 9,
  kSplitFp = 10,
  kSplitFpAlone = 11
};
constexpr const char* kWorkNames[] = {"production", "both",      "mma_only",        "dequant",
                                      "pingpong",   "split",     "split_mma",       "split_dequant",
                                      "split_int",  "split_int_alone", "split_fp",   "split_fp_alone"};

// Which instructions the dequantizing loop runs: all of dequantize_fragment, its integer half, or its
// BF16 half (split_int / split_fp).
enum Part : int { kPartAll = 0, kPartInt = 1, kPartFp = 2 };

// Turn-taking between two teams of consumer warpgroups (pingpong): team t waits on barrier
// kTurnBarrier + t before issuing a k step's wgmmas and, once they are issued, arrives on the
// other team's. Team 1 arrives on team 0's barrier once before its loop (team 0 goes first) and
// team 0 waits on its own once after its loop, so every barrier generation gets all consumer
// threads. Barrier 1 is timed()'s.
constexpr int kTurnBarrier = 2;

// The team of this thread's consumer warpgroup: 0 for the first half of them, 1 for the second
// (pingpong's turns; split's mma half is team 0).
template <class Tile>
__device__ __forceinline__ int team_of() {
  return (threadIdx.x - Tile::kProducerThreads) / 128 / (Tile::kConsumerWarpgroups / 2);
}

// fold ^= a ^ b in one LOP3: the dequantized fragments must go somewhere or ptxas drops them (an
// empty asm statement does not keep them: ptxas never sees it). Costs the dequant-only loop one
// instruction per two registers, 2 * WM a k step.
__device__ __forceinline__ void fold2(uint32_t& fold, uint32_t a, uint32_t b) {
  asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(fold) : "r"(a), "r"(b));
}

__device__ __forceinline__ uint32_t mix(uint32_t x) {  // a cheap integer hash (lowbias32)
  x ^= x >> 16, x *= 0x7feb352dU, x ^= x >> 15, x *= 0x846ca68bU, x ^= x >> 16;
  return x;
}

// Every thread fills its share of the slots: activations in [-0.5, 0.5), scales 2^-7 (1 + u/8),
// codes random. Finite values only, so the FP32 sums stay finite over thousands of stages.
template <class Tile>
__device__ void fill(typename Tile::Smem& sm, uint32_t seed) {
  auto* act = reinterpret_cast<__nv_bfloat16*>(sm.act);
  for (int i = threadIdx.x; i < int(sizeof(sm.act) / 2); i += blockDim.x)
    act[i] = __float2bfloat16_rn(float(mix(seed ^ i) & 0xFF) / 256.f - 0.5f);
  auto* w = reinterpret_cast<uint32_t*>(sm.w);
  for (int i = threadIdx.x; i < int(sizeof(sm.w) / 4); i += blockDim.x) w[i] = mix(seed + 0x9e3779b9U * (i + 1));
  auto* scale = reinterpret_cast<__nv_bfloat16*>(sm.scale);
  for (int i = threadIdx.x; i < int(sizeof(sm.scale) / 2); i += blockDim.x)
    scale[i] = __float2bfloat16_rn((1.f + float(mix(seed * 7 + i) & 7) / 8.f) / 128.f);
}

// This file's k loop over one slot: Tile::mma_stage's order (the stage's words and scales loaded
// first, dequantize step kt into an A set, issue its wgmmas, commit, wait until DEPTH groups are
// left in flight), with the dequantization or the wgmmas switched off. DEPTH 1 uses two A sets
// (kt & 1) as production does; DEPTH 2-3 four (set kt: the group that last read it is 4 back).
template <class Tile, int WM, int DEPTH, bool DEQUANT, bool MMA, bool TURNS = false, int PART = kPartAll>
struct OwnLoop {
  static_assert(PART == kPartAll || (DEQUANT && !MMA), "one instruction class runs without the wgmmas only");
  static constexpr int kSets = DEPTH == 1 ? 2 : 4;
  static_assert(DEPTH >= 1 && DEPTH <= 3, "1..3 groups in flight");
  static_assert(!DEQUANT || !Tile::kOperandsPerStep, "tiles that load operands per k step dequantize in production only");
  using Acc = typename Tile::Acc;
  using Sets = uint32_t[kSets][WM][4];
  static constexpr int kConsumerThreads = 32 * Tile::kConsumerWarps;
  __device__ __forceinline__ static int team() { return team_of<Tile>(); }
  __device__ __forceinline__ static void turns_begin() {
    if constexpr (TURNS) if (team() == 1) named_barrier_arrive<kConsumerThreads>(kTurnBarrier);
  }
  __device__ __forceinline__ static void turns_end() {
    if constexpr (TURNS) if (team() == 0) named_barrier_sync<kConsumerThreads>(kTurnBarrier);
  }

  __device__ __forceinline__ static void stage(typename Tile::Smem& sm, int slot, Acc& acc, Sets& a, bool first,
                                               uint32_t& fold) {
    const int cwarp = threadIdx.x / 32 - Tile::kProducerThreads / 32, lane = threadIdx.x % 32;
    const int cwg = cwarp / 4, wi = cwarp % 4;
    if constexpr (MMA) fence_proxy_async();  // as production: the ring's generic-proxy bytes
    uint4 w[WM];
    __nv_bfloat162 s_lo[WM][2], s_hi[WM][2];
    if constexpr (DEQUANT) {
#pragma unroll
      for (int m = 0; m < WM; ++m) {
        w[m] = *Tile::weight_chunk(sm, slot, cwarp, m, lane);
        const int r = (cwg * WM + m) * 64 + wi * kTile + lane / 4;
#pragma unroll
        for (int g = 0; g < 2; ++g) {
          s_lo[m][g] = __bfloat162bfloat162(sm.scale[slot][g][r]);
          s_hi[m][g] = __bfloat162bfloat162(sm.scale[slot][g][r + 8]);
        }
      }
    }
    const uint64_t desc = sw128_kmajor_desc(sm.act[slot]);
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
      // Fixed fragments (no dequantization) need one set: the wgmmas only read it.
      const int set = !DEQUANT ? 0 : kSets == 2 ? (kt & 1) : kt;
      if constexpr (DEQUANT) {
#pragma unroll
        for (int m = 0; m < WM; ++m) {
          const uint32_t word = kt == 0 ? w[m].x : kt == 1 ? w[m].y : kt == 2 ? w[m].z : w[m].w;
          if constexpr (PART == kPartAll) {
            dequantize_fragment(word, s_lo[m][kt / 2], s_hi[m][kt / 2], a[set][m]);
          } else if constexpr (PART == kPartInt) {
            offset_fragment(word, a[set][m]);
          } else {  // kPartFp: the previous k step's registers in (a serial chain a register)
            // The bias from its bits and the _rn forms: ptxas then keeps one HADD2 and one HMUL2 a
            // register, as production has them (the HADD2's bias an immediate here, a register there).
            // With the bias built by __floats2bfloat162_rn
            // it runs some subtractions as HFMA2.MMA in kernels without wgmmas (the dequant variant
            // does: indexed-kernels.md v62), and without _rn it fuses each HMUL2 with the next step's
            // subtraction into an HFMA2.
            const __nv_bfloat162 bias = __halves2bfloat162(__ushort_as_bfloat16(0x4308), __ushort_as_bfloat16(0x4308));
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(&a[set ^ 1][m][r]);
              const __nv_bfloat162 v = __hmul2_rn(__hsub2_rn(x, bias), (r & 1) ? s_hi[m][kt / 2] : s_lo[m][kt / 2]);
              a[set][m][r] = *reinterpret_cast<const uint32_t*>(&v);
            }
          }
        }
      }
      if constexpr (MMA) {
#pragma unroll
        for (int m = 0; m < WM; ++m)
#pragma unroll
          for (int i = 0; i < Tile::Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
        if constexpr (TURNS) named_barrier_sync<kConsumerThreads>(kTurnBarrier + team());
        wgmma_fence();
#pragma unroll
        for (int m = 0; m < WM; ++m) Tile::Mma::mma(acc[m], a[set][m], desc + 2 * kt, !(first && kt == 0));
        wgmma_commit_group();
        if constexpr (TURNS) named_barrier_arrive<kConsumerThreads>(kTurnBarrier + (team() ^ 1));
#pragma unroll
        for (int m = 0; m < WM; ++m)
#pragma unroll
          for (int i = 0; i < Tile::Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
        wgmma_wait_group<DEPTH>();
#pragma unroll
        for (int s = 0; s < kSets; ++s)  // no write to a set moves above the wait
#pragma unroll
          for (int m = 0; m < WM; ++m)
#pragma unroll
            for (int i = 0; i < 4; ++i) fence_operand(a[s][m][i]);
      } else if constexpr (PART != kPartFp) {  // the BF16 chain is folded once, after the loop
#pragma unroll
        for (int m = 0; m < WM; ++m) fold2(fold, a[set][m][0], a[set][m][1]), fold2(fold, a[set][m][2], a[set][m][3]);
      }
    }
  }
};

// Each team's first consumer thread records the span it saw between the two barriers; the host
// takes the larger. One recorder was not enough: in split_dequant the recorder's team runs an empty
// body, and ptxas brought its two clock reads together across the barrier (0 cycles, H100 run of
// 2026-12-06), while the working team's reads stay on either side of its loop.
struct Result {
  long long cycles[2];
  float sink;
};

template <int WM, int BN, int CWG, int WORK, int DEPTH>
struct Probe {
  using Tile = WgmmaTile<WM, BN, kSlots, 64, CWG>;
  static constexpr int kConsumerThreads = 32 * Tile::kConsumerWarps;

  template <class Body>
  __device__ static void timed(Result* out, int stages, Body&& body) {
    typename Tile::Acc acc;
    named_barrier_sync<1, kConsumerThreads>();  // every consumer starts together
    const long long t0 = clock64();
    body(acc);
    wgmma_wait_group<0>();
#pragma unroll
    for (int m = 0; m < WM; ++m)
#pragma unroll
      for (int i = 0; i < Tile::Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
    named_barrier_sync<1, kConsumerThreads>();  // the slowest consumer's end (split: the halves differ)
    const long long t1 = clock64();
    float s = 0.f;
#pragma unroll
    for (int m = 0; m < WM; ++m)
#pragma unroll
      for (int i = 0; i < Tile::Mma::kAccRegs; ++i) s += acc[m][i];
    const int ctid = threadIdx.x - Tile::kProducerThreads;
    if (ctid % (kConsumerThreads / 2) == 0) out[blockIdx.x].cycles[ctid / (kConsumerThreads / 2)] = t1 - t0;
    if (ctid == 0) out[blockIdx.x].sink = s;
    if (s == 1234.5f) out[gridDim.x].sink = s;  // never true in practice; keeps the sums (and the work) alive
  }

  __device__ static void consume(typename Tile::Smem& sm, Result* out, int stages) {
    if constexpr (WORK == kProduction) {
      timed(out, stages, [&](typename Tile::Acc& acc) {
        typename Tile::AFrag afrag;
        for (int i = 0; i < stages; ++i)
          Tile::template mma_stage<Tile::kOperandsPerStep>(sm, i % kSlots, acc, afrag, i == 0);
        Tile::drain(acc, afrag);
      });
    } else if constexpr (WORK == kMmaOnly) {
      timed(out, stages, [&](typename Tile::Acc& acc) { mma_only_loop(sm, acc, stages); });
    } else if constexpr (WORK >= kSplit && WORK <= kSplitFpAlone) {
      // The first half of the consumer warpgroups runs mma_only's loop, the second dequant's (or one
      // instruction class of it); the *_alone and split_dequant variants leave the first half idle.
      constexpr bool kMmaHalfWorks = WORK == kSplit || WORK == kSplitMma || WORK == kSplitInt || WORK == kSplitFp;
      constexpr int kPart = WORK == kSplitInt || WORK == kSplitIntAlone ? kPartInt
                            : WORK == kSplitFp || WORK == kSplitFpAlone ? kPartFp
                                                                        : kPartAll;
      const bool mma_half = team_of<Tile>() == 0;
      timed(out, stages, [&](typename Tile::Acc& acc) {
        if (mma_half) {
          if constexpr (kMmaHalfWorks) mma_only_loop(sm, acc, stages);
          else kept_wgmmas(sm, acc, stages);
        }
        // The dequant half keeps its fold alive by a store that never happens (writing it into the
        // accumulators as dequant does would make ptxas serialize the other half's wgmmas, C7515).
        if (!mma_half && WORK != kSplitMma) {
          const uint32_t fold = dequant_loop<false, false, false, kPart>(sm, acc, stages);
          if (fold == 0x9e3779b9u) out[gridDim.x].cycles[0] = fold;
        }
      });
    } else {
      timed(out, stages, [&](typename Tile::Acc& acc) {
        if constexpr (WORK == kDequantOnly) kept_wgmmas(sm, acc, stages);
        dequant_loop<WORK == kBoth || WORK == kPingPong, WORK == kPingPong>(sm, acc, stages);
      });
    }
  }

  // The variants without wgmmas keep a wgmma loop that never runs (stages is never negative): in a
  // kernel with no wgmma at all ptxas runs about half of dequantize_fragment's 136-subtractions as
  // HFMA2.MMA, which no production loop does (they are all HADD2 there), and that form measured
  // 14-15 % slower on its own (indexed-kernels.md v62). With a wgmma in the kernel ptxas keeps them
  // HADD2, so the dequantization alone is the one production runs.
  __device__ __forceinline__ static void kept_wgmmas(typename Tile::Smem& sm, typename Tile::Acc& acc, int stages) {
    if (stages < 0) mma_only_loop(sm, acc, 1);
  }

  // Every A register of every set: finite BF16 pairs, base with the thread's bits under mask, so the
  // lanes differ (mma_only's fixed fragments, split_fp's chains' start).
  template <class Loop>
  __device__ __forceinline__ static void fill_sets(typename Loop::Sets& a, uint32_t base, uint32_t mask) {
#pragma unroll
    for (int s = 0; s < Loop::kSets; ++s)
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[s][m][i] = base ^ (threadIdx.x * 0x00010001u & mask);
  }

  // mma_only: the wgmmas on fixed A fragments.
  __device__ __forceinline__ static void mma_only_loop(typename Tile::Smem& sm, typename Tile::Acc& acc, int stages) {
    using Loop = OwnLoop<Tile, WM, DEPTH, false, true>;
    typename Loop::Sets a;
    fill_sets<Loop>(a, 0x3c003c00u, 0x007f007fu);
    uint32_t fold = 0;
    for (int i = 0; i < stages; ++i) Loop::stage(sm, i % kSlots, acc, a, i == 0, fold);
  }

  // The dequantization, with the wgmmas (both; pingpong taking turns) or without (dequant).
  template <bool MMA, bool TURNS, bool FOLD_INTO_ACC = true, int PART = kPartAll>
  __device__ __forceinline__ static uint32_t dequant_loop(typename Tile::Smem& sm, typename Tile::Acc& acc, int stages) {
    using Loop = OwnLoop<Tile, WM, DEPTH, true, MMA, TURNS, PART>;
    typename Loop::Sets a;
    uint32_t fold = 0;
    if constexpr (PART == kPartFp) fill_sets<Loop>(a, 0x3f803f80u, 0x003f003fu);  // the BF16 chain's start
    Loop::turns_begin();
    for (int i = 0; i < stages; ++i) Loop::stage(sm, i % kSlots, acc, a, i == 0, fold);
    Loop::turns_end();
    if constexpr (PART == kPartFp) {  // every chain's last values, so none of them folds away
#pragma unroll
      for (int s = 0; s < Loop::kSets; ++s)
#pragma unroll
        for (int m = 0; m < WM; ++m) fold2(fold, a[s][m][0], a[s][m][1]), fold2(fold, a[s][m][2], a[s][m][3]);
    }
    if constexpr (!MMA && FOLD_INTO_ACC) {  // the sum below reads the fold instead
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int i = 0; i < Tile::Mma::kAccRegs; ++i) acc[m][i] = m == 0 && i == 0 ? __uint_as_float(fold & 0x3fffffffu) : 0.f;
    }
    return fold;
  }
};

template <int WM, int BN, int CWG, int WORK, int DEPTH>
__global__ void __launch_bounds__(WgmmaTile<WM, BN, kSlots, 64, CWG>::kThreads, 1)
    mainloop(Result* out, int stages, uint32_t seed) {
  using P = Probe<WM, BN, CWG, WORK, DEPTH>;
  using Tile = typename P::Tile;
  typename Tile::Smem& sm = Tile::smem();
  fill<Tile>(sm, seed);
  // split_roles' __syncthreads publishes the fill; the producer warpgroup has nothing to do.
  Tile::template split_roles<Tile::kProducerRegs, Tile::kConsumerRegs>([] {}, [&] { P::consume(sm, out, stages); });
}

struct Case {
  const char* tile;  // where production runs this shape
  int wm, bn, cwg, work, depth;
  const void* kernel;
  size_t smem;
  int threads;
  bool operands_per_step;
};

template <int WM, int BN, int CWG, int WORK, int DEPTH>
Case make_case(const char* tile) {
  using Tile = WgmmaTile<WM, BN, kSlots, 64, CWG>;
  return Case{tile, WM, BN, CWG, WORK, DEPTH, reinterpret_cast<const void*>(&mainloop<WM, BN, CWG, WORK, DEPTH>),
              sizeof(typename Tile::Smem), Tile::kThreads, Tile::kOperandsPerStep};
}

// The production tile shapes, each with the variants its loop allows: the 4-warpgroup tiles with
// WM * BN > 64 load their operands a k step at a time because they lack the registers to hold a
// stage's (Tile::kOperandsPerStep), and this file's loops hold them (there ptxas serializes even
// the fixed-fragment wgmmas, C7512), so those run production only.
// Depth-1 cases of one shape, one a work, in the order given.
template <int WM, int BN, int CWG, int... WORKS>
void add_works(std::vector<Case>& cases, const char* tile) {
  (cases.push_back(make_case<WM, BN, CWG, WORKS, 1>(tile)), ...);
}

template <int WM, int BN, int CWG, bool OVERLAP = false>
void add_shape(std::vector<Case>& cases, const char* tile) {
  add_works<WM, BN, CWG, kProduction>(cases, tile);
  if constexpr (!WgmmaTile<WM, BN, kSlots, 64, CWG>::kOperandsPerStep) {
    add_works<WM, BN, CWG, kMmaOnly, kDequantOnly, kBoth>(cases, tile);
    cases.push_back(make_case<WM, BN, CWG, kBoth, 2>(tile));
    cases.push_back(make_case<WM, BN, CWG, kBoth, 3>(tile));
    cases.push_back(make_case<WM, BN, CWG, kMmaOnly, 2>(tile));
    if constexpr (OVERLAP)  // the overlap questions (the variants' comment at the top)
      add_works<WM, BN, CWG, kPingPong, kSplit, kSplitMma, kSplitDequant, kSplitInt, kSplitIntAlone, kSplitFp,
                kSplitFpAlone>(cases, tile);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_shape<2, 56, 2, true>(cases, "TP8 T=2048 down (stream-K 256 x 56)");
  add_shape<2, 96, 2>(cases, "TP8 T=8192 down (stream-K 256 x 96)");
  add_shape<2, 128, 2>(cases, "EP8 prefill (256 x 128)");
  add_shape<2, 56, 4>(cases, "TP8 T=2048 gate_up (tile loop 512 x 56)");
  add_shape<2, 32, 4, true>(cases, "EP8 T=128 (512 x 32)");
  add_shape<1, 56, 4>(cases, "alternative: 256 x 56 on 4 warpgroups");
  add_shape<1, 96, 4>(cases, "alternative: 256 x 96 on 4 warpgroups");
  add_shape<4, 32, 2>(cases, "alternative: 512 x 32 on 2 warpgroups (WM 4)");  // v61 (B)
  return cases;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Runs every case on `grid` CTAs (one an SM at most) and prints one JSON line each.
void run(const Case& c, int grid, int stages, int reps) {
  check(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(c.smem)), "smem attribute");
  cudaFuncAttributes attr;
  check(cudaFuncGetAttributes(&attr, c.kernel), "attributes");
  Result* out;
  check(cudaMalloc(&out, sizeof(Result) * (grid + 1)), "malloc");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  std::vector<Result> host(grid);
  std::vector<double> per_stage_median, kernel_us;
  double slowest = 0;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    int s = stages;
    void* args[] = {&out, &s, &rep};
    cudaEventRecord(e0);
    check(cudaLaunchKernel(c.kernel, dim3(grid), dim3(c.threads), args, c.smem, 0), "launch");
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "kernel");
    if (rep == 0) continue;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    kernel_us.push_back(ms * 1e3);
    check(cudaMemcpy(host.data(), out, sizeof(Result) * grid, cudaMemcpyDeviceToHost), "copy");
    std::vector<double> cyc(grid);
    for (int b = 0; b < grid; ++b) cyc[b] = double(std::max(host[b].cycles[0], host[b].cycles[1])) / stages;
    std::sort(cyc.begin(), cyc.end());
    per_stage_median.push_back(cyc[grid / 2]);
    slowest = std::max(slowest, cyc.back());
  }
  std::sort(per_stage_median.begin(), per_stage_median.end());
  std::sort(kernel_us.begin(), kernel_us.end());
  const double cycles = per_stage_median[reps / 2], us = kernel_us[reps / 2];
  // Tensor work of a stage at the nominal 2048 BF16 MACs per SM cycle (H100/H200 dense rate).
  const double nominal = double(c.cwg) * c.wm * 4 * (64.0 * c.bn * 16) / 2048.0;
  std::printf(
      "{\"tile\": \"%s\", \"wm\": %d, \"bn\": %d, \"cwg\": %d, \"work\": \"%s\", \"depth\": %d, "
      "\"operands_per_step\": %s, \"grid\": %d, \"stages\": %d, \"registers\": %d, \"local_bytes\": %zu, "
      "\"cycles_per_stage\": %.1f, \"cycles_per_stage_slowest_cta\": %.1f, \"tensor_cycles_nominal\": %.1f, "
      "\"kernel_us\": %.2f, \"mhz_estimate\": %.0f}\n",
      c.tile, c.wm, c.bn, c.cwg, kWorkNames[c.work], c.depth, c.operands_per_step ? "true" : "false", grid, stages,
      attr.numRegs, attr.localSizeBytes, cycles, slowest, nominal, us, cycles * stages / us);
  std::fflush(stdout);
  cudaFree(out);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
}

}  // namespace probe

int main(int argc, char** argv) {
  int stages = 4096, reps = 5;
  bool one_cta = true, all_sms = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--stages") && i + 1 < argc) stages = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--all-sms-only")) one_cta = false;
    else if (!std::strcmp(argv[i], "--one-cta-only")) all_sms = false;
    else {
      std::fprintf(stderr, "usage: %s [--stages N] [--reps R] [--all-sms-only | --one-cta-only]\n", argv[0]);
      return 2;
    }
  }
  int device = 0, sms = 0;
  probe::check(cudaGetDevice(&device), "device");
  probe::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  for (const probe::Case& c : probe::all_cases()) {
    if (one_cta) probe::run(c, 1, stages, reps);
    if (all_sms) probe::run(c, sms, stages, reps);
  }
  return 0;
}
