// The wgmma tile (common/w4a16_wgmma_tile.cuh) on the stream-K schedule
// (common/streamk_schedule.cuh): persistent CTAs, one mbarrier ring across tile boundaries.
//
// Why: with one CTA per tile the wgmma tile restarts its ring for every tile (a TP8 down tile is
// 4 stages of K=256: fill and epilogue are most of its life) and the last wave runs partly
// empty; at mid batch (blocks of 16-32 rows) that made it slower than the stream-K mma tile
// although it issues far fewer instructions per weight byte (docs/design/indexed-kernels.md v9b).
//
// The producer warpgroup walks the CTA's run: per iteration it waits for the slot to be free,
// writes the slot's tile rows (route ids) with plain stores, issues the slot's copies and arrives
// twice on "full" (the cp.async arrive when its copies land, and an ordinary arrive that
// releases its row-id stores). It reads the next row tile's indices one tile ahead. The two
// consumer warpgroups walk the same run: wait "full", dequantize and issue the stage's wgmmas,
// release the previous slot; at a tile's last iteration in the run they retire every group, store
// the tile (or their partial: split-tile fix-up over a named barrier of the consumer threads,
// the producer never joins it), release the slot and start the next tile with scale-d = 0.
#pragma once

#include "common/mbarrier_sm90.cuh"
#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"
#include "common/w4a16_wgmma_tile.cuh"

namespace chord {

template <int WM, int BN, int STAGES, int BLOCK_K, template <int> class ROW_TILES, int CWG = 2>
struct WgmmaStreamK {
  using Tile = WgmmaTile<WM, BN, STAGES, BLOCK_K, CWG, /*WHOLE_BLOCKS=*/false>;  // a split starts at any stage
  using Smem = typename Tile::Smem;
  using Rows = ROW_TILES<BN>;
  using Walk = StreamKWalk<STAGES>;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kProducerThreads = Tile::kProducerThreads;
  static constexpr int kConsumerThreads = kThreads - kProducerThreads;
  static constexpr int kRows = Tile::kRows;
  static constexpr int kActPerThread = Tile::kActPerThread;
  static constexpr int kAcc = WM * Tile::Mma::kAccRegs;  // FP32 accumulators per consumer thread
  using Fixup = StreamKFixup<kConsumerThreads, kAcc>;
  // The producer walks the schedule and keeps two row tiles' indices: it needs more registers
  // than the one-tile producer (at 64-88 it spilled), the consumers a little fewer. With 4
  // consumer warpgroups (the indexed mid-batch tile, 512 x 32) the one-CTA tile's 64/104: at the
  // launch's 96 for both the consumers spill 138 bytes (v21); their schedule lives in shared
  // memory (run).
  static constexpr int kProducerRegs = CWG == 2 ? 88 : 64;
  static constexpr int kConsumerRegs = CWG == 2 ? 208 : 104;

  // The host keeps row tiles x column tiles x stages under 2^31 (chord_kernels/ops.py).
  __device__ static void run(const MoeParams& p) {
    Smem& sm = Tile::smem();
    // A count from a warp scan (the grouped offsets and masked forms) is the same in every lane;
    // said so (a warp reduction writes a uniform register), ptxas keeps the schedule, the ring
    // position and the wgmma descriptors in uniform registers. From the scan's result they sat in
    // vector registers: 8 R2UR (16 at WM 2) and 8-16 more instructions a consumer stage
    // (grouped-kernels.md v42). The other counts are left as they are (their SASS is unchanged).
    int row_tiles = Rows::count(p);
    if constexpr (Rows::kCountByWarpScan) row_tiles = __reduce_max_sync(0xffffffffu, row_tiles);
    const StreamKWork w(row_tiles, (p.n + kRows - 1) / kRows, p.k / Tile::kStageK, p.k, kWgmmaWholeTiles);
#ifdef CHORD_CTA_TRACE
    cta_trace_schedule(w, row_tiles);
#endif
    if (w.iterations() == 0) return;  // uniform per CTA, before any barrier
    Tile::init_barriers(sm, 2 * kProducerThreads);
    // 4 consumer warpgroups (104 registers a thread, 32 of them accumulators): the consumers read
    // the schedule from shared memory (split_roles' barrier publishes it), where holding it spilled
    // 8 bytes; they touch it only at segment ends. With 2 the registers are there.
    if (CWG == 4 && threadIdx.x == 0) sm.work = w;
    Tile::template split_roles<kProducerRegs, kConsumerRegs>([&] { produce(p, sm, w); },
                                                             [&] { consume(p, sm, CWG == 4 ? sm.work : w); });
  }

  // A producer thread's tile rows (Tile::act_row_of) of one row tile: route ids, -1 = none.
  struct RowIds {
    int expert;
    int32_t route[kActPerThread];
  };

  __device__ static RowIds row_ids(const MoeParams& p, int row_tile) {
    const Located at = Rows::locate(p, row_tile);
    RowIds ids;
    ids.expert = at.expert;
#pragma unroll
    for (int i = 0; i < kActPerThread; ++i)
      ids.route[i] = at.expert >= 0 && Tile::act_row_in_tile(threadIdx.x, i)
                         ? Rows::route(p, at, Tile::act_row_of(threadIdx.x, i)) : -1;
    return ids;
  }

  __device__ static void produce(const MoeParams& p, Smem& sm, const StreamKWork& w) {
    const int tid = threadIdx.x;
    const int iterations = w.iterations();
    Tile::prefetch_maps(p);
    Walk ld(w);
    auto fetch = [&](int row_tile) { return row_ids(p, row_tile); };
    RowTilesAhead<RowIds> rows(ld, w, fetch);
    typename Tile::Sources src;
    typename Tile::RowPointers act;  // built per tile (Tile::RowPointers)
    auto new_tile = [&]() {
      const RowIds& cur = rows.cur;
      if (cur.expert >= 0) src = Tile::sources(p, cur.expert, ld.col);
      typename Tile::RowIndex idx;
#pragma unroll
      for (int i = 0; i < kActPerThread; ++i) idx.row[i] = cur.route[i] >= 0 ? (int32_t)Rows::a_row(p, cur.route[i]) : -1;
      act = typename Tile::RowPointers(p, idx);
    };
    new_tile();
    const typename Tile::Ring bars = Tile::ring(sm);
    for (int it = 0; it < iterations; ++it) {
      const int slot = ld.slot;
      if (it >= STAGES) mbarrier_wait(bars.empty(slot), ld.phase ^ 1);  // the slot's previous use released
      if (tid % 8 == 0 && ld.s + 1 == ld.s_end)  // the tile's epilogue reads its last slot's row ids
#pragma unroll
        for (int i = 0; i < kActPerThread; ++i)
          if (Tile::act_row_in_tile(tid, i)) sm.route[slot][Tile::act_row_of(tid, i)] = rows.cur.route[i];
      if (rows.cur.expert >= 0) {
        Tile::load_stage(p, sm, slot, src, act, ld.s);
      } else {
        Tile::arrive_unloaded(sm, slot);
      }
      cp_async_mbarrier_arrive(bars.full(slot));
      mbarrier_arrive(bars.full(slot));  // orders the row-id stores before the consumers' reads
      ld.step();
      if (it + 1 < iterations && ld.segment_done()) {
        ld.next_segment(w);
        rows.on_segment(ld, w, fetch);
        new_tile();
      }
    }
    cp_async_wait<0>();
  }

  // The walk alone says when the run ends (no iteration count), and the slot to release is the
  // previous iteration's: two registers fewer, which the 512 x 32 tile (4 consumer warpgroups at
  // 104 registers) needs to hold the schedule without spilling.
  __device__ static void consume(const MoeParams& p, Smem& sm, const StreamKWork& w) {
    const int ctid = threadIdx.x - kProducerThreads;
    typename Tile::Acc acc;
    typename Tile::AFrag afrag;
    Walk at(w);  // run() returned already if this CTA has no iteration
    const typename Tile::Ring bars = Tile::ring(sm);
    bool first = true;  // the tile's first stage: no group in flight reads an earlier slot
    for (;;) {
      const int slot = at.slot;
      mbarrier_wait(bars.full(slot), at.phase);
      Tile::mma_stage(sm, slot, acc, afrag, first);
      if (!first) Tile::release(bars, slot == 0 ? STAGES - 1 : slot - 1);  // the group that read it retired
      first = false;
      at.step();
      if (at.segment_done()) {
        Tile::drain(acc, afrag);
        finish_tile(p, sm, acc, at.first_iteration(w), w, at.col, sm.route[slot], ctid);
        Tile::release(bars, slot);  // the epilogue has read the slot's row ids
        first = true;
        if (!at.next_segment(w)) break;
      }
    }
    // Every group retired at the last tile's end already; said again here because ptxas cannot
    // prove it on the loop's exit path, and otherwise injects waits that serialize the wgmmas.
    Tile::drain(acc, afrag);
  }

  // End of this CTA's part of the tile whose iterations start at `first`.
  __device__ static void finish_tile(const MoeParams& p, Smem& sm, const typename Tile::Acc& acc, int first,
                                     const StreamKWork& w, int col, const int32_t* routes, int ctid) {
    if (w.owns(first)) {
      Tile::store(p, sm, acc, col, routes);
      return;
    }
    if (!Fixup::contribute(p, w, &acc[0][0], first, ctid, &sm.finisher,
                           [] { named_barrier_sync<1, kConsumerThreads>(); }))
      return;
    Fixup::template store_sum<Fixup::Partials::kSumChunk>(p, w, first, ctid,
                                         [&](int i, float4 v) { Tile::store4(p, ctid, col, routes, i, v); });
  }
};

}  // namespace chord
