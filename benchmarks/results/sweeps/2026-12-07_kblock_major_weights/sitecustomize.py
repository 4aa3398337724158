"""Experiment hooks (not part of Chord), active with this folder on PYTHONPATH; each swaps
``chord_kernels.tma.tensor_maps`` so the wgmma tile's TMA reads a re-ordered copy of the packed weight.

CHORD_EXP_KBLOCK_MAJOR=1: the weight map reads a K-block-major copy of qweight. The packed layout is
[E, N/16, K/64, 512 bytes]: one stage's box gathers rows/16 pieces of 512 bytes, each another
n-tile's, 57 KB apart (K=7168). The copy is [E, K/64, N/16, 512 bytes], so the box is rows/16 * 512
contiguous bytes. The map keeps its dims (words, K block, n-tile, expert) and only its strides
change: the kernel, its coordinates and its shared-memory bytes are the same, and only the DRAM/L2
access order moves. (BLOCK_K 64 weights only.)

CHORD_EXP_SCALE_PAIRS=1 (with the scale_pairs.diff tree's kernels, which read a 4-byte pair): the
scale map reads a copy whose 16-row blocks hold rows r and r + 8 side by side.

CHORD_EXP_L2_PROMOTION_NONE=1: every tensor map without the 256-byte L2 promotion (Humming's weight
maps use none), the weights in their packed order.

Copies are made once per packed weight; the originals stay referenced, so their addresses are not
reused while a copy is cached.
"""

import os

_KMAJ = os.environ.get("CHORD_EXP_KBLOCK_MAJOR") == "1"
_PAIRS = os.environ.get("CHORD_EXP_SCALE_PAIRS") == "1"
_PROMO_NONE = os.environ.get("CHORD_EXP_L2_PROMOTION_NONE") == "1"

if _KMAJ or _PAIRS or _PROMO_NONE:
    import chord_kernels.tma as tma

if _PROMO_NONE:
    tma.L2_PROMOTION_256B = 0  # CU_TENSOR_MAP_L2_PROMOTION_NONE, read by tma.encode at each call

if _KMAJ or _PAIRS:
    _cache = {}

    def _weight_map(packed, rows, stage_boxes):
        qw = packed.qweight
        e, nt, kb = qw.shape[:3]
        if not _KMAJ or packed.block_k != tma.STAGE_K or stage_boxes:
            return tma.encode(tma.weight_map_geometry(e, packed.n, packed.k, rows, packed.block_k, stage_boxes),
                              qw.data_ptr()), None
        copy = qw.reshape(e, nt, kb, -1).transpose(1, 2).contiguous()  # [E, K/64, N/16, 128 words]
        piece = copy.shape[-1] * 4  # 512 bytes: one n-tile's K block
        geo = tma.MapGeometry(tma.DTYPE_INT32, (copy.shape[-1], kb, nt, e), (piece * nt, piece, piece * nt * kb),
                              (copy.shape[-1], 1, rows // tma.TILE, 1))
        return tma.encode(geo, copy.data_ptr()), copy

    def _scale_map(packed, rows):
        sc = packed.scale  # [E, K/32, N]
        e, g, n = sc.shape
        copy = sc.reshape(e, g, n // 16, 2, 8).transpose(3, 4).contiguous() if _PAIRS else None  # row i + 8h at 2i + h
        return tma.encode(tma.scale_map_geometry(e, n, packed.k, rows), (sc if copy is None else copy).data_ptr()), copy

    def _tensor_maps(packed, rows, stage_boxes=False):
        qw, sc = packed.qweight, packed.scale
        key = (qw.data_ptr(), tuple(qw.shape), sc.data_ptr(), rows, stage_boxes)
        hit = _cache.get(key)
        if hit is None:
            wmap, wcopy = _weight_map(packed, rows, stage_boxes)
            smap, scopy = _scale_map(packed, rows)
            hit = _cache[key] = (wmap + smap, wcopy, scopy, qw, sc)
            print(f"[experiment] maps for qweight {tuple(qw.shape)}, {rows}-row tiles: k-block-major "
                  f"{wcopy is not None}, scale pairs {scopy is not None}", flush=True)
        return hit[0]

    tma.tensor_maps = _tensor_maps
