"""The one definition of Chord's packed W4A16 weight layouts (packer and runtime both call this).

Every mode stores the same fragment-tiled INT4 format and differs only in BLOCK_K:

=============  =========  ==========================================================
mode           BLOCK_K    consumer
=============  =========  ==========================================================
``indexed``    64         vLLM ``moe_align_block_size`` routing (TP and EP, all batches)
``contiguous`` 64         grouped prefill, rows grouped per expert (``m_indices``/offsets)
``masked``     128        grouped decode, fixed per-expert row budget (``masked_m``)
=============  =========  ==========================================================

Format v1 (``FORMAT_VERSION``). A weight ``W[e, n, k]`` (``N x K`` per expert, y = x W^T)
is cut into 16-row x 16-column tiles; each tile is exactly one MMA A-operand fragment
(``mma.m16n8k16`` / a warp's slice of ``wgmma m64nNk16``): lane ``l`` owns rows
``g = l // 4`` and ``g + 8`` and columns ``c = 2 * (l % 4) + {0, 1}`` and ``c + 8 + {0, 1}``,
eight codes = one int32 word. Inside the word the nibble order is
``[e0, e2, e4, e6, e1, e3, e5, e7]`` for fragment elements
``e = (a0.x, a0.y, a1.x, a1.y, a2.x, a2.y, a3.x, a3.y)``, so ``(w >> 4r) & 0x000F000F``
yields the BF16 pair of register ``a_r`` in one mask (the magic-number conversion).
A lane's words for the ``BLOCK_K / 16`` tiles of one K block are adjacent, so one
16-byte load (BLOCK_K 64) or two (BLOCK_K 128) fetch a lane's whole block:

    qweight int32 [E, N/16, K/BLOCK_K, 32 (lane), BLOCK_K/16 (k tile)]
    scale   bf16  [E, K/32, N]                       (N contiguous)

Slicing rules this keeps valid: whole experts (dim 0, EP); N in multiples of 16 (dim 1 of
qweight, dim 2 of scale: TP slices of gate/up); K in multiples of BLOCK_K (dim 2 of
qweight, dim 1 of scale: TP slices of down: K=2048 gives 256 per TP8 rank, 128 per TP16).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .int4 import GROUP_SIZE, check_scale_shape

FORMAT_VERSION = 1
TILE = 16
LANES = 32
BLOCK_K_BY_MODE = {"indexed": 64, "contiguous": 64, "masked": 128}
MODES = tuple(BLOCK_K_BY_MODE)
GROUPED_MODES = ("contiguous", "masked")


@dataclass(frozen=True)
class PackedW4A16:
    """A packed expert weight; the mode it was packed for travels with it."""

    mode: str
    qweight: torch.Tensor  # int32 [E, N/16, K/BLOCK_K, 32, BLOCK_K/16]
    scale: torch.Tensor  # bf16 [E, K/32, N]
    block_k: int
    format_version: int = FORMAT_VERSION

    @property
    def num_experts(self) -> int:
        return self.qweight.shape[0]

    @property
    def n(self) -> int:
        return self.qweight.shape[1] * TILE

    @property
    def k(self) -> int:
        return self.qweight.shape[2] * self.block_k

    @property
    def device(self) -> torch.device:
        return self.qweight.device

    def to(self, device) -> PackedW4A16:
        return replace(self, qweight=self.qweight.to(device), scale=self.scale.to(device))

    def check(self) -> None:
        """Raise a clear error if the tensors disagree with the recorded mode and format."""
        check_packed(self.mode, self.qweight, self.scale, self.block_k, self.format_version)


def check_mode(mode: str, allowed: tuple[str, ...] = MODES) -> None:
    if mode not in allowed:
        raise ValueError(f"unknown packing mode {mode!r}; expected one of {', '.join(allowed)}")


def check_packed(mode: str, qweight: torch.Tensor, scale: torch.Tensor, block_k: int,
                 format_version: int) -> None:
    check_mode(mode)
    if format_version != FORMAT_VERSION:
        raise ValueError(f"packed weight has format version {format_version}; this Chord reads {FORMAT_VERSION}")
    if block_k != BLOCK_K_BY_MODE[mode]:
        raise ValueError(f"mode {mode!r} uses BLOCK_K {BLOCK_K_BY_MODE[mode]}, the weight records {block_k}")
    if qweight.dtype != torch.int32:
        raise TypeError(f"qweight must be int32, got {qweight.dtype}")
    if qweight.dim() != 5 or qweight.shape[3] != LANES or qweight.shape[4] != block_k // TILE:
        raise ValueError(f"qweight has shape {tuple(qweight.shape)}; expected [E, N/16, K/{block_k}, 32, {block_k // TILE}]")
    e, n, k = qweight.shape[0], qweight.shape[1] * TILE, qweight.shape[2] * block_k
    check_problem_dims(n, k, block_k)
    if scale.dtype != torch.bfloat16 or tuple(scale.shape) != (e, k // GROUP_SIZE, n):
        raise ValueError(f"scale has shape {tuple(scale.shape)} and dtype {scale.dtype}; expected bf16 {(e, k // GROUP_SIZE, n)}")


# The kernels index one expert's scales (and a stage's weight offsets) in int32.
MAX_SCALES_PER_EXPERT = 2**31 - 1


def check_problem_dims(n: int, k: int, block_k: int) -> None:
    if n % TILE:
        raise ValueError(f"N={n} must be a multiple of {TILE}")
    if k % block_k:
        raise ValueError(f"K={k} must be a multiple of BLOCK_K={block_k}")
    if n * (k // GROUP_SIZE) > MAX_SCALES_PER_EXPERT:
        raise ValueError(f"N={n}, K={k}: {n * (k // GROUP_SIZE)} scales per expert, over 2^31 - 1: not supported")


# Index arithmetic, written once: a code tensor viewed as
#   [E, N/16, rh, g, K/BK, kt, ch, cq, cl]   (n = 16*nt + 8*rh + g, k = BK*kb + 16*kt + 8*ch + 2*cq + cl)
# maps to words [E, nt, kb, lane = 4*g + cq, kt] with nibble j = 4*cl + 2*ch + rh.
_CODES_TO_WORDS = (0, 1, 4, 3, 7, 5, 8, 6, 2)


def _code_view_shape(e: int, n: int, k: int, block_k: int) -> tuple[int, ...]:
    return (e, n // TILE, 2, 8, k // block_k, block_k // TILE, 2, 4, 2)


# Byte masks for the 64-bit shuffles below (all fit a signed int64).
_M4 = 0x0F0F0F0F0F0F0F0F
_M8 = 0x00FF00FF00FF00FF
_M16 = 0x0000FFFF0000FFFF
_M32 = 0xFFFFFFFF


def _spread_bytes(x: torch.Tensor) -> torch.Tensor:
    """int64 holding 4 bytes in its low half -> the same bytes at byte positions 0, 2, 4, 6."""
    x = (x | (x << 16)) & _M16
    return (x | (x << 8)) & _M8


def _gather_bytes(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_spread_bytes` (bytes 0, 2, 4, 6 -> bytes 0..3)."""
    x = (x | (x >> 8)) & _M16
    return (x | (x >> 16)) & _M32


def tile_codes(codes: torch.Tensor, block_k: int) -> torch.Tensor:
    """uint8 codes [E, N, K] -> int32 qweight [E, N/16, K/BK, 32, BK/16] (format v1).

    The same map as :data:`_CODES_TO_WORDS` (nibble ``4*cl + 2*ch + rh`` of word
    ``[e, nt, kb, 4*g + cq, kt]``), computed on 64-bit lanes of the little-endian bytes instead
    of a 9-d permute of int32 nibbles: (1) rows ``g`` and ``g + 8`` of a 16-row tile merge into
    one byte per column (low nibble ``rh = 0``); an int64 then holds the 8 bytes
    ``(cq, cl)`` of one ``(kb, kt, ch)``; (2) interleaving the bytes of the ``ch = 0`` and
    ``ch = 1`` int64s gives each word's bytes in order ``2*cl + ch``; (3) one int32 permute puts
    the words in ``[kb, lane, kt]`` order. Bit-identical to the nibble formulation (tested).
    """
    if codes.dtype != torch.uint8 or codes.dim() != 3:
        raise TypeError(f"codes must be uint8 [E, N, K], got {codes.dtype} {tuple(codes.shape)}")
    e, n, k = codes.shape
    check_problem_dims(n, k, block_k)
    nt, kb, kt = n // TILE, k // block_k, block_k // TILE
    codes = codes.contiguous()
    if codes.storage_offset() % 8:
        codes = codes.clone()
    v = codes.view(torch.int64).reshape(e, nt, 2, 8, k // 8)  # [E, nt, rh, g, k/8]
    pair = ((v[:, :, 0] & _M4) | ((v[:, :, 1] & _M4) << 4)).reshape(e, nt, 8, kb, kt, 2)
    lo, hi = pair[..., 0], pair[..., 1]  # ch = 0, 1; bytes (cq, cl)
    w = torch.empty(e, nt, 8, kb, kt, 2, dtype=torch.int64, device=codes.device)
    w[..., 0] = _spread_bytes(lo & _M32) | (_spread_bytes(hi & _M32) << 8)  # cq 0, 1
    w[..., 1] = _spread_bytes((lo >> 32) & _M32) | (_spread_bytes((hi >> 32) & _M32) << 8)  # cq 2, 3
    words = w.view(torch.int32).reshape(e, nt, 8, kb, kt, 4)  # [E, nt, g, kb, kt, cq]
    return words.permute(0, 1, 3, 2, 5, 4).reshape(e, nt, kb, LANES, kt)


def untile_codes(qweight: torch.Tensor, block_k: int) -> torch.Tensor:
    """Inverse of :func:`tile_codes` (the same byte shuffles, run backwards)."""
    e, nt, kb = qweight.shape[:3]
    n, k, kt = nt * TILE, kb * block_k, block_k // TILE
    w = qweight.reshape(e, nt, kb, 8, 4, kt).permute(0, 1, 3, 2, 5, 4).contiguous()
    w = w.view(torch.int64)  # [E, nt, g, kb, kt, cq pair]
    c01, c23 = w[..., 0], w[..., 1]
    pair = torch.empty(e, nt, 8, kb, kt, 2, dtype=torch.int64, device=qweight.device)
    pair[..., 0] = _gather_bytes(c01 & _M8) | (_gather_bytes(c23 & _M8) << 32)
    pair[..., 1] = _gather_bytes((c01 >> 8) & _M8) | (_gather_bytes((c23 >> 8) & _M8) << 32)
    pair = pair.reshape(e, nt, 8, k // 8)
    out = torch.empty(e, nt, 2, 8, k // 8, dtype=torch.int64, device=qweight.device)
    torch.bitwise_and(pair, _M4, out=out[:, :, 0])
    torch.bitwise_and(pair >> 4, _M4, out=out[:, :, 1])
    return out.view(torch.uint8).reshape(e, n, k)


def pack_w4a16(codes: torch.Tensor, scale: torch.Tensor, mode: str) -> PackedW4A16:
    """Pack unsigned INT4 codes [G, N, K] (uint8, 0..15) and BF16 scales [G, N, K/32]."""
    check_mode(mode)
    check_scale_shape(codes.shape, scale)
    block_k = BLOCK_K_BY_MODE[mode]
    qweight = tile_codes(codes, block_k)
    return PackedW4A16(mode=mode, qweight=qweight, scale=scale.transpose(-1, -2).contiguous(),
                       block_k=block_k)


def unpack_w4a16(packed: PackedW4A16) -> tuple[torch.Tensor, torch.Tensor]:
    """Give back (uint8 codes [G, N, K], BF16 scales [G, N, K/32]) bit-exactly."""
    packed.check()
    return untile_codes(packed.qweight, packed.block_k), packed.scale.transpose(-1, -2).contiguous()
