"""One indexed call per case, for Nsight Compute: python scripts/profile_indexed.py [case ...]

Cases are Kimi EP8 shapes at a decode and a mid-batch point (routing as in the benchmark:
8·T tokens top-8 over 384 experts, the 48 local ones kept). Run under
  ncu --clock-control none -k regex:chord_indexed --section SpeedOfLight ... python3 scripts/profile_indexed.py
"""

import sys

import torch
from chord_kernels import dispatch, indexed, layouts, routing

CASES = {  # name: (N, K, top_k as the kernel sees it, T, local experts)
    "ep8_gate_up_T8": (4096, 7168, 8, 8, 48),
    "ep8_gate_up_T128": (4096, 7168, 8, 128, 48),  # mid batch: 32-row blocks
    "ep8_gate_up_T512": (4096, 7168, 8, 512, 48),
    "ep8_gate_up_T2048": (4096, 7168, 8, 2048, 48),  # the wgmma prefill tile
    "ep8_gate_up_T8192": (4096, 7168, 8, 8192, 48),
    "ep8_down_T8": (7168, 2048, 1, 8, 48),
    "tp8_gate_up_T128": (512, 7168, 8, 128, 384),  # TP8: T tokens, every expert local
    "tp8_down_T128": (7168, 256, 1, 128, 384),
}


def run(name: str) -> None:
    n, k, top_k, t, local = CASES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 16, (local, n, k), generator=g, device="cuda", dtype=torch.uint8)
    scale = (torch.rand(local, n, k // 32, generator=g, device="cuda") * 0.02 + 1e-3).to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, "indexed")
    del codes
    tokens = 8 * t if local < 384 else t  # EP8: 8·T tokens over all ranks, the local pairs kept
    topk = torch.rand(tokens, 384, generator=g, device="cuda").topk(8).indices.to(torch.int32)
    expert_map = torch.full((384,), -1, dtype=torch.int32, device="cuda")
    expert_map[:local] = torch.arange(local, dtype=torch.int32, device="cuda")
    m = tokens if top_k == 8 else tokens * 8
    a = torch.randn(m, k, generator=g, device="cuda").to(torch.bfloat16)
    block_m = dispatch.indexed_block_m(-(-tokens * 8 * local // 384), local, n, k)
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk, block_m, 384, expert_map)
    out = indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m)  # compile + load
    torch.cuda.synchronize()
    indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m, out)
    torch.cuda.synchronize()
    print(name, "block_m", block_m, "done")


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        run(case)
