"""Host overhead per call (issue 4: <= 5 µs in eager mode): CPU wall time of the Python call,
checks, dispatch and launch, on a problem so small the GPU never holds the host back.

    python3 -m benchmarks.host_overhead [--calls 20000]

Prints µs per call for each entry point (indexed, contiguous, contiguous_offsets, and a call that
launches a grouped pair, masked with a 2-D and a 3-D input, an empty torch launch for scale, and
the indexed call's launch alone: the same kernel and parameters, without the call's Python part;
and, where the fast call is on, the indexed call on the Python launch path alone, in the same
process: ``indexed_python_path``); GPU only (SM90). The calls are timed in batches, each queued behind a GPU sleep (per_call_us), so
the wall time of a batch's calls is the host cost; the synchronizes between batches are excluded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

import chord_kernels
import torch
from chord_kernels import contiguous, contiguous_offsets, indexed, layouts, masked, ops, routing

try:  # the base tree of an A/B (an older chord_kernels) has no fast call
    from chord_kernels.jit import fast_call
except ImportError:
    fast_call = None

# The calls are timed in batches queued behind a GPU sleep, so the GPU never holds the host back
# (a paired grouped call is two launches whose GPU time exceeds their host time) and the launch
# queue never fills (a batch's launches stay well under the driver's pending-launch limit).
BATCH_CALLS = 200
BACKLOG_CYCLES = 20_000_000  # ~10 ms at 1.98 GHz: 200 calls of up to 50 µs of host time each


def per_call_us(fn, calls: int, batch: int = BATCH_CALLS) -> float:
    """µs a call: the median over batches of a batch's wall time per call (a host shared with
    other work stalls some batches by several µs a call; the median keeps them out)."""
    for _ in range(200):  # warm: compile, load, fill the plan caches
        fn()
    torch.cuda.synchronize()
    per_batch, done = [], 0
    while done < calls:
        n = min(batch, calls - done)
        torch.cuda._sleep(BACKLOG_CYCLES)
        start = time.perf_counter()
        for _ in range(n):
            fn()
        per_batch.append((time.perf_counter() - start) / n * 1e6)
        torch.cuda.synchronize()
        done += n
    return statistics.median(per_batch)


TINY_EXPERTS, TINY_N, TINY_K = 4, 64, 256  # the problem of every entry: the GPU never holds the host back


def tiny_indexed_problem():
    """(codes, scale, indexed call's arguments): 2 tokens top-2 over 4 experts of N 64, K 256,
    block_m 8; the call is ``indexed(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)``."""
    e, n, k = TINY_EXPERTS, TINY_N, TINY_K
    codes = torch.randint(0, 16, (e, n, k), dtype=torch.uint8, device="cuda")
    scale = torch.rand(e, n, k // 32, device="cuda").to(torch.bfloat16)
    a = torch.randn(2, k, device="cuda").to(torch.bfloat16)
    topk = torch.randint(0, e, (2, 2), dtype=torch.int32, device="cuda")
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk, 8, e)
    out = torch.empty(4, n, dtype=torch.bfloat16, device="cuda")
    return codes, scale, (a, layouts.pack_w4a16(codes, scale, "indexed"), sorted_ids, expert_ids, ntp, out)


def _bare_indexed_launch(a, packed, sorted_ids, expert_ids, ntp, out):
    """A function that launches the (only) indexed plan's kernel with the parameters one call
    through the real path packs: the launch without the call's Python part."""
    (key, plan), = ops._indexed_plans.items()
    kernel, launch, grid, block = plan[:4]
    packed_params = []

    class Recorder:
        fn, ctx = kernel.fn, kernel.ctx  # what the Python path records for the fast call

        def launch(self, grid, block, smem, stream, params):
            packed_params.append(params)

    ops._indexed_plans[key] = (Recorder(), *plan[1:])
    try:
        ops._indexed_cuda(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    finally:
        ops._indexed_plans[key] = plan
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: kernel.launch(grid, block, launch.smem_bytes, stream, packed_params[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    e, n, k = TINY_EXPERTS, TINY_N, TINY_K
    codes, scale, (a, w_idx, sorted_ids, expert_ids, ntp, out) = tiny_indexed_problem()
    out2 = out[:2]  # sliced once: a slice inside the timed call is a torch op (~6 µs on the H200 host)
    w_con = layouts.pack_w4a16(codes, scale, "contiguous")
    offsets = routing.counts_to_offsets(torch.tensor([1, 0, 1, 0], dtype=torch.int32, device="cuda"))
    w_msk = layouts.pack_w4a16(codes, scale, "masked")
    counts = torch.tensor([1, 0, 1, 0], dtype=torch.int32, device="cuda")
    a8 = torch.randn(e * 8, k, device="cuda").to(torch.bfloat16)
    out8 = torch.empty(e * 8, n, dtype=torch.bfloat16, device="cuda")
    m_indices = torch.full((e * 8,), -1, dtype=torch.int32, device="cuda")
    a8_3d = a8.view(e, 8, k)
    m_indices[0], m_indices[16] = 0, 2  # DeepGEMM form: segments of 8 aligned rows, -1 padding
    # A paired launch (dispatch.pair_with_tall_tile: the tall tile and the short one, both launched,
    # one works): 900 expected rows on N 256, K 2048 pair them; the counts keep the GPU work tiny.
    kp = 2048
    w_pair = layouts.pack_w4a16(torch.randint(0, 16, (e, 256, kp), dtype=torch.uint8, device="cuda"),
                                torch.rand(e, 256, kp // 32, device="cuda").to(torch.bfloat16), "contiguous")
    a_pair = torch.randn(2, kp, device="cuda").to(torch.bfloat16)
    out_pair = torch.empty(2, 256, dtype=torch.bfloat16, device="cuda")
    results = {
        "indexed": per_call_us(lambda: indexed(a, w_idx, sorted_ids, expert_ids, ntp, 2, 8, out), args.calls),
        "contiguous_offsets": per_call_us(lambda: contiguous_offsets(a, w_con, offsets, out2, expected_m=1), args.calls),
        "contiguous_offsets_paired": per_call_us(
            lambda: contiguous_offsets(a_pair, w_pair, offsets, out_pair, expected_m=900), args.calls),
        "contiguous": per_call_us(lambda: contiguous(a8, w_con, m_indices, out8), args.calls),
        "masked": per_call_us(lambda: masked(a8, w_msk, counts, 1, out8), args.calls),
        "masked_3d": per_call_us(lambda: masked(a8_3d, w_msk, counts, 1, out8), args.calls),
        "torch_empty_launch_floor": per_call_us(lambda: torch.empty(1, device="cuda").zero_(), args.calls),
    }
    # The indexed call's own launch alone (the extension's entry and cuLaunchKernel, with the
    # parameters the last call packed): what is left of `indexed` without its Python part.
    results["indexed_bare_launch"] = per_call_us(_bare_indexed_launch(a, w_idx, sorted_ids, expert_ids, ntp, out),
                                                 args.calls)
    fast = getattr(ops, "_fast_call", None)
    if fast is not None and getattr(fast_call, "recording", False):  # the fast call is on: the same call without it
        with _python_path_only():
            results["indexed_python_path"] = per_call_us(
                lambda: indexed(a, w_idx, sorted_ids, expert_ids, ntp, 2, 8, out), args.calls)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "chord_kernels": chord_kernels.__file__,
                      "fast_call": bool(getattr(fast_call, "recording", False)), "us_per_call": results}, indent=1))


@contextlib.contextmanager
def _python_path_only():
    """The entry points' Python launch path alone (the fast call answers False, nothing recorded)."""
    fast, recording = ops._fast_call, fast_call.recording
    ops._fast_call, fast_call.recording = (lambda *args: False), False
    try:
        yield
    finally:
        ops._fast_call, fast_call.recording = fast, recording


if __name__ == "__main__":
    main()
