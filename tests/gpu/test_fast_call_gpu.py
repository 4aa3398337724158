"""The fast call (chord_kernels.jit.fast_call) on the GPU: it is on, the second call of a signature
launches from C++, and it writes what the Python path wrote for the same call, bit for bit (the
kernels are deterministic), with outputs poisoned before each call; under CUDA-graph capture too.
Every other GPU test's repeated calls run through it as well."""

import pytest
import torch
from chord_kernels import contiguous_offsets, indexed, masked, ops
from chord_kernels.jit import fast_call

from .moe_problems import align, make_problem
from .test_grouped_gpu import weights

pytestmark = pytest.mark.gpu
POISON = float("nan")


def fast_plans() -> int:
    assert fast_call.recording, "the fast call is off on this GPU machine (see the RuntimeWarning)"
    return fast_call._module.plan_count()


def forget_plans():
    """Both paths' plans dropped: the next call of any signature takes the Python path."""
    ops._indexed_plans.clear()
    ops._grouped_plans.clear()
    fast_call.forget()


def twice(call, out, monkeypatch, python_path):
    """Run ``call`` on a poisoned ``out`` twice, from no plans: the first call takes the Python
    path (``python_path``, counted) and records its launch, the second launches from C++.
    Returns both outputs."""
    forget_plans()
    taken = []
    real = getattr(ops, python_path)
    monkeypatch.setattr(ops, python_path, lambda *args: taken.append(1) or real(*args))
    outs = []
    for _ in range(2):
        out.fill_(POISON)
        call()
        torch.cuda.synchronize()
        outs.append(out.clone())
    assert len(taken) == 1 and fast_plans() == 1, "the second call did not launch from the fast call"
    return outs


@pytest.mark.parametrize("family", ["auto", "mma_sk", "wgmma"])
@pytest.mark.parametrize("shape,tokens,block_m", [("ep8_gate_up", 8, 8), ("tp8_down", 256, 64),
                                                  ("ep8_down", 256, 32)])
def test_indexed_fast_call_writes_the_python_paths_bits(shape, tokens, block_m, family, monkeypatch):
    monkeypatch.setenv("CHORD_W4A16_INDEXED_KERNEL", family)
    problem = make_problem(shape, tokens, seed=21)
    s, e, n = align(problem, block_m)
    out = torch.empty(problem.a.shape[0] * problem.top_k, problem.packed.n, dtype=torch.bfloat16, device="cuda")
    call = lambda: indexed(problem.a, problem.packed, s, e, n, problem.top_k, block_m, out)  # noqa: E731
    python, fast = twice(call, out, monkeypatch, "_indexed_cuda")
    assert torch.equal(python.view(torch.int16), fast.view(torch.int16))


@pytest.mark.parametrize("form", ["offsets", "masked"])
@pytest.mark.parametrize("rows", [6, 300])
def test_grouped_fast_call_writes_the_python_paths_bits(form, rows, monkeypatch):
    e, n, k = 12, 7168, 2048
    _, _, packed = weights(e, n, k, "contiguous" if form == "offsets" else "masked", seed=5)
    counts = torch.randint(0, 2 * rows + 1, (e,), generator=torch.Generator().manual_seed(rows), dtype=torch.int32)
    max_m = -(-int(counts.max()) // 64) * 64
    if form == "offsets":
        a = torch.randn(int(counts.sum()), k, device="cuda").to(torch.bfloat16)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).cuda()
        out = torch.empty(a.shape[0], n, dtype=torch.bfloat16, device="cuda")
        call = lambda: contiguous_offsets(a, packed, offsets, out, expected_m=rows)  # noqa: E731
        valid = slice(None)
    else:
        a = torch.randn(e * max_m, k, device="cuda").to(torch.bfloat16)
        out = torch.empty(e * max_m, n, dtype=torch.bfloat16, device="cuda")
        masked_m = counts.cuda()
        call = lambda: masked(a, packed, masked_m, rows, out)  # noqa: E731
        valid = (torch.arange(max_m)[None, :] < counts[:, None]).reshape(-1).cuda()
    python, fast = twice(call, out, monkeypatch, "_grouped_cuda")
    assert torch.equal(python[valid].view(torch.int16), fast[valid].view(torch.int16))
    assert torch.isfinite(fast[valid].float()).all()


def test_fast_call_under_graph_capture():
    """A call the fast call knows, captured and replayed with new activations copied in: the
    replay writes what an eager Python-path call writes."""
    problem = make_problem("ep8_down", 64, seed=3)
    s, e, n = align(problem, 32, garbage_tail=False)
    out = torch.full((problem.a.shape[0] * problem.top_k, problem.packed.n), POISON, dtype=torch.bfloat16,
                     device="cuda")
    forget_plans()
    call = lambda: indexed(problem.a, problem.packed, s, e, n, problem.top_k, 32, out)  # noqa: E731
    call()  # the Python path: plans and records
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()  # the fast call
    fresh = torch.randn_like(problem.a)
    problem.a.copy_(fresh)
    out.fill_(POISON)
    graph.replay()
    torch.cuda.synchronize()
    replayed = out.clone()
    forget_plans()
    out.fill_(POISON)
    call()  # the Python path again, eagerly
    torch.cuda.synchronize()
    assert torch.equal(replayed.view(torch.int16), out.view(torch.int16))
    assert fast_plans() == 1
