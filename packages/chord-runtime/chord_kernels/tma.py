"""Tensor maps of a packed weight for the wgmma tile's TMA producer (csrc/common/tma_sm90.cuh).

The wgmma tile loads its weights as one box a packed K block (a stage at BLOCK_K 64, a stage pair
at BLOCK_K 128) or, for BLOCK_K-128 stage boxes (``dispatch.Launch.stage_boxes``), one box a
stage, and its scales as one box a stage. The geometry is a pure function of the weight's shape
and the tile's rows (:func:`weight_map_geometry`,
:func:`scale_map_geometry`, CPU-tested); encoding needs the driver (``cuTensorMapEncodeTiled``
through the launcher) and happens once per (weight tensors, rows): :func:`tensor_maps` memoizes the
256 bytes a launch appends to its parameters.

- Weights, int32 ``[E, N/16, K/BLOCK_K, 32 lanes x BLOCK_K/16 words]``: a 4-D map, dims (innermost
  first) ``{2 BLOCK_K, K/BLOCK_K, N/16, E}``; the box ``{2 BLOCK_K, 1, rows/16, 1}`` is one K block
  of the tile's ``rows / 16`` n-tiles, 512 (1024) contiguous bytes each, landing in shared memory
  n-tile after n-tile in memory order. BLOCK_K-128 stage boxes: a lane's 8 words hold its 4 of
  each of the block's two stages side by side, so a 5-D map ``{8 words, 32 lanes, K/128, N/16, E}``
  and the box ``{4, 32, 1, rows/16, 1}`` at word 4 (stage % 2) take one stage (16-byte rows): the
  same 512 bytes an n-tile in shared memory as at BLOCK_K 64 (:func:`weight_box_coords`). A tile
  crossing the end of N reads past ``N/16``: zero-filled.
- Scales, bf16 ``[E, K/32, N]``, as uint32 pairs (a box dim holds at most 256 elements and a tile
  has up to 512 rows): a 3-D map ``{N/2, K/32, E}``, box ``{rows/2, 2, 1}`` = the stage's two
  groups of the tile's rows, ``[2][rows]`` bf16 in shared memory as the tile reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .int4 import GROUP_SIZE
from .layouts import LANES, TILE, PackedW4A16

if TYPE_CHECKING:
    import torch

STAGE_K = 64  # K columns a ring stage of the wgmma tile (dispatch.WGMMA_STAGE_K): a scale box's two groups
STAGE_WORDS = STAGE_K * TILE // 2 // LANES // 4  # 4: a lane's int32 words of one n-tile's stage (16 bytes)
TMA_BLOCK_KS = (64, 128)  # the packed BLOCK_Ks a stage box reads (a lane's words a block: 16 or 32 bytes)
MAX_BOX = 256  # elements a box dimension holds (the TMA unit's limit)
# CUtensorMapDataType / CUtensorMapSwizzle / CUtensorMapL2promotion values (cuda.h)
DTYPE_UINT32, DTYPE_INT32, DTYPE_BFLOAT16 = 2, 3, 9
SWIZZLE_NONE, SWIZZLE_128B = 0, 3
L2_PROMOTION_256B = 3
ELEMENT_BYTES = {DTYPE_UINT32: 4, DTYPE_INT32: 4, DTYPE_BFLOAT16: 2}


@dataclass(frozen=True)
class MapGeometry:
    dtype: int
    dims: tuple[int, ...]  # innermost first
    strides: tuple[int, ...]  # bytes, of dims 1..
    box: tuple[int, ...]
    swizzle: int = SWIZZLE_NONE

    @property
    def box_bytes(self) -> int:
        n = ELEMENT_BYTES[self.dtype]
        for b in self.box:
            n *= b
        return n


def _check_rows(rows: int, n: int) -> None:
    if rows % TILE or not 0 < rows // 2 <= MAX_BOX:
        raise ValueError(f"a TMA tile covers 16-512 weight rows in multiples of 16, got {rows}")
    if n % TILE:
        raise ValueError(f"N={n} must be a multiple of {TILE}")


def _check_block_k(block_k: int, what: str) -> None:
    if block_k not in TMA_BLOCK_KS:
        raise ValueError(f"tensor maps are for BLOCK_K {' or '.join(map(str, TMA_BLOCK_KS))} weights, {what}")


def weight_map_geometry(num_experts: int, n: int, k: int, rows: int, block_k: int = 64,
                        stage_boxes: bool = False) -> MapGeometry:
    """qweight [E, N/16, K/BLOCK_K, 32, BLOCK_K/16] int32 as boxes of one K block of ``rows``
    weight rows, or with ``stage_boxes`` of one stage (the same at BLOCK_K 64)."""
    _check_rows(rows, n)
    _check_block_k(block_k, f"got {block_k}")
    if k % block_k:
        raise ValueError(f"K={k} must be a multiple of BLOCK_K={block_k}")
    block_bytes = 4 * LANES * block_k // TILE  # 512 (1024) bytes: one n-tile's K block
    blocks, n_tiles = k // block_k, n // TILE
    outer = (block_bytes, block_bytes * blocks, block_bytes * blocks * n_tiles)  # K block, n-tile, expert
    if block_k == STAGE_K or not stage_boxes:
        return MapGeometry(DTYPE_INT32, (block_bytes // 4, blocks, n_tiles, num_experts), outer,
                           (block_bytes // 4, 1, rows // TILE, 1))
    lane_words = block_k // TILE  # 8: a lane's words of one K block, STAGE_WORDS of each stage
    return MapGeometry(DTYPE_INT32, (lane_words, LANES, blocks, n_tiles, num_experts), (4 * lane_words,) + outer,
                       (STAGE_WORDS, LANES, 1, rows // TILE, 1))


def weight_box_coords(stage: int, n_tile0: int, expert: int, block_k: int = 64,
                      stage_boxes: bool = False) -> tuple[int, ...]:
    """Where the box holding stage ``stage`` of the tile starting at n-tile ``n_tile0`` sits in
    weight_map_geometry's map (innermost first): WgmmaTile::tma_weights' coordinates."""
    if block_k == STAGE_K or not stage_boxes:
        return (0, stage // (block_k // STAGE_K), n_tile0, expert)
    per_block = block_k // STAGE_K
    return ((stage % per_block) * STAGE_WORDS, 0, stage // per_block, n_tile0, expert)


def scale_map_geometry(num_experts: int, n: int, k: int, rows: int) -> MapGeometry:
    """scale [E, K/32, N] bf16 as uint32 pairs, boxes of one stage's two groups of ``rows`` rows."""
    _check_rows(rows, n)
    groups = k // GROUP_SIZE
    return MapGeometry(DTYPE_UINT32, (n // 2, groups, num_experts), (2 * n, 2 * n * groups),
                       (rows // 2, STAGE_K // GROUP_SIZE, 1))


def _check_tensors(packed: PackedW4A16) -> None:
    _check_block_k(packed.block_k, f"this one is packed with BLOCK_K {packed.block_k} (mode {packed.mode!r})")
    for name, t in (("qweight", packed.qweight), ("scale", packed.scale)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"packed {name} must be contiguous and 16-byte aligned for the TMA producer "
                             f"(strides {t.stride()}, address {t.data_ptr():#x})")


_maps: dict[tuple, bytes] = {}


def tensor_maps(packed: PackedW4A16, rows: int, stage_boxes: bool = False) -> bytes:
    """The weight map then the scale map (128 bytes each) for tiles of ``rows`` weight rows (one
    weight box a stage where ``stage_boxes``), encoded once per (tensors' addresses and shapes,
    rows, boxes): a map holds only those."""
    qw, sc = packed.qweight, packed.scale
    key = (qw.data_ptr(), sc.data_ptr(), qw.shape, rows, stage_boxes)
    maps = _maps.get(key)
    if maps is None:
        _check_tensors(packed)
        e, n, k = packed.num_experts, packed.n, packed.k
        maps = (encode(weight_map_geometry(e, n, k, rows, packed.block_k, stage_boxes), qw.data_ptr())
                + encode(scale_map_geometry(e, n, k, rows), sc.data_ptr()))
        _maps[key] = maps
    return maps


def encode(geo: MapGeometry, address: int) -> bytes:
    """The driver's 128-byte CUtensorMap for ``geo`` over the tensor at ``address``."""
    from . import _launcher  # the extension only where a launch needs it

    return _launcher.encode_tensor_map(geo.dtype, address, list(geo.dims), list(geo.strides), list(geo.box),
                                       L2_PROMOTION_256B, geo.swizzle)


def activation_map_geometry(rows: int, k: int, lda: int, box_rows: int) -> MapGeometry:
    """a [rows, K] bf16 with row stride ``lda`` (elements) as boxes of one 64-column stage of
    ``box_rows`` rows, 128-byte swizzled: in shared memory the K-major layout the wgmma tile's
    descriptors read (WgmmaTile::Smem::act, ``sw128_offset``). Rows past ``rows`` are zeros."""
    if k % STAGE_K:
        raise ValueError(f"K={k} must be a multiple of {STAGE_K} for activation boxes")
    if (lda * ELEMENT_BYTES[DTYPE_BFLOAT16]) % 16 or lda < k:
        raise ValueError(f"a's row stride ({lda} elements) must be at least K={k} and a multiple of 8 elements "
                         "(16 bytes) for the tile loop's activation boxes")
    if box_rows % 8 or not 0 < box_rows <= MAX_BOX:
        raise ValueError(f"an activation box covers 8-{MAX_BOX} rows in multiples of 8, got {box_rows}")
    return MapGeometry(DTYPE_BFLOAT16, (k, rows), (lda * ELEMENT_BYTES[DTYPE_BFLOAT16],), (STAGE_K, box_rows),
                       SWIZZLE_128B)


def activation_map(a: torch.Tensor, box_rows: int) -> bytes:
    """The map of the activations for boxes of ``box_rows`` rows (activation_map_geometry): ``a``
    [rows, K], or [G, max_m, K] read as [G*max_m, K] (the masked form's 3-D input, which the host
    passes only where it is a view of that). Encoded anew each time (no cache here): the launch
    plans keep the result by address (chord_kernels.ops._grouped_params)."""
    if a.data_ptr() % 16:
        raise ValueError(f"a must start 16-byte aligned for the tile loop's activation boxes "
                         f"(address {a.data_ptr():#x})")
    rows = a.shape[0] if a.dim() == 2 else a.shape[0] * a.shape[1]
    return encode(activation_map_geometry(rows, a.shape[-1], a.stride(-2), box_rows), a.data_ptr())
