"""The grouped offsets and masked kernels on identical work, each on both packed layouts.

    python3 -m benchmarks.grouped_layout_ab [--case N,K,ROWS,EXPERTS ...] [--out results.json]

One routing (uniform counts over the experts) laid out twice: vLLM's offsets form ([rows, K],
unaligned) and the masked form ([E*max_m, K]); one weight packed twice: BLOCK_K 64 (the contiguous
mode) and BLOCK_K 128 (the masked mode). Each form runs on each layout (the weight's mode tag is
swapped so the entry points accept it), so a difference between the forms on one layout is the
routing front-end's, and a difference between layouts on one form is the kernel's weight path —
how the masked form's 1.85x was pinned on its BLOCK_K-128 copies (docs/design/grouped-kernels.md
v6). Timing as the benchmark's (do_bench median, L2 flushed); every pair of results must agree
exactly on the valid rows (same kernels' arithmetic), which is checked. Needs a GPU.
"""

import argparse
import dataclasses
import json

import torch

DEFAULT_CASES = ("4096,7168,162,48", "7168,2048,162,48", "4096,7168,1006,48")  # EP8 decode, mid batch


def run_case(n: int, k: int, rows: int, e: int) -> list[dict]:
    import triton
    from chord_kernels import contiguous_offsets, layouts, masked, routing

    g = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 16, (e, n, k), generator=g, device="cuda", dtype=torch.uint8)
    scale = (torch.rand(e, n, k // 32, generator=g, device="cuda") * 0.02 + 1e-3).to(torch.bfloat16)
    packs = {64: layouts.pack_w4a16(codes, scale, "contiguous"), 128: layouts.pack_w4a16(codes, scale, "masked")}
    del codes
    counts = torch.bincount(torch.randint(0, e, (rows,), generator=g, device="cuda"), minlength=e).to(torch.int32)
    expected_m = max(1, rows // e)
    max_m = -(-int(counts.max()) // 64) * 64
    offsets = routing.counts_to_offsets(counts)
    a_offsets = torch.randn(rows + 64, k, generator=g, device="cuda").to(torch.bfloat16)
    a_masked = torch.zeros(e * max_m, k, device="cuda", dtype=torch.bfloat16)
    bounds = offsets.tolist()
    for i in range(e):
        a_masked[i * max_m: i * max_m + int(counts[i])] = a_offsets[bounds[i]:bounds[i + 1]]
    results, valid = [], {}
    for block_k, packed in packs.items():
        as_contiguous = dataclasses.replace(packed, mode="contiguous")
        as_masked = dataclasses.replace(packed, mode="masked")
        out_offsets = torch.full((a_offsets.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
        out_masked = torch.full((a_masked.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
        calls = {"offsets": lambda w=as_contiguous, o=out_offsets: contiguous_offsets(a_offsets, w, offsets, o,
                                                                                      expected_m=expected_m),
                 "masked": lambda w=as_masked, o=out_masked: masked(a_masked, w, counts, expected_m, o)}
        for form, call in calls.items():
            call()
            torch.cuda.synchronize()
            us = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median") * 1e3
            results.append(dict(n=n, k=k, rows=rows, experts=e, form=form, block_k=block_k, us=us))
            print(f"N={n} K={k} rows={rows} E={e} {form:8s} BLOCK_K {block_k:3d}: {us:8.1f} us", flush=True)
        valid[("offsets", block_k)] = out_offsets[:rows]
        valid[("masked", block_k)] = torch.cat([out_masked[i * max_m: i * max_m + int(counts[i])] for i in range(e)])
    first = valid[("offsets", 64)]
    for key, got in valid.items():
        if not torch.equal(got, first):
            raise SystemExit(f"{key} differs from offsets/BLOCK_K 64 on N={n} K={k} rows={rows}")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="N,K,ROWS,EXPERTS (repeatable)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("grouped_layout_ab needs a CUDA GPU")
    results = []
    for case in args.case or DEFAULT_CASES:
        results += run_case(*(int(v) for v in case.split(",")))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
