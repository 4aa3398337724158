"""The vLLM call-sequence replay (tests/humming_replay.py) on CPU, at small shapes.

On CPU chord_kernels runs Chord's reference, so this checks the replay itself: that it makes the
calls vLLM made (compared with tests/vllm_contract/sample_calls.json, argument by argument) and
that its buffers, routing and comparison are right. The same replay runs on the H200 at Kimi
shapes in tests/gpu/test_humming_replay_gpu.py.
"""

import json
from pathlib import Path

import humming_replay as hr
import pytest
import torch
from humming import forward as hforward
from humming import transform as htransform
from humming import tune as htune
from humming.config import LayerConfig

SAMPLE = Path(__file__).parent / "vllm_contract" / "sample_calls.json"
SMALL_EP = hr.ReplayShapes(num_experts=4, hidden=256, intermediate=128, tokens=5, top_k=8, global_experts=16, rank=1)
SMALL_TP = hr.ReplayShapes(num_experts=4, hidden=256, intermediate=128, tokens=5, top_k=2)
CASES = {"indexed": "compressed-tensors/indexed", "grouped_contiguous": "compressed-tensors/grouped",
         "grouped_masked": "compressed-tensors/grouped_masked"}
ROUTING_ARGS = {"sorted_ids", "expert_ids", "num_tokens_padded", "expert_layout", "scatter_idx",
                "num_valid_tokens", "expert_tokens"}


@pytest.mark.parametrize("shapes", [SMALL_EP, SMALL_TP], ids=["ep_top8", "tp_top2"])
@pytest.mark.parametrize("gemm_type", hr.GEMM_TYPES)
def test_replay_matches_reference(gemm_type, shapes):
    replay = hr.make_replay(shapes, gemm_type, "cpu", seed=3)
    assert replay.w13.config.chord_mode_source == "env"
    for seed in (11, 12):  # a second routing copied into the same buffers (what a graph replay sees)
        topk_ids, x = hr.random_inputs(shapes, seed, "cpu")
        res = hr.run_once(replay, topk_ids, x)
        assert res["routes"] > 0 and res["rel2"] <= hr.TOL, res
    if gemm_type == "indexed":
        r = replay.routing
        ntp = int(r["ntp"])
        assert r["sorted_ids"].numel() > ntp and (r["sorted_ids"][ntp:] < shapes.num_routes).all()  # garbage tail
        assert replay.w13.block_m(replay.valid_shape_m) == replay.block_m13


def test_check_catches_a_wrong_or_stray_row():
    replay = hr.make_replay(SMALL_EP, "indexed", "cpu", seed=3)
    topk_ids, x = hr.random_inputs(SMALL_EP, 11, "cpu")
    hr.run_once(replay, topk_ids, x)
    owned = replay.route_rows[replay.route_rows >= 0]
    stray = next(i for i in range(replay.out_rows) if i not in set(owned.tolist()))
    replay.down[stray] = 0
    with pytest.raises(AssertionError, match="written"):
        replay.check()
    replay.down[stray] = float("nan")
    replay.down[owned[0]] *= 1.5
    with pytest.raises(AssertionError):
        replay.check()


# ------------------------------------------------------------ same calls as vLLM made


def _describe(name, value):
    if isinstance(value, torch.Tensor):
        d = {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."), "device": value.device.type}
        if name in ROUTING_ARGS:
            d["values"] = value.reshape(-1).tolist()
        return d
    if isinstance(value, LayerConfig):
        return {"layer_config": json.loads(value.to_str())}
    if isinstance(value, dict):
        return {k: _describe(k, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_describe("", v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _record(monkeypatch):
    calls = []
    targets = ((htransform, "prepare_and_transform_humming_tensors", "humming.transform"),
               (htune, "get_heuristics_config", "humming.tune"),
               (hforward, "may_process_input", "humming.forward"),
               (hforward, "humming_forward", "humming.forward"))
    for module, attr, qual in targets:
        fn = getattr(module, attr)

        def call(*args, _fn=fn, _name=f"{qual}.{attr}", **kwargs):
            entry = {"fn": _name, "args": [_describe("", a) for a in args],
                     "kwargs": {k: _describe(k, v) for k, v in kwargs.items()}}
            calls.append(entry)
            ret = _fn(*args, **kwargs)
            entry["returned"] = _describe("", ret)
            return ret

        monkeypatch.setattr(module, attr, call)
    return calls


def _sample_routing(case_calls):
    """The topk_ids behind the sample's routing tensors, and the replay shapes it needs."""
    fwd = next(c["kwargs"] for c in case_calls if c["fn"].endswith("humming_forward"))
    if "sorted_ids" in fwd:
        sids, eids = fwd["sorted_ids"]["values"], fwd["expert_ids"]["values"]
        ntp, bm = fwd["num_tokens_padded"]["values"][0], len(sids) // len(eids) + (len(sids) % len(eids) > 0)
        routes, top_k = fwd["valid_shape_m"], fwd["top_k"]
        expert = [None] * routes
        for pos in range(ntp):
            if sids[pos] < routes:
                expert[sids[pos]] = eids[pos // bm]
        return torch.tensor(expert, dtype=torch.int32).reshape(-1, top_k), None
    if fwd["expert_layout"]["dtype"] == "int64":  # offsets + the scatter's destination rows
        offsets = torch.tensor(fwd["expert_layout"]["values"])
        proc = next(c["kwargs"] for c in case_calls if c["fn"].endswith("may_process_input"))
        dest = torch.tensor(proc["scatter_idx"]["values"]).reshape(proc["scatter_idx"]["shape"])
        return (torch.searchsorted(offsets, dest, right=True) - 1).to(torch.int32), None
    counts = fwd["expert_layout"]["values"]  # masked: one row per (token, expert) pair, top_k 1
    ids = [e for e, c in enumerate(counts) for _ in range(c)]
    return torch.tensor(ids, dtype=torch.int32).reshape(-1, 1), fwd["inputs"]["shape"][0] // len(counts)


def _strip(desc):
    """Drop the device field (the sample was recorded on CPU; the fields compared are the rest)."""
    if isinstance(desc, dict):
        return {k: _strip(v) for k, v in desc.items() if k != "device"}
    if isinstance(desc, list):
        return [_strip(v) for v in desc]
    return desc


def _cut_tails(kwargs):
    """sorted_ids / expert_ids values past the used range: vLLM's buffers hold whatever (ours: random ids)."""
    if "num_tokens_padded" not in kwargs:
        return kwargs
    kwargs = json.loads(json.dumps(kwargs))
    ntp = kwargs["num_tokens_padded"]["values"][0]
    sids, eids = kwargs["sorted_ids"], kwargs["expert_ids"]
    bm = -(-sids["shape"][0] // eids["shape"][0])
    sids["values"] = sids["values"][:ntp]
    eids["values"] = eids["values"][:-(-ntp // bm)]
    return kwargs


@pytest.mark.parametrize("gemm_type", hr.GEMM_TYPES)
def test_replay_makes_the_recorded_calls(gemm_type, monkeypatch):
    sample = json.loads(SAMPLE.read_text())
    want = [c for c in sample["calls"] if c["case"] == CASES[gemm_type]]
    sh = sample["shapes"]
    topk_ids, max_m = _sample_routing(want)
    shapes = hr.ReplayShapes(num_experts=sh["E"], hidden=sh["H"], intermediate=sh["I"], tokens=topk_ids.shape[0],
                             top_k=topk_ids.shape[1], max_tokens_per_expert=max_m)
    calls = _record(monkeypatch)
    replay = hr.make_replay(shapes, gemm_type, "cpu", seed=1)
    x = torch.randn(shapes.tokens, shapes.hidden, generator=torch.Generator().manual_seed(0)).to(hr.BF16)
    res = hr.run_once(replay, topk_ids, x)
    assert res["routes"] == shapes.num_routes
    assert [c["fn"] for c in calls] == [c["fn"] for c in want]
    for got, exp in zip(calls, want, strict=True):
        where = f"{exp['fn']} #{want.index(exp)}"
        assert _strip(got["args"]) == _strip(exp["args"]), where
        assert sorted(got["kwargs"]) == sorted(exp["kwargs"]), where
        assert _strip(_cut_tails(got["kwargs"])) == _strip(_cut_tails(exp["kwargs"])), where
        if "returned" in exp:
            assert _strip(got["returned"]) == _strip(exp["returned"]), where
