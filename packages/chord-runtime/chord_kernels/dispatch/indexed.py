"""The indexed family (vLLM's moe_align_block_size routing): its kernels, the decode rules that
need the call's route count, the family each routing block runs, and every launch it can pick."""

from __future__ import annotations

from dataclasses import dataclass

from .. import env
from ..jit.kernel import DEFAULT_ARCH, KernelSpec
from ..layouts import BLOCK_K_BY_MODE
from .blocks import INDEXED_BLOCK_M_CHOICES
from .launch import (
    H200_SMS,
    MAX_CTAS_PER_SM,
    SMEM_PER_SM,
    Launch,
    decode_dual_launch,
    evict_first_note,
    loop_targs,
    mma_launch,
    resident_ctas,
    streamk_launch,
    wgmma_deferred_stages,
    wgmma_launch,
    wgmma_streamk_launch,
)
from .report import report_choice
from .shapes import (
    MID_BATCH_STREAMK_MAX_ROWS,
    WGMMA_MIN_K,
    apply_tuning,
    auto_tile_family,
    is_mid_batch_tile,
    mma_shape,
    parse_tuning,
    streamk_shape,
    wgmma_shape,
    wgmma_streamk_shape,
)

INDEXED_FAMILIES = ("auto", "mma_sk", "wgmma_sk", "mma", "wgmma", "simple")


@dataclass(frozen=True)
class IndexedProblem:
    n: int
    k: int
    num_experts: int
    top_k: int
    block_m: int  # routing block size used by moe_align_block_size
    num_routes: int = 0  # M x top_k of the call: at most this many routed rows (0: not known)


def indexed_simple(arch: str = DEFAULT_ARCH) -> Launch:
    """FP32-FMA kernel: the slow, obviously-correct baseline (kept for cross-checking)."""
    spec = KernelSpec(family="indexed_simple", header="indexed/w4a16_indexed_simple.cuh",
                      body="chord::IndexedSimple", params_type="chord::MoeParams",
                      template_args=(("BLOCK_K", BLOCK_K_BY_MODE["indexed"]),), threads=128, arch=arch)
    return Launch(spec, rows_per_cta=16, cols_per_cta=64)


def indexed_mma_streamk(nt: int, tt: int, stage_k: int, stages: int = 3, arch: str = DEFAULT_ARCH) -> Launch:
    """Indexed routing on the mma tile, stream-K schedule."""
    return streamk_launch("indexed_mma_sk", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedMmaStreamK",
                          (("NT", nt), ("TT", tt), ("STAGE_K", stage_k), ("STAGES", stages)), nt, tt, stage_k,
                          stages, arch)


def indexed_mma(nt: int, tt: int, stage_k: int, stages: int = 3, arch: str = DEFAULT_ARCH) -> Launch:
    """Indexed routing on the mma tile (csrc/indexed/w4a16_indexed_mma.cuh)."""
    return mma_launch("indexed_mma", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedMma",
                      (("NT", nt), ("TT", tt), ("STAGE_K", stage_k), ("STAGES", stages)),
                      nt, tt, stage_k, stages, arch)


def indexed_wgmma(wm: int, bn: int, stages: int, arch: str = DEFAULT_ARCH, cwg: int = 2, loop: bool = False,
                  defer_store: bool = False) -> Launch:
    """Indexed routing on the wgmma tile: whole tiles on at most one CTA an SM (2 consumer
    warpgroups, or 4 with ``loop``), else one CTA per tile. ``defer_store`` (2 consumer
    warpgroups): the tile loop's epilogue on the producer's store warps, warp 0 gathering the
    activation rows alone (WgmmaTiles DEFER_STORE; ``stages`` must leave room for its staging:
    wgmma_deferred_stages)."""
    if defer_store and cwg != 2:
        raise ValueError("defer_store: the deferred epilogue is the 2-warpgroup tile loop's")
    targs = (("WM", wm), ("BN", bn), ("STAGES", stages), ("CWG", cwg)) + loop_targs(loop, cwg)
    if defer_store:  # template arguments are positional: LOOP comes before DEFER_STORE
        targs += (("LOOP", 1), ("DEFER_STORE", 1))
    return wgmma_launch("indexed_wgmma", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedWgmma", targs, wm, bn,
                        stages, arch, cwg, loop=loop or cwg == 2, defer_store=defer_store)


def indexed_wgmma_streamk(wm: int, bn: int, stages: int, arch: str = DEFAULT_ARCH, cwg: int = 2) -> Launch:
    """Indexed routing on the wgmma tile, stream-K schedule."""
    return wgmma_streamk_launch("indexed_wgmma_sk", "indexed/w4a16_indexed_mma.cuh", "chord::IndexedWgmmaStreamK",
                                (("WM", wm), ("BN", bn), ("STAGES", stages), ("CWG", cwg)), wm, bn, stages, arch,
                                cwg)


def choose_indexed_mma(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    cfg = apply_tuning(mma_shape(problem.n, problem.k, problem.block_m), problem.k, tuning)
    return indexed_mma(cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"], arch=arch)


def max_blocks(problem: IndexedProblem) -> int | None:
    """The most routing blocks the call can have: at most routes / block_m full ones plus one
    partial an expert with routes; None when the route count is not known."""
    routes = problem.num_routes
    return min(routes, routes // problem.block_m + min(problem.num_experts, routes)) if routes else None


def decode_tiles(problem: IndexedProblem, launch: Launch) -> int | None:
    """The most tiles ``launch`` can have for the call: max_blocks times the block's tiles; None
    when the route count is not known."""
    blocks = max_blocks(problem)
    if blocks is None:
        return None
    return blocks * launch.ctas_per_block(problem) * -(-problem.n // launch.cols_per_cta)


# A launch whose tiles cannot fill the resident CTAs (TP8 down at T=1: 8 routes x 28 tiles of 256
# weight rows for 396 CTAs) takes 128 weight rows a tile on short K: twice the tiles, every CTA busy
# (ncu, base clock: TP8 T=1 down 10.7 -> 9.75 µs; from T=8, 1792+ tiles, NT 4 stays: NT 2 +10-17 %,
# benchmarks/results/sweeps/2026-12-03_v36_tp8_t1_nt2/).
def one_wave_decode(problem: IndexedProblem, launch: Launch, sms: int = H200_SMS) -> bool:
    """Every routing block the call can have fits its tiles in ``launch``'s resident CTAs."""
    tiles = decode_tiles(problem, launch)
    return tiles is not None and tiles < resident_ctas(launch, sms)


# A launch with at most half as many tiles as resident CTAs splits every tile over 2+ CTAs (TP8
# gate_up at T=1: 32 tiles of 28 stages, ~12 CTAs a tile). A 4-deep ring (2 CTAs an SM where 3
# stages fit 3) makes a third fewer CTAs and so fewer contributors a split tile, each with a
# longer run (ncu, base clock, v39: TP8 gate_up T=1 -13.8 %, T=2 -9.2 %, T=4 -7.1 %; at T=8, 256
# tiles, +1.2 %; EP8 T=2/4 +3 to +6 %, EP8 T=1 -10 %, which the tile bound cannot see: its local
# routes are unknown; sparse_routes_decode takes EP8 T=1 by its route count,
# benchmarks/results/sweeps/2026-12-03_v39_decode_stages/).
FEW_TILES_STAGES = 4


def few_tiles_decode(problem: IndexedProblem, launch: Launch, sms: int = H200_SMS) -> bool:
    """``launch``'s tiles (decode_tiles) are at most half its resident CTAs."""
    tiles = decode_tiles(problem, launch)
    return tiles is not None and 2 * tiles <= resident_ctas(launch, sms)


# EP's one-token-a-rank decode: a call of at most one route for every two SMs over a wide weight
# (32+ tiles a route) and deep K. EP8 with one token a rank makes 8 tokens x top-8 = 64 routes, of
# which ~8 are the rank's own; the host cannot tell which, so decode_tiles bounds 1792+ tiles where
# ~130 run, and the call is few_tiles_decode's case in fact: the 4-deep ring (2 CTAs an SM) wins
# (ncu ABBA, H100 at boost clock, 2026-12-06: EP8 T=1 gate_up -7.9 %, down -13.0 %; indexed-kernels.md
# v39 on the H200 at base clock: -9.7 / -6.7 %). With twice the routes it loses (EP8 T=2 gate_up
# +5.9 %; v39: T=2/4 +3 to +6 %). TP8 keeps its rings: its gate_up has 4 tiles a route, its down
# short K. Where every route is local (a wide weight with all experts on the rank) the bet is wrong
# by about what EP8 T=2 shows.
SPARSE_ROUTES_MIN_TILES_PER_ROUTE = 32


def sparse_routes_decode(problem: IndexedProblem, launch: Launch, sms: int = H200_SMS) -> bool:
    """At most one route for every two SMs, deep K, and a weight of at least
    SPARSE_ROUTES_MIN_TILES_PER_ROUTE tiles a route on ``launch``."""
    return (0 < 2 * problem.num_routes <= sms and problem.k >= WGMMA_MIN_K
            and -(-problem.n // launch.cols_per_cta) >= SPARSE_ROUTES_MIN_TILES_PER_ROUTE)


# The 8 x 128 decode tile (NT 2, TT 1, STAGE_K 256) with at least 4 tiles for every resident CTA
# (EP8 gate_up from T=8: 3584+ tiles by the bound) runs a 2-stage ring at 4 CTAs an SM instead of
# 3 stages at 3: each CTA streams whole tiles, and a fourth CTA hides a tile's latency chain
# better than a third stage (ncu ABBA, base clock, indexed-kernels.md v47: EP8 T=8 -3.5 / -2.1 %,
# skewed EP8 T=20 -3.6 / -3.7 %, EP8 T=20 within noise). With fewer tiles a CTA splits them and
# the shallower ring loses (TP8 T=8 gate_up +6.9 %, skewed TP8 T=20 gate_up +8.4 %, when "c4"
# took it for every decode tile), so those keep 3. Calls of fewer
# routes than SMs keep 3 too: there the bound can overstate the tiles many times (EP8 T=1 down:
# 56 blocks by the bound for ~8 local routes), and c4 was +9 to +11 % on such grouped T=1 calls.
MANY_TILES_RING = {"NT": 2, "TT": 1, "STAGE_K": 256, "STAGES": 3}
MANY_TILES_PER_CTA = 4


def many_tiles_decode(problem: IndexedProblem, launch: Launch, sms: int = H200_SMS) -> bool:
    """``launch``'s tiles (decode_tiles) are at least MANY_TILES_PER_CTA a resident CTA, from
    at least one route an SM."""
    tiles = decode_tiles(problem, launch)
    return (tiles is not None and problem.num_routes >= sms
            and tiles >= MANY_TILES_PER_CTA * resident_ctas(launch, sms))


# 16-row blocks on the short-K 256-row tile (TP8 down at T=512, K=256: 2 stages a tile) run a
# one-tile ring, 2 stages, which frees the registers for 3 CTAs an SM instead of 2 (168 a thread,
# STREAMK_CTAS_PER_SM): 12 warps an SM hide the stage's latency chain better than a deeper ring
# (ncu ABBA on the H200, indexed-kernels.md v45: TP8 T=512 down -8.0 / -8.4 %, skewed -7.7 %, at
# base and boost clock).
ONE_TILE_RING = {"NT": 4, "TT": 2, "STAGE_K": 128}


# The short-K decode tile (TP8 down: NT 4, 8-row blocks, K=256) with a 16-row tile over pairs of an
# expert's consecutive blocks in the same kernel (IndexedMmaDecodeDual; csrc/indexed/paired_blocks.cuh):
# each CTA counts the call's tiles both ways and runs the cheaper (indexed-kernels.md v83). At 8-row
# blocks an expert with 9-16 rows has two blocks, and the 8-row tile reads its weights twice; a
# skewed router puts that many on its popular experts (TP8 T=128: 296 blocks, 270 pair tiles). On
# an H100, 16-row blocks took 7 % off that down (v82) and cost the gate_up; the pairs keep the
# routing's 8-row blocks. The pair tile is the 16 x 256 one-tile ring (ONE_TILE_RING, 2 stages, the
# T=512 down's), costed 51 against the 8-row tile's 50 (16-row blocks at equal counts: +0.7 %, v82):
# it runs where pairs save 2+ % of the tiles. From PAIRED_MIN_ROUTES_PER_EXPERT routes an expert only
# (T=128 on 384 experts): below it, pairs are too few to pay the count (one read of expert_ids and
# three barriers a CTA before its first load).
# Not on by default: the kernel has not run on a GPU yet (written 2026-12-07 with no device lent).
# CHORD_W4A16_TUNING=PAIRED=1 takes it by the route rule, PAIRED=2 wherever it fits; the plan step
# that verifies and measures it is benchmarks/results/sweeps/2026-12-07_paired_decode/run.sh, and
# PAIRED_DEFAULT becomes 1 if it holds there.
PAIRED_DEFAULT = 0
PAIRED_BLOCKS_CAPACITY = 1024  # IndexedPairedRowTiles::kCapacity: a call with more blocks runs the 8-row tile
PAIRED_TABLE_BYTES = (PAIRED_BLOCKS_CAPACITY + 8) * 4  # IndexedPairedRowTiles::kTableBytes, static shared memory
PAIRED_COST = (50, 51)  # an 8-row tile, a pair tile (MoeParams::pick_cost, pick_other_cost)
PAIRED_MIN_ROUTES_PER_EXPERT = 2
PAIRED_SHORT_TILE = {"NT": 4, "TT": 1, "STAGE_K": 128, "STAGES": 3}
PAIRED_TALL_STAGES = 2  # the pair tile's ring: ONE_TILE_RING's 2 stages


def indexed_mma_decode_dual(nt: int, stage_k: int, stages: int, tall_stages: int, arch: str = DEFAULT_ARCH) -> Launch:
    """IndexedMmaDecodeDual: the 8-row stream-K tile and the 16-row pair tile (``tall_stages``
    ring) in one launch, with the larger tile's dynamic shared memory and partials (the pair
    table is static shared memory, PAIRED_TABLE_BYTES), at the occupancy both fit."""
    return decode_dual_launch(indexed_mma_streamk(nt, 1, stage_k, stages, arch),
                              indexed_mma_streamk(nt, 2, stage_k, tall_stages, arch), "chord::IndexedMmaDecodeDual",
                              PAIRED_COST)


def paired_decode(problem: IndexedProblem, launch: Launch, tuned: dict[str, int], arch: str = DEFAULT_ARCH) -> Launch:
    """indexed_mma_decode_dual where ``launch`` is PAIRED_SHORT_TILE on short K and 8-row blocks of
    at most PAIRED_BLOCKS_CAPACITY, by ``tuned``'s PAIRED (else PAIRED_DEFAULT): 1 where the call
    has PAIRED_MIN_ROUTES_PER_EXPERT+ routes an expert, 2 at any route count; else ``launch``."""
    paired = tuned.get("PAIRED", PAIRED_DEFAULT)
    if paired not in (0, 1, 2):
        raise ValueError(f"CHORD_W4A16_TUNING PAIRED={paired}: expected 0 (never), 1 (the route rule) or 2 (always)")
    blocks = max_blocks(problem)
    if (paired == 0 or launch.spec.family != "indexed_mma_sk" or problem.block_m != 8 or problem.k >= WGMMA_MIN_K
            or any(launch.spec.config[key] != v for key, v in PAIRED_SHORT_TILE.items())
            or blocks is None or blocks > PAIRED_BLOCKS_CAPACITY
            or (paired == 1 and problem.num_routes < PAIRED_MIN_ROUTES_PER_EXPERT * problem.num_experts)):
        return launch
    short = PAIRED_SHORT_TILE
    dual = indexed_mma_decode_dual(short["NT"], short["STAGE_K"], short["STAGES"], PAIRED_TALL_STAGES, arch)
    # the pair table beside the 8-row ring must leave the occupancy the 8-row tile had
    return dual if dual.smem_bytes + PAIRED_TABLE_BYTES + 1024 <= SMEM_PER_SM // launch.spec.min_blocks_per_sm else launch


def choose_indexed_mma_streamk(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    cfg = apply_tuning(streamk_shape(problem.n, problem.k, problem.block_m), problem.k, tuning)
    tuned = parse_tuning(tuning)
    ring = cfg["STAGES"]  # streamk_shape's (or the override's) ring, for the NT 2 fallback below
    if "STAGES" not in tuned and all(cfg[key] == v for key, v in ONE_TILE_RING.items()) and problem.k < WGMMA_MIN_K:
        cfg["STAGES"] = 2
    launch = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"], arch=arch)
    if cfg["NT"] == 4 and problem.k < WGMMA_MIN_K and "NT" not in tuned and one_wave_decode(problem, launch):
        cfg["NT"], cfg["STAGES"] = 2, ring  # the one-tile ring is the 256-row tile's (ONE_TILE_RING)
        launch = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], cfg["STAGES"], arch=arch)
    if "STAGES" not in tuned and (few_tiles_decode(problem, launch) or sparse_routes_decode(problem, launch)):
        deeper = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], FEW_TILES_STAGES, arch=arch)
        if deeper.smem_bytes + 1024 <= SMEM_PER_SM:  # the deeper ring fits an SM (every decode tile's does)
            launch = deeper
    if "STAGES" not in tuned and all(cfg[key] == v for key, v in MANY_TILES_RING.items()):
        shallower = indexed_mma_streamk(cfg["NT"], cfg["TT"], cfg["STAGE_K"], 2, arch=arch)
        if many_tiles_decode(problem, shallower):
            launch = shallower
    return paired_decode(problem, launch, tuned, arch)


def choose_indexed_wgmma_streamk(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    """Mid-batch blocks (is_mid_batch_tile) take the 512-row tile with 4 consumer warpgroups
    (wgmma_shape), the rest wgmma_streamk_shape's 2-warpgroup tile."""
    if is_mid_batch_tile(problem.block_m, problem.n, problem.k, "indexed"):
        shape = wgmma_shape(problem.n, problem.block_m)
    else:
        shape = wgmma_streamk_shape(problem.n, problem.block_m)
    cfg = apply_tuning(shape, problem.k, tuning)
    return indexed_wgmma_streamk(cfg["WM"], cfg["BN"], cfg["STAGES"], arch=arch, cwg=cfg["CWG"])


def choose_indexed_wgmma(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    """The wgmma tile on the tile loop, 2 or 4 consumer warpgroups (the 4-warpgroup tiles since
    v34: TP8 T=2048 gate_up, 512 x 56, -2.5 % and -2.8 % skewed against one CTA per tile); on
    short K the stream-K schedule's 2-warpgroup tile with its epilogue on the store warps
    (choose_indexed_short_k_loop; ``auto`` takes it from SHORT_K_LOOP_MIN_ROWS rows a block)."""
    if problem.k < WGMMA_MIN_K:
        return choose_indexed_short_k_loop(problem, arch, tuning)
    cfg = apply_tuning(wgmma_shape(problem.n, problem.block_m), problem.k, tuning)
    return indexed_wgmma(cfg["WM"], cfg["BN"], cfg["STAGES"], arch=arch, cwg=cfg["CWG"], loop=True)


# Short K (TP8 down, K=256: 4 stages a tile) at prefill: a tile's output is ~40 % of its bytes, and
# on the stream-K tile the consumers write it between the tile's last wgmma and the next tile's
# first (main without its stores: TP8 T=2048 / 8192 down -7 / -14 %, ncu at base clock,
# indexed-kernels.md v50). The tile loop hands it to the producer's store warps (v51), from
# SHORT_K_LOOP_MIN_ROWS rows a block: ncu ABBA on an H100, TP8 T=8192 down (96 rows) -5.6 / -5.3 %
# at base / boost clock, but T=2048 down (56 rows) +10 / +27 %: a 56-row tile's k loop is too
# short to hide the store warps' write of the one before, so those blocks keep the stream-K tile.
SHORT_K_LOOP_MIN_ROWS = 96


def choose_indexed_short_k_loop(problem: IndexedProblem, arch: str = DEFAULT_ARCH, tuning: str = "") -> Launch:
    """The 2-warpgroup tile (wgmma_streamk_shape's) on the tile loop with the deferred epilogue,
    as deep a ring as fits beside its staging."""
    cfg = apply_tuning(wgmma_streamk_shape(problem.n, problem.block_m), problem.k, tuning)
    stages = wgmma_deferred_stages(cfg["WM"], cfg["BN"], cfg["STAGES"], cfg["CWG"])
    if not stages:
        return indexed_wgmma(cfg["WM"], cfg["BN"], cfg["STAGES"], arch=arch, cwg=cfg["CWG"], loop=True)
    return indexed_wgmma(cfg["WM"], cfg["BN"], stages, arch=arch, cwg=2, loop=True, defer_store=True)


def indexed_family() -> str:
    return env.get(env.INDEXED_KERNEL, "auto")


def indexed_tuning() -> str:
    return env.get(env.TUNING)


def resolve_indexed_family(problem: IndexedProblem, family: str = "auto") -> str:
    if family not in INDEXED_FAMILIES:
        raise ValueError(f"CHORD_W4A16_INDEXED_KERNEL={family!r}; expected one of {', '.join(INDEXED_FAMILIES)}")
    if family != "auto":
        return family
    if is_mid_batch_tile(problem.block_m, problem.n, problem.k, "indexed"):
        # the 512-row tile (MID_BATCH_TILES): on the stream-K schedule, or on the tile loop
        return "wgmma_sk" if problem.block_m <= MID_BATCH_STREAMK_MAX_ROWS else "wgmma"
    family = auto_tile_family(problem.block_m, problem.k)
    # short-K prefill blocks of 96+ rows: the tile loop with the deferred epilogue (choose_indexed_short_k_loop)
    return "wgmma" if family == "wgmma_sk" and problem.block_m >= SHORT_K_LOOP_MIN_ROWS else family


def select_indexed(problem: IndexedProblem, arch: str = DEFAULT_ARCH, family: str = "auto",
                   tuning: str = "") -> Launch:
    launch = pick_indexed(problem, arch, family, tuning)
    report_choice(problem, launch.spec, evict_first_note(launch, problem.k))
    return launch


def pick_indexed(problem: IndexedProblem, arch: str = DEFAULT_ARCH, family: str = "auto",
                 tuning: str = "") -> Launch:
    """select_indexed without CHORD_PRINT_CONFIGS's report (the precompile list probes hundreds
    of problems)."""
    family = resolve_indexed_family(problem, family)
    if family == "simple":
        launch = indexed_simple(arch)
    elif family == "wgmma":
        launch = choose_indexed_wgmma(problem, arch, tuning)
    elif family == "mma_sk":
        launch = choose_indexed_mma_streamk(problem, arch, tuning)
    elif family == "wgmma_sk":
        launch = choose_indexed_wgmma_streamk(problem, arch, tuning)
    else:
        launch = choose_indexed_mma(problem, arch, tuning)
    return launch


def indexed_profile_launches(n: int, k: int, arch: str = DEFAULT_ARCH) -> list[Launch]:
    """Every launch the heuristic can pick for a projection shape (every routing block size)."""
    seen: dict[str, Launch] = {}
    # The blocks the rule asks for, plus CHORD_W4A16_BLOCK_M sizes between them (the mma tile).
    # The decode rules (one_wave_decode, few_tiles_decode) depend on the call's block count only:
    # with an expert a route every count up to the most resident CTAs (past it neither holds)
    # reaches every branch; 0 is a call of unknown routes.
    for block_m in sorted(set(INDEXED_BLOCK_M_CHOICES) | {24, 40, 48, 56}):
        for routes in range(MAX_CTAS_PER_SM * H200_SMS + 1):
            launch = pick_indexed(IndexedProblem(n, k, max(routes, 1), 1, block_m, routes), arch)
            seen.setdefault(launch.spec.symbol, launch)
        # the paired decode tile (paired_decode) at PAIRED_MIN_ROUTES_PER_EXPERT routes an expert
        busy = IndexedProblem(n, k, H200_SMS, 1, block_m, PAIRED_MIN_ROUTES_PER_EXPERT * H200_SMS)
        for launch in (pick_indexed(busy, arch), pick_indexed(busy, arch, tuning="PAIRED=1")):
            seen.setdefault(launch.spec.symbol, launch)
    return list(seen.values())


def indexed_reachable_launches(arch: str = DEFAULT_ARCH) -> list[Launch]:
    """Every indexed launch the dispatch can pick for any shape (CI compiles all of them):
    the heuristic's branches are N below/above 2048 (and 256 for the wgmma tile) and K a
    multiple of 256 or only of 64; the mma tile at 64-row blocks and the wgmma tile at 16/32-row
    blocks too (the family override)."""
    seen: dict[str, Launch] = {indexed_simple(arch).spec.symbol: indexed_simple(arch)}
    for n in (128, 512, 4096):
        for k in (256, 320, 2048):
            for launch in indexed_profile_launches(n, k, arch):
                seen.setdefault(launch.spec.symbol, launch)
            mma64 = choose_indexed_mma(IndexedProblem(n, k, 1, 1, 64), arch)
            seen.setdefault(mma64.spec.symbol, mma64)
            for block_m in (16, 32):  # the wgmma tile's BN 16/32 (family override)
                small = choose_indexed_wgmma(IndexedProblem(n, k, 1, 1, block_m), arch)
                seen.setdefault(small.spec.symbol, small)
            for block_m in INDEXED_BLOCK_M_CHOICES:  # the wgmma tile on the stream-K schedule (family override)
                sk = choose_indexed_wgmma_streamk(IndexedProblem(n, k, 1, 1, block_m), arch)
                seen.setdefault(sk.spec.symbol, sk)
    return list(seen.values())
