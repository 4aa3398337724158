"""The seed's packing API: ``from chord_kernels.operator import pack_w4a16_grouped``."""

from __future__ import annotations

import torch

from .layouts import GROUPED_MODES, PackedW4A16, check_mode, pack_w4a16, unpack_w4a16


def pack_w4a16_grouped(weight: torch.Tensor, scale: torch.Tensor, mode: str = "contiguous") -> PackedW4A16:
    """weight: unsigned INT4 codes [G, N, K] (uint8 0..15); scale: BF16 [G, N, K/32].

    ``mode="contiguous"`` packs for the grouped prefill kernel (BLOCK_K 64),
    ``mode="masked"`` for the grouped decode kernel (BLOCK_K 128).
    """
    check_mode(mode, GROUPED_MODES)
    return pack_w4a16(weight, scale, mode)


def pack_w4a16_indexed(weight: torch.Tensor, scale: torch.Tensor) -> PackedW4A16:
    """Pack for the indexed family (vLLM ``moe_align_block_size`` routing); one weight serves all batches."""
    return pack_w4a16(weight, scale, "indexed")


__all__ = ["pack_w4a16_grouped", "pack_w4a16_indexed", "unpack_w4a16"]
