"""One grouped call per case, for Nsight Compute: python scripts/profile_grouped.py [case ...]

The same decode routing (EP8, 48 local experts, uniform counts) through the vLLM contiguous form
and the masked form, so the two kernels can be compared on identical work. Run under
  ncu --clock-control none -k regex:chord_grouped --section SpeedOfLight ... python3 scripts/profile_grouped.py
"""

import sys

import torch
from chord_kernels import contiguous_offsets, layouts, masked, routing

CASES = {  # name: (form, N, K, routed rows over the 48 experts)
    "contiguous_gate_up_160": ("contiguous", 4096, 7168, 160),
    "masked_gate_up_160": ("masked", 4096, 7168, 160),
}


def run(name: str) -> None:
    form, n, k, total = CASES[name]
    e = 48
    g = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 16, (e, n, k), generator=g, device="cuda", dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=g, device="cuda") * 0.02 + 1e-3).to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, form)
    del codes
    counts = torch.bincount(torch.randint(0, e, (total,), generator=g, device="cuda"), minlength=e).to(torch.int32)
    expected_m = max(1, total // e)
    if form == "masked":
        max_m = 64
        a = torch.randn(e * max_m, k, generator=g, device="cuda").to(torch.bfloat16)
        call = lambda: masked(a, packed, counts.clamp_max(max_m), expected_m)  # noqa: E731
    else:
        offsets = routing.counts_to_offsets(counts)
        a = torch.randn(total + 64, k, generator=g, device="cuda").to(torch.bfloat16)
        call = lambda: contiguous_offsets(a, packed, offsets, expected_m=expected_m)  # noqa: E731
    call()  # compile + load
    torch.cuda.synchronize()
    call()
    torch.cuda.synchronize()
    print(name, "done")


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        run(case)
