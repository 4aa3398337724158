"""Pure-PyTorch reference math: the numerics every Chord kernel is checked against.

Weights are dequantized exactly as compressed-tensors decompresses them (BF16 of
``(u - 8) * scale``); the GEMMs accumulate in fp32 and round the output once to BF16.
These run on any device and are deliberately simple, not fast.
"""

from __future__ import annotations

import torch

from .int4 import dequantize_codes, dequantize_packed
from .layouts import PackedW4A16, unpack_w4a16

__all__ = [
    "dequantize_codes",
    "dequantize_packed",
    "dequantize_w4a16",
    "moe_contiguous_reference",
    "moe_indexed_reference",
    "moe_masked_reference",
]


def dequantize_w4a16(packed: PackedW4A16) -> torch.Tensor:
    """A packed weight of any mode -> BF16 [E, N, K]."""
    codes, scale = unpack_w4a16(packed)
    return dequantize_codes(codes, scale)


def _expert_matmul(a_rows: torch.Tensor, w: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """fp32 ``a_rows[i] @ w[experts[i]]^T`` for each row, grouped by expert; returns fp32 [rows, N]."""
    out = torch.zeros(a_rows.shape[0], w.shape[1], dtype=torch.float32, device=a_rows.device)
    for e in torch.unique(experts).tolist():
        sel = experts == e
        out[sel] = a_rows[sel].float() @ w[e].float().t()
    return out


def moe_indexed_reference(a: torch.Tensor, w: torch.Tensor, sorted_ids: torch.Tensor,
                          expert_ids: torch.Tensor, num_tokens_padded: torch.Tensor | int,
                          top_k: int, block_m: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """vLLM indexed semantics: for each valid route r in ``sorted_ids[:num_tokens_padded]``,
    ``out[r] = a[r // top_k] @ w[expert_ids[block]]^T``. Rows of routes not listed are left
    as they were in ``out`` (a fresh ``out`` starts as zeros). ``a`` [M, K]; out [M*top_k, N].
    """
    m = a.shape[0]
    num_routes = m * top_k
    if out is None:
        out = torch.zeros(num_routes, w.shape[1], dtype=torch.bfloat16, device=a.device)
    used = int(num_tokens_padded) if not torch.is_tensor(num_tokens_padded) else int(num_tokens_padded.reshape(-1)[0])
    ids = sorted_ids[:used].long()
    experts = expert_ids[: used // block_m].long().repeat_interleave(block_m)[: ids.numel()]
    valid = ids < num_routes
    ids, experts = ids[valid], experts[valid]
    out[ids] = _expert_matmul(a[ids // top_k], w, experts).to(out.dtype)
    return out


def moe_contiguous_reference(a: torch.Tensor, w: torch.Tensor, m_indices: torch.Tensor) -> torch.Tensor:
    """Rows grouped by expert: ``out[i] = a[i] @ w[m_indices[i]]^T``; rows with -1 are zero."""
    out = torch.zeros(a.shape[0], w.shape[1], dtype=torch.bfloat16, device=a.device)
    valid = m_indices >= 0
    out[valid] = _expert_matmul(a[valid], w, m_indices[valid].long()).to(torch.bfloat16)
    return out


def moe_masked_reference(a: torch.Tensor, w: torch.Tensor, masked_m: torch.Tensor) -> torch.Tensor:
    """``a`` [G, max_m, K] (or flat [G*max_m, K]); rows ``i < masked_m[g]`` of group g get
    ``a[g, i] @ w[g]^T``; the rest are zero. Returns the flat [G*max_m, N]."""
    g = w.shape[0]
    a3 = a.reshape(g, -1, a.shape[-1])
    max_m = a3.shape[1]
    rows = torch.arange(max_m, device=a.device).expand(g, max_m)
    experts = torch.arange(g, device=a.device)[:, None].expand(g, max_m)
    valid = rows < masked_m.to(a.device)[:, None].long()
    flat = torch.zeros(g * max_m, w.shape[1], dtype=torch.bfloat16, device=a.device)
    flat[valid.reshape(-1)] = _expert_matmul(a3[valid], w, experts[valid]).to(torch.bfloat16)
    return flat
