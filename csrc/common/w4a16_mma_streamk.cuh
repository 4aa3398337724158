// The decode schedule of the mma tile: persistent CTAs, stream-K over (tile, stage) iterations,
// one cp.async ring that runs on across tile boundaries.
//
// Why: at decode every tile is a weight stream of 16–460 KB with a few rows. One CTA per tile
// loses bandwidth twice: each tile restarts the pipeline (index loads, ring fill, epilogue —
// most of a K=256 tile's life), and the last wave is partly empty (EP8 T=8: 960 tiles on 396
// slots is 2.4 waves, so ~20 % of the machine idles). Here the grid is the resident CTA count;
// the work is the flat sequence of iterations (row tile, CTA column tile, K stage), stage
// fastest, and CTA c takes the contiguous run [c*L, (c+1)*L), L = ceil(total / CTAs): every CTA
// streams the same number of weight bytes. The ring loads iteration g+STAGES-1 while computing g,
// whichever tile either belongs to, so tile switches cost no refill; the next tile's indices
// (expert, the thread's routed row) are read one tile ahead into registers.
//
// A tile cut by a run boundary is summed deterministically: every contributing CTA writes its
// FP32 partial to a workspace slot of its own (slot 0: the tile began in an earlier CTA's run,
// slot 1: it continues into a later one), counts itself on the lock of the tile's first CTA, and
// the last to arrive adds the partials in CTA order — the same order whoever finishes — stores
// the tile and re-zeroes the lock for the next launch. No CTA ever waits for another.
//
// The family supplies ROW_TILES<kTok>: count(p) row tiles (read on the device, no host sync) and
// fetch(p, row_tile, row) -> {expert (-1: skip), route id of that row (-1: none)}, plus
// a_row(p, route) (activation row) and out_row(p, route).
#pragma once

#include "common/mma_sm80.cuh"
#include "common/moe_params.cuh"
#include "common/w4a16_mma_tile.cuh"

namespace chord {

struct RowRef {
  int expert;     // -1: the tile has no work (not a local expert / past the routed rows)
  int32_t route;  // -1: no row
};

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
  static_assert(kAcc % 4 == 0, "partials move as float4");

  __device__ static float* partial(const MoeParams& p, int cta, int slot) {
    return p.workspace + ((int64_t)(cta * 2 + slot) * kThreads + threadIdx.x) * kAcc;
  }

  // Where an iteration sits: its tile, the tile's CTA column tile and row tile, its K stage and
  // ring slot. The loop advances cursors one iteration at a time, without divisions.
  struct Cursor {
    int tile, col, row_tile, s, slot;
    __device__ Cursor(int g, int stages, int col_tiles)
        : tile(g / stages), col(tile % col_tiles), row_tile(tile / col_tiles), s(g - tile * stages), slot(0) {}
    // Returns true when the next iteration starts a new row tile.
    __device__ bool advance(int stages, int col_tiles) {
      slot = slot + 1 == STAGES ? 0 : slot + 1;
      if (++s < stages) return false;
      s = 0, ++tile;
      if (++col < col_tiles) return false;
      col = 0, ++row_tile;
      return true;
    }
  };

  // End of this CTA's part of a tile whose iterations are [first, first + stages) overall.
  __device__ static void finish_tile(const MoeParams& p, Smem& sm, float (&acc)[NT][TT][4], int first, int stages,
                                     int g0, int g1, int run, int row0, const int32_t* routes) {
    const int last = first + stages - 1;
    if (first >= g0 && last < g1) {  // the whole tile is ours
      Tile::store(p, acc, row0, routes);
      return;
    }
    const int c0 = first / run, c1 = last / run;  // contributing CTAs, in order
    float4* mine = reinterpret_cast<float4*>(partial(p, blockIdx.x, first < g0 ? 0 : 1));
    const float4* a4 = reinterpret_cast<const float4*>(&acc[0][0][0]);
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i) __stcg(mine + i, a4[i]);
    __threadfence();  // partial visible device-wide before the count says so
    __syncthreads();
    if (threadIdx.x == 0) sm.finisher = atomicAdd(p.locks + c0, 1) == c1 - c0;
    __syncthreads();
    if (!sm.finisher) return;  // uniform per CTA
    __threadfence();
    float sum[NT][TT][4] = {};
    float4* s4 = reinterpret_cast<float4*>(&sum[0][0][0]);
    for (int c = c0; c <= c1; ++c) {  // CTA order: deterministic
      const float4* src = reinterpret_cast<const float4*>(partial(p, c, c == c0 ? 1 : 0));
#pragma unroll
      for (int i = 0; i < kAcc / 4; ++i) {
        const float4 v = __ldcg(src + i);
        s4[i].x += v.x, s4[i].y += v.y, s4[i].z += v.z, s4[i].w += v.w;
      }
    }
    if (threadIdx.x == 0) p.locks[c0] = 0;  // every contributor has counted: ready for next launch
    Tile::store(p, sum, row0, routes);
  }

  // The host keeps row tiles x column tiles x stages under 2^31 (chord_kernels/ops.py).
  __device__ static void run(const MoeParams& p) {
    Smem& sm = Tile::smem();
    // A thread always gathers the same tile row; a warp covers 32 / kThreadsPerRow rows, each
    // as one contiguous run (2 x 256 B at 8 rows and 256 columns).
    const int tid = threadIdx.x, my_row = tid / kThreadsPerRow, my_chunk = tid % kThreadsPerRow;
    const int col_tiles = (p.n + kRows - 1) / kRows;
    const int stages = p.k / STAGE_K;
    const int total = Rows::count(p) * col_tiles * stages;
    const int run = (total + gridDim.x - 1) / gridDim.x;
    const int g0 = blockIdx.x * run, g1 = min(g0 + run, total);
    if (g0 >= g1) return;
    const int last_row_tile = (g1 - 1) / stages / col_tiles;

    // Loader: its cursor, the row tile's indices, the next row tile's indices (in flight), and
    // the copy sources of the tile being loaded (rebuilt when the tile changes).
    Cursor ld(g0, stages, col_tiles);
    RowRef cur = Rows::fetch(p, ld.row_tile, my_row);
    RowRef next = ld.row_tile < last_row_tile ? Rows::fetch(p, ld.row_tile + 1, my_row) : cur;
    typename Tile::Sources src;
    const __nv_bfloat16* act_src;  // this thread's activation row, column my_chunk * 8
    auto new_tile = [&]() {
      if (cur.expert >= 0) src = Tile::sources(p, cur.expert, ld.col * kRows);
      act_src = p.a + (cur.route >= 0 ? Rows::a_row(p, cur.route) * p.lda : 0) + my_chunk * 8;
    };
    new_tile();
    int loads_left = g1 - g0;

    auto load = [&]() {
      if (loads_left > 0) {
        const int slot = ld.slot;
        if (my_chunk == 0) sm.route[slot][my_row] = cur.expert >= 0 ? cur.route : -1;
        if (cur.expert >= 0) {
          Tile::load_weights_scales(p, sm, slot, src, ld.s);
          // Activations: this thread always gathers tile row my_row; missing rows read as zero.
          const int bytes = cur.route >= 0 ? 16 : 0;
#pragma unroll
          for (int col = 0; col < STAGE_K; col += kThreadsPerRow * 8)
            if (STAGE_K % (kThreadsPerRow * 8) == 0 || col + my_chunk * 8 < STAGE_K)
              cp_async_16(&sm.act[slot][my_row][col + my_chunk * 8], act_src + ld.s * STAGE_K + col, bytes);
        }
        if (--loads_left > 0 && ld.advance(stages, col_tiles)) {  // next row tile: prefetched indices
          cur = next;
          if (ld.row_tile < last_row_tile) next = Rows::fetch(p, ld.row_tile + 1, my_row);
        }
        if (loads_left > 0 && ld.s == 0) new_tile();
      }
      cp_async_commit();  // always commit, so group counting stays uniform
    };

    float acc[NT][TT][4] = {};
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) load();

    Cursor at(g0, stages, col_tiles);
    for (int g = g0; g < g1; ++g) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // iteration g landed for everyone; the slot of g-1 is free to refill
      load();
      Tile::mma_stage(sm, at.slot, acc);
      if (at.s == stages - 1 || g + 1 == g1) {
        finish_tile(p, sm, acc, at.tile * stages, stages, g0, g1, run, at.col * kRows, sm.route[at.slot]);
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int tt = 0; tt < TT; ++tt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[t][tt][i] = 0.f;
      }
      at.advance(stages, col_tiles);
    }
    cp_async_wait<0>();
  }
};

}  // namespace chord
