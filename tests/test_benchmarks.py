"""CPU tests of the benchmark harness (benchmarks/): the grid, routing generation, floors and
targets, the per-point loop (run end to end on CPU with tiny shapes through Chord's CPU
reference path, timing stubbed), the Humming-side pure helpers and process isolation, and the
report (table, doc markers, results JSON, plots when matplotlib is there)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `benchmarks` is a top-level folder of the repo, not installed
    sys.path.insert(0, str(REPO))

from benchmarks import common, floors, gpu_clocks, make_routing, report, runner  # noqa: E402
from benchmarks import scenarios as S  # noqa: E402
from benchmarks.bench_humming import block_size_from_table, format_kernel_config  # noqa: E402

# ---------------------------------------------------------------------------------------
# Grid
# ---------------------------------------------------------------------------------------


def test_default_grid_matches_issue_4():
    points = S.grid()
    assert {p.scenario for p in points} == {"ep8", "tp8"}
    for scn in ("ep8", "tp8"):
        uni = [p.tokens for p in points if p.scenario == scn and p.dist == "uniform"]
        skew = [p.tokens for p in points if p.scenario == scn and p.dist == "skew"]
        assert uni == [1, 8, 20, 32, 64, 128, 512, 2048, 8192]
        assert skew == [20, 128, 2048]
    assert len(points) == 24
    assert S.DISTS["skew"] == 1.0 and S.DISTS["uniform"] == 0.0


def test_scenario_shapes_and_tokens():
    ep8, tp8 = S.SCENARIOS["ep8"], S.SCENARIOS["tp8"]
    assert (ep8.projections["gate_up"].n, ep8.projections["gate_up"].k) == (4096, 7168)
    assert (ep8.projections["down"].n, ep8.projections["down"].k) == (7168, 2048)
    assert (tp8.projections["gate_up"].n, tp8.projections["gate_up"].k) == (512, 7168)
    assert (tp8.projections["down"].n, tp8.projections["down"].k) == (7168, 256)
    assert ep8.num_local_experts == 48 and tp8.num_local_experts == 384
    assert S.SCENARIOS["ep16"].num_local_experts == 24 and S.SCENARIOS["ep32"].num_local_experts == 12
    p = S.Point("ep8", "uniform", 20)
    assert p.num_tokens == 160 and p.num_routes == 1280
    assert p.valid_shape_m == 160  # ceil(1280 * 48 / 384)
    assert S.Point("ep32", "uniform", 3).num_tokens == 96
    assert S.Point("tp8", "skew", 128).valid_shape_m == 1024
    gate, down = ep8.projections["gate_up"], ep8.projections["down"]
    assert gate.top_k == 8 and gate.input_rows(160) == 160 and gate.output_rows(160) == 1280
    assert down.top_k == 1 and down.input_rows(160) == 1280 and down.output_rows(160) == 1280
    emap = ep8.expert_map()
    assert emap[:48] == list(range(48)) and set(emap[48:]) == {-1} and len(emap) == 384
    assert tp8.expert_map() is None
    assert p.routing_file == "routing_ep8_uniform_T20.pt"


def test_quick_grid_and_filters():
    quick = S.grid(quick=True)
    assert [p.tokens for p in quick if p.scenario == "ep8" and p.dist == "uniform"] == [1, 20, 128, 2048]
    assert [p.tokens for p in quick if p.dist == "skew"] == [128, 128]
    only = S.grid(("tp8",), tokens=(20, 8192), dists=("uniform",))
    assert [(p.scenario, p.dist, p.tokens) for p in only] == [("tp8", "uniform", 20), ("tp8", "uniform", 8192)]
    with pytest.raises(ValueError, match="unknown scenario"):
        S.grid(("ep9",))
    assert S.parse_list("1, 2,3", int) == (1, 2, 3) and S.parse_list("") is None
    keys = [("tp8", "uniform", 1), ("ep8", "skew", 20), ("ep8", "uniform", 8192), ("ep8", "uniform", 1)]
    assert sorted(keys, key=S.sort_key) == [("ep8", "uniform", 1), ("ep8", "uniform", 8192),
                                           ("ep8", "skew", 20), ("tp8", "uniform", 1)]


# ---------------------------------------------------------------------------------------
# Routing generation
# ---------------------------------------------------------------------------------------


def test_popularity():
    assert make_routing.popularity(5, 0.0, 1) == [1.0] * 5
    a = make_routing.popularity(384, 1.0, 7)
    assert a == make_routing.popularity(384, 1.0, 7) and a != make_routing.popularity(384, 1.0, 8)
    big = torch.tensor(make_routing.popularity(20000, 1.0, 3), dtype=torch.float64)
    assert abs(big.mean().item() - 1.0) < 0.05 and abs((big.std() / big.mean()).item() - 1.0) < 0.05
    assert (big > 0).all()


def test_route_distinct_experts_and_deterministic():
    w = make_routing.popularity(384, 1.0, 0)
    ids = make_routing.route(1000, w, 8, seed=5)
    assert ids.dtype == torch.int32 and ids.shape == (1000, 8)
    assert ((ids >= 0) & (ids < 384)).all()
    assert all(len(set(row)) == 8 for row in ids.tolist())  # top-8 without replacement
    assert torch.equal(ids, make_routing.route(1000, w, 8, seed=5))
    assert not torch.equal(ids, make_routing.route(1000, w, 8, seed=6))


def test_route_chunking_is_invisible(monkeypatch):
    w = make_routing.popularity(384, 0.0, 0)
    whole = make_routing.route(300, w, 8, seed=3)
    monkeypatch.setattr(make_routing, "CHUNK_TOKENS", 64)
    chunked = make_routing.route(300, w, 8, seed=3)
    assert chunked.shape == whole.shape
    assert all(len(set(row)) == 8 for row in chunked.tolist())


def test_skewed_router_concentrates_load():
    uni = make_routing.route(4000, make_routing.popularity(384, 0.0, 0), 8, seed=1)
    skw = make_routing.route(4000, make_routing.popularity(384, 1.0, 0), 8, seed=1)
    cv = [(torch.bincount(t.reshape(-1).long(), minlength=384).double()) for t in (uni, skw)]
    cv = [(c.std() / c.mean()).item() for c in cv]
    assert cv[1] > 2 * cv[0]


def test_routing_stats_hand_case():
    topk = torch.tensor([[0, 50, 1], [60, 70, 80], [1, 2, 100]], dtype=torch.int32)
    emap = torch.tensor([e if e < 48 else -1 for e in range(384)], dtype=torch.int32)
    stats = make_routing.routing_stats(topk, emap, 48)
    # kept pairs: (0,0) (0,1) (2,0) (2,1) -> 4 routes, experts {0, 1, 2}, tokens {0, 2}
    assert stats == {"routes_kept": 4, "experts_touched": 3, "tokens_touched": 2}
    assert make_routing.routing_stats(topk, None, 384) == {"routes_kept": 9, "experts_touched": 8,
                                                           "tokens_touched": 3}


def test_make_point_ep_filtering_and_determinism(tmp_path):
    point = S.Point("ep8", "skew", 20)
    a, b = make_routing.make_point(point, seed=0), make_routing.make_point(point, seed=0)
    assert torch.equal(a["topk_ids"], b["topk_ids"]) and a["meta"] == b["meta"]
    c = make_routing.make_point(point, seed=1)
    assert not torch.equal(a["topk_ids"], c["topk_ids"])
    topk, emap, meta = a["topk_ids"], a["expert_map"], a["meta"]
    assert topk.shape == (160, 8) and emap.shape == (384,) and emap.dtype == torch.int32
    assert meta["routes_kept"] == int((topk < 48).sum())  # EP8 rank 0 keeps experts 0..47
    assert meta["experts_touched"] == int(torch.unique(topk[topk < 48]).numel())
    assert meta["tokens_touched"] == int((topk < 48).any(dim=1).sum())
    assert meta["valid_shape_m"] == 160 and meta["cv"] == 1.0
    # same popularity for every scenario and T of one distribution: one router
    other = make_routing.make_point(S.Point("tp8", "skew", 2048), seed=0)["meta"]
    assert other["popularity_seed"] == meta["popularity_seed"]
    tp = make_routing.make_point(S.Point("tp8", "uniform", 8), seed=0)
    assert tp["expert_map"] is None and tp["meta"]["routes_kept"] == 64
    # files: written once, read back identically through common.load_routing
    make_routing.write_all(tmp_path, [point], seed=0, verbose=False)
    loaded = common.load_routing(tmp_path, point)
    assert torch.equal(loaded["topk_ids"], topk) and torch.equal(loaded["expert_map"], emap)
    assert loaded["meta"] == meta
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["points"][0]["digest"] == meta["digest"]
    with pytest.raises(FileNotFoundError):
        common.load_routing(tmp_path, S.Point("ep8", "skew", 128))


# ---------------------------------------------------------------------------------------
# Shared inputs and the reference check
# ---------------------------------------------------------------------------------------


def test_weights_deterministic_and_compressed_tensors_form():
    wp, ws = common.make_weights(3, 32, 128, seed=11, device="cpu")
    assert wp.dtype == torch.int32 and wp.shape == (3, 32, 16)
    assert ws.dtype == torch.bfloat16 and ws.shape == (3, 32, 4)
    assert ((ws.float() >= 1e-3 - 1e-6) & (ws.float() < 0.021 + 1e-4)).all()
    wp2, ws2 = common.make_weights(3, 32, 128, seed=11, device="cpu")
    assert torch.equal(wp, wp2) and torch.equal(ws, ws2)
    assert common.tensor_digest(wp, ws) == common.tensor_digest(wp2, ws2)
    wp3, _ = common.make_weights(3, 32, 128, seed=12, device="cpu")
    assert common.tensor_digest(wp3, ws) != common.tensor_digest(wp, ws)
    codes = common.unpack_nibbles(wp)
    assert codes.shape == (3, 32, 128) and int(codes.max()) <= 15 and len(torch.unique(codes)) == 16
    assert common.weight_seed("ep8", "down") == common.weight_seed("ep8", "down")
    assert common.weight_seed("ep8", "down") != common.weight_seed("ep8", "gate_up")


def test_fifteen_level_weights_are_kimi_like():
    from chord_kernels.int4 import pack_codes_along_k

    wp, ws = common.make_weights(2, 16, 256, seed=4, device="cpu", levels=15)
    codes = common.unpack_nibbles(wp)
    assert int(codes.min()) == 1 and int(codes.max()) == 15  # no -8
    assert torch.equal(pack_codes_along_k(codes), wp)  # nibble order = compressed-tensors order
    wp2, _ = common.make_weights(2, 16, 256, seed=4, device="cpu", levels=15)
    assert torch.equal(wp, wp2)
    with pytest.raises(ValueError, match="levels"):
        common.make_weights(1, 16, 64, seed=0, device="cpu", levels=8)


def test_unpack_and_dequant_match_chord():
    from chord_kernels.int4 import dequantize_packed, unpack_codes_along_k

    wp, ws = common.make_weights(2, 16, 64, seed=3, device="cpu")
    assert torch.equal(common.unpack_nibbles(wp), unpack_codes_along_k(wp))
    assert torch.equal(common.dequant(wp, ws), dequantize_packed(wp, ws))
    # hand case: one word 0x76543210 holds codes 0..7, low nibble first
    word = torch.tensor([[0x76543210]], dtype=torch.int32)
    assert common.unpack_nibbles(word).tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_reference_rows_and_relative_error():
    g = torch.Generator().manual_seed(0)
    wp, ws = common.make_weights(4, 16, 64, seed=1, device="cpu")
    topk = torch.tensor([[0, 3], [2, 3], [1, 0]], dtype=torch.int32)
    emap = torch.tensor([0, -1, 1, 2], dtype=torch.int32)  # expert 1 lives elsewhere
    routes, experts = common.kept_routes(topk, emap, 4)
    assert routes.tolist() == [0, 1, 2, 3, 5] and experts.tolist() == [0, 2, 1, 2, 0]
    a = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    ref = common.reference_rows(a, wp, ws, routes, experts, top_k=2)
    w = common.dequant(wp, ws).float()
    expect = torch.stack([a[r // 2].float() @ w[e].t() for r, e in zip(routes.tolist(), experts.tolist(), strict=True)])
    torch.testing.assert_close(ref, expect)
    out = torch.full((6, 16), float("nan"))
    assert math.isnan(common.relative_error(out, routes, ref))  # poison left in a routed row
    out[routes] = ref
    assert common.relative_error(out, routes, ref) == 0.0
    out[routes] = ref * 1.01
    assert abs(common.relative_error(out, routes, ref) - 0.01) < 1e-5
    assert common.relative_error(out, routes[:0], ref[:0]) == 0.0
    assert common.clean_float(float("nan")) is None and common.clean_float(1.5) == 1.5


def test_routing_loaded_by_path_is_chords_routing():
    from chord_kernels import routing as R

    mod = common.load_routing_module_by_path()
    assert mod is not R and mod.__name__ == "chord_bench_routing"
    topk = make_routing.make_point(S.Point("ep8", "uniform", 8))["topk_ids"]
    emap = make_routing.expert_map_tensor(S.SCENARIOS["ep8"])
    for x, y in zip(mod.moe_align_block_size(topk, 16, 384, emap), R.moe_align_block_size(topk, 16, 384, emap),
                    strict=True):
        assert torch.equal(x, y)


def test_humming_process_does_not_import_chord_kernels():
    """What bench_humming imports before humming itself must stay free of chord_kernels."""
    code = ("import sys, benchmarks.bench_humming as bh, benchmarks.common as c;"
            "c.load_routing_module_by_path();"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('chord_kernels', 'humming')];"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------
# Humming-side pure helpers
# ---------------------------------------------------------------------------------------


def test_block_size_from_table_follows_vllm_rule():
    table = [[0, 8, {"block_shape": [8, 128, 64]}], [8, 64, {"block_shape": [16, 256, 64]}],
             [64, 1 << 30, {"block_shape": [96, 256, 64]}]]
    assert block_size_from_table(table, 1) == (8, (0, 8))
    assert block_size_from_table(table, 8) == (8, (0, 8))  # lower < m <= upper
    assert block_size_from_table(table, 9) == (16, (8, 64))
    assert block_size_from_table(table, 65536) == (96, (64, 1 << 30))
    assert block_size_from_table([], 5) == (64, None)  # vLLM's fallback


def test_format_kernel_config():
    cfg = {"mma_type": "wgmma", "block_shape": [96, 256, 64], "warp_shape": [96, 32, 64], "num_stages": 4,
           "use_stream_k": False, "use_warp_spec": True, "use_tma": True, "num_ctas_per_sm": 1}
    assert format_kernel_config(cfg) == "wgmma 96x256x64 w96x32x64 st4 ws tma cta/sm1"

    class Kernel:  # attribute access, as on a HummingKernel
        mma_type = type("E", (), {"value": "mma"})()
        block_shape, warp_shape, num_stages = (8, 128, 64), (8, 64, 32), 4
        use_stream_k, use_warp_spec, use_tma, num_ctas_per_sm = True, False, False, 4

    assert format_kernel_config(Kernel(), num_sms=132) == "mma 8x128x64 w8x64x32 st4 sk cta/sm4 sms132"


# ---------------------------------------------------------------------------------------
# Floors and targets
# ---------------------------------------------------------------------------------------


def test_floor_formulas_hand_cases():
    assert floors.weight_bytes_per_expert(4096, 7168) == 4096 * 7168 // 2 + 4096 * 224 * 2
    assert floors.projection_bytes(64, 64, 2, 3, 5) == 2 * (64 * 32 + 128 * 2) + 3 * 64 * 2 + 5 * 64 * 2
    assert floors.projection_flops(4, 8, 3) == 192
    assert floors.bytes_floor_us(4e9, 4000) == pytest.approx(1000.0)
    assert floors.compute_floor_us(1e12, 500) == pytest.approx(2000.0)
    # The peer reference (humming-0.1.19-h200/full.txt): TP8 T=8192 uniform, every expert
    # touched, 8192 tokens, 65536 routes, copy 4248 GB/s -> bytes floor 552.4 us.
    fl = floors.point_floors([
        {"n": 512, "k": 7168, "rows": 65536, "rows_in": 8192, "experts_touched": 384},
        {"n": 7168, "k": 256, "rows": 65536, "rows_in": 65536, "experts_touched": 384},
    ], copy_gbs=4248, tflops=686)
    assert round(fl.bytes_us, 1) == 552.4
    assert fl.compute_us == pytest.approx(2 * 65536 * (512 * 7168 + 7168 * 256) / 686e12 * 1e6)
    assert fl.bound == "compute" and fl.larger_us == fl.compute_us  # 1052 us > 552 us


def test_bound_and_targets():
    launch = floors.Floors(bytes_us=40.0, compute_us=1.0, nbytes=0, flops=0)
    byts = floors.Floors(bytes_us=300.0, compute_us=100.0, nbytes=0, flops=0)
    comp = floors.Floors(bytes_us=400.0, compute_us=2000.0, nbytes=0, flops=0)
    assert (launch.bound, byts.bound, comp.bound) == ("launch", "bytes", "compute")
    assert floors.pct_of_floor(byts, 600.0) == pytest.approx(50.0)
    assert floors.pct_of_floor(byts, None) is None
    # launch-bound: >= 1.3x Humming
    assert floors.target_status(launch, 20.0, 26.0).met is True
    t = floors.target_status(launch, 20.0, 25.0)
    assert t.met is False and "1.25x < 1.3x" in t.detail
    # bytes-bound: >= 90 % of the bytes floor and not slower than Humming
    assert floors.target_status(byts, 330.0, 400.0).met is True  # 91 %
    t = floors.target_status(byts, 340.0, 400.0)
    assert t.met is False and "88% < 90%" in t.detail
    t = floors.target_status(byts, 330.0, 320.0)
    assert t.met is False and "x < 1.0x" in t.detail
    # compute-bound: >= 85 %
    assert floors.target_status(comp, 2350.0, 3000.0).met is True
    assert floors.target_status(comp, 2400.0, 3000.0).met is False
    missing = floors.target_status(comp, None, 3000.0)
    assert missing.met is None and "Chord" in missing.detail


def test_attainable_share_from_the_copy_probe():
    """benchmarks.attainable: the copy's overhead over its bytes, interpolated in log bytes, and
    the share of the bytes floor copies of each projection's bytes reach (a hand case), then the
    committed probe and grid: small-floor points fall short of 90 %, EP8 decode does not."""
    from benchmarks import attainable as A

    mb = A.MB
    probe = [{"mode": "zero", "kind": A.CEILING_KIND, "mb": 2048, "us": 1000.0, "gbs": 2048 * mb / 1e6},
             {"mode": "zero", "kind": A.COPY_KIND, "mb": 8, "us": 8 / 2048 * 1000 + 4.0},
             {"mode": "zero", "kind": A.COPY_KIND, "mb": 32, "us": 32 / 2048 * 1000 + 6.0},
             {"mode": "read", "kind": A.COPY_KIND, "mb": 8, "us": 1.0}]
    table = A.copy_overheads(probe)
    assert [b for b, _ in table] == [8 * mb, 32 * mb]
    assert [o for _, o in table] == pytest.approx([4.0, 6.0])
    assert A.overhead_us(table, 1) == pytest.approx(4.0) and A.overhead_us(table, 1 << 40) == pytest.approx(6.0)
    assert A.overhead_us(table, 16 * mb) == pytest.approx(5.0)  # halfway in log bytes
    gbs = 2048 * mb / 1e6  # GB/s: 2 GiB in 1000 µs, 1 MiB a 0.48828 µs
    proj = {"n": 64, "k": 64, "experts_touched": 0, "rows_in": 0, "rows": 16 * mb // 128}  # 16 MiB written
    floor = A.F.bytes_floor_us(16 * mb, gbs)
    assert A.attainable_share([proj], gbs, table) == pytest.approx(floor / (floor + 5.0))
    assert A.attainable_share([proj, proj], gbs, table) == pytest.approx(2 * floor / (2 * floor + 10.0))

    results = json.loads((REPO / "benchmarks/results/2026-12-05_h200_18e989a_grouped.json").read_text())
    rows = A.point_rows(results, A.copy_overheads(json.loads(A.PROBE.read_text())))
    by = {(r["path"], r["scenario"], r["dist"], r["T"]): r for r in rows}
    assert by["grouped_contiguous", "ep32", "uniform", 8]["attainable"] < 0.9
    assert by["grouped_contiguous", "ep8", "uniform", 20]["attainable"] > 0.95
    assert all(0 < r["attainable"] < 1 for r in rows)
    assert {r["bound"] for r in rows} == {"bytes", "launch"}  # the compute-bound points are left out
    t1 = by["grouped_masked", "ep8", "uniform", 1]
    assert t1["bound"] == "launch" and t1["floor_us"] < t1["copy_us"] < t1["humming_us"]
    text = A.render(rows)
    assert "could not" in text and "launch-bound points" in text


# ---------------------------------------------------------------------------------------
# The per-point loop, end to end on CPU (tiny shapes, Chord's CPU reference path)
# ---------------------------------------------------------------------------------------

TINY = {
    "tiny_ep": S.Scenario("tiny_ep", num_local_experts=48, tokens_factor=2, tp=1, hidden=64, intermediate=64),
    "tiny_tp": S.Scenario("tiny_tp", num_local_experts=384, tokens_factor=1, tp=2, hidden=64, intermediate=128),
}
TINY_POINTS = [S.Point("tiny_ep", "uniform", 4), S.Point("tiny_ep", "skew", 20), S.Point("tiny_tp", "uniform", 3)]


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    for name, scn in TINY.items():
        monkeypatch.setitem(S.SCENARIOS, name, scn)
    timings = {"single_ms": 0.02}
    monkeypatch.setattr(runner, "event_time_ms", lambda fn: (fn(), timings["single_ms"])[1])
    monkeypatch.setattr(runner, "bench_us", lambda fn, warmup_ms, rep_ms: 12.5)
    routing_dir = tmp_path / "routing"
    make_routing.write_all(routing_dir, TINY_POINTS, seed=0, verbose=False)
    return {"dir": tmp_path, "routing": routing_dir, "timings": timings}


def _run(backend, tiny, name, **kw):
    opts = runner.Options(routing_dir=tiny["routing"], out=tiny["dir"] / f"{name}.json", points=TINY_POINTS,
                          device="cpu", **kw)
    runner.run_side(backend, opts)
    return json.loads(opts.out.read_text())


def test_chord_side_end_to_end_on_cpu(tiny):
    from chord_kernels import dispatch

    from benchmarks.bench_chord import ChordBackend

    data = _run(ChordBackend(), tiny, "chord")
    assert data["meta"]["side"] == "chord" and data["meta"]["gpu"] == "cpu"
    pts = data["points"]
    assert len(pts) == 6
    for rec in pts:
        assert rec["status"] == "ok", rec
        assert rec["check"] == "ok" and rec["rel_err"] <= common.REL_ERR_TOL
        assert 0 <= rec["check_s"] <= rec["point_s"]  # where a grid run's minutes go
        meta = common.load_routing(tiny["routing"], S.Point(rec["scenario"], rec["dist"], rec["tokens"]))["meta"]
        assert rec["us"] == 12.5 and rec["block_m"] == dispatch.indexed_block_m(rec["valid_shape_m"], rec["num_experts"], rec["n"], rec["k"])
        assert rec["rows"] == meta["routes_kept"] and rec["experts_touched"] == meta["experts_touched"]
        assert rec["rows_in"] == (meta["tokens_touched"] if rec["proj"] == "gate_up" else meta["routes_kept"])
        assert rec["weights_digest"] and rec["routing_digest"] == meta["digest"]
    down = next(r for r in pts if r["scenario"] == "tiny_ep" and r["proj"] == "down")
    assert (down["n"], down["k"], down["top_k"], down["m"]) == (64, 64, 1, 64)


class _LazyBackend:
    """Writes nothing: every routed row keeps its NaN poison."""

    side = "lazy"
    path = "indexed"

    def meta(self):
        return {}

    def prepare(self, scenario, proj, weight_packed, weight_scale):
        return None

    def make_call(self, handle, a, topk_ids, expert_map, proj, point):
        out = torch.zeros(proj.output_rows(point.num_tokens), proj.n, dtype=torch.bfloat16)
        return runner.Call(fn=lambda: out, out=out, block_m=8)

    def describe(self, handle, call, point, proj):
        return "lazy"


def test_poisoned_rows_fail_the_check(tiny):
    pts = _run(_LazyBackend(), tiny, "lazy")["points"]
    assert all(r["check"] == "nan" and r["rel_err"] is None for r in pts)


def test_slow_and_budget_skips(tiny):
    tiny["timings"]["single_ms"] = 1000.0
    pts = _run(_LazyBackend(), tiny, "slow", slow_ms=250.0)["points"]
    assert all(r["status"] == "skipped (slow)" and r["us"] is None and r["us_single"] == 1e6 for r in pts)
    pts = _run(_LazyBackend(), tiny, "budget", budget_s=0.0)["points"]
    assert all(r["status"] == "skipped (budget)" and r["us"] is None for r in pts)


def test_settle_waits_fit_the_budget(tiny, monkeypatch):
    """Each point's wait for the power cap is at most --settle-s and at most half its share of the
    group's time left, so a GPU that stays capped costs waits, never skipped points; the wait is
    recorded with the point."""
    limits = []
    monkeypatch.setattr(runner, "_nvml", lambda device: object())
    monkeypatch.setattr(runner, "ClockSampler", lambda nvml: gpu_clocks.ClockSampler(None))
    monkeypatch.setattr(runner, "settle", lambda nvml, timeout_s: limits.append(timeout_s) or 0.25)
    pts = _run(_LazyBackend(), tiny, "settle", settle_s=3.0, budget_s=2.0)["points"]
    assert limits and all(0.0 <= t <= min(3.0, 2.0 / 2) for t in limits)
    timed = [r for r in pts if r["status"] == "ok"]
    assert len(timed) == len(limits) and all(r["settle_s"] == 0.25 for r in timed)
    limits.clear()
    _run(_LazyBackend(), tiny, "settle_fast", settle_s=0.1, budget_s=1000.0)
    assert limits and all(t == 0.1 for t in limits)


def test_errors_are_recorded_not_raised(tiny):
    class Broken(_LazyBackend):
        side = "broken"

        def make_call(self, *args):
            raise RuntimeError("launch failed\nbadly")

    pts = _run(Broken(), tiny, "broken")["points"]
    assert all(r["status"] == "error" and "launch failed badly" in r["error"] for r in pts)


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

CEILINGS = {"copy_gbs": 4000.0, "bf16_tflops": 700.0,
            "gpu": {"name": "NVIDIA H200", "sms": 132, "memory_gib": 139.8, "torch": "2.11", "cuda": "13.0",
                    "triton": "3.6"},
            "nvidia_smi": {"clocks.sm": "1980 MHz", "clocks.max.sm": "1980 MHz", "clocks.mem": "3201 MHz"}}


def _rec(side, scenario, dist, tokens, proj, us, **kw):
    n, k = {"gate_up": (4096, 7168), "down": (7168, 2048)}[proj]
    rec = {"side": side, "scenario": scenario, "dist": dist, "tokens": tokens, "proj": proj, "n": n, "k": k,
           "num_experts": 48, "rows": 160, "rows_in": 130 if proj == "gate_up" else 160,
           "experts_touched": 48, "us": us, "us_single": None, "status": "ok", "check": "ok",
           "rel_err": 2.2e-3, "block_m": 16, "config": f"{side}-cfg", "error": None,
           "weights_digest": f"w-{proj}", "routing_digest": "r"}
    rec.update(kw)
    return rec


def _sides():
    chord = {"meta": {"chord_version": "0.1.0", "warmup_ms": 10, "rep_ms": 50, "slow_ms": 250}, "points": [
        _rec("chord", "ep8", "uniform", 20, "gate_up", 250.0), _rec("chord", "ep8", "uniform", 20, "down", 100.0),
        _rec("chord", "ep8", "skew", 20, "gate_up", None, us_single=9000.0, status="skipped (slow)"),
        _rec("chord", "ep8", "skew", 20, "down", 90.0, check="fail", rel_err=0.02),
    ]}
    humming = {"meta": {"humming_version": "0.1.19"}, "points": [
        _rec("humming", "ep8", "uniform", 20, "gate_up", 197.6), _rec("humming", "ep8", "uniform", 20, "down", 114.0),
        _rec("humming", "ep8", "skew", 20, "gate_up", 171.0), _rec("humming", "ep8", "skew", 20, "down", 101.2),
    ]}
    return {"chord": chord, "humming": humming}


def test_report_merge_numbers():
    rows = report.merge(CEILINGS, _sides())
    assert [(r["scenario"], r["dist"], r["tokens"]) for r in rows] == [("ep8", "uniform", 20), ("ep8", "skew", 20)]
    uni, skew = rows
    assert uni["sides"]["chord"]["sum_us"] == 350.0
    assert uni["sides"]["humming"]["sum_us"] == pytest.approx(311.6)
    assert uni["speedup"] == pytest.approx(311.6 / 350.0)
    nbytes = 48 * (floors.weight_bytes_per_expert(4096, 7168) + floors.weight_bytes_per_expert(7168, 2048)) \
        + 130 * 7168 * 2 + 160 * 4096 * 2 + 160 * 2048 * 2 + 160 * 7168 * 2
    assert uni["floors"]["nbytes"] == nbytes
    assert uni["floors"]["bytes_us"] == pytest.approx(nbytes / 4000e9 * 1e6)
    assert uni["floors"]["bound"] == "bytes"
    assert uni["pct_floor"]["chord"] == pytest.approx(100 * uni["floors"]["bytes_us"] / 350.0)
    # 85 % of the bytes floor (< 90 %) and slower than Humming: both reasons reported
    assert uni["target"]["met"] is False
    assert uni["target"]["detail"] == "0.89x < 1.0x; 85% < 90%"
    assert uni["rows_per_expert"] == pytest.approx(160 / 48)
    # skew: a slow (single-call) gate_up and a failed check -> no sum, no target verdict
    assert skew["sides"]["chord"]["sum_us"] is None
    assert skew["sides"]["chord"]["sum_single_us"] == 9090.0
    assert skew["sides"]["chord"]["check_ok"] is False
    assert skew["target"]["met"] is None and skew["speedup"] is None
    assert uni["consistency"] == []


def test_report_flags_input_mismatch():
    sides = _sides()
    sides["humming"]["points"][0]["weights_digest"] = "other"
    rows = report.merge(CEILINGS, sides)
    assert rows[0]["consistency"] == ["gate_up: weights_digest differs"]
    assert "Inputs differ" in report.summarize(rows)


def test_report_markdown_doc_and_results(tmp_path):
    doc = tmp_path / "docs" / "performance.md"
    out = report.build(CEILINGS, _sides(), {"date": "2026-12-01", "commit": "abc1234"}, tmp_path / "results",
                       doc, None)
    md = out["markdown"]
    assert "| ep8 | uniform | 20 | 3.33 | 250.0 | 100.0 | 350.0 | 197.6 | 114.0 | 311.6 |" in md
    assert "| ep8 | skew | 20 |" in md and "(9000.0)" in md and "90.0 ✗" in md
    assert "0.89×" in md and "✗ 0.89x < 1.0x; 85% < 90%" in md and "NVIDIA H200" in md and "4000 GB/s" in md and "700 TFLOP/s" in md
    assert "chord-cfg" in md and "humming-cfg" in md
    assert out["results"].name == "2026-12-01_h200_abc1234.json"
    saved = json.loads(out["results"].read_text())
    assert saved["run"]["commit"] == "abc1234" and len(saved["points"]) == 2
    assert set(saved["raw"]) == {"chord", "humming"}
    text = doc.read_text()
    assert text.startswith("# Performance") and text.count(report.BEGIN) == 1 and text.count(report.END) == 1
    # a second run replaces only the marked section
    doc.write_text(text.replace("# Performance", "# Performance\n\nHand-written design log.") + "\nTrailer.\n")
    report.build(CEILINGS, _sides(), {"date": "2026-12-02", "commit": "def5678"}, None, doc, None)
    text = doc.read_text()
    assert "Hand-written design log." in text and text.rstrip().endswith("Trailer.")
    assert "def5678" in text and "abc1234" not in text and text.count(report.BEGIN) == 1


def test_report_appends_markers_to_existing_doc(tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# Notes\n\nkeep me\n")
    report.update_doc(doc, "BLOCK")
    assert doc.read_text() == f"# Notes\n\nkeep me\n\n{report.BEGIN}\nBLOCK\n{report.END}\n"


def test_report_with_one_side_missing():
    rows = report.merge(CEILINGS, {"chord": _sides()["chord"], "humming": None})
    assert rows[0]["sides"]["humming"] is None and rows[0]["target"]["met"] is None
    md = report.render_block(rows, CEILINGS, {"chord": _sides()["chord"], "humming": None},
                             {"date": "d", "commit": "c"})
    assert "| ep8 | uniform | 20 |" in md


def test_report_cli_end_to_end(tmp_path):
    sides = _sides()
    paths = {}
    for name, data in (("ceilings", CEILINGS), ("chord", sides["chord"]), ("humming", sides["humming"])):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    copy_to = tmp_path / "out"
    rc = report.main(["--ceilings", str(paths["ceilings"]), "--chord", str(paths["chord"]),
                      "--humming", str(paths["humming"]), "--commit", "abc", "--date", "2026-12-01",
                      "--results-dir", str(tmp_path / "results"), "--doc", str(tmp_path / "perf.md"),
                      "--plot-dir", str(tmp_path / "plots"), "--copy-to", str(copy_to)])
    assert rc == 0
    assert (copy_to / "2026-12-01_h200_abc.json").is_file() and (copy_to / "perf.md").is_file()


def test_plot_written_when_matplotlib_available(tmp_path):
    pytest.importorskip("matplotlib")
    rows = report.merge(CEILINGS, _sides())
    paths = report.plot(rows, tmp_path, {"date": "d", "commit": "c", "gpu": "H200"})
    assert [p.name for p in paths] == ["performance_ep8.png"] and paths[0].stat().st_size > 0


def test_report_keeps_one_path():
    sides = _sides()
    for rec in sides["humming"]["points"]:
        rec["path"] = "grouped_masked"
    rows = report.merge(CEILINGS, sides)  # indexed: the humming records are another path
    assert all(r["sides"]["humming"] is None for r in rows)
    rows = report.merge(CEILINGS, sides, path="grouped_masked")
    assert all(r["sides"]["chord"] is None and r["sides"]["humming"] for r in rows)


def test_chord_block_m_follows_dispatch(monkeypatch):
    from chord_kernels import dispatch

    from benchmarks import bench_chord

    problem = {"n": 4096, "k": 7168, "num_experts": 48, "top_k": 8, "num_routes": 1280, "valid_shape_m": 160}
    monkeypatch.delenv("CHORD_W4A16_BLOCK_M", raising=False)
    assert bench_chord.chord_block_m(problem) == dispatch.indexed_block_m(160, 48, 4096, 7168) == 8
    monkeypatch.setenv("CHORD_W4A16_BLOCK_M", "32")
    assert bench_chord.chord_block_m(problem) == 32


def test_chord_config_describes_dispatch_choice(monkeypatch):
    from chord_kernels import device

    from benchmarks import bench_chord

    monkeypatch.setattr(device, "kernel_arch", lambda index: "sm_90a")
    text = bench_chord.chord_config(4096, 7168, 48, 8, 16, torch.device("cuda", 0), 64)
    assert "arch=sm_90a" in text and text.endswith("bm=16")
    # describing never raises: a failing dispatch gives a readable note instead

    def no_gpu(index):
        raise RuntimeError("no SM90 here")

    monkeypatch.setattr(device, "kernel_arch", no_gpu)
    text = bench_chord.chord_config(4096, 7168, 48, 8, 16, torch.device("cuda", 0), 64)
    assert text == "bm=16 (config unknown: RuntimeError: no SM90 here)"


def test_results_name_slug():
    assert report.results_name("2026-12-01", "NVIDIA H200", "abc1234-dirty") == "2026-12-01_h200_abc1234-dirty.json"


def test_update_doc_replaces_marker_lines_not_quoted_markers(tmp_path):
    """Prose may quote a marker in inline code; only whole-line markers delimit the section."""
    from benchmarks import report

    doc = tmp_path / "perf.md"
    doc.write_text("intro: between `<!-- bench-grouped:begin -->` and `<!-- bench-grouped:end -->`.\n\n"
                   "<!-- bench-grouped:begin -->\nold\n<!-- bench-grouped:end -->\ntail\n")
    report.update_doc(doc, "new", report.GROUPED_BEGIN, report.GROUPED_END)
    text = doc.read_text()
    assert text.startswith("intro: between `<!-- bench-grouped:begin -->` and `<!-- bench-grouped:end -->`.")
    assert "\n<!-- bench-grouped:begin -->\nnew\n<!-- bench-grouped:end -->\ntail\n" in text and "old" not in text


def test_sweep_table_columns_and_sums(tmp_path):
    """benchmarks.sweep_table: one column per config file, per-projection rows and their sums;
    failed checks shown instead of a time, errored points (no config) named by their status."""
    import json

    from benchmarks import sweep_table

    def rec(proj, us, check="ok"):
        return {"scenario": "ep8", "dist": "uniform", "tokens": 2048, "proj": proj, "us": us, "check": check,
                "config": f"cfg-{proj}"}

    (tmp_path / "sweep_a.json").write_text(json.dumps({"points": [rec("gate_up", 10.0), rec("down", 5.0)]}))
    (tmp_path / "sweep_b.json").write_text(json.dumps({"points": [rec("gate_up", 8.0), rec("down", 1.0, "fail")]}))
    errored = {**rec("down", None, None), "config": None, "status": "error"}  # e.g. a tuning that does not fit
    (tmp_path / "sweep_c.json").write_text(json.dumps({"points": [rec("gate_up", 7.0), errored]}))
    text = sweep_table.table([tmp_path / f"sweep_{x}.json" for x in "abc"])
    assert "| scn | dist | T | proj | a | b | c |" in text
    assert "| ep8 | uniform | 2048 | down | 5.0 | fail | - |" in text
    # a config with a projection missing has no sum (half a sum would read as a win)
    assert "| ep8 | uniform | 2048 | **sum** | 15.0 | - | - |" in text
    assert "- c down: error" in text


def test_sweep_table_grouped_paths(tmp_path):
    """Grouped records (sweep.sh --family grouped) are keyed by path: one row per path and
    projection, one sum per path; indexed records keep the bare projection."""
    import json

    from benchmarks import sweep_table

    def rec(path, proj, us):
        return {"scenario": "ep8", "dist": "uniform", "tokens": 128, "path": path, "proj": proj, "us": us,
                "check": "ok", "config": "cfg"}

    points = [rec(p, proj, us) for p, us in (("grouped_contiguous", 1.0), ("grouped_masked", 10.0))
              for proj in ("gate_up", "down")]
    (tmp_path / "sweep_g.json").write_text(json.dumps({"points": points}))
    (tmp_path / "sweep_i.json").write_text(json.dumps({"points": [rec("indexed", "down", 3.0)]}))
    text = sweep_table.table([tmp_path / "sweep_g.json"])
    assert "| ep8 | uniform | 128 | masked/down | 10.0 |" in text
    assert "| ep8 | uniform | 128 | **contiguous sum** | 2.0 |" in text
    assert "| ep8 | uniform | 128 | **masked sum** | 20.0 |" in text
    assert "| ep8 | uniform | 128 | down | 3.0 |" in sweep_table.table([tmp_path / "sweep_i.json"])


@pytest.mark.parametrize("family,scenario", [("indexed", "ep8"), ("grouped", "ep8")])
def test_precompile_points_picks_the_runs_launches(family, scenario, tmp_path):
    """benchmarks.precompile_points compiles what the run will pick: EP8 T=64 takes 24-row blocks
    (the 512 x 24 tile) on both projections, both families."""
    import argparse

    from benchmarks import precompile_points

    point = S.Point(scenario, "uniform", 64)
    make_routing.write_all(tmp_path, [point], seed=0, verbose=False)
    parser = argparse.ArgumentParser()
    runner.add_bench_args(parser, default_out="unused.json")
    args = parser.parse_args(["--routing-dir", str(tmp_path), "--family", family, "--scenarios", scenario,
                              "--tokens", "64", "--dists", "uniform"])
    launches = precompile_points.point_launches(args, "sm_90a", 132)
    per_path = len(runner.family_paths(args))
    assert len(launches) == len(S.PROJECTIONS) * per_path
    assert all(launch.rows_per_cta == 24 for launch in launches), [launch.spec.symbol for launch in launches]


def test_precompile_points_and_config_cover_a_grouped_pair(tmp_path, monkeypatch):
    """EP16 T=2048 on the offsets and masked forms launches a pair of tile loops (dispatch.Launch.pick,
    the 240-row tile and the 256 x 128 tile): precompile_points compiles both kernels, and the point's
    config names both (benchmarks.ncu_ab_table counts two kernels for it)."""
    import argparse

    from benchmarks import bench_chord, ncu_ab_table, precompile_points

    point = S.Point("ep16", "uniform", 2048)
    make_routing.write_all(tmp_path, [point], seed=0, verbose=False)
    parser = argparse.ArgumentParser()
    runner.add_bench_args(parser, default_out="unused.json")
    args = parser.parse_args(["--routing-dir", str(tmp_path), "--family", "grouped", "--scenarios", "ep16",
                              "--tokens", "2048", "--dists", "uniform"])
    launches = precompile_points.point_launches(args, "sm_90a", 132)
    tall = [launch for launch in launches if launch.rows_per_cta == 240]
    paths = runner.family_paths(args)
    assert len(tall) == len(S.PROJECTIONS) * len(paths) and all(launch.pick for launch in tall)
    assert all(launch.pick[0] in launches for launch in tall)
    assert len(launches) == len(S.PROJECTIONS) * len(paths) * 2  # two each

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: argparse.Namespace(multi_processor_count=132))
    monkeypatch.setattr("chord_kernels.device.kernel_arch", lambda index: "sm_90a")
    monkeypatch.setattr("chord_kernels.device.memory_tbps", lambda index: 4.8)
    proj = S.SCENARIOS["ep16"].projections["gate_up"]
    rec = {"config": bench_chord.grouped_config("grouped_contiguous", proj.n, proj.k, 24, 683, torch.device("cuda", 0))}
    assert "tile=240x128; paired with " in rec["config"] and "tile=128x256 em=683" in rec["config"], rec
    assert ncu_ab_table.launches_per_call(rec) == 2
    masked = bench_chord.grouped_config("grouped_masked", proj.n, proj.k, 24, 683, torch.device("cuda", 0))
    assert ncu_ab_table.launches_per_call({"config": masked}) == 2 and "BLOCK_K=128" in masked, masked
    single = bench_chord.grouped_config("grouped_masked", proj.n, proj.k, 24, 120, torch.device("cuda", 0))
    assert ncu_ab_table.launches_per_call({"config": single}) == 1 and "config unknown" not in single


def test_dispatch_map_rows_and_changes(tmp_path, capsys):
    """benchmarks.dispatch_map: the run's choices on the CPU (EP32 T=32, both grouped forms and
    projections: the 256 x 32 tile loop at 22 rows an expert, grouped v48), and --against a tree with the same
    dispatch (this checkout) changes no row; changes() names a row whose kernel differs."""
    from benchmarks import dispatch_map

    argv = ["--routing-dir", str(tmp_path), "--family", "grouped", "--scenarios", "ep32", "--tokens", "32",
            "--dists", "uniform"]
    assert dispatch_map.main(argv + ["--json"]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(found) == len(S.PROJECTIONS) * len(S.GROUPED_PATHS)
    assert {(r["hint"], r["tile"]) for r in found} == {(22, "32x256")}, found
    assert (tmp_path / S.Point("ep32", "uniform", 32).routing_file).exists()  # drawn once, then reused
    other = [dict(found[0], kernel="another", tile="32x512")] + found[1:]
    diff = dispatch_map.changes(found, other)
    assert [(r["proj"], r["path"], r["against"], r["tile against"]) for r in diff] == \
        [(found[0]["proj"], found[0]["path"], "another", "32x512")]
    assert dispatch_map.main(argv + ["--against", str(Path(__file__).resolve().parent.parent)]) == 0
    assert capsys.readouterr().out.startswith(f"0 of {len(found)} rows pick another kernel")


def test_host_overhead_times_batches_behind_a_gpu_sleep(monkeypatch):
    """benchmarks.host_overhead.per_call_us queues each batch of calls behind a GPU sleep and times
    only the calls (CPU stubs for the CUDA calls): every call runs once, in batches of at most
    BATCH_CALLS, each batch after a sleep and before a synchronize."""
    from benchmarks import host_overhead

    events = []
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: events.append(("sleep", cycles)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: events.append(("sync",)))
    us = host_overhead.per_call_us(lambda: events.append(("call",)), 450, batch=200)
    assert us >= 0
    timed = events[events.index(("sync",)) + 1:]  # after the warm-up's 200 calls and its synchronize
    assert events[:200] == [("call",)] * 200
    batches, current = [], None
    for event in timed:
        if event[0] == "sleep":
            assert current is None and event[1] == host_overhead.BACKLOG_CYCLES
            current = 0
        elif event == ("call",):
            current += 1
        else:
            batches.append(current)
            current = None
    assert batches == [200, 200, 50]


def test_flush_mode_from_the_environment(monkeypatch):
    """CHORD_BENCH_FLUSH picks how do_bench empties the L2 (both sides read the same variable);
    do_bench's own memset by default, and a typo fails before anything is timed."""
    monkeypatch.delenv("CHORD_BENCH_FLUSH", raising=False)
    assert common.flush_mode() == "zero"
    monkeypatch.setenv("CHORD_BENCH_FLUSH", "read")
    assert common.flush_mode() == "read"
    monkeypatch.setenv("CHORD_BENCH_FLUSH", "clean")
    with pytest.raises(ValueError, match="CHORD_BENCH_FLUSH"):
        common.flush_mode()


# ---------------------------------------------------------------------------------------
# Clock and power during the timing (benchmarks/gpu_clocks.py)
# ---------------------------------------------------------------------------------------


class _FakeNvmlLib:
    """libnvidia-ml's calls as the sampler makes them (ctypes byref arguments), with set readings."""

    def __init__(self, clock=1650, power_mw=512_000, energy_mj=None, uuid_ok=True):
        self.clock, self.power_mw, self.energy_mj, self.uuid_ok = clock, power_mw, energy_mj, uuid_ok
        self.by_index = []

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByUUID(self, uuid, ref):
        return 0 if self.uuid_ok else 13

    def nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        self.by_index.append(index)
        return 0

    def nvmlDeviceGetClockInfo(self, handle, clock_type, ref):
        ref._obj.value = self.clock
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, ref):
        ref._obj.value = self.power_mw
        return 0

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, ref):
        ref._obj.value = 0x4  # software power cap
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle, ref):
        if self.energy_mj is None:
            return 3  # not supported
        ref._obj.value = self.energy_mj
        self.energy_mj += 50_000  # 50 J a reading
        return 0


def test_nvml_reads_through_the_driver_calls():
    from benchmarks import gpu_clocks

    lib = _FakeNvmlLib(energy_mj=1_000)
    nv = gpu_clocks.Nvml(0, "GPU-1234", lib=lib)
    assert (nv.sm_mhz(), nv.power_mw(), nv.energy_mj(), nv.clock_events()) == (1650, 512_000, 1_000, 0x4)
    assert lib.by_index == []  # found by UUID
    gpu_clocks.Nvml(2, "GPU-missing", lib=_FakeNvmlLib(uuid_ok=False))  # falls back to the index
    assert gpu_clocks.Nvml(3, None, lib=(lib3 := _FakeNvmlLib())).sm_mhz() == 1650 and lib3.by_index == [3]
    assert gpu_clocks.Nvml(0, None, lib=_FakeNvmlLib()).energy_mj() is None


def test_clock_sampler_summary_and_without_nvml():
    """Mean and lowest SM clock over the block; the power from the energy counter over the wall
    time where there is one, else the samples' mean; nothing at all without NVML."""
    from benchmarks import gpu_clocks

    class Readings:
        def __init__(self, clocks, energy=None):
            self.clocks, self.energy = list(clocks), energy

        def sm_mhz(self):
            return self.clocks.pop(0) if len(self.clocks) > 1 else self.clocks[0]

        def power_mw(self):
            return 400_000

        def energy_mj(self):
            return self.energy

        def clock_events(self):
            return 0x4 if len(self.clocks) == 2 else None  # one sample saw the power cap

    with gpu_clocks.ClockSampler(Readings([1500, 1700, 1600]), period_s=0.001) as s:
        import time

        time.sleep(0.02)
    out = s.summary()
    assert set(out) == {"sm_mhz", "sm_mhz_min", "power_w", "clock_events"} and out["clock_events"] == 0x4
    assert out["sm_mhz_min"] == 1500.0 and 1500 <= out["sm_mhz"] <= 1700 and out["power_w"] == 400.0
    s = gpu_clocks.ClockSampler(Readings([1600], energy=10_000))
    s._e0, s._e1, s._t0, s._t1, s.clocks, s.powers = 10_000, 610_000, 0.0, 1.2, [1600], [1]
    assert s.summary() == {"sm_mhz": 1600.0, "sm_mhz_min": 1600.0, "power_w": 500.0}  # 600 J in 1.2 s
    s._t1, s.powers = 0.06, [450_000, 470_000]  # a do_bench window: the counter's steps are too coarse
    assert s.summary()["power_w"] == 460.0
    with gpu_clocks.ClockSampler(None) as s:
        pass
    assert s.summary() == {}


def test_open_nvml_without_the_driver_says_so(monkeypatch, capsys):
    from benchmarks import gpu_clocks

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(gpu_clocks.ctypes, "CDLL", missing)
    assert gpu_clocks.open_nvml(0) is None
    assert "no NVML" in capsys.readouterr().err


def test_report_shows_clocks_where_recorded():
    sides = _sides()
    for rec in sides["chord"]["points"]:
        rec.update(sm_mhz=1500.4, sm_mhz_min=1410.0, power_w=655.2)
    for rec in sides["humming"]["points"][:2]:
        rec.update(sm_mhz=1700.0, sm_mhz_min=1650.0, power_w=600.0, clock_events=0)
    sides["chord"]["points"][0]["clock_events"] = 0x4 | 0x1  # power cap (and idle)
    rows = report.merge(CEILINGS, sides)
    configs = report.render_configs(rows)
    assert "| 1500 / 655 cap |" in configs and "| 1500 / 655 |" in configs and "| 1700 / 600 |" in configs
    assert configs.splitlines()[0].count("MHz / W") == 2
    text = report.summarize(rows)
    assert ("T ≤ 128: Chord 1500 MHz (lowest 1410), 655 W, power cap in 1 of 1 calls; "
            "Humming 1700 MHz (lowest 1650), 600 W, power cap in 0 of 2 calls") in text
    assert "T ≥ 512" not in text
    assert report.clock_summary(report.merge(CEILINGS, _sides())) == ""  # nothing recorded: no line


def test_settle_waits_for_the_power_cap_to_clear():
    """settle polls NVML's clock-event reasons with the GPU idle until no power or heat bit is
    set (idle, 0x1, does not count), at most its timeout; nothing without NVML or reasons."""
    from benchmarks import gpu_clocks

    class Events:
        def __init__(self, seq):
            self.seq = list(seq)

        def clock_events(self):
            return self.seq.pop(0) if len(self.seq) > 1 else self.seq[0]

    now = [0.0]

    def sleep(s):
        now[0] += s

    def run(seq, timeout_s=3.0):
        now[0] = 0.0
        return gpu_clocks.settle(Events(seq), timeout_s, period_s=0.5, sleep=sleep, clock=lambda: now[0])

    assert run([0x1]) == 0.0  # idle only: no wait
    assert run([0x4 | 0x1, 0x4, 0x40, 0x1]) == 1.5  # power cap, then heat, then clear
    assert run([0x80]) == 3.0  # never clears: the timeout
    assert run([None]) is None and run([0x4], timeout_s=0) is None
    assert gpu_clocks.settle(None, 3.0) is None


def test_report_counts_the_settle_waits():
    sides = _sides()
    for rec in sides["chord"]["points"]:
        rec.update(sm_mhz=1980.0, sm_mhz_min=1980.0, power_w=400.0, clock_events=0, settle_s=0.4)
    sides["chord"]["points"][0]["settle_s"] = 0.0
    sides["chord"]["meta"]["settle_s"] = 3.0
    text = report.summarize(report.merge(CEILINGS, sides))
    waited = 0.4 * (len(sides["chord"]["points"]) - 1)
    assert f"waited {waited:.1f} s before {len(sides['chord']['points']) - 1} calls" in text
    facts = "\n".join(report.run_facts(CEILINGS, sides, {}, "indexed"))
    assert "idles up to 3 s until NVML stops reporting" in facts


def test_clock_sampler_survives_an_nvml_error():
    from benchmarks import gpu_clocks

    class Failing:
        def sm_mhz(self):
            raise OSError("nvmlDeviceGetClockInfo returned NVML error 15")

        power_mw = sm_mhz

        def energy_mj(self):
            return None

        clock_events = energy_mj

    with gpu_clocks.ClockSampler(Failing(), period_s=0.001) as s:
        pass
    assert s.summary() == {}
