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
// (common/w4a16_wgmma_streamk.cuh) no tile is split (no fix-up partials, no split tail).
#pragma once

#include "common/mbarrier_sm90.cuh"
#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"
#include "common/w4a16_wgmma_tile.cuh"

namespace chord {

template <int WM, int BN, int STAGES, int BLOCK_K, template <int> class ROW_TILES, int CWG = 2>
struct WgmmaTiles {
  using Tile = WgmmaTile<WM, BN, STAGES, BLOCK_K, CWG>;
  using Smem = typename Tile::Smem;
  using Rows = ROW_TILES<BN>;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kConsumerThreads = kThreads - Tile::kProducerThreads;
  static constexpr int kStagesPerStep = Tile::kBlockPairs ? 2 : 1;  // see Tile::weight_chunk
  static constexpr int kOutRowsBarrier = 2;  // named barrier of the consumers (1: stream-K fix-up)
  static constexpr int kClaimBarrier = 3;    // of the producer warpgroup: its claim is in shared memory
  // The loop's state costs the producer registers: at the one-tile split (72/216) some tiles
  // spill 4-16 bytes, and 72/216 measured slower everywhere (indexed-kernels.md v16); BLOCK_K 128
  // (stage pairs) spilled even at 88/208. With 4 consumer warpgroups (96 registers a thread)
  // neither role has any to give: those tiles keep one CTA per tile.
  static_assert(CWG == 2, "the tile loop runs 2 consumer warpgroups");
  static constexpr int kProducerRegs = BLOCK_K == 64 ? 88 : 104;
  static constexpr int kConsumerRegs = BLOCK_K == 64 ? 208 : 200;

  // The host keeps row tiles x column tiles + CTAs under 2^31 (chord_kernels/ops.py) and passes
  // p.locks zeroed; the last CTA to finish claiming zeroes them again.
  __device__ static void run(const MoeParams& p) {
    Smem& sm = Tile::smem();
    const int cols = (p.n + Tile::kRows - 1) / Tile::kRows;
    const int tiles = Rows::count(p) * cols;  // warp-collective in some routings: every warp calls it
    // Every CTA runs, even with no tile to claim: the counter's reset needs all of them done.
    Tile::init_barriers(sm, Tile::kProducerThreads + 1);
    Tile::template split_roles<kProducerRegs, kConsumerRegs>([&] { produce(p, sm, cols, tiles); },
                                                                         [&] { consume(p, sm, cols); });
  }

  // Both roles skip the same empty tiles (the routing is read-only).
  __device__ static bool has_work(const Located& at) { return at.expert >= 0 && at.rows > 0; }

  // The producer warpgroup's next tile: thread 0 claims it, the others read it (two slots, so one
  // barrier a claim: a slot is rewritten only after every thread passed the next claim's barrier).
  __device__ static int claim(const MoeParams& p, Smem& sm, int n) {
    if (threadIdx.x == 0) sm.claimed[n & 1] = atomicAdd(p.locks, 1);
    named_barrier_sync<kClaimBarrier, Tile::kProducerThreads>();
    return sm.claimed[n & 1];
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

  __device__ static void produce(const MoeParams& p, Smem& sm, int cols, int tiles) {
    const int tid = threadIdx.x;
    const int num_stages = p.k / Tile::kStageK;
    Tile::prefetch_maps(p);
    const typename Tile::Ring bars = Tile::ring(sm);
    int g = 0;  // ring position: stages this CTA has issued
    for (int n = 0;; ++n) {
      const int t = claim(p, sm, n);
      if (t >= tiles) break;
      const Located at = Rows::locate(p, t / cols);
      if (!has_work(at)) continue;
      const typename Tile::Sources src =
          Tile::template sources<Tile::kBlockPairs ? Tile::kWholeBlocks : Tile::kByOwner>(p, at.expert, t % cols);
      typename Tile::RowIndex idx;
#pragma unroll
      for (int i = 0; i < Tile::kActPerThread; ++i) {
        const int32_t route = Tile::act_row_in_tile(tid, i) ? Rows::route(p, at, Tile::act_row_of(tid, i)) : -1;
        idx.row[i] = route >= 0 ? (int32_t)Rows::a_row(p, route) : -1;
      }
      const typename Tile::RowPointers rows(p, idx);
      for (int s = 0; s < num_stages; s += kStagesPerStep, g += kStagesPerStep) {
        const int slot = g % STAGES;  // even when stages go in pairs (STAGES and num_stages even)
#pragma unroll
        for (int q = 0; q < kStagesPerStep; ++q) wait_free(bars, slot + q, g + q);
        if (s == 0 && tid == 0) sm.slots[slot] = SlotTile{t, at};
        if constexpr (Tile::kBlockPairs) {
          Tile::load_block_pair(p, sm, slot, src, rows, s);
        } else {
          Tile::load_stage(p, sm, slot, src, rows, s);
        }
#pragma unroll
        for (int q = 0; q < kStagesPerStep; ++q) publish(bars, slot + q);
      }
    }
    // No more tiles: one slot more says so to the consumers.
    const int slot = g % STAGES;
    wait_free(bars, slot, g);
    if (tid == 0) sm.slots[slot].tile = -1;
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

  __device__ static void consume(const MoeParams& p, Smem& sm, int cols) {
    const int ctid = threadIdx.x - Tile::kProducerThreads;
    const int num_stages = p.k / Tile::kStageK;
    typename Tile::Acc acc;
    typename Tile::AFrag afrag;
    const typename Tile::Ring bars = Tile::ring(sm);
    for (int g = 0;;) {  // g: ring position, stages this CTA has consumed
      mbarrier_wait(bars.full(g % STAGES), (g / STAGES) & 1);
      // Read before the slot is released (the producer rewrites it). The producer located the
      // tile already: the consumers take its answer instead of locating it again (a warp scan
      // over the experts in the offsets and masked forms, with the tensor cores idle).
      const SlotTile slot_tile = sm.slots[g % STAGES];
      const int t = slot_tile.tile;
      if (t < 0) break;
      const Located at = slot_tile.at;
      // The tile's out rows for the epilogue, in a shared array only the consumers use: the
      // previous tile's stores have read it (first barrier), all of it is written (second).
      named_barrier_sync<kOutRowsBarrier, kConsumerThreads>();
      for (int i = ctid; i < BN; i += kConsumerThreads) sm.out_row[i] = Rows::route(p, at, i);
      named_barrier_sync<kOutRowsBarrier, kConsumerThreads>();
      for (int s = 0; s < num_stages; ++s, ++g) {
        const int slot = g % STAGES;
        mbarrier_wait(bars.full(slot), (g / STAGES) & 1);
        Tile::template mma_stage<Tile::kBlockPairs>(sm, slot, acc, afrag, s == 0);
        if (s > 0) Tile::release(bars, (g - 1) % STAGES);
      }
      Tile::drain(acc, afrag);
      Tile::store(p, sm, acc, t % cols, sm.out_row);
      Tile::release(bars, (g - 1) % STAGES);  // its last slot: every group that read it retired
    }
    // Said again after the loop: ptxas cannot prove every group retired on the loop's exit path,
    // and otherwise injects waits that serialize the wgmmas (as in the stream-K kernel).
    Tile::drain(acc, afrag);
  }
};

}  // namespace chord
