// The W4A16 MoE tile for many rows per expert (prefill), on Hopper's warpgroup MMA. Same contract
// as common/w4a16_mma_tile.cuh (a family locates one expert and up to kTok rows, fills a_row /
// out_row; this computes out[rows, CTA's N range] = a[rows] @ dequant(W[expert])^T), but the MMA
// is wgmma.mma_async: mma.sync cannot feed Hopper's tensor cores at their full rate.
//
// Operands stay swapped: dequantized weights are the register A operand on WGMMA-M (each of the
// CWG (2 or 4) consumer warpgroups owns WM m64 tiles = 64*WM weight rows; warp w of a warpgroup reads
// n-tile 4m+w, so the packed per-lane fragment word is exactly its A fragment), the tile's rows
// are WGMMA-N (BN = 32 at mid batch, 56, 64, 96 or 128; 240 at WM 1, the grouped offsets form's
// tall tile; 16 and 48 by override) and come from shared memory, K-major in the 128-byte swizzle,
// through a descriptor.
//
// Warp-specialized: warpgroup 0 is the producer. It gathers each 64-column stage (the consumer
// lanes' weight chunks, the CTA rows' scales, the tile's activation rows) into a STAGES-deep
// ring and signals the slot's "full" mbarrier when its copies land: the weights and scales as
// tensor-map boxes (TMA, one thread; BLOCK_K-128 weights either one box a K block into two slots,
// or one box a stage, see kBlockPairs) and the gathered activation rows with cp.async. It gives
// its registers to the consumers (setmaxnreg). The consumer warpgroups wait on "full", load their weight
// chunk and scales, dequantize k step i+1 into one of two A register sets while the wgmma group
// of step i runs (wait_group<1>), and release a slot on its "empty" mbarrier (one arrival per
// consumer thread) once the group that read it has retired. No CTA-wide barrier in the main loop: the consumers never wait on each
// other or on load issue, only on data.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

#include "common/cluster_sm90.cuh"
#include "common/mbarrier_sm90.cuh"
#include "common/mma_sm80.cuh"
#include "common/moe_params.cuh"
#include "common/staged_store.cuh"
#include "common/streamk_schedule.cuh"
#include "common/tma_sm90.cuh"
#include "common/w4a16_fragment.cuh"
#include "common/wgmma_sm90.cuh"

namespace chord {

// The tile loop's record of a ring slot (WgmmaTile::Smem::slots): the tile whose first stage the
// slot holds (-1: no more tiles) and where its rows are. 16 bytes, one shared store a tile (the
// store sits in the producer's stage loop, 75-180 instructions, the first thing to stall when it
// grows), inside the union with the stream-K row ids (4 bytes a tile row, 8+ rows): the host's
// size mirror holds.
struct alignas(16) SlotTile {
  int32_t tile;
  Located at;
};

// The tile loop's deferred epilogue (WgmmaTiles, DEFER_STORE): the consumers stage a tile's
// outputs, record where they go and arrive on `staged`; the store warps write them out and
// arrive on `stored`. One handoff in flight: the consumers wait for `stored` of the previous
// handoff before they stage the next. Inside the union with the stream-K row ids (WgmmaTile::Smem).
struct alignas(16) StoreHandoff {
  uint64_t staged;   // completes once a handoff: every consumer thread staged its outputs
  uint64_t stored;   // completes once a handoff: every store thread read the staging
  int32_t col_tile;  // the tile's column tile; -1: no more tiles
  int32_t rows_set;  // which set of out rows (WgmmaTile::Smem::out_row) the tile's are
};

// CWG = 4 (640 threads, ~96-104 registers a thread): twice the warps to hide the dequant's
// latency, and with WM = 2 a 512-row tile that reads each activation stage once per 512 weight
// rows; only small accumulators fit (WM * BN <= 112: 56 a thread), i.e. mid batch and 56-row blocks
// (docs/design/indexed-kernels.md v13, v14).
// WHOLE_BLOCKS: the schedule loads a packed K block's stages together (the one-CTA tile, the tile
// loop); the stream-K schedule (false) loads stage by stage, a split may start inside a block.
// DEFER_STORE (the tile loop's deferred epilogue, common/w4a16_wgmma_tiles.cuh): the consumers
// stage all WM m64 tiles at once and the producer warpgroup's store warps write them out while
// the consumers run the next tile, so the staging holds WM m64 tiles a warpgroup and there are
// two sets of out rows (the tile being stored, the tile being computed).
template <int WM, int BN, int STAGES, int BLOCK_K, int CWG = 2, bool WHOLE_BLOCKS = true, bool DEFER_STORE = false>
struct WgmmaTile {
  static constexpr int kConsumerWarpgroups = CWG;
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kProducerThreads = 128;  // warpgroup 0
  static constexpr int kThreads = kProducerThreads + 32 * kConsumerWarps;
  // setmaxnreg moves registers through the CTA's pool: the launch gives every thread kLaunchRegs
  // (64K / 384 threads, in units of 8), and the producer's decrease must free at least what the
  // consumers' increase takes, or the increase waits forever (a hang, not an error).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;  // 168
  static constexpr bool regs_fit(int producer, int consumer) {
    return kProducerThreads * (kLaunchRegs - producer) >= 32 * kConsumerWarps * (consumer - kLaunchRegs);
  }
  // One tile per CTA: the producer only adds stage offsets; the consumers get the rest.
  static constexpr int kProducerRegs = CWG == 2 ? 72 : 64;
  static constexpr int kConsumerRegs = CWG == 2 ? 216 : 104;
  static constexpr int kRows = kConsumerWarpgroups * WM * 64;  // weight rows (output columns) per CTA
  static constexpr int kTok = BN;                               // activation rows per CTA
  static constexpr int kStageK = 64;                            // one 128-byte swizzle row of BF16
  static constexpr int kGroupsPerStage = kStageK / kGroupSize;
  // A packed K block's stages: 1 at BLOCK_K 64, 2 at 128 (a lane's 16 bytes of each side by side).
  static constexpr int kStagesPerBlock = BLOCK_K / kStageK;
  // BLOCK_K-128 weights come one box a K block (a stage pair: an even ring slot and the next,
  // the block in memory order, see weight_chunk) where the tile takes 256+ weight rows a stage
  // and loads whole blocks; else one box a stage (stage boxes: a lane's 16 bytes of the stage
  // from each lane's 32, the BLOCK_K-64 layout in shared memory, tma_weights). A stage box is
  // rows of 16 bytes: on the memory-bound 512-row mid-batch tiles it measured +13 to +21 %
  // (grouped-kernels.md v30), while the 128-row tall tile needs it (its 4-slot ring holds two
  // pairs: +17 to +71 %, v27) and the stream-K schedule may start a split inside a block.
  static constexpr bool kBlockPairs = kStagesPerBlock == 2 && WHOLE_BLOCKS && kRows >= 256;
  using Mma = WgmmaRS<BN>;
  static_assert(BN % 8 == 0 && BN <= 256, "BN must be a multiple of 8 (one swizzle atom), at most 256");
  static_assert(WM * BN <= 256, "at most 128 accumulators a consumer thread (2 consumer warpgroups hold 216 registers)");
  static_assert(STAGES >= 2, "the ring needs a slot being read and one being filled");
  static_assert(CWG == 2 || (CWG == 4 && WM * BN <= 112), "4 consumer warpgroups hold at most 56 accumulators a thread");
  static_assert(BLOCK_K == 64 || BLOCK_K == 128, "the packed BLOCK_K is 64 or 128 (chord_kernels.tma)");
  // The epilogue through shared memory (store): each consumer warpgroup stages one m64 tile's
  // BN x 64 outputs at a time and writes them as 16-byte row pieces. With 4 consumer warpgroups
  // up to 48 rows (dispatch.WGMMA_CWG4_STAGED_MAX_BN): the 8-deep ring and 4 warpgroups' staging
  // (4 x BN x 144 bytes) fit an SM there, at 56 they do not. Why at 4 too: the direct stores are
  // 2-byte, two half-sectors per 16 columns of a row, each behind a shared read of its out row
  // (v15b's reading), and on the mid-batch down (K=2048: 32 stages a tile) the consumers issue
  // them between one tile's last wgmma and the next's first (indexed-kernels.md v69).
  static constexpr int kStagedEpilogueMaxBnCwg4 = 48;
  static constexpr bool kStagedEpilogue = CWG == 2 || BN <= kStagedEpilogueMaxBnCwg4;
  static constexpr int kOutStageStride = 64 + 8;  // +16 bytes: stmatrix rows and 16-byte reads hit distinct banks
  static_assert(!DEFER_STORE || kStagedEpilogue, "the deferred epilogue stores the staged epilogue's tiles");
  static constexpr int kStagedTiles = DEFER_STORE ? WM : 1;  // m64 tiles a warpgroup stages at once
  static constexpr int kOutRowSets = DEFER_STORE ? 2 : 1;

  // The host passes chord_kernels.dispatch wgmma_smem_bytes(), which mirrors sizeof(Smem).
  // act first: each stage is BN * 128 bytes, a multiple of the 1024-byte swizzle atom.
  struct Smem {
    __nv_bfloat16 act[STAGES][BN * kStageK];
    uint4 w[STAGES][kConsumerWarps][WM][32];
    __nv_bfloat16 scale[STAGES][kGroupsPerStage][kRows];
    // m64 tile m of warpgroup c at rows [m * BN, (m + 1) * BN) of out_stage[c] (staging_rows).
    __nv_bfloat16 out_stage[kStagedEpilogue ? CWG : 1][kStagedEpilogue ? kStagedTiles * BN : 1][kOutStageStride];
    alignas(16) int32_t a_row[kTok];  // 16: the loader warp reads it in vectors (WarpRows)
    int32_t out_row[kOutRowSets * kTok];  // set r at out_row + r * kTok (DEFER_STORE: r = handoff % 2)
    union {
      // Stream-K schedule (common/w4a16_wgmma_streamk.cuh): each ring slot's tile rows (route
      // ids, -1 = none), written by the producer with the slot, read by the tile's epilogue.
      int32_t route[STAGES][kTok];
      // Tile loop (common/w4a16_wgmma_tiles.cuh): the tile whose first stage the slot holds
      // (-1: no more tiles) and where its rows are, written by the producer with the slot; with
      // DEFER_STORE also the consumers' handoff to the store warps.
      struct {
        SlotTile slots[STAGES];
        StoreHandoff handoff;
      } loop;
    };
    uint64_t full[STAGES];   // the producer's copies of the slot landed (see init_barriers)
    uint64_t empty[STAGES];  // every consumer thread is done with the slot (128*CWG arrivals)
    int32_t finisher;        // stream-K and the tile loop's split tail: "this CTA adds up the split tile"
    int32_t claimed[2];      // tile loop: the producer's last two claims (inside the struct's padding)
    // Stream-K with 4 consumer warpgroups: the CTA's schedule, which those consumers read from
    // here instead of holding it in registers (at 104 a thread it spilled; common/w4a16_wgmma_streamk.cuh).
    StreamKWork work;
  };

  static_assert(STAGES * sizeof(SlotTile) + sizeof(StoreHandoff) <= sizeof(int32_t[STAGES][kTok]),
                "the tile loop's slot records and handoff stay inside the union");

  __device__ static Smem& smem() {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // Host and device disagree on the size, or the swizzled tiles are misaligned: fail loudly.
    if (dynamic_smem_bytes() < sizeof(Smem) || (__cvta_generic_to_shared(smem_raw) & 1023) != 0) __trap();
    return *reinterpret_cast<Smem*>(smem_raw);
  }

  // `full` completes after `full_arrivals`: one cp.async-arrive per producer thread (its copies
  // of the slot landed), plus, on the stream-K schedule, one ordinary arrive per producer thread
  // after its plain shared-memory stores of the slot's row ids, and in the tile loop one by the
  // thread that stores the slot's tile (cp.async arrivals do not order those stores); and one
  // more, thread 0's arrive that arms the boxes' bytes (load_stage, or arrive_unloaded).
  static constexpr int kTmaArrivals = 1;
  __device__ static void init_barriers(Smem& sm, int full_arrivals) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        mbarrier_init(&sm.full[s], full_arrivals + kTmaArrivals);
        mbarrier_init(&sm.empty[s], 32 * kConsumerWarps);
      }
      mbarrier_init_fence();
    }
  }

  // The ring's barriers as shared-memory addresses, each thread's computed once before its loop
  // (the empty asm keeps ptxas from folding them back into per-use rebuilds of the shared window's
  // base: mbarrier_sm90.cuh).
  struct Ring {
    uint32_t full0, empty0;
    __device__ __forceinline__ uint32_t full(int slot) const { return full0 + 8 * slot; }
    __device__ __forceinline__ uint32_t empty(int slot) const { return empty0 + 8 * slot; }
  };
  __device__ __forceinline__ static Ring ring(Smem& sm) {
    Ring r{smem_addr(&sm.full[0]), smem_addr(&sm.empty[0])};
    asm volatile("" : "+r"(r.full0), "+r"(r.empty0));
    return r;
  }

  // Hands the CTA to its roles after one last CTA-wide barrier (from there the warpgroups sync by
  // mbarrier): warpgroup 0 produces with P registers a thread, the others consume with C.
  template <int P, int C, class Produce, class Consume>
  __device__ __forceinline__ static void split_roles(Produce&& produce, Consume&& consume) {
    static_assert(regs_fit(P, C), "setmaxnreg: consumers would wait for registers forever");
    __syncthreads();
    if (threadIdx.x < kProducerThreads) {
      if constexpr (P < kLaunchRegs) warpgroup_reg_dealloc<P>();
      produce();
    } else {
      if constexpr (C > kLaunchRegs) warpgroup_reg_alloc<C>();
      consume();
    }
  }

  // Requires sm.a_row / sm.out_row filled and a barrier after it; all kThreads threads call it.
  // SPLIT_K > 1: the kernel runs in clusters of SPLIT_K CTAs along z (the same tile), CTA r of a
  // cluster computes K stages [r, r + 1) * stages / SPLIT_K and the cluster adds the partial sums
  // (store_split_k). Why: one CTA per tile leaves a partly empty last wave when the tiles are
  // few (grouped mid batch: 192 tiles on 132 SMs); SPLIT_K CTAs a tile fill the waves.
  // The host keeps K / 64 a multiple of SPLIT_K (of 2 * SPLIT_K with whole-block pairs).
  template <int SPLIT_K = 1>
  __device__ static void run(const MoeParams& p, Smem& sm, int expert) {
    init_barriers(sm, kProducerThreads);
    const int stages = p.k / kStageK / SPLIT_K;
    const int rank = SPLIT_K == 1 ? 0 : cluster_cta_rank();
    split_roles<kProducerRegs, kConsumerRegs>(
        [&] {
          produce(p, sm, expert, rank * stages, stages);
          if constexpr (SPLIT_K > 1) cluster_sync(), cluster_sync();  // store_split_k's two
        },
        [&] { consume<SPLIT_K>(p, sm, rank * stages, stages, rank); });
  }

  // n-tile of consumer warp `cwarp` (0..4*CWG-1), m64 tile m: its place inside a CTA column tile
  // (tile_in_cta), and its index in N for CTA column tile `col_tile` (tile_of).
  __host__ __device__ static constexpr int tile_in_cta(int cwarp, int m) { return ((cwarp / 4) * WM + m) * 4 + cwarp % 4; }
  __device__ __forceinline__ static int tile_of(int col_tile, int cwarp, int m) {
    return col_tile * (kRows / kTile) + tile_in_cta(cwarp, m);
  }

  // The producer's per-stage work is address arithmetic plus one cp.async per 16 bytes of
  // activations (the weights and scales are one box each, from one thread), so everything that
  // does not change along K is computed once per tile: each thread keeps the same activation rows
  // for every stage and only adds the stage's offset.
  static constexpr int kActPerThread = (kTok + 15) / 16;  // 16 tile rows a pass of 128 threads

  // Activations: producer thread tid copies chunk tid % 8 of tile rows tid / 8 + 16 i (their
  // swizzled destinations are one offset apart: row % 8 is the same for all of them).
  __device__ __forceinline__ static int act_row_of(int tid, int i) { return tid / 8 + 16 * i; }
  // BN 56 (not a multiple of 16): the last pass covers rows 48-63, of which 56-63 are not the tile's.
  __device__ __forceinline__ static bool act_row_in_tile(int tid, int i) {
    return kTok % 16 == 0 || act_row_of(tid, i) < kTok;
  }

  // The boxes' coordinates are all a tile needs (the maps zero-fill past N).
  struct Sources {
    int expert;
    int col_tile;
  };
  __device__ __forceinline__ static Sources sources(const MoeParams&, int expert, int col_tile) {
    return Sources{expert, col_tile};
  }

  // Where the consumers find their weight chunk of the stage in ring slot `slot`: the box holds
  // the CTA's n-tiles in order, so the chunk is in n-tile tile_in_cta(cwarp, m): a stage box puts
  // lane o's 16 bytes at o of it (a warp reads 512 contiguous bytes); stage pairs (kBlockPairs):
  // the box fills an even slot's weight area and the next's, the block in memory order, lane o's
  // chunk of stage h at 2 o + h of its n-tile (a warp's 16-byte reads at a 32-byte stride: 2-way
  // bank conflicted, once a stage).
  __device__ __forceinline__ static const uint4* weight_chunk(const Smem& sm, int slot, int cwarp, int m, int lane) {
    if constexpr (kBlockPairs) {
      const uint4* pair = &sm.w[slot & ~1][0][0][0];
      return pair + (tile_in_cta(cwarp, m) * 32 + lane) * 2 + (slot & 1);
    } else {
      return &sm.w[slot][0][0][0] + tile_in_cta(cwarp, m) * 32 + lane;
    }
  }

  // A producer thread's activation rows of one tile (tile rows act_row_of(tid, i)): RowIndex keeps
  // the row numbers, RowPointers the stage-0 chunk pointers built from them once per tile (every
  // schedule: the 64-bit row math per stage was measured slower on long K, v13, and on the
  // stream-K schedule it made the producer too slow to keep the ring full, v21).
  struct RowIndex {
    int32_t row[kActPerThread];  // -1: no row (zero-filled)
    __device__ __forceinline__ bool present(int i) const { return row[i] >= 0; }
    __device__ __forceinline__ const __nv_bfloat16* first_chunk(const MoeParams& p, int i) const {  // stage 0
      return p.a + (threadIdx.x % 8) * 8 + (row[i] >= 0 ? (int64_t)row[i] * p.lda : 0);
    }
  };
  struct RowPointers {
    const __nv_bfloat16* row[kActPerThread];
    uint32_t present_bits;
    RowPointers() = default;
    __device__ __forceinline__ RowPointers(const MoeParams& p, const RowIndex& idx) : present_bits(0) {
#pragma unroll
      for (int i = 0; i < kActPerThread; ++i) {
        row[i] = idx.first_chunk(p, i);
        present_bits |= (idx.present(i) ? 1u : 0u) << i;
      }
    }
    __device__ __forceinline__ bool present(int i) const { return (present_bits >> i) & 1; }
    __device__ __forceinline__ const __nv_bfloat16* chunk(int i, int s) const {
      return row[i] + s * kStageK;
    }
    // The rows from stage s on (a split piece's first): chunk(i, 0) is then stage s.
    __device__ __forceinline__ void advance(int s) {
#pragma unroll
      for (int i = 0; i < kActPerThread; ++i) row[i] += (int64_t)s * kStageK;
    }
  };

  // The tile's activation rows gathered by one warp (the indexed tile loop with DEFER_STORE, where
  // producer warps 1-3 store): lane copies chunk lane % 8 of tile rows lane / 8 + 4 i. The tile's
  // rows sit in a_row as offsets from p.a in 16-byte units (set_warp_rows, once a tile), so a chunk
  // is one shared load, one IMAD.WIDE and its cp.async: with row numbers, a zero-fill predicate
  // and the 64-bit row math it was 21 instructions a chunk (549 a stage at BN 96, one warp), and
  // held in registers the rows spilled 184 bytes of the producer's 72. A tile row with no route
  // copies row 0 instead of zeros: its outputs are computed and never stored (out_row -1), like
  // the rows past a grouped tile's own (ActBox). Offsets in 32 bits: a under 64 GB (ops checks).
  static constexpr int kActPerLane = kTok / 4;
  static_assert(kTok % 8 == 0, "a lane's rows are 4 apart, its offsets read 8 bytes at a time");
  struct WarpRows {
    const __nv_bfloat16* chunk0;  // p.a + this lane's chunk of stage 0 (of the stage advanced to)
    __device__ __forceinline__ void advance(int s) { chunk0 += (int64_t)s * kStageK; }
  };
  // A tile's rows into a_row from the loader warp (`row_of(r)`: the activation row of tile row r,
  // -1 for none), each lane group's rows (r % 4 = lane / 8) contiguous, so a lane reads its offsets
  // as 16-byte words; the warp's reads of the last tile's are done (its copies were issued), and
  // every lane sees the new ones.
  template <class RowOf>
  __device__ __forceinline__ static void set_warp_rows(const MoeParams& p, Smem& sm, RowOf&& row_of) {
    __syncwarp();
    for (int r = threadIdx.x % 32; r < kTok; r += 32) {
      const int32_t row = row_of(r);
      sm.a_row[(r % 4) * kActPerLane + r / 4] = (int32_t)((uint64_t)max(row, 0) * (uint64_t)p.lda / 8);
    }
    __syncwarp();
  }
  __device__ __forceinline__ static void load_acts(const MoeParams&, Smem& sm, int slot, const WarpRows& rows, int s) {
    const int lane = threadIdx.x % 32;
    // The lane's offsets first, as vectors (one shared load each before the copies, not a
    // load-to-use wait in front of every copy: the copies' memory clobber orders them).
    using Vec = std::conditional_t<kActPerLane % 4 == 0, uint4, uint2>;
    constexpr int kPerVec = sizeof(Vec) / 4;
    uint32_t offset[kActPerLane];
    const Vec* lane_offsets = reinterpret_cast<const Vec*>(sm.a_row + (lane / 8) * kActPerLane);
#pragma unroll
    for (int v = 0; v < kActPerLane / kPerVec; ++v) *reinterpret_cast<Vec*>(&offset[v * kPerVec]) = lane_offsets[v];
    // Rows 8 apart share their swizzle: two destinations, then a constant per row.
    unsigned char* act = reinterpret_cast<unsigned char*>(sm.act[slot]);
    unsigned char* dst_even = act + sw128_offset(lane / 8, lane % 8);
    unsigned char* dst_odd = act + sw128_offset(lane / 8 + 4, lane % 8);
    const uint4* stage = reinterpret_cast<const uint4*>(rows.chunk0 + s * kStageK);
#pragma unroll
    for (int i = 0; i < kActPerLane; ++i)
      cp_async_16((i % 2 ? dst_odd : dst_even) + (i / 2) * 8 * 128, stage + offset[i], 16);
  }

  // The tile's activation rows as one tensor-map box a stage (the grouped tile loop, TMA_ACTS):
  // rows [row, row + BN) of a, whose rows are contiguous in the grouped forms; rows past the
  // tile's own (the next expert's, or zeros past a's end) are loaded and computed, never stored
  // (out_row -1). Its stage act_s is column (stage0 + act_s) * 64; advance as RowPointers'.
  struct ActBox {
    int row, stage0;
    __device__ __forceinline__ void advance(int s) { stage0 += s; }
  };
  template <class Acts>
  static constexpr bool kActBox = std::is_same_v<Acts, ActBox>;
  // A slot's activation bytes by tensor map (all of them count, the zero-filled rows too).
  template <class Acts>
  static constexpr uint32_t kActBoxBytes = kActBox<Acts> ? sizeof(Smem::act[0]) : 0;

  // Stage s (64 columns of K) into ring slot `slot`: weights, scales and the tile's activation
  // rows (stage act_s of `rows`: s, or counted from where the rows were advanced to). Issue only:
  // the caller arrives on the slot's "full" barrier; thread 0 arms it here with the boxes' bytes
  // (its one arrival of kTmaArrivals).
  __device__ __forceinline__ static void load_stage(const MoeParams& p, Smem& sm, int slot, const Sources& src,
                                                    const RowPointers& rows, int s) {
    load_stage(p, sm, slot, src, rows, s, s);
  }
  template <class Acts>
  __device__ __forceinline__ static void load_stage(const MoeParams& p, Smem& sm, int slot, const Sources& src,
                                                    const Acts& rows, int s, int act_s) {
    static_assert(!kBlockPairs, "stage pairs load whole blocks (load_block_pair)");
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&sm.full[slot], kTmaStageBytes + kActBoxBytes<Acts>);
      tma_weights(p, sm, slot, src, s);
      tma_scales(p, sm, slot, src, s);
    }
    load_acts(p, sm, slot, rows, act_s);
  }

  // The boxes' bytes a stage: all of them count, the zero-filled ones past N too.
  static constexpr uint32_t kTmaStageBytes = sizeof(Smem::w[0]) + sizeof(Smem::scale[0]);

  // Weights [E][N/16][K/BLOCK_K][32 lanes x BLOCK_K/16 int32] into slot `slot`'s weight area, on
  // the slot's "full" barrier: stage s of the CTA's n-tiles, or with kBlockPairs K block s / 2 (s
  // even) into this slot's and the next's. BLOCK_K 64, or a pair: K block(s), 512 (1024) contiguous
  // bytes an n-tile (a 4-D box). A BLOCK_K-128 stage box: a lane's 32 bytes of a K block hold its
  // 16 of each of the block's two stages side by side, so the map's innermost dims are a lane's 8
  // words and the 32 lanes, and the box takes 4 words from word 4 (s % 2) of each lane (a 5-D box
  // of 16-byte rows): the same bytes in shared memory as at BLOCK_K 64 (chord_kernels.tma).
  // Scales [E][K/32][N/2 pairs]: stage s's groups of the CTA's rows.
  __device__ __forceinline__ static void tma_weights(const MoeParams& p, Smem& sm, int slot, const Sources& src,
                                                     int s) {
    const int n_tile0 = src.col_tile * (kRows / kTile);
    if constexpr (kStagesPerBlock == 1 || kBlockPairs) {
      tma_load_4d(sm.w[slot], tma_maps(p).weight_map, &sm.full[slot], 0, s / kStagesPerBlock, n_tile0, src.expert);
    } else {
      tma_load_5d(sm.w[slot], tma_maps(p).weight_map, &sm.full[slot], (s % kStagesPerBlock) * 4, 0,
                  s / kStagesPerBlock, n_tile0, src.expert);
    }
  }
  __device__ __forceinline__ static void tma_scales(const MoeParams& p, Smem& sm, int slot, const Sources& src,
                                                    int s) {
    tma_load_3d(sm.scale[slot], tma_maps(p).scale_map, &sm.full[slot], src.col_tile * (kRows / 2),
                s * kGroupsPerStage, src.expert);
  }

  // A slot published without loading anything (the stream-K schedule's empty tiles, the tile
  // loop's end marker): thread 0's arrival that load_stage's box arm would have been.
  __device__ __forceinline__ static void arrive_unloaded(Smem& sm, int slot) {
    if (threadIdx.x == 0) mbarrier_arrive(&sm.full[slot]);
  }

  // Every producer thread at its start: the maps into the TMA unit's cache before the first box.
  __device__ __forceinline__ static void prefetch_maps(const MoeParams& p) {
    if (threadIdx.x == 0) {
      tma_prefetch_map(tma_maps(p).weight_map);
      tma_prefetch_map(tma_maps(p).scale_map);
    }
  }

  // The activation box of stage s (ActBox), from thread 0, after the slot's arm.
  __device__ __forceinline__ static void load_acts(const MoeParams& p, Smem& sm, int slot, const ActBox& box, int s) {
    if (threadIdx.x == 0)
      tma_load_2d(sm.act[slot], tma_act_map(p), &sm.full[slot], (box.stage0 + s) * kStageK, box.row);
  }
  __device__ __forceinline__ static void load_acts(const MoeParams&, Smem& sm, int slot, const RowPointers& rows,
                                                   int s) {
    load_acts(sm, slot, rows, s);
  }
  __device__ __forceinline__ static void load_acts(Smem& sm, int slot, const RowPointers& rows, int s) {
    const int tid = threadIdx.x;
    unsigned char* dst = reinterpret_cast<unsigned char*>(sm.act[slot]) + sw128_offset(act_row_of(tid, 0), tid % 8);
#pragma unroll
    for (int i = 0; i < kActPerThread; ++i)
      if (act_row_in_tile(tid, i)) cp_async_16(dst + i * 16 * 128, rows.chunk(i, s), rows.present(i) ? 16 : 0);
  }

  // The two stages of K block s0 / 2 into slots `slot` (even) and slot + 1 (kBlockPairs): the
  // block's weights as one box into both slots' weight areas (see weight_chunk) and stage s0's
  // scales, both on the first slot's barrier (the consumers wait for it before the second's);
  // stage s0 + 1's scales on the second's; activations from stage act_s0 of `rows` (as
  // load_stage). Issue only.
  template <class Acts>
  __device__ __forceinline__ static void load_block_pair(const MoeParams& p, Smem& sm, int slot, const Sources& src,
                                                         const Acts& rows, int s0, int act_s0) {
    static_assert(kBlockPairs, "stage pairs load whole blocks");
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&sm.full[slot], 2 * sizeof(Smem::w[0]) + sizeof(Smem::scale[0]) + kActBoxBytes<Acts>);
      tma_weights(p, sm, slot, src, s0);
      tma_scales(p, sm, slot, src, s0);
      mbarrier_arrive_expect_tx(&sm.full[slot + 1], sizeof(Smem::scale[0]) + kActBoxBytes<Acts>);
      tma_scales(p, sm, slot + 1, src, s0 + 1);
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) load_acts(p, sm, slot + q, rows, act_s0 + q);
  }

  // Stages [first_stage, first_stage + num_stages) of K into the ring (first_stage even with
  // whole-block pairs).
  __device__ static void produce(const MoeParams& p, Smem& sm, int expert, int first_stage, int num_stages) {
    const int tid = threadIdx.x;
    prefetch_maps(p);
    const Sources src = sources(p, expert, blockIdx.x);
    RowIndex idx;
#pragma unroll
    for (int i = 0; i < kActPerThread; ++i) idx.row[i] = act_row_in_tile(tid, i) ? sm.a_row[act_row_of(tid, i)] : -1;
    const RowPointers rows(p, idx);
    // Stage pairs (kBlockPairs): waiting for two slots at once needs a third being read (a slot is
    // released after the next stage's first step), and pairs must not wrap the ring.
    static_assert(!kBlockPairs || (STAGES % 2 == 0 && STAGES >= 4), "stage pairs need an even ring of 4+ slots");
    constexpr int kStep = kBlockPairs ? 2 : 1;
    const Ring bars = ring(sm);
    for (int i = 0; i < num_stages; i += kStep) {
      const int slot = i % STAGES;
#pragma unroll
      for (int q = 0; q < kStep; ++q)  // use (i + q) / STAGES - 1 of the slot released
        if (i + q >= STAGES) mbarrier_wait(bars.empty(slot + q), (((i + q) / STAGES) + 1) & 1);
      if constexpr (kBlockPairs) {
        load_block_pair(p, sm, slot, src, rows, first_stage + i, first_stage + i);
      } else {
        load_stage(p, sm, slot, src, rows, first_stage + i);
      }
#pragma unroll
      for (int q = 0; q < kStep; ++q) cp_async_mbarrier_arrive(bars.full(slot + q));
    }
    cp_async_wait<0>();
  }

  // Consumer state across stages: the accumulators and two A register sets (one being
  // dequantized, one being read by the wgmma group in flight). With 4 consumer warpgroups and 48-56
  // accumulators a thread (the 512 x 56 tile) that leaves no room to hold the stage's weight
  // words and scales as well (ptxas serializes the wgmmas, C7512): each k step loads its own word
  // and every other step its scales from shared memory. Measured (v14) only where needed: on the
  // other tiles the per-step loads cost 2-9 % (EP8 T=8192 sum 10361 -> 11132 µs). On the tile
  // loop (PAIRED_WORDS) one 8-byte load brings two k steps' words (one kept a step): half the
  // loads, each as many wavefronts as a 4-byte one at the 16/32-byte lane stride; -2 to -4 % on
  // the 512 x 56 loop (grouped-kernels.md v24).
  // The one-CTA tile lacks the two registers (ptxas serializes its wgmmas, C7512): it keeps a
  // word a step.
  static constexpr bool kOperandsPerStep = CWG == 4 && WM * BN > 64;  // host: dispatch.wgmma_loads_operands_per_step
  using Acc = float[WM][Mma::kAccRegs];
  using AFrag = uint32_t[2][WM][4];

  // The consumers' work on ring slot `slot` (full): acc (+)= its 64 columns, 4 k steps, each
  // step's group left in flight while the next is dequantized. `first` starts the tile: the
  // first wgmma runs with scale-d = 0 (D = A*B). No zeroing by moves: that makes ptxas serialize
  // every wgmma once a group stays in flight across the loop's back edge (C7515).
  template <bool PAIRED_WORDS = false>
  __device__ __forceinline__ static void mma_stage(Smem& sm, int slot, Acc& acc, AFrag& afrag, bool first) {
    if constexpr (kDiagFeedOnly) return;  // common/moe_params.cuh
    const int cwarp = threadIdx.x / 32 - kProducerThreads / 32, lane = threadIdx.x % 32;
    const int cwg = cwarp / 4, wi = cwarp % 4;  // consumer warpgroup, warp within it
    fence_proxy_async();  // the cp.async bytes (generic proxy) -> visible to the wgmma reads
    uint4 w[WM];
    __nv_bfloat162 s_lo[WM][kGroupsPerStage], s_hi[WM][kGroupsPerStage];
    auto load_scales = [&](int m, int grp) {
      const int r = (cwg * WM + m) * 64 + wi * kTile + lane / 4;
      s_lo[m][grp] = __bfloat162bfloat162(sm.scale[slot][grp][r]);
      s_hi[m][grp] = __bfloat162bfloat162(sm.scale[slot][grp][r + 8]);
    };
    if constexpr (!kOperandsPerStep) {
#pragma unroll
      for (int m = 0; m < WM; ++m) {
        w[m] = *weight_chunk(sm, slot, cwarp, m, lane);
#pragma unroll
        for (int grp = 0; grp < kGroupsPerStage; ++grp) load_scales(m, grp);
      }
    }
    const uint64_t desc = sw128_kmajor_desc(sm.act[slot]);
    uint2 word_pair[WM];  // PAIRED_WORDS: k steps 2j and 2j + 1
#pragma unroll
    for (int kt = 0; kt < kStageK / kTile; ++kt) {
      const int buf = kt & 1;  // 4 k steps per stage: the parity carries across stages
#pragma unroll
      for (int m = 0; m < WM; ++m) {
        uint32_t word;
        if constexpr (kOperandsPerStep) {
          if constexpr (PAIRED_WORDS) {
            if (kt % 2 == 0) word_pair[m] = reinterpret_cast<const uint2*>(weight_chunk(sm, slot, cwarp, m, lane))[kt / 2];
            word = kt % 2 == 0 ? word_pair[m].x : word_pair[m].y;
          } else {
            word = reinterpret_cast<const uint32_t*>(weight_chunk(sm, slot, cwarp, m, lane))[kt];
          }
          if (kt % 2 == 0) load_scales(m, kt / 2);  // a scale group is 32 columns: two k steps
        } else {
          word = kt == 0 ? w[m].x : kt == 1 ? w[m].y : kt == 2 ? w[m].z : w[m].w;
        }
        dequantize_fragment(word, s_lo[m][kt / 2], s_hi[m][kt / 2], afrag[buf][m]);
      }
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int i = 0; i < Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
      wgmma_fence();
#pragma unroll
      for (int m = 0; m < WM; ++m) Mma::mma(acc[m], afrag[buf][m], desc + 2 * kt, !(first && kt == 0));  // +32 B per k step
      wgmma_commit_group();
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int i = 0; i < Mma::kAccRegs; ++i) fence_operand(acc[m][i]);
      wgmma_wait_group<1>();  // the previous k step's group is done: its A set may be rewritten
#pragma unroll
      for (int m = 0; m < WM; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) fence_operand(afrag[buf ^ 1][m][i]);
    }
  }

  // Every group that read earlier slots has retired (the last one at this stage's kt == 0), and
  // so have this thread's loads from them. Every consumer thread releases its own reads (the
  // producer refills the slot after all of them arrived). One arrive per warp after a __syncwarp
  // is also correct, but it was no faster (v18: same or slower on the H200) and racecheck cannot
  // follow the warp barrier: it reported the producer's refill racing the other 31 lanes' loads.
  // (Inside the k loop, the arrive makes ptxas serialize the wgmmas: C7513.)
  __device__ __forceinline__ static void release(const Ring& bars, int slot) { mbarrier_arrive(bars.empty(slot)); }

  // Retire every wgmma group; from here the accumulators may be read.
  __device__ __forceinline__ static void drain(Acc& acc, AFrag& afrag) {
    wgmma_wait_group<0>();
#pragma unroll
    for (int m = 0; m < WM; ++m) {
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_operand(afrag[0][m][i]), fence_operand(afrag[1][m][i]);
#pragma unroll
      for (int i = 0; i < Mma::kAccRegs; ++i) fence_operand(acc[m][i]);  // no read before the wait
    }
  }

  // Accumulator group i (m64 tile m = i / (BN/8), n8 chunk j = i % (BN/8): 4 floats) of consumer
  // thread ctid to out[out_rows[...], col_tile's columns], rows -1 skipped: v.x, v.y = weight
  // row g, tile rows 8j + 2t + {0,1}; v.z, v.w = weight row g + 8.
  static constexpr int kAccGroups = WM * Mma::kAccRegs / 4;
  __device__ __forceinline__ static void store4(const MoeParams& p, int ctid, int col_tile, const int32_t* out_rows, int i, float4 v) {
    const int cwarp = ctid / 32, lane = ctid % 32;
    const int m = i / (BN / 8), j = i % (BN / 8);
    const int tile = tile_of(col_tile, cwarp, m);
    if (kDiagNoStore || tile >= p.n / kTile) return;  // the clamped tiles past N
    const int col = tile * kTile + lane / 4;
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const int out_row = out_rows[8 * j + 2 * (lane % 4) + (h & 1)];
      if (out_row >= 0) p.out[(int64_t)out_row * p.ldc + col + 8 * (h >> 1)] = __float2bfloat16_rn(e[h]);
    }
  }

  // The tile's outputs (after drain) to out[out_rows[r], col_tile's columns], rows -1 skipped.
  __device__ __forceinline__ static void store(const MoeParams& p, Smem& sm, const Acc& acc, int col_tile,
                                               const int32_t* out_rows) {
    const int ctid = threadIdx.x - kProducerThreads;
    if constexpr (kStagedEpilogue) {
      store_staged(p, sm, acc, col_tile, out_rows, ctid);
    } else {
#pragma unroll
      for (int i = 0; i < kAccGroups; ++i) {
        const float* a = &acc[i / (BN / 8)][4 * (i % (BN / 8))];
        store4(p, ctid, col_tile, out_rows, i, make_float4(a[0], a[1], a[2], a[3]));
      }
    }
  }

  // Each warpgroup, per m64 tile: its BN x 64 outputs into its own staging rows (why staged:
  // common/staged_store.cuh), then 16-byte row pieces to global memory, 8 threads a row. Two
  // barriers of the warpgroup per m64 tile: the staging rows are free (the last pass read them)
  // and written.
  __device__ __forceinline__ static void store_staged(const MoeParams& p, Smem& sm, const Acc& acc, int col_tile,
                                                      const int32_t* out_rows, int ctid) {
    const int cwg = ctid / 128, wt = ctid % 128, warp = wt / 32;
    __nv_bfloat16(*stage)[kOutStageStride] = sm.out_stage[cwg];
    const int barrier = 4 + cwg;  // 4-7; 0: __syncthreads, 1: stream-K fix-up, 2: the tile loop's out rows, 3: the K split
    const bool vec = out_rows_vectorizable(p);
#pragma unroll
    for (int m = 0; m < WM; ++m) {
      named_barrier_sync<128>(barrier);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) stage_accumulators(stage, 8 * j, 16 * warp, &acc[m][4 * j]);  // rows 8j..8j+7
      named_barrier_sync<128>(barrier);
      store_staged_rows<BN, 64, kOutStageStride, 128>(p, stage, out_rows, col_tile * kRows + (cwg * WM + m) * 64, wt,
                                                      vec);
    }
  }

  // The deferred epilogue's two halves (DEFER_STORE; the handoff between them: WgmmaTiles).
  // Warpgroup c's staging rows of m64 tile m.
  __device__ __forceinline__ static __nv_bfloat16 (*staging_rows(Smem& sm, int c, int m))[kOutStageStride] {
    return &sm.out_stage[c][m * BN];
  }
  // The consumers' half (after drain): every m64 tile of this thread's warpgroup into its staging rows.
  __device__ __forceinline__ static void stage_tiles(Smem& sm, const Acc& acc) {
    static_assert(DEFER_STORE, "one staged m64 tile at a time otherwise (store_staged)");
    const int ctid = threadIdx.x - kProducerThreads, warp = ctid % 128 / 32;
#pragma unroll
    for (int m = 0; m < WM; ++m)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) stage_accumulators(staging_rows(sm, ctid / 128, m), 8 * j, 16 * warp, &acc[m][4 * j]);
  }
  // The store warps' half: THREADS threads (this one is t) write the CTA's staged tile to
  // out[out_rows[r], col_tile's columns], rows -1 skipped.
  template <int THREADS>
  __device__ __forceinline__ static void store_staged_tiles(const MoeParams& p, Smem& sm, int col_tile,
                                                            const int32_t* out_rows, int t, bool vec) {
    static_assert(DEFER_STORE, "the store warps write what stage_tiles staged");
#pragma unroll
    for (int c = 0; c < CWG; ++c)
#pragma unroll
      for (int m = 0; m < WM; ++m)
        store_staged_rows<BN, 64, kOutStageStride, THREADS>(p, staging_rows(sm, c, m), out_rows,
                                                            col_tile * kRows + (c * WM + m) * 64, t, vec);
  }


  // The ring's stages in order (produce's stages [first_stage, first_stage + num_stages)), then
  // the epilogue: this CTA's outputs, or with SPLIT_K > 1 the cluster's sum.
  template <int SPLIT_K>
  __device__ static void consume(const MoeParams& p, Smem& sm, int first_stage, int num_stages, int rank) {
    Acc acc;
    AFrag afrag;
    const Ring bars = ring(sm);
    for (int i = 0; i < num_stages; ++i) {
      const int slot = i % STAGES;
      mbarrier_wait(bars.full(slot), (i / STAGES) & 1);
      mma_stage(sm, slot, acc, afrag, i == 0);
      if (i > 0) release(bars, (i - 1) % STAGES);
    }
    drain(acc, afrag);
    if constexpr (SPLIT_K == 1) {
      store(p, sm, acc, blockIdx.x, sm.out_row);
    } else {
      store_split_k<SPLIT_K>(p, sm, acc, rank);
    }
  }

  // The K split's epilogue (one CTA per tile, SPLIT_K CTAs a cluster). Each CTA leaves its FP32
  // accumulators in its own ring, idle once every consumer's wgmmas retired (the producer's last
  // copies landed before the consumers' last "full" wait): float4 group g of consumer thread t at
  // [g][t], 16 bytes a thread, a warp's 512 contiguous. After a cluster barrier, CTA r adds up the
  // groups g = r mod SPLIT_K of every CTA's partials, in rank order (a fixed order: the sums are
  // the same run to run), from distributed shared memory and stores them: the SPLIT_K CTAs share
  // the epilogue. A second cluster barrier keeps every CTA's ring alive until the others read it.
  static constexpr int kConsumerThreads = 32 * kConsumerWarps;
  static constexpr int kSplitBarrier = 3;  // named barrier 3 (see store_staged's list): the consumers
  template <int SPLIT_K>
  __device__ static void store_split_k(const MoeParams& p, Smem& sm, const Acc& acc, int rank) {
    static_assert(kAccGroups * kConsumerThreads * sizeof(float4) <= sizeof(Smem::act) + sizeof(Smem::w),
                  "the partials must fit in the ring's activation and weight slots");
    const int ctid = threadIdx.x - kProducerThreads;
    float4* partial = reinterpret_cast<float4*>(&sm);  // act, then w: contiguous from the start
    named_barrier_sync<kSplitBarrier, kConsumerThreads>();  // nothing reads the ring any more
#pragma unroll
    for (int g = 0; g < kAccGroups; ++g) {
      const float* a = &acc[g / (BN / 8)][4 * (g % (BN / 8))];
      partial[g * kConsumerThreads + ctid] = make_float4(a[0], a[1], a[2], a[3]);
    }
    cluster_sync();  // every CTA's partials written
#pragma unroll
    for (int g = 0; g < kAccGroups; ++g) {
      if (g % SPLIT_K != rank) continue;
      float4 v = ld_shared_cluster_f4(&partial[g * kConsumerThreads + ctid], 0);
#pragma unroll
      for (int r = 1; r < SPLIT_K; ++r) {
        const float4 o = ld_shared_cluster_f4(&partial[g * kConsumerThreads + ctid], r);
        v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
      }
      store4(p, ctid, blockIdx.x, sm.out_row, g, v);
    }
    cluster_sync();  // no CTA leaves while another reads its partials
  }
};

}  // namespace chord
