"""Tile configs: the kernel family a tile of so many rows runs (shared by both families), each
tile's config for a projection shape (mma: NT/TT/STAGE_K/STAGES; wgmma: WM/BN/STAGES/CWG), and the
CHORD_W4A16_TUNING overrides of them."""

from __future__ import annotations

from .launch import WGMMA_CWG_CHOICES, WGMMA_SMEM_LIMIT, deepest_wgmma_ring, wgmma_smem_bytes

MAX_TOKEN_TILES = 8  # n8 token tiles per CTA in the mma kernel (64 routed rows)


# The wgmma tile takes routing blocks past the stream-K mma range (33+ rows: the prefill blocks,
# 56 and up; auto_tile_family). On deep K whole tiles (one CTA per tile, since v16 claimed by
# at most the resident CTAs: the tile loop; v6 sweep, H200: from K=2048 it beats
# the mma tile, 1418 vs 1744 µs at EP8 down T=2048; v10: it also beats its own stream-K schedule
# there, 6187 vs 8924 µs at EP8 gate_up T=8192). On short K (TP8 down, K=256: 4 stages a tile)
# pipeline fill dominates a one-CTA tile, and the stream-K schedule's ring across tiles wins
# (v10: T=8192 1256 vs 1568 µs for the mma tile, T=2048 390 vs 405).
WGMMA_MIN_K = 1024
# Routing blocks up to this many rows run the mma tile on the stream-K schedule (persistent CTAs,
# one ring across tiles, balanced runs): decode and mid batch, where per-tile restarts and the
# last wave's idle slots cost most (docs/design/indexed-kernels.md, v9: faster or equal at every
# point with blocks of 8-32 rows; 2x slower with 128-row blocks, which belong to the wgmma tile).
STREAMK_MAX_BLOCK_M = 32
# Mid batch on deep K: the wgmma tile with 4 consumer warpgroups and 512 weight rows per CTA.
# Grouped (whole tiles, on the tile loop since grouped v23): tiles of 17-32 rows on N >= 2048
# (v13, H200, EP8 T=128, sum of gate_up and down: 523 -> 475 µs against the stream-K mma tile,
# skewed 561 -> 550; one CTA per 16-row tile lost, 269 -> 345 at EP8 T=64 gate_up). On the grouped
# routings the stream-K schedule of the same tile lost (grouped-kernels.md v14: masked EP8 T=128
# 461 -> 637 µs, offsets 434 -> 454). Indexed: blocks of 17-32 rows (v26 on the stream-K schedule,
# same-run sweeps: equal to 2.5 % slower where the tiles fill their waves, EP8 T=128; 3-6 % faster
# where they do not, skewed T=128-512; on the tile loop since v34) and, since v28, 16-row blocks
# (the 512 x 16 stream-K tile: EP8 T=64 432 -> 407 µs, skewed 412 -> 390; TP8 T=512 458 -> 443,
# skewed 510 -> 497, its gate_up at N 512 -5 %).
# Blocks of 56 take the same tile on deep K through wgmma_shape (v14).
# (lowest rows, highest rows, lowest N) per family
MID_BATCH_TILES = {"grouped": (17, 32, 2048), "indexed": (9, 32, 512)}
# Indexed mid-batch blocks up to this many rows (the 512 x 16 tile) stay on the stream-K schedule;
# 17-32 rows run the 512 x 32 tile on the tile loop with its split tail (indexed-kernels.md v34,
# ncu at base clock: EP8 T=128 gate_up -4 / -6 % skewed, down -6 / -8 %; the 512 x 16 tile on the
# loop was mixed, TP8 T=512 skewed gate_up +6 %, EP8 T=64 down -3 %).
MID_BATCH_STREAMK_MAX_ROWS = 16


def mma_shape(n: int, k: int, rows: int) -> dict[str, int]:
    """Tile config of the mma kernels for ``rows`` activation rows per tile (a routing block or
    a grouped expert's expected rows), as measured on the H200 (docs/design/indexed-kernels.md)."""
    # Rows: cover the block in one CTA up to 64 rows (8 n8 tiles), so each dequantized weight
    # serves the whole block; bigger blocks are split over several CTAs, each re-streaming the
    # expert's weights (large prefill belongs to the wgmma kernel).
    tt = min(MAX_TOKEN_TILES, max(1, -(-rows // 8)))
    # Weight rows per warp: more 16-row tiles cut the activation bytes re-read per weight byte,
    # fewer make more CTAs. Measured (v5 sweep): 4 tiles win once the tile has 32+ rows, 2 at
    # decode; narrow N (TP8 gate_up, N=512) keeps 1 so the grid still fills the machine.
    nt = 1 if n < 2048 else 4 if rows >= 32 else 2
    # Stage width: 256 columns (fewer barriers, deeper bytes in flight) while the activation
    # rows are few; narrower stages for big row tiles keep 2+ CTAs per SM in shared memory.
    stage_k = 256 if k % 256 == 0 and tt <= 2 else 128 if k % 128 == 0 else 64
    return {"NT": nt, "TT": tt, "STAGE_K": stage_k, "STAGES": 3}


WGMMA_CWG2_STAGES = 6  # ring depth of the 2-warpgroup tile (depth made no difference in the v6 sweep)
WGMMA_BN_CHOICES = (16, 24, 32, 48, 56, 64, 96, 128)  # N of the wgmma: the block's rows (16, 24, 32 at mid batch)


def wgmma_shape(n: int, rows: int) -> dict[str, int]:
    """Tile config of the wgmma kernel for a routing block of ``rows``: N of the wgmma is the
    smallest of 16/24/32/48/56/64/96/128 holding the block; two m64 weight tiles per warpgroup (half
    the activation bytes re-read per weight byte of one) unless N is too narrow; up to 56 rows 4
    consumer warpgroups (512 weight rows, 8 stages; ``auto`` sends mid-batch tiles on deep K here,
    MID_BATCH_TILES: 17-32 rows since v13, indexed 16-row blocks since v28; 56-row blocks, v14),
    else 2 (256 weight rows, 6 stages: prefill, 64+ rows; the depth made no difference in the v6
    sweep)."""
    bn = next((b for b in WGMMA_BN_CHOICES if rows <= b), WGMMA_BN_CHOICES[-1])
    wm = 2 if n >= 256 else 1
    # Up to 56 rows the accumulators (WM * BN / 2 <= 56 a thread) fit 4 consumer warpgroups (512
    # weight rows; from 48 rows the tile loads its weight words per k step, v14), and their 8-deep
    # ring still fits (181-207 KB; v13: 6 -> 8 stages took EP8 T=128 490 -> 475 µs; v14: TP8
    # T=2048 gate_up 373 -> 354 at BN 56).
    cwg = 4 if wm == 2 and bn <= 56 else 2
    return {"WM": wm, "BN": bn, "STAGES": 8 if cwg == 4 else WGMMA_CWG2_STAGES, "CWG": cwg}


def wgmma_loads_operands_per_step(cfg: dict[str, int]) -> bool:
    """WgmmaTile::kOperandsPerStep: the 4-warpgroup tile with more than 64 accumulators a thread
    (WM * BN > 64, the 512 x 56 tile) has no registers to hold a stage's weight words, so each k
    step loads its own 4-byte word from shared memory (on the tile loop two steps' words a load:
    grouped-kernels.md v24)."""
    return cfg["CWG"] == 4 and cfg["WM"] * cfg["BN"] > 64


def streamk_shape(n: int, k: int, rows: int) -> dict[str, int]:
    """mma_shape for the stream-K schedule: TT a power of two (rows divide 128), and narrow N
    (TP8 gate_up) keeps 2 weight tiles per warp, since the schedule fills the machine whatever
    the tile count (half the activation bytes and B-fragment loads per weight byte); wide N on
    short K takes 4 (256 weight rows a tile)."""
    cfg = mma_shape(n, k, rows)
    cfg["TT"] = 1 << (cfg["TT"] - 1).bit_length()
    if n >= 256:
        cfg["NT"] = max(cfg["NT"], 2)
    if n >= 2048 and k < WGMMA_MIN_K:
        # Short K (TP8 down, K=256: one 256-column stage a 128-row tile): 256 weight rows a tile
        # in two 128-column stages halve the per-tile work (row ids, partials, epilogue) per
        # weight byte and keep 2 CTAs an SM (v30, H200: TP8 down T=128 125 -> 118 µs, T=512
        # 186 -> 176, skewed 210 -> 197; T=20 equal). 256-column stages at NT 4 fit one CTA an
        # SM and lost 20 %; deep K lost 1-3 % (EP8 T=8-32).
        cfg["NT"], cfg["STAGE_K"] = 4, min(cfg["STAGE_K"], 128)
    return cfg


def wgmma_streamk_shape(n: int, rows: int) -> dict[str, int]:
    """wgmma_shape on the stream-K schedule: the ring as deep as shared memory allows, up to 8
    stages (the schedule pays its fill once per CTA, not per tile, so depth is only bytes in
    flight: 8 stages of 256 weight rows are 64 KB a SM, twice what covers HBM latency)."""
    # 2 consumer warpgroups off the mid batch (the 4-warpgroup tile is for 17-32-row blocks,
    # choose_indexed_wgmma_streamk; at BN 48/56 it would spill, v14).
    cfg = {**wgmma_shape(n, rows), "CWG": 2}
    cfg["STAGES"] = deepest_wgmma_ring(cfg["WM"], cfg["BN"], 8)
    return cfg


def auto_tile_family(rows: int, k: int) -> str:
    """The ``auto`` kernel for tiles of ``rows`` (an indexed routing block, a grouped tile) on K,
    shared by both families: the mma tile on the stream-K schedule up to 32 rows (decode, mid
    batch; the wgmma tile there measured 10-50 % slower, v10); above (the 56+-row prefill blocks)
    the wgmma tile, whole tiles on deep K (the tile loop) and the stream-K schedule on short K. The
    one-CTA mma tile is reached only by CHORD_W4A16_INDEXED_KERNEL=mma."""
    if rows <= STREAMK_MAX_BLOCK_M:
        return "mma_sk"
    return "wgmma" if k >= WGMMA_MIN_K else "wgmma_sk"


def is_mid_batch_tile(rows: int, n: int, k: int, family: str) -> bool:
    """Mid-batch tiles on deep K and wide enough N (MID_BATCH_TILES[family]): the 512-row wgmma
    tile with 4 consumer warpgroups (wgmma_shape): whole tiles on the tile loop, or for indexed
    blocks up to MID_BATCH_STREAMK_MAX_ROWS the stream-K schedule."""
    lo, hi, min_n = MID_BATCH_TILES[family]
    return lo <= rows <= hi and k >= WGMMA_MIN_K and n >= min_n


MMA_TUNABLE = ("NT", "TT", "STAGE_K", "STAGES")
WGMMA_TUNABLE = ("WM", "BN", "STAGES", "CWG")
# PAIRED (indexed short-K decode, dispatch.indexed.paired_decode): the tile over pairs of an
# expert's 8-row blocks; 0 never, 1 by its route rule, 2 wherever the kernel can.
TUNABLE = MMA_TUNABLE + ("WM", "BN", "CWG", "PAIRED")


def parse_tuning(text: str) -> dict[str, int]:
    """``CHORD_W4A16_TUNING="NT=4,STAGES=4"`` -> {"NT": 4, "STAGES": 4} (experiments, debugging)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip().upper() not in TUNABLE or not value.strip().isdigit():
            raise ValueError(f"CHORD_W4A16_TUNING item {item!r}: expected KEY=INT with KEY in {', '.join(TUNABLE)}")
        out[key.strip().upper()] = int(value)
    return out


def apply_tuning(cfg: dict[str, int], k: int, tuning: str) -> dict[str, int]:
    """Overrides from CHORD_W4A16_TUNING for the keys this config has (an mma config takes
    NT/TT/STAGE_K/STAGES, a wgmma config WM/BN/STAGES; the other family's keys are for the
    other family's calls in the same run)."""
    cfg = {**cfg, **{key: v for key, v in parse_tuning(tuning).items() if key in cfg}}
    if "WM" in cfg:
        if cfg["WM"] not in (1, 2, 4) or cfg["BN"] not in WGMMA_BN_CHOICES or not 2 <= cfg["STAGES"] <= 8 or k % 64:
            raise ValueError(f"tuning {cfg} does not fit K={k} (WM 1|2|4, BN 16|24|32|48|56|64|96|128, STAGES 2..8, "
                             "K a multiple of 64)")
        if cfg["CWG"] not in WGMMA_CWG_CHOICES or (cfg["CWG"] == 4 and cfg["WM"] * cfg["BN"] > 112):
            raise ValueError(f"tuning {cfg}: CWG is 2 or 4, and 4 consumer warpgroups need WM*BN <= 112 "
                             "(their accumulators must fit ~100 registers a thread)")
        # WM 4 (an experiment, indexed-kernels.md v61: the 512-row tile on 2 consumer warpgroups)
        # on 2 warpgroups only, within their 128 accumulators a thread.
        if cfg["WM"] == 4 and (cfg["CWG"] != 2 or cfg["WM"] * cfg["BN"] > 256):
            raise ValueError(f"tuning {cfg}: WM 4 runs on 2 consumer warpgroups (CWG=2) with WM*BN <= 256 "
                             "(128 accumulators a thread)")
        if wgmma_smem_bytes(cfg["WM"], cfg["BN"], cfg["STAGES"], cfg["CWG"]) > WGMMA_SMEM_LIMIT:
            raise ValueError(f"tuning {cfg}: the ring needs more shared memory than an SM has")
    elif k % cfg["STAGE_K"] or cfg["STAGE_K"] % 64 or not 1 <= cfg["TT"] <= MAX_TOKEN_TILES:
        raise ValueError(f"tuning {cfg} does not fit K={k} (STAGE_K must divide K, multiple of 64; TT 1..8)")
    return cfg
