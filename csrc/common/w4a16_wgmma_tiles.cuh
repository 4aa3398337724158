// The wgmma tile (common/w4a16_wgmma_tile.cuh) on at most one CTA an SM, each looping over whole
// tiles: the kernel for long K (prefill) in both families.
//
// Why not one CTA per tile: that grid must be sized for the routing buffers, and vLLM
// over-allocates them (the indexed expert_ids buffer holds every route plus 384 experts' padding:
// ~8x the valid blocks at EP8; the grouped_contiguous buffer is num_tokens x top_k rows: 32x the
// valid rows at EP32). Every CTA past the last row tile still launches, finds nothing and exits,
// ~0.4 µs each on an SM that holds one (H200, EP32 T=2048 down: 115K CTAs for 3.7K tiles, 1267 µs
// against 844 on a tight grid; docs/design/grouped-kernels.md). Here the row-tile count comes from
// the device (ROW_TILES::count), the grid is at most the resident CTAs, and each CTA claims tiles
// from a device-wide counter (p.locks[0]) in tile order, row-tile major, column tiles fastest: the
// order the hardware took the old grid in. Claimed, not strided (t = b, b + gridDim.x, ...): with
// fixed strides the CTAs drift apart and the tiles in flight span more experts' weights than L2
// holds (EP8 T=2048 gate_up: 6 % slower than the one-CTA grid; claimed: docs/design/
// indexed-kernels.md v16). One ring carries the tiles, so the producer loads the next tile while
// the consumers finish the last one. Unlike the stream-K schedule
// (common/w4a16_wgmma_streamk.cuh) only the last wave's tiles may be split, and only when that
// wave is at most half full (TailSplit).
#pragma once

#include "common/mbarrier_sm90.cuh"
#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"
#include "common/tail_split.cuh"
#include "common/w4a16_wgmma_tile.cuh"

namespace chord {

// TMA_ACTS (the grouped forms, whose tile rows are contiguous in a): the producer loads the
// tile's activation rows as one tensor-map box a stage (WgmmaTile::ActBox) from thread 0 instead
// of 16-byte cp.async copies from every producer thread. Why: at EP8 T=8192 gate_up (BN 240)
// those copies and their 64-bit addresses were ~400 M of the kernel's 1963 M instructions, where
// Humming's kernel loads everything by TMA (benchmarks/results/ncu/2026-12-04_ep8_gate_up.md).
//
// DEFER_STORE (2 consumer warpgroups): the epilogue leaves the consumers' critical
// path. Why: between a tile's last wgmma and the next tile's first the tensor pipe idles while
// the consumers write the tile out (the staged stores, two warpgroup barriers a m64 tile, the out
// rows between two barriers); on the K-2048 down projection that is a tile of 32 stages, and
// Humming's down leads ours at T=2048-8192 while our gate_up (112 stages) leads its
// (docs/design/grouped-kernels.md v42). Here the consumers only stage the tile (stmatrix) and
// hand it off; warps 1-3 of the producer warpgroup, idle once the activations come by tensor map
// (thread 0 issues every box), store it while the consumers run the next tile. Without TMA_ACTS
// (the indexed tile loop: its rows are routes / top_k, no box holds them) warp 0 gathers the
// rows alone (WgmmaTile::WarpRows): on short K (TP8 down, K=256: 4 stages a tile) the stores are
// ~40 % of a tile's bytes and main without them measured -7 to -14 % (indexed-kernels.md v50).
template <int WM, int BN, int STAGES, int BLOCK_K, template <int> class ROW_TILES, int CWG = 2, bool TMA_ACTS = false,
          bool DEFER_STORE = false>
struct WgmmaTiles {
  using Tile = WgmmaTile<WM, BN, STAGES, BLOCK_K, CWG, /*WHOLE_BLOCKS=*/true, DEFER_STORE>;
  using Smem = typename Tile::Smem;
  using Rows = ROW_TILES<BN>;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kConsumerThreads = kThreads - Tile::kProducerThreads;
  // The producer warpgroup's threads that fill the ring (with DEFER_STORE warp 0; thread 0 issues
  // the boxes, the warp gathers the rows without TMA_ACTS), and the rest, which write the staged
  // tiles out (DEFER_STORE).
  static constexpr int kLoaderThreads = DEFER_STORE ? 32 : Tile::kProducerThreads;
  static constexpr int kStoreThreads = Tile::kProducerThreads - kLoaderThreads;
  static constexpr int kStagesPerStep = Tile::kBlockPairs ? 2 : 1;  // see Tile::weight_chunk
  static_assert(!Tile::kBlockPairs || STAGES % 2 == 0, "a stage pair must not wrap the ring: an even number of slots");
  static constexpr int kFixupBarrier = 1;    // named barriers of the consumers: a split tile's count
  static constexpr int kOutRowsBarrier = 2;  // the tile's out rows
  static constexpr int kClaimBarrier = 3;    // of the producer warpgroup: its claim is in shared memory
  // A split tile's partials (TailSplit): group-major, so a warp's store is 512 contiguous bytes.
  static constexpr int kAcc = WM * Tile::Mma::kAccRegs;  // FP32 accumulators per consumer thread
  using Partials = SplitPartials<kConsumerThreads, kAcc, kConsumerThreads, /*kCompactSum=*/true, /*kCountPerCta=*/false>;
  // The loop's state costs the producer registers: at the one-tile split (72/216) some tiles
  // spill 4-16 bytes, and 72/216 measured slower everywhere (indexed-kernels.md v16); stage pairs
  // (BLOCK_K 128) spilled even at 88/208 while they copied their weights with cp.async (104/200 is
  // what was measured since; by tensor map 88/208 compiles clean, unmeasured: grouped-kernels.md
  // v20). Stage boxes (BLOCK_K 128 a stage a box, v30) run BLOCK_K 64's code: its split. With 4
  // consumer warpgroups (640 threads, 96 registers a thread at launch) the one-CTA tile's split,
  // 64/104: both producers load by tensor map, so the loop's state fits 64.
  // The 96-row tiles a stage a box take 72/216 (compiles clean; v42, ncu at base clock over two
  // leases: indexed EP8 T=512 -1.5 to -2.9 %, TP8 T=8192 gate_up -2.1 to -3.0 %; at 128 rows the
  // same split was +2.7 to +3.7 %, at 64 rows +3.2 %: indexed-kernels.md v41, v42).
  static constexpr bool kWideConsumers = CWG == 2 && !Tile::kBlockPairs && BN == 96;
  static constexpr int kProducerRegs = CWG == 4 ? 64 : kWideConsumers ? 72 : Tile::kBlockPairs ? 104 : 88;
  static constexpr int kConsumerRegs = CWG == 4 ? 104 : kWideConsumers ? 216 : Tile::kBlockPairs ? 200 : 208;
  static constexpr bool kPairable = CWG == 2;  // MoeParams::pick_rows is read (see run)
  static constexpr int kTailMinPieceStages = CWG == 4 ? Rows::kTailMinPieceStagesCwg4 : TailSplit::kMinPieceStages;  // see TailSplit

  // The host keeps row tiles x column tiles + 2 x CTAs under 2^31 (chord_kernels/ops.py) and
  // passes p.locks zeroed (2 + CTAs of them: the counters, then a lock per split tile) with a
  // workspace of CTAs x kConsumerThreads x kAcc floats (TailSplit: a partial per piece, at most one
  // piece a CTA); the last CTA to finish claiming zeroes the counters again, each split tile's
  // finisher its lock.
  __device__ static void run(const MoeParams& p) {
    Smem& sm = Tile::smem();
    const int cols = (p.n + Tile::kRows - 1) / Tile::kRows;
    // Warp-collective in some routings (every warp calls it). The reduction says the count is the
    // same in every lane (it is): ptxas then keeps what the consumers derive from it (a unit's
    // stage count, the ring position, the wgmma descriptors) in uniform registers.
    const int row_tiles = Rows::count(p);
    // The other kernel of a pair runs this call (MoeParams::pick_rows): every thread of every CTA
    // leaves before the barriers and the claim counters. Only 2-warpgroup tiles are paired (the
    // host's rule, dispatch.pair_with_tall_tile): in the 4-warpgroup tile's 104 registers the
    // pick's second warp scan spilled 8 bytes.
    if constexpr (kPairable) {
      if (!__reduce_max_sync(0xffffffffu, (int)Rows::picked(p, row_tiles))) return;
    }
    const int tiles = __reduce_max_sync(0xffffffffu, row_tiles * cols);
    const TailSplit split(tiles, gridDim.x, p.k / Tile::kStageK, kStagesPerStep, kTailMinPieceStages);
    // Every CTA runs, even with no tile to claim: the counter's reset needs all of them done.
    if constexpr (DEFER_STORE) {
      if (threadIdx.x == 0) {
        mbarrier_init(&sm.loop.handoff.staged, kConsumerThreads);
        mbarrier_init(&sm.loop.handoff.stored, kStoreThreads);
      }  // init_barriers' fence covers these too (same thread, before it)
    }
    Tile::init_barriers(sm, kLoaderThreads + 1);
    Tile::template split_roles<kProducerRegs, kConsumerRegs>(
        [&] {
          // The warp's role from lane 0's index: ptxas then knows the branch is warp-uniform (on
          // `threadIdx.x < kLoaderThreads` the loader's stage addresses left the uniform registers,
          // +10-18 instructions a stage and an R2UR loop before every box).
          if (!DEFER_STORE || __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0) < kLoaderThreads / 32) {
            produce(p, sm, cols, split);
          } else if constexpr (DEFER_STORE) {
            store_tiles(p, sm);
          }
        },
        [&] { consume(p, sm, cols, split); });
  }

  // Both roles skip the same empty tiles (the routing is read-only).
  __device__ static bool has_work(const Located& at) { return at.expert >= 0 && at.rows > 0; }

  // A unit's stages, as both roles count them: from 0, and bounded by K's (the bound is already
  // true; said so, ptxas widens the count to 64 bits once and keeps each per-stage address at one
  // add: from [s0, s1) it rebuilt them from 32-bit indices, 17 more instructions a producer stage
  // and 14 a consumer stage).
  __device__ __forceinline__ static int unit_stages(const MoeParams& p, const TailSplit::Unit& unit) {
    return min(unit.s1 - unit.s0, p.k / Tile::kStageK);
  }

  // The loaders' next tile: thread 0 claims it, the others read it (two slots, so one barrier a
  // claim: a slot is rewritten only after every thread passed the next claim's barrier); one
  // loader warp (DEFER_STORE) takes it by shuffle.
  __device__ static int claim(const MoeParams& p, Smem& sm, int n) {
    if constexpr (kLoaderThreads == 32) {
      int u = 0;
      if (threadIdx.x == 0) u = atomicAdd(p.locks, 1);
      return __shfl_sync(0xffffffffu, u, 0);
    } else {
      if (threadIdx.x == 0) sm.claimed[n & 1] = atomicAdd(p.locks, 1);
      named_barrier_sync<kClaimBarrier, kLoaderThreads>();
      return sm.claimed[n & 1];
    }
  }

  // Slot `slot` at ring position g (stages this CTA issued) is free: its use g / STAGES - 1 released.
  __device__ static void wait_free(const typename Tile::Ring& bars, int slot, int g) {
    if (g >= STAGES) mbarrier_wait(bars.empty(slot), ((g / STAGES) + 1) & 1);
  }

  // The slot's copies and, from thread 0, its plain stores (the tile id and location) complete `full`.
  __device__ static void publish(const typename Tile::Ring& bars, int slot) {
    cp_async_mbarrier_arrive(bars.full(slot));
    if (threadIdx.x == 0) mbarrier_arrive(bars.full(slot));
  }

  __device__ static void produce(const MoeParams& p, Smem& sm, int cols, const TailSplit& split) {
    const int tid = threadIdx.x;
    Tile::prefetch_maps(p);
    const typename Tile::Ring bars = Tile::ring(sm);
    int g = 0;  // ring position: stages this CTA has issued
    for (int n = 0;; ++n) {
      const int u = claim(p, sm, n);
      if (u >= split.units) break;
      const TailSplit::Unit unit = split.unit(u);
      const int t = unit.tile;
      const Located at = Rows::locate(p, t / cols);
      if (!has_work(at)) continue;
      const typename Tile::Sources src = Tile::sources(p, at.expert, t % cols);
      // The unit's stages [s0, s1) counted from 0 (j; the activation rows advanced to s0).
      const auto rows = [&] {
        if constexpr (TMA_ACTS) {
          return typename Tile::ActBox{at.first, unit.s0};
        } else if constexpr (DEFER_STORE) {  // warp 0 alone
          Tile::set_warp_rows(p, sm, [&](int r) {
            const int32_t route = Rows::route(p, at, r);
            return route >= 0 ? (int32_t)Rows::a_row(p, route) : -1;
          });
          return typename Tile::WarpRows{p.a + (tid % 8) * 8 + (int64_t)unit.s0 * Tile::kStageK};
        } else {
          typename Tile::RowIndex idx;
#pragma unroll
          for (int i = 0; i < Tile::kActPerThread; ++i) {
            const int32_t route = Tile::act_row_in_tile(tid, i) ? Rows::route(p, at, Tile::act_row_of(tid, i)) : -1;
            idx.row[i] = route >= 0 ? (int32_t)Rows::a_row(p, route) : -1;
          }
          typename Tile::RowPointers ptrs(p, idx);
          ptrs.advance(unit.s0);
          return ptrs;
        }
      }();
      const int count = unit_stages(p, unit);
      for (int j = 0; j < count; j += kStagesPerStep, g += kStagesPerStep) {
        const int slot = g % STAGES;  // even when stages go in pairs (STAGES and every unit's stages even)
#pragma unroll
        for (int q = 0; q < kStagesPerStep; ++q) wait_free(bars, slot + q, g + q);
        if (j == 0 && tid == 0) sm.loop.slots[slot] = SlotTile{u, at};
        if constexpr (Tile::kBlockPairs) {
          Tile::load_block_pair(p, sm, slot, src, rows, unit.s0 + j, j);
        } else {
          Tile::load_stage(p, sm, slot, src, rows, unit.s0 + j, j);
        }
#pragma unroll
        for (int q = 0; q < kStagesPerStep; ++q) publish(bars, slot + q);
      }
    }
    // No more tiles: one slot more says so to the consumers.
    const int slot = g % STAGES;
    wait_free(bars, slot, g);
    if (tid == 0) sm.loop.slots[slot].tile = -1;
    Tile::arrive_unloaded(sm, slot);
    publish(bars, slot);
    cp_async_wait<0>();
    // This CTA's claims are over; the last CTA to get here zeroes the counters for the next launch.
    if (tid == 0) {
      __threadfence();  // this CTA's claims land before its "done"
      if (atomicAdd(p.locks + 1, 1) == (int)gridDim.x - 1) {
        __threadfence();  // every CTA's claims landed before the reset
        p.locks[0] = 0;
        p.locks[1] = 0;
      }
    }
  }

  // A piece of a split tile (TailSplit): its partial to the workspace slot `piece`; in the last
  // of the tile's `split` pieces to finish, the pieces' sum in piece order back into acc (true:
  // store it). The tile's lock is p.locks[2 + piece / split] (0, 1: the claim counters).
  __device__ static float4* partial(const MoeParams& p, int piece, int ctid) {
    return reinterpret_cast<float4*>(p.workspace) + (int64_t)piece * (kAcc / 4) * kConsumerThreads + ctid;
  }
  __device__ static bool add_up(const MoeParams& p, Smem& sm, typename Tile::Acc& acc, int piece, int split,
                                int ctid) {
    const int first = piece - piece % split;
    if (!Partials::contribute(partial(p, piece, ctid), &acc[0][0], p.locks + 2 + piece / split, split, ctid,
                              &sm.finisher, [] { named_barrier_sync<kFixupBarrier, kConsumerThreads>(); }))
      return false;
    Partials::template sum<Partials::kSumChunk>(split, [&](int q) { return partial(p, first + q, ctid); },
                                      [&](int i, float4 v) {
                                        float* a = &acc[i / (BN / 8)][4 * (i % (BN / 8))];
                                        a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
                                      });
    return true;
  }

  __device__ static void consume(const MoeParams& p, Smem& sm, int cols, const TailSplit& split) {
    const int ctid = threadIdx.x - Tile::kProducerThreads;
    typename Tile::Acc acc;
    typename Tile::AFrag afrag;
    const typename Tile::Ring bars = Tile::ring(sm);
    int handoffs = 0;  // DEFER_STORE: tiles handed to the store warps
    for (int g = 0;;) {  // g: ring position, stages this CTA has consumed
      mbarrier_wait(bars.full(g % STAGES), (g / STAGES) & 1);
      // Read before the slot is released (the producer rewrites it). The producer located the
      // tile already: the consumers take its answer instead of locating it again (a warp scan
      // over the experts in the offsets and masked forms, with the tensor cores idle).
      const SlotTile slot_tile = sm.loop.slots[g % STAGES];
      // The same in every lane; said so (a warp reduction writes a uniform register), ptxas keeps
      // the unit's stage count, and with it the ring position and the wgmma descriptors, in
      // uniform registers (from the shared load and the routing's count it moved them back from
      // vector registers: 14 more instructions a stage).
      const int u = __reduce_max_sync(0xffffffffu, slot_tile.tile);
      if (u < 0) break;
      const TailSplit::Unit unit = split.unit(u);
      const Located at = slot_tile.at;
      if constexpr (DEFER_STORE) {
        // The tile's out rows into set handoffs % 2, with no barrier: only the store warps read
        // them, after this tile's handoff (every consumer thread's arrival on `staged` releases
        // its rows); the last handoff that read this set, handoffs - 2, was stored before this
        // thread staged handoff handoffs - 1 (hand_off's wait).
        int32_t* rows = sm.out_row + (handoffs & 1) * Tile::kTok;
        for (int i = ctid; i < BN; i += kConsumerThreads) rows[i] = Rows::route(p, at, i);
      } else {
        // The tile's out rows for the epilogue, in a shared array only the consumers use: the
        // previous tile's stores have read it (first barrier), all of it is written (second).
        named_barrier_sync<kOutRowsBarrier, kConsumerThreads>();
        for (int i = ctid; i < BN; i += kConsumerThreads) sm.out_row[i] = Rows::route(p, at, i);
        named_barrier_sync<kOutRowsBarrier, kConsumerThreads>();
      }
      const int count = unit_stages(p, unit);
      for (int s = 0; s < count; ++s, ++g) {
        const int slot = g % STAGES;
        mbarrier_wait(bars.full(slot), (g / STAGES) & 1);
        Tile::template mma_stage<true>(sm, slot, acc, afrag, s == 0);  // paired words: kOperandsPerStep
        if (s > 0) Tile::release(bars, (g - 1) % STAGES);
      }
      Tile::drain(acc, afrag);
      if (unit.piece < 0 || add_up(p, sm, acc, unit.piece, split.split, ctid)) {
        if constexpr (DEFER_STORE) {
          hand_off(sm, handoffs, unit.tile % cols, [&] { Tile::stage_tiles(sm, acc); });
          ++handoffs;
        } else {
          Tile::store(p, sm, acc, unit.tile % cols, sm.out_row);
        }
      }
      Tile::release(bars, (g - 1) % STAGES);  // its last slot: every group that read it retired
    }
    // Said again after the loop: ptxas cannot prove every group retired on the loop's exit path,
    // and otherwise injects waits that serialize the wgmmas (as in the stream-K kernel).
    Tile::drain(acc, afrag);
    if constexpr (DEFER_STORE) hand_off(sm, handoffs, -1, [] {});  // no more tiles: the store warps leave
  }

  // Handoff h to the store warps (every consumer thread): once handoff h - 1 is stored (the
  // staging rows and the record are free again), stage (the tile's outputs into the staging rows;
  // nothing for the end marker, col_tile -1), record, arrive. Stores of a tile are never waited for
  // by its own consumers, only by the next handoff's, a tile of MMAs later.
  template <class Stage>
  __device__ static void hand_off(Smem& sm, int h, int col_tile, Stage&& stage) {
    StoreHandoff& handoff = sm.loop.handoff;
    if (h > 0) mbarrier_wait(&handoff.stored, (h - 1) & 1);
    stage();
    record(threadIdx.x == Tile::kProducerThreads, &handoff.col_tile, col_tile, h & 1);
    mbarrier_arrive(&handoff.staged);
  }

  // The handoff's record from one thread, as a predicated store. Why not `if (leader) ...`: that
  // divergent branch inside the tile loop moved the ring position and the wgmma descriptors out
  // of the uniform registers (ptxas; +2 instructions and 2 RUR moves a consumer stage).
  __device__ __forceinline__ static void record(bool leader, int32_t* at, int32_t col_tile, int32_t rows_set) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n@p st.shared.v2.s32 [%0], {%1, %2};\n}\n" ::"r"(smem_addr(at)),
                 "r"(col_tile), "r"(rows_set), "r"((int)leader)
                 : "memory");
  }

  // Producer warps 1-3 (DEFER_STORE): write each handed-off tile, then free its staging.
  __device__ static void store_tiles(const MoeParams& p, Smem& sm) {
    const int t = threadIdx.x - kLoaderThreads;
    const bool vec = out_rows_vectorizable(p);
    StoreHandoff& handoff = sm.loop.handoff;
    for (int h = 0;; ++h) {
      mbarrier_wait(&handoff.staged, h & 1);
      const int col_tile = handoff.col_tile;
      if (col_tile < 0) break;
      Tile::template store_staged_tiles<kStoreThreads>(p, sm, col_tile, sm.out_row + handoff.rows_set * Tile::kTok,
                                                      t, vec);
      mbarrier_arrive(&handoff.stored);
    }
  }
};

}  // namespace chord
