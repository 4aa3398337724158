"""vLLM's recorded Humming call sequence replayed at Kimi shapes on the real kernels (H200).

tests/humming_replay.py builds the sequence vLLM 0.32 makes (tests/vllm_contract/sample_calls.json,
checked call by call on CPU in tests/test_humming_replay.py): humming's transform of
compressed-tensors weights, the tuning tables, then per forward may_process_input -> w13
humming_forward -> SiLU-and-mul -> w2 humming_forward into NaN-poisoned preallocated buffers
(garbage sorted_ids / expert_ids tails). Per gemm type and token count: one warm-up call (compiles
the kernels), one call under ``torch.cuda.set_sync_debug_mode("error")``, then the forward
captured in a CUDA graph and replayed with a different routing copied into the same buffers.
Each result is the per-route down output against an fp32 reference from the dequantized weights
(relative Frobenius error <= 5e-3 on routed rows; every other row still NaN).

Kimi K2.x: hidden 7168, moe_intermediate 2048, 384 experts, top-8. EP8: 48 local experts of 384
(rank 3's slab, expert_map), w13 N=4096 K=7168, w2 N=7168 K=2048. TP8: all 384 experts with
I=256 per rank (w13 N=512, w2 K=256).
"""

import gc

import humming_replay as hr
import pytest
import torch

pytestmark = pytest.mark.gpu

HIDDEN, INTER, EXPERTS, TOP_K = 7168, 2048, 384, 8
EP8_LOCAL, EP8_RANK = EXPERTS // 8, 3
TOKENS = (1, 20, 128)
# base routing seed per token count (host generator, so fixed here): at 1 token the four routings
# keep 1, 2, 0 and 1 routes on rank 3 -- the third graph replay runs with nothing routed locally
SEEDS = {1: 14, 20: 200, 128: 1280}


def ep8(tokens: int) -> hr.ReplayShapes:
    return hr.ReplayShapes(num_experts=EP8_LOCAL, hidden=HIDDEN, intermediate=INTER, tokens=tokens, top_k=TOP_K,
                           global_experts=EXPERTS, rank=EP8_RANK)


def tp8(tokens: int) -> hr.ReplayShapes:
    return hr.ReplayShapes(num_experts=EXPERTS, hidden=HIDDEN, intermediate=INTER // 8, tokens=tokens, top_k=TOP_K)


@pytest.fixture
def free_gpu():
    """Weights live only for one test: give the memory back afterwards."""
    yield
    gc.collect()
    torch.cuda.empty_cache()


def _cases(replay: hr.Replay, seed: int) -> list[dict]:
    """Warm-up (compiles), sync-checked call, graph capture + replay with another routing."""
    s, dev = replay.shapes, replay.device
    results = [hr.run_once(replay, *hr.random_inputs(s, seed, dev), sync_check=False)]
    results.append(hr.run_once(replay, *hr.random_inputs(s, seed + 1, dev), sync_check=True))
    graph = hr.capture_graph(replay)
    try:
        results.append(hr.replay_graph(replay, graph, *hr.random_inputs(s, seed + 2, dev)))
        results.append(hr.replay_graph(replay, graph, *hr.random_inputs(s, seed + 3, dev)))
    finally:
        del graph
    return results


@pytest.mark.parametrize("gemm_type", hr.GEMM_TYPES)
def test_ep8_replay(gemm_type, free_gpu):
    base = ep8(TOKENS[0])
    w13, w2 = hr.load_layer(base, gemm_type, "cuda", seed=5)
    assert w13.config.chord_mode == {"indexed": "indexed", "grouped_contiguous": "contiguous",
                                     "grouped_masked": "masked"}[gemm_type]
    for tokens in TOKENS:
        replay = hr.Replay(ep8(tokens), gemm_type, w13, w2, "cuda", seed=tokens)
        results = _cases(replay, seed=SEEDS[tokens])
        routed = [r["routes"] for r in results]
        assert routed[1] > 0, (tokens, results)  # the sync-checked call computes something
        if tokens >= 20:
            assert all(routed), (tokens, results)
        del replay
    del w13, w2


def test_tp8_indexed_replay(free_gpu):
    shapes = tp8(8)
    w13, w2 = hr.load_layer(shapes, "indexed", "cuda", seed=6)
    replay = hr.Replay(shapes, "indexed", w13, w2, "cuda", seed=8)
    results = _cases(replay, seed=80)
    assert all(r["routes"] == shapes.num_routes for r in results), results
    assert replay.routing["sorted_ids"].numel() > shapes.num_routes  # over-allocated, garbage tail
    del replay, w13, w2
