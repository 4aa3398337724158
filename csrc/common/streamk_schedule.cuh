// The stream-K schedule shared by the tensor-core consumers (common/w4a16_mma_streamk.cuh for the
// mma tile, common/w4a16_wgmma_streamk.cuh for the wgmma tile).
//
// The work is the flat sequence of iterations (row tile, CTA column tile, K stage), stage
// fastest. The grid is every CTA the GPU holds at once; whole waves of tiles go round-robin over
// the CTAs, and the rest (the last one to two waves) is split into equal contiguous runs of
// iterations, one per CTA (StreamKWork), or runs of whole tiles where that costs at most one
// iteration more (streamk_run.cuh: short K, where a cut tile's fix-up costs more than that).
// Every CTA streams about the same number of weight bytes, and its ring runs on across tile
// boundaries (no per-tile refill, no partly empty last wave).
//
// A tile cut by a run boundary is summed deterministically: every contributing CTA writes its
// FP32 partial to a workspace slot of its own (slot 0: the tile began in an earlier CTA's run,
// slot 1: it continues into a later one), counts itself on the lock of the tile's first CTA, and
// the last to arrive adds the partials in CTA order — the same order whoever finishes — stores
// the tile and re-zeroes the lock for the next launch. No CTA ever waits for another.
//
// A family describes its row tiles with ROW_TILES<kTok> (read on the device, no host sync):
//   count(p)               row tiles
//   locate(p, row_tile)    -> Located {expert (-1: no work), first, rows}
//   route(p, at, row)      -> the route id of tile row `row` (-1: none); it is the out row
//   a_row(p, route)        -> the activation row of a route
#pragma once

#include <climits>
#include <stdint.h>

#include "common/moe_params.cuh"
#include "common/streamk_run.cuh"

namespace chord {

// A row tile: its expert (-1: no work — not a local expert, or past the routed rows) and where
// its rows start in the family's row space, with how many there are.
struct Located {
  int expert, first, rows;
};

struct RowRef {
  int expert;     // -1: the tile has no work
  int32_t route;  // -1: no row
};

template <class Rows>
__device__ __forceinline__ RowRef fetch_row(const MoeParams& p, int row_tile, int row) {
  const Located at = Rows::locate(p, row_tile);
  return {at.expert, at.expert >= 0 ? Rows::route(p, at, row) : -1};
}

// The work of one launch: tiles = row tiles x column tiles, each `stages` K iterations; tile t is
// row tile t / col_tiles, column tile t % col_tiles (consecutive tiles share their rows).
//   Data-parallel part: tiles [0, dp_tiles), whole waves of the grid (or every tile, see
//   WholeTilesRule): CTA c runs tiles c, c + G,
//   c + 2G, ... So at any moment the CTAs work on neighbouring tiles — the same rows, the same
//   expert's weights — and those stay in L2, as with one CTA per tile (prefill: a stream-K run of
//   whole row tiles per CTA re-read each CTA's activation rows from DRAM for every column tile).
//   Stream-K part: the last one to two waves' iterations, [dp_tiles * stages, tiles * stages),
//   split into contiguous runs of streamk_run iterations, one per CTA: no partly empty last
//   wave. With fewer tiles than CTAs (decode) it is all of the work.
// Short K (K < kDataParallelMinK) runs all of it as stream-K: a tile is then one to four stages,
// and a contiguous run keeps one row tile (its indices, its activation rows) for many tiles,
// where the round-robin order fetched a new row tile's indices every tile (measured, H200, TP8
// down K=256: 53 -> 68 µs at T=20, 1256 -> 1356 µs at T=8192).
constexpr int kDataParallelMinK = 1024;
// Whole last wave: when the tiles' last wave is at least fill_eighths / 8 full (and the tiles
// make at most max_waves whole waves before it), every tile is data-parallel, the last wave left
// partly empty: stream-K's split tiles (partials through the workspace, a fix-up per split) cost
// more than the idle part they would fill.
//   The wgmma tile, from 7/8 after any number of waves: EP8 T=128 gate_up, 384 tiles of 512 x 32
//   on 132 SMs (docs/design/indexed-kernels.md v23).
//   The mma tile, from 3/4 within one wave only: decode is weight-bandwidth bound, and three
//   quarters of the resident CTAs keep HBM as busy as all of them (EP32 T=8 down, 336 tiles of
//   256 rows on 396 CTAs: -6.3 / -4.9 % at serving clocks). After a whole wave the same rule lost
//   (EP16 T=8 gate_up, 1.78 waves: +4.5 / +10.3 %; grouped-kernels.md v32).
struct WholeTilesRule {
  int fill_eighths, max_waves;
};
constexpr WholeTilesRule kWgmmaWholeTiles{7, INT_MAX}, kMmaWholeTiles{6, 0};

struct StreamKWork {
  int col_tiles, stages;
  int dp_tiles;  // a multiple of the grid, or every tile (whole last wave)
  int sk_run;    // stream-K iterations per CTA
  int sk0, sk1;  // this CTA's stream-K iterations [sk0, sk1), counted from the launch's first

  __device__ StreamKWork(int row_tiles, int col_tiles_, int stages_, int k, WholeTilesRule whole)
      : col_tiles(col_tiles_), stages(stages_) {
    const int grid = gridDim.x, tiles = row_tiles * col_tiles;
    const int waves = tiles / grid, rem = tiles - waves * grid;
    const bool all_whole = rem == 0 || (waves <= whole.max_waves && rem * 8 >= grid * whole.fill_eighths);
    dp_tiles = k < kDataParallelMinK ? 0 : all_whole ? tiles : max(waves - 1, 0) * grid;
    const int base = dp_tiles * stages, sk_total = (tiles - dp_tiles) * stages;
    sk_run = streamk_run(tiles - dp_tiles, stages, grid);
    sk0 = base + min((int)blockIdx.x * sk_run, sk_total);
    sk1 = base + min((int)blockIdx.x * sk_run + sk_run, sk_total);
  }
  // this CTA's whole tiles: c, c + G, ... below dp_tiles (not a multiple of G with a whole last wave)
  __device__ int dp_count() const { return dp_tiles > (int)blockIdx.x ? (dp_tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0; }
  __device__ int iterations() const { return dp_count() * stages + (sk1 - sk0); }
  // The tile whose iterations start at `first` is this CTA's alone (no fix-up).
  __device__ bool owns(int first) const { return first < dp_tiles * stages || (first >= sk0 && first + stages <= sk1); }
  // The CTA whose stream-K run holds iteration g.
  __device__ int cta_of(int g) const { return (g - dp_tiles * stages) / sk_run; }
};

// A walk over one CTA's work, one iteration at a time, as segments: (tile, its stages [s, s_end)).
// Whole tiles first, then the stream-K run (whose first and last tiles may be partial). Carries the
// ring slot of the iteration and the slot's use parity. Producer and consumers walk the same way.
template <int STAGES>
struct StreamKWalk {
  int tile, row_tile, col, s, s_end;
  int slot = 0, phase = 0;
  int dp_index = 0;  // whole tiles begun
  bool in_sk = false;

  __device__ explicit StreamKWalk(const StreamKWork& w) {
    if (w.dp_count() > 0) seek(w, blockIdx.x, 0, w.stages);
    else enter_sk(w);
  }
  __device__ void seek(const StreamKWork& w, int t, int s0, int s1) {
    tile = t, row_tile = t / w.col_tiles, col = t - row_tile * w.col_tiles, s = s0, s_end = s1;
  }
  __device__ void enter_sk(const StreamKWork& w) {
    in_sk = true;
    const int t = w.sk0 / w.stages;
    seek(w, t, w.sk0 - t * w.stages, min(w.stages, w.sk1 - t * w.stages));
  }
  // After an iteration: the next slot, the next stage of the segment.
  __device__ void step() {
    if (++slot == STAGES) slot = 0, phase ^= 1;
    ++s;
  }
  __device__ bool segment_done() const { return s == s_end; }
  __device__ int first_iteration(const StreamKWork& w) const { return tile * w.stages; }
  // Move to the next segment; false when the CTA's work is done.
  __device__ bool next_segment(const StreamKWork& w) {
    if (!in_sk) {
      if (++dp_index < w.dp_count()) {
        seek(w, blockIdx.x + dp_index * gridDim.x, 0, w.stages);
        return true;
      }
      if (w.sk0 >= w.sk1) return false;
      enter_sk(w);
      return true;
    }
    // Consecutive tiles, without a division (at K=256 a tile is one iteration).
    if ((tile + 1) * w.stages >= w.sk1) return false;
    ++tile, s = 0, s_end = min(w.stages, w.sk1 - tile * w.stages);
    if (++col == w.col_tiles) col = 0, ++row_tile;
    return true;
  }
  // The row tile of the first later segment on another row tile (-1: none): the one whose
  // indices the loader reads ahead. Stream-K tiles are consecutive, so it is the next row tile if
  // the run reaches it; whole tiles step by the grid (usually a new row tile every segment).
  __device__ int next_row_tile(const StreamKWork& w) const {
    if (in_sk) return (row_tile + 1) * w.col_tiles * w.stages < w.sk1 ? row_tile + 1 : -1;
    StreamKWalk ahead = *this;
    while (ahead.next_segment(w))
      if (ahead.row_tile != row_tile) return ahead.row_tile;
    return -1;
  }
};

// The loader's row indices (Data: what a thread keeps of one row tile): the current row tile's,
// and the next row tile's, read while the current one streams (a whole row tile of iterations
// ahead: at K=256 a tile is one stage, and reading one segment ahead left the index loads'
// latency exposed at every row-tile change, TP8 down T=512 187 -> 221 µs).
template <class Data>
struct RowTilesAhead {
  Data cur, next;
  int cur_rt;

  template <class Walk, class Fetch>
  __device__ RowTilesAhead(const Walk& walk, const StreamKWork& w, Fetch fetch)
      : cur(fetch(walk.row_tile)), next(cur), cur_rt(walk.row_tile) {
    prefetch(walk, w, fetch);
  }
  // At a new segment: on a new row tile, its data (read ahead) and the following one's in flight.
  template <class Walk, class Fetch>
  __device__ void on_segment(const Walk& walk, const StreamKWork& w, Fetch fetch) {
    if (walk.row_tile == cur_rt) return;
    cur = next, cur_rt = walk.row_tile;  // next_row_tile() named exactly this row tile
    prefetch(walk, w, fetch);
  }
  template <class Walk, class Fetch>
  __device__ void prefetch(const Walk& walk, const StreamKWork& w, Fetch fetch) {
    const int f = walk.next_row_tile(w);
    if (f >= 0) next = fetch(f);
  }
};

// One thread's count on a split tile's lock, release and acquire at GPU scope: after the barrier
// over the contributing threads it publishes the whole CTA's partial stores (fence cumulativity, as
// a grid-wide barrier's arrival does), and in the last contributor it makes every other
// contributor's partials visible to the threads past the next barrier. One fence a CTA where every
// thread's __threadfence (MEMBAR.SC.GPU) was one a thread.
__device__ __forceinline__ int count_acq_rel(int32_t* lock) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;" : "=r"(old) : "l"(lock) : "memory");
  return old;
}

// FP32 partial sums of one split tile, added deterministically, by the kThreads threads (tid
// 0..kThreads-1) that hold its kAcc accumulators each. Every contributor writes its partial to a
// workspace slot of its own and counts itself on the tile's lock; the last to count adds the
// partials in contributor order (the same order whoever finishes: the same bits run to run) and
// re-zeroes the lock for the next launch. No contributor ever waits for another. A thread's float4
// groups lie kStride float4s apart in its slot (1: contiguous; kThreads: group-major, so a warp's
// store is 512 contiguous bytes).
// kCompactSum: the finisher's loop over contributors stays rolled (the tile loop's split tail: at
// most TailSplit::kMaxSplit of them, off the hot path; unrolled it doubled the kernel's code).
// kCountPerCta: the CTA's count is one acquire-release atomic after the contributors' barrier
// (count_acq_rel; stream-K decode -1 to -5 %, indexed-kernels.md v38); false: every thread's
// __threadfence on both sides and a relaxed count. The tile loop keeps the fences: its split tail
// is a few pieces of the last wave, and with the count the indexed 256 x 128 tile's consumer loop
// scheduled differently and ran +3 % at EP8 T=2048/8192 (ncu, ABBA; v39).
template <int kThreads, int kAcc, int kStride = 1, bool kCompactSum = false, bool kCountPerCta = true>
struct SplitPartials {
  static_assert(kAcc % 4 == 0, "partials move as float4");
  // The finisher's sums in flight (registers) for tiles holding their accumulators in registers
  // alongside everything else (the wgmma tiles): 16, or what divides the accumulators (BN 48/56).
  static constexpr int kSumChunk = kAcc < 16 ? kAcc : kAcc % 16 == 0 ? 16 : kAcc % 8 == 0 ? 8 : 4;

  // Writes this thread's partial to `mine` and counts the CTA on `lock`; true in the CTA that adds
  // the tile up (the last of `contributors`). `sync` is a barrier over exactly the kThreads
  // threads, `flag` a shared int32 they all read.
  template <class Sync>
  __device__ static bool contribute(float4* mine, const float* acc, int32_t* lock, int contributors, int tid,
                                    int32_t* flag, Sync sync) {
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i)
      __stcg(mine + i * kStride, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    if constexpr (kCountPerCta) {
      sync();  // every thread's partial stored before thread 0 counts the CTA
      if (tid == 0) *flag = count_acq_rel(lock) == contributors - 1;
      sync();
      if (!*flag) return false;  // uniform over the threads
    } else {
      __threadfence();  // this thread's partial visible device-wide before the count says so
      sync();
      if (tid == 0) *flag = atomicAdd(lock, 1) == contributors - 1;
      sync();
      if (!*flag) return false;  // uniform over the threads
      __threadfence();  // the other contributors' partials visible to this thread
    }
    if (tid == 0) *lock = 0;  // every contributor has counted: ready for the next launch
    return true;
  }

  template <int kChunk>
  __device__ __forceinline__ static void add(float4 (&total)[kChunk / 4], const float4* from) {
#pragma unroll
    for (int i = 0; i < kChunk / 4; ++i) {
      const float4 v = __ldcg(from + i * kStride);
      total[i].x += v.x, total[i].y += v.y, total[i].z += v.z, total[i].w += v.w;
    }
  }

  // The finisher: partials src(0), src(1), ... src(contributors - 1) (this thread's slots) added in
  // that order, kChunk accumulators at a time (their loads in flight together), each group of 4
  // handed to emit(group, float4).
  template <int kChunk, class Src, class Emit>
  __device__ static void sum(int contributors, Src src, Emit emit) {
    static_assert(kAcc % kChunk == 0 && kChunk % 4 == 0, "chunks of whole float4 groups");
#pragma unroll
    for (int i0 = 0; i0 < kAcc / 4; i0 += kChunk / 4) {
      float4 total[kChunk / 4];
      const float4* head = src(0);
#pragma unroll
      for (int i = 0; i < kChunk / 4; ++i) total[i] = __ldcg(head + (i0 + i) * kStride);
      // contributor order: deterministic
      if constexpr (kCompactSum) {
#pragma unroll 1
        for (int c = 1; c < contributors; ++c) add<kChunk>(total, src(c) + i0 * kStride);
      } else {
        for (int c = 1; c < contributors; ++c) add<kChunk>(total, src(c) + i0 * kStride);
      }
#pragma unroll
      for (int i = 0; i < kChunk / 4; ++i) emit(i0 + i, total[i]);
    }
  }
};

// Split-tile fix-up for a stream-K tile whose iterations are [first, first + stages): its
// contributors are the CTAs whose runs hold those iterations, in CTA order; the lock is the first
// one's. Each CTA has two partial slots (slot 0: the tile began in an earlier CTA's run, slot 1:
// it continues into a later one). The finisher then calls store_sum.
template <int kThreads, int kAcc>
struct StreamKFixup {
  using Partials = SplitPartials<kThreads, kAcc>;

  __device__ static float4* partial(const MoeParams& p, int cta, int slot, int tid) {
    return reinterpret_cast<float4*>(p.workspace + ((int64_t)(cta * 2 + slot) * kThreads + tid) * kAcc);
  }

  // The tile's contributing CTAs, first_cta .. last_cta in order (the lock is the first one's),
  // and this CTA's partial slot for it (tests/host_emu/streamk_walk.cpp checks them on the CPU).
  __device__ static int first_cta(const StreamKWork& w, int first) { return w.cta_of(first); }
  __device__ static int last_cta(const StreamKWork& w, int first) { return w.cta_of(first + w.stages - 1); }
  __device__ static int slot(const StreamKWork& w, int first) { return first < w.sk0 ? 0 : 1; }

  template <class Sync>
  __device__ static bool contribute(const MoeParams& p, const StreamKWork& w, const float* acc, int first, int tid,
                                    int32_t* flag, Sync sync) {
    const int c0 = first_cta(w, first), c1 = last_cta(w, first);
    return Partials::contribute(partial(p, blockIdx.x, slot(w, first), tid), acc, p.locks + c0, c1 - c0 + 1, tid,
                                flag, sync);
  }

  template <int kChunk, class Store4>
  __device__ static void store_sum(const MoeParams& p, const StreamKWork& w, int first, int tid, Store4 store4) {
    const int c0 = first_cta(w, first), c1 = last_cta(w, first);
    Partials::template sum<kChunk>(
        c1 - c0 + 1, [&](int c) { return c == 0 ? partial(p, c0, 1, tid) : partial(p, c0 + c, 0, tid); }, store4);
  }
};

}  // namespace chord
