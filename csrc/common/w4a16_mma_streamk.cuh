// The mma tile (common/w4a16_mma_tile.cuh) on the stream-K schedule (common/streamk_schedule.cuh):
// persistent CTAs, one cp.async ring that runs on across tile boundaries.
//
// Why: at decode every tile is a weight stream of 16–460 KB with a few rows. One CTA per tile
// loses bandwidth twice: each tile restarts the pipeline (index loads, ring fill, epilogue —
// most of a K=256 tile's life), and the last wave is partly empty (EP8 T=8: 960 tiles on 396
// slots is 2.4 waves, so ~20 % of the machine idles). Here the ring loads iteration g+STAGES-1
// while computing g, whichever tile either belongs to, so tile switches cost no refill; the next
// tile's indices (expert, the thread's routed row) are read one tile ahead into registers.
#pragma once

#include "common/mma_sm80.cuh"
#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"
#include "common/w4a16_mma_tile.cuh"

namespace chord {

template <int NT, int TT, int STAGE_K, int STAGES, int BLOCK_K, template <int> class ROW_TILES>
struct MmaStreamK {
  using Tile = MmaTile<NT, TT, STAGE_K, STAGES, BLOCK_K>;
  using Smem = typename Tile::Smem;
  using Rows = ROW_TILES<Tile::kTok>;
  static constexpr int kThreads = Tile::kThreads;
  static constexpr int kTok = Tile::kTok;
  static constexpr int kRows = Tile::kRows;
  static constexpr int kAcc = NT * TT * 4;  // FP32 accumulators per thread (a workspace slot row)
  static_assert(kThreads % kTok == 0, "a thread always gathers the same tile row: kTok must divide 128");
  static constexpr int kThreadsPerRow = kThreads / kTok;
  // A thread's activation column (its chunk x 8) goes into its row pointer once a tile, or with
  // the one-tile ring (STAGES 2: 3 CTAs an SM at 168 registers, dispatch.STREAMK_CTAS_PER_SM) into
  // each copy: held as a 64-bit offset for the per-tile rebuild it spilled 8 bytes there. Only
  // there: elsewhere ptxas then schedules the whole kernel anew (the grouped 8 x 128 tile went
  // from 144 to 130 registers and ran 2-4 % slower at EP8 T=8-20, ncu on the H200).
  static constexpr bool kChunkPerCopy = STAGES == 2;

  // Whether the kernel reads MoeParams::pick_rows: the masked form's 16-row tile, which the narrow
  // pair launches before the 256 x 24 tile loop (chord_kernels.dispatch.pair_narrow_mid_batch), and
  // no other, since the count costs every kernel that carries it ~300 instructions. (The 8-row
  // tile paired with the 16-row one lost more where it ran than it won where the other did:
  // grouped-kernels.md v57.)
  static constexpr bool kReadsPick = Rows::kPairedMma && TT == 2 && STAGES <= 3;

  using Walk = StreamKWalk<STAGES>;
  using Fixup = StreamKFixup<kThreads, kAcc>;

  // End of this CTA's part of the tile whose iterations start at `first`.
  __device__ static void finish_tile(const MoeParams& p, Smem& sm, const float (&acc)[NT][TT][4], int first,
                                     const StreamKWork& w, int row0, const int32_t* routes) {
    if (w.owns(first)) {
      Tile::store(p, sm, acc, row0, routes);
      return;
    }
    if (!Fixup::contribute(p, w, &acc[0][0][0], first, threadIdx.x, &sm.finisher, [] { __syncthreads(); })) return;
    Fixup::template store_sum<kAcc>(p, w, first, threadIdx.x,
                                    [&](int i, float4 v) { Tile::store4(p, row0, routes, i, v); });
  }

  __device__ static void run(const MoeParams& p) {
    const int row_tiles = Rows::count(p);
    // The other kernel of a pair runs this call (MoeParams::pick_rows: the grouped masked form's
    // 16-row tile and the 256 x 24 tile loop, grouped-kernels.md v57). Uniform over the grid: every
    // thread counts the same row tiles.
    if constexpr (kReadsPick) {
      if (!Rows::picked(p, row_tiles)) return;
    }
    run_tiles(p, row_tiles);
  }

  // The call's `row_tiles` (Rows::count) on this tile; a kernel that holds two tile heights
  // (GroupedMmaDecodeDual) enters here with the height it picked.
  // The host keeps row tiles x column tiles x stages under 2^31 (chord_kernels/ops.py).
  __device__ static void run_tiles(const MoeParams& p, const int row_tiles) {
    Smem& sm = Tile::smem();
    // A thread always gathers the same tile row; a warp covers 32 / kThreadsPerRow rows, each
    // as one contiguous run (2 x 256 B at 8 rows and 256 columns).
    const int tid = threadIdx.x, my_row = tid / kThreadsPerRow, my_chunk = tid % kThreadsPerRow;
    const int col_tiles = (p.n + kRows - 1) / kRows;
    const StreamKWork w(row_tiles, col_tiles, p.k / STAGE_K, p.k, kMmaWholeTiles);
    const int iterations = w.iterations();
#ifdef CHORD_CTA_TRACE
    cta_trace_schedule(w, Rows::count(p));
#endif
    if (iterations == 0) return;
    // Whether the call's weight stream is short enough to go through L2 evict-first
    // (MoeParams::evict_first_tiles): kept in shared memory, as a register across the loop would
    // spill the 4-CTA rings (127 registers).
    if constexpr (Rows::kEvictFirstWeights) {
      if (tid == 0) sm.evict_first = row_tiles * col_tiles <= p.evict_first_tiles;
      __syncthreads();
    }

    // Loader: its walk, the row tiles' indices (the next one's in flight), and the copy sources
    // of the tile being loaded (rebuilt when the segment changes).
    Walk ld(w);
    auto fetch = [&](int row_tile) { return fetch_row<Rows>(p, row_tile, my_row); };
    RowTilesAhead<RowRef> rows(ld, w, fetch);
    typename Tile::Sources src;
    const __nv_bfloat16* act_src;  // this thread's activation row (kChunkPerCopy: its column 0, else my_chunk * 8)
    const int copy_chunk = kChunkPerCopy ? my_chunk * 8 : 0;
    auto new_tile = [&]() {
      const RowRef& cur = rows.cur;
      if (cur.expert >= 0) src = Tile::sources(p, cur.expert, ld.col * kRows);
      act_src = p.a + (cur.route >= 0 ? Rows::a_row(p, cur.route) * p.lda : 0) + (kChunkPerCopy ? 0 : my_chunk * 8);
    };
    new_tile();
    int loads_left = iterations;

    auto load = [&]() {
      if (loads_left > 0) {
        const int slot = ld.slot;
        const RowRef& cur = rows.cur;
        if (my_chunk == 0) sm.route[slot][my_row] = cur.expert >= 0 ? cur.route : -1;
        if (cur.expert >= 0) {
          Tile::load_weights_scales(p, sm, slot, src, ld.s, Rows::kEvictFirstWeights && sm.evict_first);
          // Activations: this thread always gathers tile row my_row; missing rows read as zero.
          const int bytes = cur.route >= 0 ? 16 : 0;
#pragma unroll
          for (int col = 0; col < STAGE_K; col += kThreadsPerRow * 8)
            if (STAGE_K % (kThreadsPerRow * 8) == 0 || col + my_chunk * 8 < STAGE_K)
              cp_async_16(&sm.act[slot][my_row][col + my_chunk * 8], act_src + ld.s * STAGE_K + col + copy_chunk, bytes);
        }
        ld.step();
        if (--loads_left > 0 && ld.segment_done()) {
          ld.next_segment(w);
          rows.on_segment(ld, w, fetch);
          new_tile();
        }
      }
      cp_async_commit();  // always commit, so group counting stays uniform
    };

    float acc[NT][TT][4] = {};
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) load();

    Walk at(w);
    for (int it = 0; it < iterations; ++it) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // iteration it landed for everyone; the slot of it-1 is free to refill
      load();
      const int slot = at.slot;
      Tile::mma_stage(sm, slot, acc);
      at.step();
      if (at.segment_done()) {
        finish_tile(p, sm, acc, at.first_iteration(w), w, at.col * kRows, sm.route[slot]);
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int tt = 0; tt < TT; ++tt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[t][tt][i] = 0.f;
        if (it + 1 < iterations) at.next_segment(w);
      }
    }
    cp_async_wait<0>();
  }
};

}  // namespace chord
