"""INT4 bit-level primitives shared by the packer, the layouts and the reference.

Kimi K2.x stores each routed-expert matrix in compressed-tensors ``pack-quantized``
form: unsigned nibbles ``u = q + 8`` (offset binary, 0..15), eight per int32 word
along K, element ``i`` of a row at bits ``[4*(i%8), 4*(i%8)+4)`` of word ``i//8``,
and one BF16 scale per 32 consecutive K elements. The value of a weight is
``(u - 8) * scale`` rounded once to BF16 (see shared/reference/kimi_k2_format.md §4).
"""

from __future__ import annotations

import torch

GROUP_SIZE = 32  # input channels per BF16 scale; the only group size Chord kernels implement
CODES_PER_WORD = 8
CODE_OFFSET = 8  # offset-binary zero point of the symmetric scheme

_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)


def pack_codes_along_k(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes ``[..., K]`` (values 0..15) -> int32 words ``[..., K/8]`` (compressed-tensors order)."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8 nibbles, got {codes.dtype}")
    k = codes.shape[-1]
    if k % CODES_PER_WORD:
        raise ValueError(f"K={k} is not a multiple of {CODES_PER_WORD}")
    nib = codes.reshape(*codes.shape[:-1], k // CODES_PER_WORD, CODES_PER_WORD).to(torch.int32)
    return _or_nibbles(nib)


def unpack_codes_along_k(packed: torch.Tensor) -> torch.Tensor:
    """int32 words ``[..., K/8]`` -> uint8 codes ``[..., K]``; inverse of :func:`pack_codes_along_k`."""
    if packed.dtype != torch.int32:
        raise TypeError(f"packed weights must be int32 words, got {packed.dtype}")
    nib = _split_nibbles(packed)
    return nib.reshape(*packed.shape[:-1], packed.shape[-1] * CODES_PER_WORD)


def _or_nibbles(nib: torch.Tensor) -> torch.Tensor:
    """int32 ``[..., 8]`` nibbles -> int32 ``[...]``: nibble j goes to bits 4j..4j+3 (int32 wraps).

    Works on the little-endian bytes: nibble pairs merge into one byte each, four bytes are a word.
    """
    pairs = (nib & 0xF).to(torch.uint8).contiguous().view(torch.int16)  # [..., 4]: lo | hi << 8
    packed = ((pairs | (pairs >> 4)) & 0xFF).to(torch.uint8)  # [..., 4] bytes
    return packed.contiguous().view(torch.int32)[..., 0]


def _split_nibbles(words: torch.Tensor) -> torch.Tensor:
    """int32 ``[...]`` -> uint8 ``[..., 8]``: nibble j is bits 4j..4j+3."""
    b = words.contiguous().reshape(-1).view(torch.uint8).reshape(*words.shape, 4).to(torch.int16)
    pairs = (b | (b << 4)) & 0x0F0F  # per byte: low nibble in the low byte, high nibble in the high byte
    return pairs.view(torch.uint8).reshape(*words.shape, 8)


def dequantize_codes(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """uint8 codes ``[..., N, K]`` and BF16 scales ``[..., N, K/32]`` -> BF16 ``[..., N, K]``.

    ``(u - 8) * s`` is exact in fp32 (a 4-bit integer times an 8-bit mantissa), so
    rounding it once to BF16 gives the same bits as compressed-tensors' decompress.
    """
    check_scale_shape(codes.shape, scale)
    q = codes.to(torch.float32) - CODE_OFFSET
    s = scale.to(torch.float32).repeat_interleave(GROUP_SIZE, dim=-1)
    return (q * s).to(torch.bfloat16)


def dequantize_packed(weight_packed: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """compressed-tensors ``weight_packed`` int32 ``[..., N, K/8]`` + ``weight_scale`` -> BF16."""
    return dequantize_codes(unpack_codes_along_k(weight_packed), weight_scale)


def check_scale_shape(code_shape: torch.Size | tuple, scale: torch.Tensor) -> None:
    *lead, k = code_shape
    if k % GROUP_SIZE:
        raise ValueError(f"K={k} is not a multiple of the group size {GROUP_SIZE}")
    want = (*lead, k // GROUP_SIZE)
    if tuple(scale.shape) != want:
        raise ValueError(f"scale has shape {tuple(scale.shape)}, expected {want} for weights of shape {tuple(code_shape)}")
    if scale.dtype != torch.bfloat16:
        raise TypeError(f"scale must be bfloat16, got {scale.dtype}")
