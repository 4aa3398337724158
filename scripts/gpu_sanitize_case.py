"""Small indexed launches for compute-sanitizer (memcheck / racecheck) on the GPU machine:
every kernel family (the stream-K schedules with tiles split over CTAs), both activation-stage
widths, a garbage routing tail; the wgmma tile with a ragged 64- and 128-row block, and N narrower
than its 256-column tile."""

import os
import sys

import torch
from chord_kernels import indexed, layouts, routing

g = torch.Generator().manual_seed(0)
CASES = {"mma": ((8, 64, 256, 5, 2, 16), (4, 160, 320, 9, 2, 32)),
         # stream-K: many tiles per CTA; a few long-K tiles each split over many CTAs (the fix-up)
         # the short-K tile (N >= 2048, K < 1024: 256 weight rows, 128-column stages), K 384 an odd
         # stage count; the calls of a few tiles (all but the 300- and 150-token ones) take the
         # 4-deep ring (dispatch.few_tiles_decode)
         "mma_sk": ((8, 64, 256, 5, 2, 8), (4, 160, 320, 9, 2, 16), (3, 512, 2048, 2, 8, 8),
                    (3, 2048, 256, 300, 2, 8), (3, 2048, 384, 150, 2, 16),
                    # few routes on short K: the one-wave decode tile (128 weight rows)
                    (3, 2048, 256, 2, 2, 8), (3, 2048, 384, 3, 2, 16),
                    # ~58 blocks x 8 tiles of 2 stages: runs of 3 grow to 4 (whole tiles, streamk_run.cuh)
                    (3, 2048, 256, 224, 2, 8),
                    # 16-row blocks on short K: the one-tile (2-stage) ring at 3 CTAs an SM; K 384
                    # is 3 stages a tile, so the ring wraps inside a tile
                    (3, 2048, 256, 400, 2, 16), (3, 2048, 384, 400, 2, 16)),
         # the short-K decode tile holding the pair tile (dispatch.paired_decode, forced): ~7 blocks an
         # expert (the pair tile runs), ~1 block an expert (the 8-row tile runs), K 384
         "paired": ((8, 2048, 256, 200, 2, 8), (64, 2048, 256, 100, 2, 8), (8, 2048, 384, 200, 2, 8)),
         "simple": ((8, 64, 256, 5, 2, 16), (4, 160, 320, 9, 2, 32)),
         # wgmma tile, stream-K: long-K tiles split over many CTAs; ~8 short tiles per CTA (the
         # ring across tiles); K = 640 wraps the 8-slot ring; N = 160 half past a 128-column tile
         "wgmma_sk": ((3, 512, 2048, 2, 8, 8), (8, 512, 256, 4000, 2, 16), (3, 160, 640, 60, 2, 64),
                      (2, 160, 640, 80, 2, 128), (3, 512, 256, 150, 2, 96), (3, 512, 256, 120, 2, 56)),
         # the same schedule on the 512-row tile with 4 consumer warpgroups (BN 32, 16, 24): split
         # long-K tiles (both BN), many short tiles per CTA, N = 336 ending inside the tile
         "wgmma_sk4": ((3, 512, 2048, 2, 8, 32), (3, 512, 2048, 2, 8, 16), (8, 512, 256, 4000, 2, 16),
                       (3, 336, 640, 60, 2, 32), (3, 512, 2048, 2, 8, 24)),
         # the decode tile's 2-stage ring (4 CTAs an SM): long-K tiles split over CTAs, many short
         # tiles a CTA (odd stage count), N = 320 ending inside the tile
         "mma_sk2": ((3, 512, 2048, 2, 8, 8), (8, 512, 768, 300, 2, 8), (5, 320, 512, 40, 2, 8)),
         # (WM, BN) = (1, 64), (2, 128), (1, 64), (2, 64), (1, 128), (2, 96); K = 640 wraps the
         # ring; then BN 32, 16 (N = 336), 56 and 24. Written for the 4-warpgroup tile, but since v51
         # every K under 1024 runs the 2-warpgroup short-K loop with the deferred epilogue (WM 2
         # there too: N = 336 ends inside a 256-row tile); the two deep-K cases at the end reach the
         # 4-warpgroup tile loop
         "wgmma": ((4, 160, 320, 50, 2, 64), (3, 512, 256, 90, 2, 128), (2, 128, 192, 7, 1, 64),
                   (3, 512, 640, 60, 2, 64), (2, 160, 640, 80, 2, 128), (3, 512, 640, 150, 2, 96),
                   (3, 512, 640, 40, 2, 32), (2, 336, 640, 30, 2, 16), (3, 512, 640, 90, 2, 56),
                   (3, 512, 640, 40, 2, 24),
                   # ~280 tiles: more than the resident CTAs, so each loops over 2-3 tiles
                   (4, 2048, 256, 2000, 2, 128),
                   # deep K (1024): the 4-warpgroup 512-row tile on the tile loop, which the short-K
                   # cases above never reach (they run the 2-warpgroup loop): BN 32 over N 512, BN 24
                   # over N 336 ending inside the tile
                   (3, 512, 1024, 40, 2, 32), (3, 336, 1024, 30, 2, 24))}
# Case families that are a kernel family with a tuning override: (kernel family, tuning).
# mma_sk2: the 8 x 128 decode tile on its 2-stage ring at 4 CTAs an SM (dispatch.many_tiles_decode
# picks it only past 2112 tiles; forced here on the mma_sk cases).
OVERRIDES = {"wgmma_sk4": ("wgmma_sk", "CWG=4,STAGES=8"), "paired": ("mma_sk", "PAIRED=2"), "mma_sk2": ("mma_sk", "NT=2,TT=1,STAGE_K=256,STAGES=2")}
# Optional arguments: only these indexed families' cases; "grouped" for every grouped case, or
# "grouped:TEXT" for the grouped cases whose label holds TEXT (a candidate's own case alone, where
# racecheck on all of them would take minutes of device time).
ONLY = sys.argv[1:]
GROUPED_MATCH = [arg.split(":", 1)[1] for arg in ONLY if arg.startswith("grouped:")]
# A name that selects no case would run nothing and exit 0, which compute-sanitizer reports only as
# "terminated before first instrumented API call" (a candidate's stale case name did, 2026-12-06).
UNKNOWN = [arg for arg in ONLY if arg not in CASES and arg != "grouped" and not arg.startswith("grouped:")]
if UNKNOWN:
    sys.exit(f"gpu_sanitize_case.py: no such case family {UNKNOWN}; families: {sorted(CASES)}, "
             "grouped, grouped:TEXT")
GROUPED_RAN = set()  # the grouped:TEXT matches that selected a case
for family, cases in CASES.items():
    if ONLY and family not in ONLY:
        continue
    os.environ["CHORD_W4A16_INDEXED_KERNEL"], os.environ["CHORD_W4A16_TUNING"] = OVERRIDES.get(family, (family, ""))
    for e, n, k, tokens, top_k, block_m in cases:
        codes = torch.randint(0, 16, (e, n, k), generator=g, dtype=torch.uint8)
        scale = (torch.rand(e, n, k // 32, generator=g) * 0.05).to(torch.bfloat16)
        packed = layouts.pack_w4a16(codes, scale, "indexed").to("cuda")
        a = torch.randn(tokens, k, generator=g).to(torch.bfloat16).to("cuda")
        topk = torch.randint(0, e, (tokens, top_k), generator=g).to(torch.int32).to("cuda")
        sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk, block_m, e)
        sorted_ids[ntp.item():] = 10**6  # garbage tail: must never be read
        out = indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m)
        torch.cuda.synchronize()
        print(f"sanitize case ok: {family} E={e} N={n} K={k} block_m={block_m}", tuple(out.shape))

if ONLY and "grouped" not in ONLY and not GROUPED_MATCH:
    sys.exit(0)

# Grouped family: contiguous offsets (unaligned, over-allocated rows) and masked (rows past masked_m).
from chord_kernels import contiguous_offsets, masked  # noqa: E402


def grouped_case(label, n, k, counts, rows, expected_rows, max_m, expected_m):
    """One contiguous_offsets call over `rows` activation rows and one masked call with max_m rows
    per expert (counts clamped to it)."""
    if GROUPED_MATCH and "grouped" not in ONLY and not any(text in label for text in GROUPED_MATCH):
        return
    GROUPED_RAN.update(text for text in GROUPED_MATCH if text in label)
    e = len(counts)
    codes = torch.randint(0, 16, (e, n, k), generator=g, dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=g) * 0.05).to(torch.bfloat16)
    counts = torch.tensor(counts, dtype=torch.int32)
    offsets = routing.counts_to_offsets(counts).to("cuda")
    a = torch.randn(rows, k, generator=g).to(torch.bfloat16).to("cuda")
    contiguous_offsets(a, layouts.pack_w4a16(codes, scale, "contiguous").to("cuda"), offsets, expected_m=expected_rows)
    masked(a[:e * max_m], layouts.pack_w4a16(codes, scale, "masked").to("cuda"), counts.clamp_max(max_m).to("cuda"),
           expected_m)
    torch.cuda.synchronize()
    print(f"sanitize case ok: {label} contiguous_offsets + masked")


grouped_case("grouped", 80, 256, [3, 0, 17, 9], 40, 8, 8, 4)
# The wgmma tile (64+ rows per expert, K >= 1024): ragged experts, an empty one.
grouped_case("grouped wgmma", 256, 1024, [70, 0, 130, 9], 220, 100, 55, 80)
# Masked BLOCK_K 128 read as whole K blocks: the 4-warpgroup tile (17-32 rows, two stages filled
# together), the 56-row tile with N ending inside its 512-row tile, and the mma tile at STAGE_K 128.
grouped_case("grouped 4-warpgroup", 512, 1024, [30, 0, 17, 25], 128, 24, 32, 24)
grouped_case("grouped 56", 336, 1024, [50, 3, 40], 168, 40, 56, 40)
grouped_case("grouped K384", 160, 384, [5, 12, 0, 7], 64, 6, 16, 6)
# ~180 wgmma tiles, more than the resident CTAs: each CTA loops over 1-2 tiles through one ring.
grouped_case("grouped tile loop", 2048, 1024, [900, 0, 1200, 500], 4864, 2600, 1216, 650)
# A few tiles on K 2048, far fewer than the CTAs: the tile loop's split tail (each tile in two
# pieces, partials through the workspace, the last piece adds up; masked: BLOCK_K-128 stage pairs).
grouped_case("grouped split tail", 256, 2048, [200, 0, 90, 130], 420, 105, 200, 105)
# The tall tile (240 rows at WM 1) alone (1000 expected rows: from dispatch.TALL_TILE_UNPAIRED_ROWS;
# masked: its BLOCK_K-128 weights a stage a box). Experts of 1300 (six tiles, the last partial), 0,
# 700 and 1000 rows (masked: 1024 at most): 28 tiles on K 2048, each in two pieces (the split
# tail's 120-float partials).
grouped_case("grouped tall split tail", 256, 2048, [1300, 0, 700, 1000], 4096, 1000, 1024, 1000)
# The same counts at 900 expected rows: the tall tile paired with the 256 x 128 tile (dispatch.
# Launch.pick: both launched, the device runs one; masked too). The tall tile (launched first)
# runs; the 128-row launch exits before its barriers.
grouped_case("grouped pair, tall runs", 256, 2048, [1300, 0, 700, 1000], 4096, 900, 1024, 900)
# The same pair on counts that pad the tall tile (130, 0, 250, 500 rows): the second launch (128
# rows, 8 tiles split over CTAs) runs after the first exits.
grouped_case("grouped pair, short runs", 256, 2048, [130, 0, 250, 500], 1024, 300, 256, 128)
# The 256 x 96 tile launched first, the tall tile second (280 expected rows, K 1024): on 240, 0,
# 240 and 230 rows the tall tile runs (3 tiles against 9).
grouped_case("grouped pair, tall second", 256, 1024, [240, 0, 240, 230], 768, 280, 192, 96)
# The 4-warpgroup 512 x 32 tile on the tile loop: 160 tiles on the 132 resident CTAs, the last 28
# in two pieces each.
grouped_case("grouped 4-warpgroup split tail", 4096, 2048, [24] * 20, 640, 24, 32, 24)
# 24-row tiles (the 512 x 24 tile: 12 expected rows on 24 experts, 1.45 waves): experts of 0, 5,
# 12, 26 and 30 rows (two tiles; masked clamps to 32).
grouped_case("grouped 512 x 24", 4096, 1024, [12] * 20 + [30, 0, 5, 26], 768, 12, 32, 12)
# The 256 x 24 tile loop (dispatch.narrow_mid_batch; grouped v46): 14 expected rows on 12
# experts, K 4096 (the rule's least), too few 512 x 24 tiles for their loop: ~190 tiles on the 132
# resident CTAs, the last wave split along K (partials through the workspace); experts of 0, 5,
# 24 and 30 rows (two tiles; masked clamps to 32).
grouped_case("grouped 256 x 24 tile loop", 4096, 4096, [14] * 8 + [0, 5, 24, 30], 384, 14, 32, 14)
# The few-wave 32-row tile (dispatch.few_wave_32; grouped v48): 22 expected rows on 12 experts,
# N 4096 on K 1024 (96 tiles of 512 x 32 for the 132 SMs), the 256 x 32 tile loop in their place;
# experts of 0, 5, 33 and 40 rows (two tiles; the masked call reads 48 rows an expert).
grouped_case("grouped few-wave 32-row tiles", 4096, 1024, [22] * 8 + [0, 5, 33, 40], 576, 22, 48, 22)
# The wide decode tile (dispatch.widen_decode: 256 weight rows in 128-column stages, NT 4) on K
# 1024: 4 expected rows on 48 experts, ~780 tiles of 8 stages on the 396 resident CTAs (most
# tiles split over two CTAs), an empty expert and two of 9-12 rows (two tiles).
grouped_case("grouped wide decode", 4096, 1024, [4] * 45 + [0, 9, 12], 768, 4, 16, 4)
# The wide decode tile for one wave of whole tiles (dispatch.widen_decode, MMA_WHOLE_FILL; the
# device's kMmaWholeTiles): 5 expected rows on 20 experts, 19 busy: 304 tiles for the 396 resident
# CTAs, each run whole by one CTA (no partials, no locks).
grouped_case("grouped wide decode, one wave whole", 4096, 1024, [5] * 18 + [0, 7], 120, 5, 8, 5)
# The 8 x 128 decode tile on its 2-stage ring at 4 CTAs an SM, offsets and masked forms (dispatch.
# shallow_decode; grouped v43, v44): 2 expected rows on 48 experts, N 4096 on K 1024 (~1330 tiles of 4 stages for
# the 528 resident CTAs: runs split tiles), an empty expert and two of 9-13 rows (two tiles).
# (768 rows: the masked call reads 48 x 16.) Then 4 expected rows (EP8 T=20), where the ring
# replaces the wide tile: an expert of 17 rows (three tiles), an empty one.
grouped_case("grouped 2-stage decode ring", 4096, 1024, [2] * 45 + [0, 9, 13], 768, 2, 16, 2)
grouped_case("grouped 2-stage decode ring, 4 rows", 4096, 1024, [4] * 46 + [0, 17], 768, 4, 16, 4)
# The 8 x 128 decode tile on its 4-deep ring at 2 CTAs an SM (dispatch.sparse_decode; grouped v53):
# one expected row on 48 experts (EP8 T=1), N 4096 on K 1024, five busy experts of 1-9 rows (the
# last two tiles): ~200 tiles of 4 stages for the 264 resident CTAs, split over runs.
grouped_case("grouped 4-deep decode ring", 4096, 1024, [1, 0, 2, 0, 3, 9] + [0] * 42, 384, 1, 8, 1)
# The 16-row decode tile (dispatch.decode_16; grouped v47): 7 expected rows on 24
# experts, N 4096 on K 1024 (~770 tiles of 4 stages over the resident CTAs: split tiles), an empty
# expert, one of 3 rows and two of 12 and 17 (two tiles).
grouped_case("grouped 16-row decode", 4096, 1024, [7] * 20 + [0, 3, 12, 17], 768, 7, 32, 7)
# The masked form's kernel holding the 8- and 16-row tiles (dispatch.dual_decode_16; grouped
# v58): hinted 6 rows on 24 experts, N 4096 on K 1024. On 20 experts of 5 rows, an empty one and
# three of 6-9 (24 8-row tiles against 23: 120 < 138) the 8-row height runs; on 14 rows an expert
# (48 against 24) the 16-row height. (The offsets form, hinted the same, runs its 8-row tile.)
grouped_case("grouped decode dual, 8 rows run", 4096, 1024, [5] * 20 + [0, 6, 8, 9], 768, 6, 32, 6)
grouped_case("grouped decode dual, 16 rows run", 4096, 1024, [14] * 23 + [0], 768, 6, 32, 6)
# The masked form's narrow pair (dispatch.pair_narrow_mid_batch; grouped v57): hinted 10 rows on
# 12 experts, K 4096, the 16-row mma tile first and the 256 x 24 tile loop second. On 11 experts
# of 10 rows and an empty one (11 tiles of 16 rows against 11 of 24: 110 < 121) the mma tile
# runs; on experts of 0, 5, 20 and 24 rows beside eight of 10 (13 against 11: 130 > 121) the loop.
grouped_case("grouped narrow pair, mma runs", 4096, 4096, [10] * 11 + [0], 384, 10, 32, 10)
grouped_case("grouped narrow pair, loop runs", 4096, 4096, [10] * 8 + [0, 5, 20, 24], 384, 10, 32, 10)

if "grouped" not in ONLY and set(GROUPED_MATCH) - GROUPED_RAN:
    sys.exit(f"gpu_sanitize_case.py: no grouped case label holds {sorted(set(GROUPED_MATCH) - GROUPED_RAN)}")
