// Row tiles of up to two consecutive routing blocks of one expert, for the short-K decode tile
// (IndexedMmaDecodeDual in indexed/w4a16_indexed_mma.cuh; docs/design/indexed-kernels.md v83).
//
// Why: moe_align_block_size at 8-row blocks gives an expert with 9-16 rows two blocks, and the
// 8-row tile reads the expert's weights once a block. On the short-K down (K=256) every tile is
// stream-K work in routing order, so the second block's weights come from HBM again (a third of
// the call later). Skewed routing puts 9+ rows on the popular experts: TP8 T=128 has 296 blocks for
// 270 experts' worth of 16-row tiles, and 16-row blocks read the down 7 % faster on an H100 (v82).
// These row tiles take such pairs as one 16-row tile (TT 2), so the routing keeps 8-row blocks
// (the gate_up's best, and one moe_align a step in vLLM) and the down reads each pair once.
//
// The tiles depend on expert_ids, which only the device knows: every CTA builds the table of
// its call's tiles in shared memory (count), from one read of expert_ids. A tile starts at every
// block of a valid expert whose distance from the expert's first block is even; it holds the next
// block too where that has the same expert. So an expert of n blocks makes ceil(n / 2) tiles, and
// blocks of no local expert (-1, or past num_experts) make none.
#pragma once

#include <climits>
#include <stdint.h>

#include "common/moe_params.cuh"
#include "common/streamk_schedule.cuh"
#include "indexed/row_tiles.cuh"

namespace chord {

template <int kTok>
struct IndexedPairedRowTiles : IndexedRoutes {  // route, a_row
  static constexpr bool kCountByWarpScan = false;
  static constexpr bool kEvictFirstWeights = true;  // MoeParams::evict_first_tiles
  static constexpr bool kPairedMma = false;         // MoeParams::pick_rows: the dual kernel's, not read per tile
  static constexpr int kThreads = 128;              // the mma tile's CTA
  // Routing blocks the table holds (chord_kernels.dispatch.PAIRED_BLOCKS_CAPACITY): a call with
  // more runs the 8-row tile (count answers kTooManyBlocks).
  static constexpr int kCapacity = 1024;
  static constexpr int kPerThread = kCapacity / kThreads;  // consecutive blocks a thread reads
  // The table, then 8 ints of the scans' per-warp totals, in static shared memory: at a fixed
  // address (a table found from the dynamic size held a register across the k loop, and the
  // 3-CTA pair tile spilled), besides the tiles' dynamic shared memory.
  static constexpr int kTableBytes = (kCapacity + 8) * 4;
  static constexpr int kTooManyBlocks = INT_MAX;
  static_assert(kTok == 16, "two 8-row blocks a tile");
  static_assert(kCapacity % kThreads == 0, "whole chunks a thread");

  // Entry of tile i: its first block, bit 31 set where the tile holds the next block too.
  __device__ static int32_t* table() {
    __shared__ int32_t entries[kTableBytes / 4];
    return entries;
  }

  __device__ static int local_expert(const MoeParams& p, int block, int blocks) {
    if (block < 0 || block >= blocks) return -1;
    const int e = __ldg(p.expert_ids + block);
    return e >= 0 && e < p.num_experts ? e : -1;
  }

  // The call's tiles, with their table built; every thread of the CTA calls it (three barriers).
  // kTooManyBlocks where the blocks before num_tokens_padded overflow the table or the blocks are
  // not 8 rows (the dual kernel then runs its 8-row tile).
  __device__ static int count(const MoeParams& p) {
    const int64_t padded = max(__ldg(p.num_tokens_padded), 0);
    const int blocks = (int)min((int64_t)p.num_blocks, (padded + p.block_m - 1) / p.block_m);
    if (blocks > kCapacity || 2 * p.block_m != kTok) return kTooManyBlocks;  // uniform over the grid
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, b0 = tid * kPerThread;
    int32_t* const tiles = table();
    int32_t* const warp_totals = tiles + kCapacity;  // [0, 4): last starts, [4, 8): tile counts

    // This thread's blocks and their neighbours (the loads in flight together).
    int e[kPerThread + 2];  // e[i + 1]: block b0 + i; e[0] and e[kPerThread + 1] the neighbours
#pragma unroll
    for (int i = 0; i < kPerThread + 2; ++i) e[i] = local_expert(p, b0 - 1 + i, blocks);

    // The expert's first block ("run start") before or at each block: the latest start of this
    // thread's chunk, scanned (max) over the CTA for the chunks after it.
    int last_start = -1;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
      if (e[i + 1] >= 0 && e[i + 1] != e[i]) last_start = b0 + i;
    int start_scan = last_start;  // inclusive over the warp's lanes
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, start_scan, d);
      if (lane >= d) start_scan = max(start_scan, other);
    }
    if (lane == 31) warp_totals[warp] = start_scan;
    __syncthreads();
    int run_start = __shfl_up_sync(0xffffffffu, start_scan, 1);
    if (lane == 0) run_start = -1;
    for (int w = 0; w < warp; ++w) run_start = max(run_start, warp_totals[w]);

    // Tile starts: a block of a local expert an even distance from the expert's first block.
    uint32_t starts = 0, pairs = 0;  // bit i: block b0 + i starts a tile / holds the next block too
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (e[i + 1] >= 0 && e[i + 1] != e[i]) run_start = b0 + i;
      if (e[i + 1] >= 0 && ((b0 + i - run_start) & 1) == 0) {
        starts |= 1u << i;
        if (e[i + 2] == e[i + 1]) pairs |= 1u << i;
      }
    }

    // Where this thread's tiles go: the tiles of the chunks before it (an exclusive sum).
    const int mine = __popc(starts);
    int sum_scan = mine;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, sum_scan, d);
      if (lane >= d) sum_scan += other;
    }
    if (lane == 31) warp_totals[4 + warp] = sum_scan;
    __syncthreads();
    int at = sum_scan - mine, total = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) at += warp_totals[4 + w];
      total += warp_totals[4 + w];
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
      if (starts >> i & 1) tiles[at++] = (b0 + i) | (pairs >> i & 1 ? INT_MIN : 0);
    __syncthreads();  // the table is whole before any tile is located
    return total;
  }

  __device__ static Located locate(const MoeParams& p, int row_tile) {
    const int32_t entry = table()[row_tile];
    const int block = entry & INT_MAX, first = block * p.block_m;
    const int rows = min((entry < 0 ? 2 : 1) * p.block_m, p.sorted_len - first);
    const int expert = __ldg(p.expert_ids + block);
    return {expert >= 0 && expert < p.num_experts ? expert : -1, first, rows};  // never read outside the weights
  }
};

}  // namespace chord
