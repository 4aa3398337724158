"""Random W4A16 MoE problems for the GPU tests: Kimi-shaped weights, vLLM-style routing."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from chord_kernels import layouts, routing
from chord_kernels.int4 import GROUP_SIZE, dequantize_codes

# (name, global experts, local experts, N, K, top_k semantics): gate_up reads a[r // 8], down a[r]
KIMI_SHAPES = {
    "ep8_gate_up": (384, 48, 4096, 7168, 8),
    "ep8_down": (384, 48, 7168, 2048, 1),
    "tp8_gate_up": (384, 384, 512, 7168, 8),
    "tp8_down": (384, 384, 7168, 256, 1),
}


@dataclass
class Problem:
    a: torch.Tensor  # [M, K] bf16
    codes: torch.Tensor  # [E, N, K] uint8
    scale: torch.Tensor  # [E, N, K/32] bf16
    packed: layouts.PackedW4A16
    topk_ids: torch.Tensor  # [tokens, 8] global expert ids
    expert_map: torch.Tensor | None
    top_k: int  # top_k as the kernel sees it (8 for gate_up, 1 for down)



def popularity(num_experts: int, skew: bool, g: torch.Generator) -> torch.Tensor:
    if not skew:
        return torch.ones(num_experts)
    # Gamma(1, 1) = Exponential(1): coefficient of variation 1.0 (the benchmark's skewed router).
    return (-torch.log(torch.rand(num_experts, generator=g))).clamp_min(1e-3)


def route(tokens: int, num_experts: int, skew: bool, g: torch.Generator, top_k: int = 8) -> torch.Tensor:
    p = popularity(num_experts, skew, g)
    return torch.multinomial(p.expand(tokens, -1), top_k, replacement=False, generator=g).to(torch.int32)


@functools.lru_cache(maxsize=2)
def expert_weights(shape: str, exact: bool, device: str = "cuda"):
    """Codes, scales, packed weight and dequantized fp32 weight of one Kimi shape (cached: big)."""
    _, local_e, n, k, _ = KIMI_SHAPES[shape]
    g = torch.Generator(device=device).manual_seed(1234)
    codes = torch.randint(0, 16, (local_e, n, k), generator=g, device=device, dtype=torch.uint8)
    if exact:  # power-of-two scales: with small integer activations every sum is exact in fp32
        scale = torch.pow(2.0, torch.randint(-8, -4, (local_e, n, k // GROUP_SIZE), generator=g, device=device).float())
    else:
        scale = torch.rand(local_e, n, k // GROUP_SIZE, generator=g, device=device) * 0.02 + 1e-3
    scale = scale.to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, "indexed")
    return codes, scale, packed


def make_problem(shape: str, tokens: int, *, skew=False, exact=False, seed=0, device="cuda") -> Problem:
    g = torch.Generator().manual_seed(seed)
    global_e, local_e, n, k, top_k = KIMI_SHAPES[shape]
    topk_ids = route(tokens, global_e, skew, g)
    expert_map = None
    if local_e != global_e:  # EP8 rank 0: experts 0..47 are local
        expert_map = torch.full((global_e,), -1, dtype=torch.int32)
        expert_map[:local_e] = torch.arange(local_e, dtype=torch.int32)
    m = tokens if top_k == 8 else tokens * 8  # down reads one activation row per route
    if exact:
        a = torch.randint(-3, 4, (m, k), generator=g).to(torch.bfloat16)
    else:
        a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    codes, scale, packed = expert_weights(shape, exact, device)
    return Problem(a.to(device), codes, scale, packed, topk_ids.to(device),
                   None if expert_map is None else expert_map.to(device), top_k)


def align(problem: Problem, block_m: int, garbage_tail=True, seed=1):
    """vLLM moe_align_block_size outputs, with the tails past the count filled with garbage."""
    ids = problem.topk_ids if problem.top_k == 8 else problem.topk_ids  # routes are token*8+k either way
    num_experts = ids.max().item() + 1 if problem.expert_map is None else problem.expert_map.numel()
    num_experts = max(num_experts, problem.packed.num_experts)
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(ids, block_m, num_experts, problem.expert_map)
    if garbage_tail:
        g = torch.Generator(device=sorted_ids.device).manual_seed(seed)
        used = ntp.item()
        num_routes = ids.numel()
        tail = sorted_ids[used:]
        tail.copy_(torch.randint(-5, num_routes + 5, tail.shape, generator=g, device=tail.device, dtype=torch.int32))
        etail = expert_ids[-(-used // block_m):]
        etail.copy_(torch.randint(-3, 1000, etail.shape, generator=g, device=etail.device, dtype=torch.int32))
    return sorted_ids, expert_ids, ntp


def reference_fp32(problem: Problem, sorted_ids, expert_ids, ntp, block_m) -> dict[int, torch.Tensor]:
    """{route: fp32 output row} for every route listed before the count."""
    used = int(ntp.item())
    ids = sorted_ids[:used].long().cpu()
    experts = expert_ids[: used // block_m].long().cpu().repeat_interleave(block_m)
    num_routes = problem.a.shape[0] * problem.top_k
    keep = ids < num_routes
    ids, experts = ids[keep], experts[keep]
    a = problem.a.float()
    out = torch.empty(ids.numel(), problem.packed.n, device=a.device)
    for e in experts.unique().tolist():
        sel = experts == e
        w = dequantize_codes(problem.codes[e], problem.scale[e]).float()  # one expert at a time
        out[sel.to(a.device)] = a[(ids[sel] // problem.top_k).to(a.device)] @ w.t()
    return ids.to(a.device), out
