"""GPU checks of chord_kernels.routing: every helper runs on CUDA with no host sync
(``torch.cuda.set_sync_debug_mode("error")`` turns any sync into an error), matches the
CPU result exactly, and the indexed builder can be captured in a CUDA graph."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from chord_kernels import routing as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@contextlib.contextmanager
def no_sync():
    """Any synchronizing CUDA call inside raises; the mode is always reset after."""
    torch.cuda.synchronize()
    try:
        with warnings.catch_warnings():
            # setting the mode warns that it is a prototype; under -W error that warning
            # would escape after the mode is already set, so keep it quiet here
            warnings.simplefilter("ignore", UserWarning)
            torch.cuda.set_sync_debug_mode("error")
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def make_case(seed: int, m: int, top_k: int, n_exp: int, n_local: int | None, skew: bool):
    g = torch.Generator().manual_seed(seed)
    if skew:  # half of all routes on expert 0
        ids = torch.randint(0, n_exp, (m, top_k), generator=g)
        ids[torch.rand(m, top_k, generator=g) < 0.5] = 0
    else:
        ids = torch.randint(0, n_exp, (m, top_k), generator=g)
    emap = None
    if n_local is not None:
        chosen = torch.randperm(n_exp, generator=g)[:n_local]
        emap = torch.full((n_exp,), -1, dtype=torch.int32)
        emap[chosen] = torch.arange(n_local, dtype=torch.int32)
    return ids.to(torch.int32), emap, n_local or n_exp


CASES = [
    # seed, M, top_k, experts, local experts (None: no expert_map), skewed
    (0, 0, 8, 384, None, False),
    (1, 1, 8, 384, None, False),
    (2, 7, 2, 4, None, True),
    (3, 64, 8, 384, 48, False),
    (4, 4096, 8, 384, None, False),
    (5, 4096, 8, 384, 48, True),
    (6, 33, 1, 1, None, False),
    (7, 300, 6, 16, 3, True),
]


def run_all(topk, emap, n_exp, n_local):
    """Every public helper, in one list of output tensors."""
    out = []
    for block_m in (1, 16, 64):
        out += R.moe_align_block_size(topk, block_m, n_exp, emap)
    offsets, inv_perm = R.contiguous_offsets(topk, n_local, emap)
    out += [offsets, inv_perm]
    for alignment in (1, 128):
        out += R.contiguous_aligned(topk, n_local, emap, alignment)
        out.append(R.align_offsets(offsets, alignment))
        out.append(R.aligned_row_of_rows(offsets, topk.numel(), alignment))
        out.append(R.aligned_m_indices_from_offsets(
            offsets, alignment, R.aligned_rows(topk.numel(), n_local, alignment)))
    out += R.masked_layout(topk, n_local, 16, emap)
    counts = R.offsets_to_counts(offsets)
    m_rows = R.offsets_to_m_indices(offsets, topk.numel() + 5)
    out += [counts, R.counts_to_offsets(counts), m_rows, R.m_indices_to_counts(m_rows, n_local)]
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}-M{c[1]}" for c in CASES])
def test_no_sync_and_matches_cpu(case):
    topk, emap, n_local = make_case(*case[:3], case[3], case[4], case[5])
    n_exp = case[3]
    expected = run_all(topk, emap, n_exp, n_local)
    topk_d = topk.cuda()
    emap_d = None if emap is None else emap.cuda()
    for ids in (topk_d, topk_d.long()):
        with no_sync():
            got = run_all(ids, emap_d, n_exp, n_local)
        assert len(got) == len(expected)
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert a.device.type == "cuda", i
            assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
            assert torch.equal(a.cpu(), b), f"output {i} differs from CPU"


def test_validators_accept_cuda_tensors():
    topk, emap, n_local = make_case(9, 256, 8, 384, 48, False)
    topk, emap = topk.cuda(), emap.cuda()
    R.moe_align_block_size(topk, 64, 384, emap, validate=True)
    R.contiguous_offsets(topk, n_local, emap, validate=True)
    R.contiguous_aligned(topk, n_local, emap, validate=True)
    R.masked_layout(topk, n_local, 256 * 8, emap, validate=True)


def test_moe_align_cuda_graph_replay():
    """Captured once, replayed on new routing data: results track the new data."""
    m, top_k, n_exp = 512, 8, 384
    static_ids = torch.zeros(m, top_k, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        R.moe_align_block_size(static_ids, 64, n_exp)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = R.moe_align_block_size(static_ids, 64, n_exp)
    for seed in range(3):
        new = torch.randint(0, n_exp, (m, top_k), generator=torch.Generator().manual_seed(seed))
        static_ids.copy_(new.to(torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(outs, R.moe_align_block_size(new.to(torch.int32), 64, n_exp), strict=True):
            assert torch.equal(a.cpu(), b)


def test_all_helpers_capture_in_cuda_graph():
    """The sync debug mode misses some syncs; stream capture rejects any, so capture them all."""
    topk, emap, n_local = make_case(5, 1024, 8, 384, 48, True)
    static_ids, emap_d = torch.zeros_like(topk).cuda(), emap.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (allocator, kernels) outside the capture
        run_all(static_ids, emap_d, 384, n_local)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run_all(static_ids, emap_d, 384, n_local)
    static_ids.copy_(topk.cuda())
    graph.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(outs, run_all(topk, emap, 384, n_local), strict=True)):
        assert torch.equal(a.cpu(), b), f"output {i} differs after graph replay"
