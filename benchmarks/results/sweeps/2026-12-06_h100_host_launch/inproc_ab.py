"""In one process, main's indexed host path against 3909673's (its two per-call costs put back by
monkeypatching: the launcher imported in every LoadedKernel.launch, and indexed's shape message
formatted on every call), alternating rounds, so a process-wide slow or fast mode of the host
hits both alike.

    python3 benchmarks/results/sweeps/2026-12-06_h100_host_launch/inproc_ab.py [--rounds 12]
"""

import argparse
import json
import statistics

import torch
from chord_kernels import indexed, ops
from chord_kernels.jit import launch as jit_launch

from benchmarks.host_overhead import per_call_us, tiny_indexed_problem


def old_launch(self, grid, block, smem, stream, params):  # 3909673's LoadedKernel.launch
    jit_launch._launcher().launch(self.fn, self.ctx, grid[0], grid[1], grid[2], block[0], block[1],
                                  block[2], smem, stream, params)


def old_indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m, out):  # 3909673's checks
    ops._require_mode(packed, "indexed")
    ops._require(a.dim() == 2, f"a must be [M, K], got shape {tuple(a.shape)}")
    if out is None:
        out = torch.empty(a.shape[0] * top_k, packed.n, dtype=torch.bfloat16, device=a.device)
    if ops.env.flag(ops.env.VALIDATE_ROUTING):
        raise AssertionError("unset CHORD_VALIDATE_ROUTING")
    if not a.is_cuda:
        raise AssertionError("GPU only")
    ops._indexed_cuda(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=10000)
    args = parser.parse_args()
    _, _, (a, w, sorted_ids, expert_ids, ntp, out) = tiny_indexed_problem()
    new_launch = jit_launch.LoadedKernel.launch
    rows = {"main": [], "3909673": []}
    for _ in range(args.rounds):
        jit_launch.LoadedKernel.launch = new_launch
        rows["main"].append(per_call_us(lambda: indexed(a, w, sorted_ids, expert_ids, ntp, 2, 8, out), args.calls))
        jit_launch.LoadedKernel.launch = old_launch
        rows["3909673"].append(per_call_us(lambda: old_indexed(a, w, sorted_ids, expert_ids, ntp, 2, 8, out),
                                           args.calls))
    jit_launch.LoadedKernel.launch = new_launch
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "us_per_call_by_round": rows,
                      "median": {side: statistics.median(v) for side, v in rows.items()}}, indent=1))


if __name__ == "__main__":
    main()
