"""Launches: what a kernel config costs in resources (shared memory, registers, CTAs an SM) and
the generic launch builders of the two tensor-core tiles (the mma tile, the wgmma tile) on their
schedules (one CTA a tile, stream-K, the tile loop). The indexed and grouped families name their
kernels on top of these (dispatch.indexed, dispatch.grouped)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..jit.kernel import KernelSpec
from ..layouts import BLOCK_K_BY_MODE
from ..tma import STAGE_K, TMA_BLOCK_KS

if TYPE_CHECKING:
    from .indexed import IndexedProblem


H200_SMS = 132  # SMs of an H200 (H100 SXM too): the wave model's default; chord_kernels.ops passes the device's

# Peak memory bandwidth (TB/s) by device name: the H200 and the H100 are both sm_90a with 132 SMs,
# so a rule that one measured differently from the other (grouped-kernels.md v49) needs this. The
# first entry whose text is in the name wins; any other GPU gets the H200's, the GPU Chord is tuned
# on. chord_kernels.device.memory_tbps looks the device up.
H200_MEMORY_TBPS = 4.8
MEMORY_TBPS_BY_NAME = (("H200", H200_MEMORY_TBPS), ("H100", 3.35))


def memory_tbps_of(device_name: str) -> float:
    """Peak memory bandwidth (TB/s) of the GPU called ``device_name`` (MEMORY_TBPS_BY_NAME)."""
    return next((tbps for text, tbps in MEMORY_TBPS_BY_NAME if text in device_name), H200_MEMORY_TBPS)


SMEM_PER_SM = 227 * 1024  # usable shared memory per SM on H100/H200 (1 KB per CTA is reserved)


@dataclass(frozen=True)
class Launch:
    spec: KernelSpec
    rows_per_cta: int  # routed rows (tokens) one CTA covers
    cols_per_cta: int  # output columns (weight rows) one CTA covers
    smem_bytes: int = 0  # dynamic shared memory per CTA
    # Stream-K schedule: the grid is every CTA the GPU holds at once (chord_kernels.ops asks the
    # driver), each with a workspace of this many FP32 partials (0: one CTA per tile, grid below),
    # over iterations of this many K columns.
    partial_floats: int = 0
    iteration_k: int = 0
    # Whole tiles looped over by at most the resident CTAs (csrc/common/w4a16_wgmma_tiles.cuh):
    # the grid below is only the bound the loop may need, never launched as such.
    tile_loop: bool = False
    # One-CTA tiles: CTAs a tile, a cluster along grid z splitting K (WgmmaTile::run); 1: none.
    split_k: int = 1
    # The kernel takes chord::MoeTmaParams: its parameters end with the packed weight's tensor
    # maps for tiles of cols_per_cta rows (chord_kernels.tma.tensor_maps), with stage_boxes one
    # weight box a stage of a BLOCK_K-128 weight (wgmma_block_pairs false).
    tensor_maps: bool = False
    stage_boxes: bool = False
    # The kernel takes chord::MoeTmaActParams: after the weight's maps, a map of the call's
    # activations whose box is this many rows (chord_kernels.tma.activation_map); 0: none.
    act_map_rows: int = 0
    # A pair of tile loops (pair_with_tall_tile, TALL_TILE_ROWS) or of the 16-row mma tile and a tile
    # loop (pair_narrow_mid_batch): the other launch, this one's cost
    # a row tile and the other's (MoeParams::pick_*). Both run back to back; on the device each
    # counts the call's row tiles in both heights and only the cheaper does any work. This one
    # (launched first) wins a tie.
    pick: tuple[Launch, int, int] | None = None
    # A kernel that holds two tile heights and runs one (GroupedMmaDecodeDual; dispatch.dual_decode_16):
    # the taller tile's rows, the cost a row tile of this one and of the taller (MoeParams::pick_*).
    # One launch; every CTA counts the call's row tiles at both heights and takes the cheaper.
    dual: tuple[int, int, int] | None = None

    @property
    def persistent(self) -> bool:
        return self.partial_floats > 0

    def ctas_per_block(self, problem: IndexedProblem) -> int:
        return -(-problem.block_m // self.rows_per_cta)

    def grid(self, problem: IndexedProblem, num_blocks: int) -> tuple[int, int, int]:
        return (-(-problem.n // self.cols_per_cta), num_blocks * self.ctas_per_block(problem), self.split_k)


MMA_STAGED_EPILOGUE_MAX_TT = 4  # MmaTile::kStagedEpilogue: up to 32 rows the epilogue goes through shared memory


def mma_smem_bytes(nt: int, tt: int, stage_k: int, stages: int) -> int:
    """sizeof(MmaTile::Smem): per stage the lanes' weight chunks, the CTA rows' scales, the
    gathered activation rows (padded by 8 columns) and the stream-K schedule's row ids, then the
    epilogue's staging tile (up to 32 rows: the rows x the CTA's columns, padded by 8; else 16
    bytes), two int32 row indices per row and the stream-K finisher flag (padded to 16 bytes)."""
    rows, tokens = 64 * nt, 8 * tt
    weights = (stage_k // 64) * 4 * nt * 32 * 16
    scales = (stage_k // 32) * rows * 2
    acts = tokens * (stage_k + 8) * 2
    out_stage = tokens * (rows + 8) * 2 if tt <= MMA_STAGED_EPILOGUE_MAX_TT else 16
    return stages * (weights + scales + acts + tokens * 4) + out_stage + tokens * 2 * 4 + 16


def mma_register_estimate(nt: int, tt: int) -> int:
    """Registers per thread of IndexedMma, rounded up to the allocation granule of 8: the
    accumulators (4 per tile per 8 tokens), weight words and scales per tile, B fragments per
    8 tokens, and ~40 for addressing; +10 % margin. Fitted to ptxas -v on sm_90a (within 10 %)."""
    est = 40 + 4 * nt * tt + 8 * nt + 4 * tt
    return -(-int(est * 1.1) // 8) * 8


MAX_CTAS_PER_SM = 4  # the mma launches' occupancy cap


def mma_launch(family: str, header: str, body: str, template_args: tuple, nt: int, tt: int,
               stage_k: int, stages: int, arch: str, extra_regs: int = 0) -> Launch:
    """A tensor-core (common/w4a16_mma_tile.cuh) launch: 4 warps x ``nt`` 16-row weight tiles,
    8*``tt`` rows. CTAs per SM follow from shared memory and registers (at most 4; the kernel's
    own state beyond the tile's adds ``extra_regs``); __launch_bounds__ then caps registers to
    match, so ptxas must fit the occupancy asked for."""
    smem = mma_smem_bytes(nt, tt, stage_k, stages)
    by_smem = SMEM_PER_SM // (smem + 1024)
    by_regs = 65536 // (128 * (mma_register_estimate(nt, tt) + extra_regs))
    spec = KernelSpec(family=family, header=header, body=body, params_type="chord::MoeParams",
                      template_args=template_args, threads=128,
                      min_blocks_per_sm=max(1, min(MAX_CTAS_PER_SM, by_smem, by_regs)), arch=arch)
    return Launch(spec, rows_per_cta=8 * tt, cols_per_cta=4 * nt * 16, smem_bytes=smem)


# Registers the stream-K kernel holds beyond the tile's (per-tile copy sources, two schedule
# walks, the prefetched row indices): ptxas -v on sm_90a, 24-56 over the one-CTA-per-tile kernel;
# with less, the TT=4 configs spilled at the occupancy the tile's estimate alone allowed (40 held
# until the walk of v10; NT=2 TT=4 now runs 2 CTAs an SM, no benchmark point uses it).
STREAMK_EXTRA_REGS = 56


# Stream-K mma kernels that ptxas fits at more CTAs an SM than the register estimate allows,
# (family, NT, TT, STAGE_K, STAGES) -> CTAs an SM; test_jit holds them to no spill (the grouped
# kernel of the same shape spills 24 bytes at 3). See ONE_TILE_RING, MANY_TILES_RING (127
# registers a thread at 4, no spill) and grouped SHALLOW_DECODE_RING (BLOCK_K 64: 127 registers
# at 4, no spill; BLOCK_K 128, the masked form's, 128 and no spill since grouped v44).
STREAMK_CTAS_PER_SM = {("indexed_mma_sk", 4, 2, 128, 2): 3, ("indexed_mma_sk", 2, 1, 256, 2): 4,
                       ("grouped_mma_sk", 2, 1, 256, 2): 4}


def streamk_launch(family: str, header: str, body: str, template_args: tuple, nt: int, tt: int,
                   stage_k: int, stages: int, arch: str) -> Launch:
    """The mma tile on the stream-K schedule (csrc/common/w4a16_mma_streamk.cuh): persistent CTAs,
    each with two FP32 partial slots (its run's first and last tile) of 128 threads x NT*TT*4
    accumulators. A thread gathers one tile row, so the tile's rows (8*tt) must divide 128."""
    if tt not in (1, 2, 4, 8):
        raise ValueError(f"the stream-K mma kernel takes TT 1, 2, 4 or 8, got {tt}")
    launch = mma_launch(family, header, body, template_args, nt, tt, stage_k, stages, arch, STREAMK_EXTRA_REGS)
    ctas = STREAMK_CTAS_PER_SM.get((family, nt, tt, stage_k, stages))
    if ctas is not None:
        launch = replace(launch, spec=replace(launch.spec, min_blocks_per_sm=ctas))
    return replace(launch, partial_floats=2 * 128 * nt * tt * 4, iteration_k=stage_k)


# The mma stream-K tiles' weight loads through L2 evict-first (MoeParams::evict_first_tiles;
# indexed-kernels.md v67). Under do_bench's flush, and in serving after kernels that wrote, L2 holds
# dirty lines: a weight stream on the default policy evicts them, and their write-back shares the
# call's HBM time (a read flush instead took 6-9 µs off every decode call on the H200, 2026-12-04).
# Weight lines marked evict-first leave those lines be. Measured on an H100 (do_bench, ABBA), the
# stream-K decode calls of up to ~400 MB of tiles gained 2-11 % (EP8 T=1 -11 %, TP8 T=8 -8 to
# -10 %, TP8 T=20 and T=128 down -2 to -7 %); the calls of 500-800 MB lost 1-2 % (EP8 T=8/20 and
# TP8 T=128 gate_up). So the policy holds up to EVICT_FIRST_MAX_BYTES of a call's tiles, which the
# kernel counts from the routed rows on the device (row tiles x column tiles): the host's bound on
# the rows cannot tell an EP rank's few local routes from many. Known loss: where an expert's rows
# span several row tiles (skewed masked calls, EP32/EP16 T=20), the later tiles' weight reads miss
# L2, +4-8 % on those projections; the prepared fix is in v67's folder (once.diff).
EVICT_FIRST_MAX_BYTES = 400 * 2**20
EVICT_FIRST_FAMILIES = ("indexed_mma_sk", "grouped_mma_sk")
EVICT_FIRST_NEVER_ROUTING = 1  # the DeepGEMM form (kContiguousRows): prefill, no register to spare (kEvictFirstWeights)


def mma_tile_weight_bytes(launch: Launch, k: int) -> int:
    """Bytes of one tile's weights over K: INT4 codes (K/2 a row) and BF16 group-32 scales (K/16)."""
    return launch.cols_per_cta * k * 9 // 16


def evict_first_tiles(launch: Launch, k: int) -> int:
    """MoeParams::evict_first_tiles: the most tiles of a call whose weights ``launch`` loads L2
    evict-first (EVICT_FIRST_MAX_BYTES of them); 0 for kernels that do not read it."""
    if launch.spec.family not in EVICT_FIRST_FAMILIES or launch.spec.config.get("ROUTING") == EVICT_FIRST_NEVER_ROUTING:
        return 0
    return EVICT_FIRST_MAX_BYTES // mma_tile_weight_bytes(launch, k)


def evict_first_note(launch: Launch, k: int) -> str:
    """CHORD_PRINT_CONFIGS's words for evict_first_tiles (empty where the launch never loads
    evict-first)."""
    tiles = evict_first_tiles(launch, k)
    return f"weights L2 evict-first at up to {tiles} tiles, counted on the device" if tiles else ""


def wgmma_weight_rows(wm: int, cwg: int) -> int:
    """Weight rows (output columns) one wgmma CTA covers: ``cwg`` consumer warpgroups x ``wm``
    m64 tiles."""
    return cwg * 64 * wm


def decode_dual_launch(short: Launch, tall: Launch, body: str, costs: tuple[int, int]) -> Launch:
    """One kernel holding two stream-K mma tiles of one family (GroupedMmaDecodeDual,
    IndexedMmaDecodeDual: common/mma_decode_dual.cuh): ``short``'s launch with ``body``, the tall
    tile's ring as TALL_STAGES, the larger of the two tiles' shared memory and partials, the
    occupancy both fit, and Launch.dual = (the tall tile's rows, ``costs``: a short row tile's and
    a tall one's)."""
    spec = replace(short.spec, body=body,
                   template_args=short.spec.template_args + (("TALL_STAGES", tall.spec.config["STAGES"]),),
                   min_blocks_per_sm=min(short.spec.min_blocks_per_sm, tall.spec.min_blocks_per_sm))
    return replace(short, spec=spec, smem_bytes=max(short.smem_bytes, tall.smem_bytes),
                   partial_floats=max(short.partial_floats, tall.partial_floats), dual=(tall.rows_per_cta, *costs))


# WgmmaTile::kStagedEpilogue: the 4-warpgroup tiles stage their epilogue up to 48 rows (their
# 8-deep ring and the staging fit an SM there; indexed-kernels.md v69).
WGMMA_CWG4_STAGED_MAX_BN = 48


def wgmma_staged_epilogue(bn: int, cwg: int) -> bool:
    """WgmmaTile::kStagedEpilogue: the tile's epilogue goes through shared memory."""
    return cwg == 2 or bn <= WGMMA_CWG4_STAGED_MAX_BN


def wgmma_smem_bytes(wm: int, bn: int, stages: int, cwg: int = 2, defer_store: bool = False) -> int:
    """sizeof(WgmmaTile::Smem): per stage the swizzled activation rows (128 bytes each), the
    4*CWG consumer warps' weight chunks (WM x 512 bytes each), the CTA rows' two scale groups, the
    stream-K schedule's row ids and two mbarriers (full, empty); then the epilogue's staging rows
    (with 2 consumer warpgroups, or 4 up to WGMMA_CWG4_STAGED_MAX_BN rows: BN rows of 64 + 8 BF16
    each per warpgroup, WM such tiles with ``defer_store``; else one row), two int32 row indices
    per row (three with ``defer_store``: two sets of out rows), the stream-K finisher flag, the
    tile loop's two claims and the stream-K schedule (6 int32; the struct pads to 16 bytes). The
    tile loop's deferred-store handoff sits inside the per-stage row ids (a union)."""
    rows = wgmma_weight_rows(wm, cwg)
    staged_tiles = wm if defer_store else 1
    out_stage = (cwg * staged_tiles * bn if wgmma_staged_epilogue(bn, cwg) else 1) * (64 + 8) * 2
    row_ids = (3 if defer_store else 2) * bn * 4
    tail = -(-(4 + 2 * 4 + 6 * 4) // 16) * 16
    return stages * (bn * 128 + 4 * cwg * wm * 512 + 2 * rows * 2 + bn * 4 + 16) + out_stage + row_ids + tail


# The largest wgmma tile (one CTA an SM) that fits: an SM's shared memory less the 1 KB the
# system reserves per CTA.
WGMMA_SMEM_LIMIT = SMEM_PER_SM - 1024


# A tile loop may give up ring stages for the deferred epilogue down to this depth: the 256 x 128
# tile's 6 stages become 5. Each stage is a stage of MMAs (~0.5 µs at prefill), so 5 cover far
# more than a load's latency; depth made no difference in the v6 sweep (indexed-kernels.md).
DEFER_STORE_MIN_STAGES = 5


def wgmma_deferred_stages(wm: int, bn: int, stages: int, cwg: int, block_pairs: bool = False) -> int:
    """The ring depth a 2-warpgroup tile loop runs with the deferred epilogue (WgmmaTiles
    DEFER_STORE: staging for all WM m64 tiles and a second set of out rows beside the ring):
    ``stages`` where that fits, else the deepest ring that fits down to DEFER_STORE_MIN_STAGES;
    0 where none does (the tile keeps its own epilogue and ring). A tile that loads stage pairs
    (``block_pairs``, wgmma_block_pairs) takes even depths only: a pair must not wrap the ring
    (at 5 stages the masked 256 x 128 tile's pair at slot 4 armed slot 5, past the ring: the GPU
    run of 2026-12-05 crashed on it, grouped-kernels.md v42)."""
    if cwg != 2:
        return 0
    for depth in range(stages, min(stages, DEFER_STORE_MIN_STAGES) - 1, -1):
        if block_pairs and depth % 2:
            continue
        if wgmma_smem_bytes(wm, bn, depth, cwg, defer_store=True) <= WGMMA_SMEM_LIMIT:
            return depth
    return 0


WGMMA_STAGE_K = STAGE_K  # K columns per ring stage of the wgmma tile (one 128-byte swizzle row)
# Consumer warpgroups of the wgmma tile: 2 (384 threads), or 4 (640 threads, ~96-104 registers a
# thread) when the accumulators are small (WM * BN <= 64): twice the warps hide more of the
# dequant's latency (Humming's mid-batch kernel runs 4; docs/design/indexed-kernels.md v13).
WGMMA_CWG_CHOICES = (2, 4)


def wgmma_threads(cwg: int) -> int:
    return 128 * (1 + cwg)  # a producer warpgroup + the consumer warpgroups


def wgmma_block_pairs(block_k: int, weight_rows: int, whole_blocks: bool = True) -> bool:
    """WgmmaTile::kBlockPairs: a BLOCK_K-128 weight comes one box a K block (two ring slots) where
    the tile takes 256+ weight rows a stage and its schedule loads whole blocks (``whole_blocks``:
    the one-CTA tile and the tile loop, not stream-K); else one box a stage (grouped-kernels.md
    v30: stage boxes on 512-row mid-batch tiles +13 to +21 %, the 128-row tall tile needs them)."""
    return block_k == 2 * WGMMA_STAGE_K and whole_blocks and weight_rows >= 256


def wgmma_launch(family: str, header: str, body: str, template_args: tuple, wm: int, bn: int, stages: int,
                 arch: str, cwg: int = 2, split_k: int = 1, whole_blocks: bool = True, loop: bool = False,
                 defer_store: bool = False) -> Launch:
    """A wgmma tile (csrc/common/w4a16_wgmma_tile.cuh) launch: a producer warpgroup and ``cwg``
    consumer warpgroups x ``wm`` m64 weight tiles, ``bn`` rows on WGMMA-N; one CTA per SM (its
    ring fills shared memory; with 2 consumer warpgroups they take 216 registers a thread, 200 on
    the stream-K schedule; with 4, 104 and 96). With 2 consumer warpgroups, or 4 and ``loop``,
    each CTA loops over whole tiles (csrc/common/w4a16_wgmma_tiles.cuh); else one CTA per tile, or
    with ``split_k`` > 1 one cluster of ``split_k`` CTAs per tile (grid z). ``template_args`` name
    BLOCK_K where it is not the indexed layout's 64 (the grouped family). The tile loads its weights
    and scales by tensor map (a weight box a K block or a stage, wgmma_block_pairs; chord_kernels.tma):
    its parameters carry the maps. ``defer_store``: the tile loop's deferred epilogue (its
    shared memory: wgmma_smem_bytes)."""
    block_k = dict(template_args).get("BLOCK_K", BLOCK_K_BY_MODE["indexed"])
    if block_k not in TMA_BLOCK_KS:
        raise ValueError(f"the wgmma tile reads BLOCK_K {' or '.join(map(str, TMA_BLOCK_KS))} weights, not {block_k}")
    spec = KernelSpec(family=family, header=header, body=body, params_type="chord::MoeTmaParams",
                      template_args=template_args, threads=wgmma_threads(cwg), min_blocks_per_sm=1, arch=arch,
                      cluster_z=split_k)
    rows = wgmma_weight_rows(wm, cwg)
    return Launch(spec, rows_per_cta=bn, cols_per_cta=rows, smem_bytes=wgmma_smem_bytes(wm, bn, stages, cwg, defer_store),
                  tile_loop=cwg == 2 or loop, split_k=split_k, tensor_maps=True,
                  stage_boxes=block_k != WGMMA_STAGE_K and not wgmma_block_pairs(block_k, rows, whole_blocks))


def wgmma_streamk_launch(family: str, header: str, body: str, template_args: tuple, wm: int, bn: int, stages: int,
                         arch: str, cwg: int = 2) -> Launch:
    """The wgmma tile on the stream-K schedule (csrc/common/w4a16_wgmma_streamk.cuh): persistent
    CTAs, each with two FP32 partial slots of 128*CWG consumer threads x WM*BN/2 accumulators."""
    launch = wgmma_launch(family, header, body, template_args, wm, bn, stages, arch, cwg, whole_blocks=False)
    return replace(launch, partial_floats=2 * 128 * cwg * wm * bn // 2, iteration_k=WGMMA_STAGE_K, tile_loop=False)


def loop_targs(loop: bool, cwg: int) -> tuple:
    """The LOOP template argument: named only where it differs from the kernel's default (2
    consumer warpgroups always loop), so those kernels keep their symbols."""
    return (("LOOP", 1),) if loop and cwg == 4 else ()


def deepest_wgmma_ring(wm: int, bn: int, most: int) -> int:
    """Stages of the deepest 2-warpgroup ring, up to ``most``, that fits an SM's shared memory."""
    per_stage = wgmma_smem_bytes(wm, bn, 2) - wgmma_smem_bytes(wm, bn, 1)
    fixed = wgmma_smem_bytes(wm, bn, 1) - per_stage
    return min(most, (WGMMA_SMEM_LIMIT - fixed) // per_stage)


def resident_ctas(launch: Launch, sms: int = H200_SMS) -> int:
    return launch.spec.min_blocks_per_sm * sms
