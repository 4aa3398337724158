"""Experiment hook (not part of Chord): with CHORD_EXP_KBLOCK_MAJOR=1 and this folder on PYTHONPATH,
the wgmma tile's weight tensor map reads a K-block-major copy of the packed qweight.

The packed layout is [E, N/16, K/64, 512 bytes]: one stage's box gathers rows/16 pieces of 512 bytes,
each from another n-tile 57 KB apart (K=7168). The copy is [E, K/64, N/16, 512 bytes], so the same
box is rows/16 * 512 contiguous bytes. The map keeps its dims (words, K block, n-tile, expert) and
only its strides change, so the kernel, its coordinates and its shared-memory bytes are the same:
whatever moves is the DRAM/L2 access order alone. The copy is made once per packed weight (and the
original kept referenced, so its address is not reused while the copy is cached).
"""

import os

if os.environ.get("CHORD_EXP_KBLOCK_MAJOR") == "1":
    import chord_kernels.tma as tma

    _orig_tensor_maps = tma.tensor_maps
    _cache = {}

    def _kblock_major_maps(packed, rows, stage_boxes=False):
        if packed.block_k != tma.STAGE_K or stage_boxes:
            return _orig_tensor_maps(packed, rows, stage_boxes)
        qw, sc = packed.qweight, packed.scale
        key = (qw.data_ptr(), tuple(qw.shape), sc.data_ptr(), rows)
        hit = _cache.get(key)
        if hit is None:
            e, nt, kb = qw.shape[:3]
            copy = qw.reshape(e, nt, kb, -1).transpose(1, 2).contiguous()  # [E, K/64, N/16, 128 words]
            piece = copy.shape[-1] * 4  # 512 bytes: one n-tile's K block
            geo = tma.MapGeometry(tma.DTYPE_INT32, (copy.shape[-1], kb, nt, e),
                                  (piece * nt, piece, piece * nt * kb), (copy.shape[-1], 1, rows // tma.TILE, 1))
            maps = tma.encode(geo, copy.data_ptr()) + tma.encode(
                tma.scale_map_geometry(e, packed.n, packed.k, rows), sc.data_ptr())
            hit = _cache[key] = (maps, copy, qw, sc)
            print(f"[kblock-major] copy of qweight {tuple(qw.shape)} for {rows}-row tiles", flush=True)
        return hit[0]

    tma.tensor_maps = _kblock_major_maps
