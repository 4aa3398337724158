"""CPU tests of the grouped family of the side-by-side benchmark (benchmarks/, --family grouped):
the grid and CLI selection, the grouped layouts both processes derive from one routing file
(offsets, counts, max_m, the valid rows of each buffer), the Chord side end to end on CPU
through Chord's CPU reference paths, the Humming side's call sequence against a stand-in
``humming`` module, and the report (one table over both paths, its own doc section, results
file name, plots when matplotlib is there)."""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `benchmarks` is a top-level folder of the repo, not installed
    sys.path.insert(0, str(REPO))

from benchmarks import common, floors, make_routing, report, runner  # noqa: E402
from benchmarks import scenarios as S  # noqa: E402

# ---------------------------------------------------------------------------------------
# Grid and selection
# ---------------------------------------------------------------------------------------


def test_families_and_grouped_grid():
    assert S.FAMILIES == {"indexed": ("indexed",), "grouped": ("grouped_contiguous", "grouped_masked")}
    assert S.family_of("indexed") == "indexed" and S.family_of("grouped_masked") == "grouped"
    with pytest.raises(ValueError, match="unknown kernel path"):
        S.family_of("grouped_contiguous_pad128")
    assert S.default_scenarios("indexed") == ("ep8", "tp8")
    assert S.default_scenarios("grouped") == ("ep8", "ep16", "ep32")
    points = S.grid(S.default_scenarios("grouped"))
    assert len(points) == 36  # 3 scenarios x (9 uniform + 3 skewed)
    for name, local, factor in (("ep8", 48, 8), ("ep16", 24, 16), ("ep32", 12, 32)):
        scn = S.SCENARIOS[name]
        assert (scn.num_local_experts, scn.tokens_factor) == (local, factor)
        assert (scn.projections["gate_up"].n, scn.projections["gate_up"].k) == (4096, 7168)
        assert (scn.projections["down"].n, scn.projections["down"].k) == (7168, 2048)
        assert [p.tokens for p in points if p.scenario == name and p.dist == "skew"] == [20, 128, 2048]


def test_grid_runs_the_tokens_asked_for_on_or_off_the_report_grid():
    # A sweep of block sizes needs T between the report's points; a T dropped without a word
    # would read as measured (it did: a sweep over T=256..1024 ran only 512).
    points = S.grid(("ep8",), tokens=[512, 384], dists=["uniform"])
    assert [(p.dist, p.tokens) for p in points] == [("uniform", 384), ("uniform", 512)]
    both = S.grid(("tp8",), tokens=[777])
    assert [(p.dist, p.tokens) for p in both] == [("uniform", 777), ("skew", 777)]
    with pytest.raises(ValueError, match="tokens must be >= 1"):
        S.grid(("ep8",), tokens=[0])
    quick = S.grid(S.default_scenarios("grouped"), quick=True)
    assert len(quick) == 15


def _args(**kw):
    base = dict(family="grouped", paths=None, scenarios=None, quick=True, tokens=None, dists=None,
                routing_dir=Path("r"), out=Path("o.json"), warmup_ms=10.0, rep_ms=50.0, slow_ms=250.0,
                budget_s=100.0, settle_s=3.0, seed=0, projections=None, levels=16)
    base.update(kw)
    return argparse.Namespace(**base)


def test_grouped_options_and_paths():
    opts = runner.options_from_args(_args())
    assert opts.family == "grouped" and {p.scenario for p in opts.points} == {"ep8", "ep16", "ep32"}
    assert runner.options_from_args(_args(family="indexed")).points == S.grid(quick=True)  # unchanged default
    with pytest.raises(SystemExit, match="EP-only"):
        runner.options_from_args(_args(scenarios="ep8,tp8"))
    assert runner.family_paths(_args()) == S.GROUPED_PATHS
    assert runner.family_paths(_args(paths="grouped_masked")) == ("grouped_masked",)
    assert runner.family_paths(_args(family="indexed")) == ("indexed",)
    with pytest.raises(SystemExit, match="not a path of the grouped family"):
        runner.family_paths(_args(paths="indexed"))
    parser = argparse.ArgumentParser()
    runner.add_bench_args(parser, default_out="x.json")
    args = parser.parse_args(["--routing-dir", "r", "--family", "grouped", "--quick"])
    assert args.family == "grouped" and args.scenarios is None


# ---------------------------------------------------------------------------------------
# Grouped layouts (routing -> offsets / counts / masked buffer)
# ---------------------------------------------------------------------------------------


def test_grouped_layout_hand_case():
    # 4 global experts, this rank holds global 0 and 2 as local 0 and 1; expert 1/3 elsewhere
    topk = torch.tensor([[0, 3], [2, 0], [1, 2], [2, 3]], dtype=torch.int32)
    emap = torch.tensor([0, -1, 1, -1], dtype=torch.int32)
    lay = common.grouped_layout(topk, emap, 2)
    assert lay.counts.tolist() == [2, 3] and lay.counts.dtype == torch.int32
    assert lay.offsets.tolist() == [0, 2, 5] and lay.offsets.dtype == torch.int64
    assert (lay.rows, lay.max_m, lay.expected_m, lay.num_routes) == (5, 64, 3, 8)
    assert lay.buffer_rows("grouped_contiguous") == 8  # vLLM's [num_tokens * top_k, K] buffer
    assert lay.buffer_rows("grouped_masked") == 128
    rows, experts = lay.valid_rows("grouped_contiguous")
    assert rows.tolist() == [0, 1, 2, 3, 4] and experts.tolist() == [0, 0, 1, 1, 1]
    rows, experts = lay.valid_rows("grouped_masked")
    assert rows.tolist() == [0, 1, 64, 65, 66] and experts.tolist() == [0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="not a grouped path"):
        lay.buffer_rows("indexed")
    # max_m: the largest count rounded up to 64, never below 64; an empty rank still has a buffer
    many = torch.zeros(65, 1, dtype=torch.int32)
    assert common.grouped_layout(many, None, 2).max_m == 128
    assert common.grouped_layout(torch.full((3, 1), 7, dtype=torch.int32), None, 2).max_m == 64
    empty = common.grouped_layout(torch.full((3, 2), 9, dtype=torch.int32), None, 4)
    assert (empty.rows, empty.expected_m, empty.max_m) == (0, 1, 64) and empty.valid_rows("grouped_masked")[0].numel() == 0


@pytest.mark.parametrize("point", [S.Point("ep8", "uniform", 20), S.Point("ep16", "skew", 128),
                                   S.Point("ep32", "uniform", 8)])
def test_grouped_layout_matches_chords_routing_builders(point):
    """The benchmark's layout (host side, both processes) equals what Chord's on-device routing
    builders make of the same routing file, and keeps exactly the indexed path's routes."""
    from chord_kernels import routing as R

    data = make_routing.make_point(point)
    topk, emap, meta = data["topk_ids"], data["expert_map"], data["meta"]
    local = point.spec.num_local_experts
    lay = common.grouped_layout(topk, emap, local)
    offsets, _ = R.contiguous_offsets(topk, local, emap)
    assert torch.equal(lay.offsets, offsets)
    masked_m, slots = R.masked_layout(topk, local, lay.max_m, emap)
    assert torch.equal(lay.counts, masked_m) and int(lay.counts.max()) <= lay.max_m
    assert lay.max_m % S.MASKED_ALIGN == 0 and lay.max_m - int(lay.counts.max()) < S.MASKED_ALIGN
    assert lay.rows == meta["routes_kept"] and lay.num_routes == point.num_routes
    assert sorted(slots[slots >= 0].tolist()) == lay.valid_rows("grouped_masked")[0].tolist()
    routes, experts = common.kept_routes(topk, emap, local)
    assert sorted(experts.tolist()) == lay.valid_rows("grouped_contiguous")[1].tolist()
    assert lay.expected_m == -(-meta["routes_kept"] // local)


def test_grouped_activations_fill_only_valid_rows():
    lay = common.grouped_layout(torch.tensor([[0, 1], [1, 2]], dtype=torch.int32), None, 3)
    for path in S.GROUPED_PATHS:
        a = common.make_grouped_activations(lay, path, 32, seed=5, device="cpu")
        rows, _ = lay.valid_rows(path)
        assert a.shape == (lay.buffer_rows(path), 32) and a.dtype == torch.bfloat16
        assert torch.equal(a[rows], common.make_activations(4, 32, 5, "cpu"))  # same rows on both paths
        keep = torch.zeros(a.shape[0], dtype=torch.bool)
        keep[rows] = True
        assert torch.isnan(a[~keep].float()).all()  # a row no call may read


def test_grouped_floors_count_one_input_row_per_route():
    point = S.Point("ep8", "uniform", 20)
    proj = point.spec.projections["gate_up"]
    rmeta = {"routes_kept": 160, "tokens_touched": 130, "experts_touched": 48, "digest": "d"}
    grouped = runner.base_record("chord", point, proj, rmeta, "grouped_masked")
    indexed = runner.base_record("chord", point, proj, rmeta)
    assert (grouped["family"], grouped["top_k"], grouped["rows_in"]) == ("grouped", 1, 160)
    assert (indexed["family"], indexed["top_k"], indexed["rows_in"]) == ("indexed", 8, 130)
    fl = floors.point_floors([grouped], copy_gbs=4000, tflops=700)
    assert fl.nbytes == 48 * floors.weight_bytes_per_expert(4096, 7168) + 160 * 7168 * 2 + 160 * 4096 * 2


# ---------------------------------------------------------------------------------------
# Chord side, end to end on CPU (tiny EP shapes, Chord's CPU reference paths)
# ---------------------------------------------------------------------------------------

# K a multiple of 128 on both projections: the masked packing has BLOCK_K 128
TINY_EP = S.Scenario("tiny_gep", num_local_experts=12, tokens_factor=4, tp=1, hidden=128, intermediate=128)
TINY_POINTS = [S.Point("tiny_gep", "uniform", 2), S.Point("tiny_gep", "skew", 20)]


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setitem(S.SCENARIOS, "tiny_gep", TINY_EP)
    monkeypatch.setattr(runner, "event_time_ms", lambda fn: (fn(), 0.02)[1])
    monkeypatch.setattr(runner, "bench_us", lambda fn, warmup_ms, rep_ms: 12.5)
    routing_dir = tmp_path / "routing"
    make_routing.write_all(routing_dir, TINY_POINTS, seed=0, verbose=False)
    return {"dir": tmp_path, "routing": routing_dir}


def _run(backends, tiny, name):
    opts = runner.Options(routing_dir=tiny["routing"], out=tiny["dir"] / f"{name}.json", points=TINY_POINTS,
                          device="cpu", family="grouped")
    runner.run_side(backends, opts)
    return json.loads(opts.out.read_text())


def test_chord_grouped_end_to_end_on_cpu(tiny):
    from benchmarks.bench_chord import ChordGroupedBackend, backends_for

    assert [b.path for b in backends_for(_args())] == list(S.GROUPED_PATHS)
    data = _run(backends_for(_args()), tiny, "chord_grouped")
    assert data["meta"]["family"] == "grouped" and data["meta"]["path"] == "grouped_contiguous,grouped_masked"
    pts = data["points"]
    assert len(pts) == 2 * 2 * 2  # points x projections x paths
    for rec in pts:
        assert rec["status"] == "ok" and rec["check"] == "ok", rec
        point = S.Point(rec["scenario"], rec["dist"], rec["tokens"])
        routing = common.load_routing(tiny["routing"], point)
        lay = common.grouped_layout(routing["topk_ids"], routing["expert_map"], 12)
        assert rec["family"] == "grouped" and rec["top_k"] == 1
        assert rec["rows"] == rec["rows_in"] == lay.rows == routing["meta"]["routes_kept"]
        assert rec["m"] == lay.buffer_rows(rec["path"]) and rec["max_m"] == lay.max_m
        assert rec["layout_digest"] == lay.digest() and rec["weights_digest"]
        hint = -(-point.valid_shape_m // 12) if rec["path"] == "grouped_contiguous" else lay.expected_m
        assert rec["extra_expected_m_hint"] == hint and rec["block_m"] is None
    # the groups run scenario by scenario with both paths of a projection next to each other
    order = list(dict.fromkeys((r["proj"], r["path"]) for r in pts))
    assert order == [("gate_up", "grouped_contiguous"), ("gate_up", "grouped_masked"),
                     ("down", "grouped_contiguous"), ("down", "grouped_masked")]
    with pytest.raises(ValueError, match="not a grouped path"):
        ChordGroupedBackend("indexed")


def test_grouped_poison_and_wrong_rows_fail_the_check(tiny):
    """A side that skips rows, or writes a valid row wrong, fails the grouped check."""

    class Lazy:
        side = "lazy"

        def __init__(self, path, scale):
            self.path, self.scale = path, scale

        def meta(self):
            return {}

        def prepare(self, scenario, proj, wp, ws):
            return (wp, ws)

        def make_call(self, handle, a, layout, proj, point):
            out = torch.empty(a.shape[0], proj.n, dtype=torch.bfloat16)
            rows, experts = layout.valid_rows(self.path)

            def fn():
                if self.scale:
                    ref = common.reference_rows(a, *handle, rows, experts, 1)
                    out[rows] = (ref * self.scale).to(torch.bfloat16)
                return out

            return runner.Call(fn=fn, out=out, block_m=None)

        def describe(self, handle, call, point, proj):
            return "lazy"

    pts = _run([Lazy("grouped_masked", 0.0)], tiny, "lazy")["points"]
    assert all(r["check"] == "nan" for r in pts if r["rows"])
    pts = _run([Lazy("grouped_contiguous", 1.0)], tiny, "exact")["points"]
    assert all(r["check"] == "ok" for r in pts)
    pts = _run([Lazy("grouped_contiguous", 1.05)], tiny, "wrong")["points"]
    assert all(r["check"] == "fail" for r in pts if r["rows"])


# ---------------------------------------------------------------------------------------
# Humming side: the call sequence, against a stand-in `humming` package
# ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_humming(monkeypatch, tmp_path):
    """Just enough of humming's API for bench_humming's grouped backend; records every call."""
    calls = []

    class GemmType:
        def __init__(self, value):
            assert value in ("indexed", "grouped_contiguous", "grouped_masked")
            self.value = value

    class Schema:
        @staticmethod
        def from_config(cfg):
            calls.append(("from_config", cfg))
            return Schema()

        def convert_humming(self, **kw):
            calls.append(("convert_humming", kw))
            return "weight_schema", dict(kw["tensors"])

    class LayerConfig:
        b_dtype = "uint4"

        def to_str(self):
            return "{}"

    def prepare(**kw):
        calls.append(("prepare", kw))
        return LayerConfig(), {"weight": kw["tensors"]["weight_packed"], "weight_scale": kw["tensors"]["weight_scale"]}

    def heuristics(**kw):
        calls.append(("heuristics", kw))
        return [[0, 64, {"block_shape": [16, 256, 64]}], [64, 1 << 30, {"block_shape": [96, 256, 64]}]]

    def forward(cfg, **kw):
        calls.append(("forward", kw))
        return kw["outputs"]

    root = tmp_path / "site" / "humming"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    mods = {"humming": types.ModuleType("humming"), "humming.config": types.ModuleType("humming.config"),
            "humming.forward": types.ModuleType("humming.forward"), "humming.schema": types.ModuleType("humming.schema"),
            "humming.transform": types.ModuleType("humming.transform"), "humming.tune": types.ModuleType("humming.tune")}
    mods["humming"].__file__ = str(root / "__init__.py")
    mods["humming"].__version__ = "0.1.19"
    mods["humming.config"].GemmType = GemmType
    mods["humming.forward"].humming_forward = forward
    mods["humming.schema"].BaseWeightSchema = Schema
    mods["humming.schema"].HummingInputSchema = lambda: "input_schema"
    mods["humming.transform"].prepare_and_transform_humming_tensors = prepare
    mods["humming.tune"].get_heuristics_config = heuristics
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv("HUMMING_SITE", raising=False)
    return calls


@pytest.mark.parametrize("path", S.GROUPED_PATHS)
def test_humming_grouped_call_sequence(fake_humming, monkeypatch, path):
    from benchmarks import bench_humming

    monkeypatch.setattr(bench_humming.HummingBackend, "_compile_table", staticmethod(lambda handle, device: None))
    monkeypatch.setattr(bench_humming.HummingBackend, "locks", lambda self, device: "locks")
    backends = bench_humming.backends_for(_args(paths=path), routing_module=None)
    assert [b.path for b in backends] == [path]
    backend = backends[0]
    assert backend.meta()["compute_config"] == {"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": path}
    scenario = S.SCENARIOS["ep16"]
    proj = scenario.projections["gate_up"]
    wp, ws = common.make_weights(2, 32, 64, seed=0, device="cpu")
    handle = backend.prepare(scenario, proj, wp, ws)
    kinds = [c[0] for c in fake_humming]
    assert kinds == ["from_config", "convert_humming", "prepare", "heuristics"]
    assert fake_humming[1][1]["shape_n_stacks"] == [2048, 2048] and fake_humming[1][1]["num_experts"] == 24
    assert fake_humming[3][1]["gemm_type"].value == path
    assert json.loads(handle.compute_str)["gemm_type"] == path
    point = S.Point("ep16", "uniform", 20)
    topk = make_routing.make_point(point)["topk_ids"]
    lay = common.grouped_layout(topk, make_routing.expert_map_tensor(scenario), 24)
    a = torch.zeros(lay.buffer_rows(path), 16, dtype=torch.bfloat16)
    call = backend.make_call(handle, a, lay, proj, point)
    assert call.out.shape == (a.shape[0], proj.n) and call.block_m == 96  # table entry at valid_shape_m 160
    call.fn()
    kw = fake_humming[-1][1]
    assert kw["inputs"] is a and kw["outputs"] is call.out and kw["locks"] == "locks"
    assert kw["valid_shape_m"] == point.valid_shape_m == 160
    assert "sorted_ids" not in kw and "top_k" not in kw  # vLLM's grouped call passes neither
    want = lay.offsets if path == "grouped_contiguous" else lay.counts
    assert kw["expert_layout"].dtype == want.dtype and torch.equal(kw["expert_layout"], want)
    assert json.loads(kw["compute_config"])["gemm_type"] == path
    assert call.extra == {"tuning_interval": [64, 1 << 30], "b_dtype": "uint4"}


def test_humming_indexed_backend_unchanged(fake_humming, monkeypatch):
    from benchmarks import bench_humming

    monkeypatch.setattr(bench_humming.HummingBackend, "_compile_table", staticmethod(lambda handle, device: None))
    backend = bench_humming.backends_for(_args(family="indexed"), routing_module=None)[0]
    assert type(backend) is bench_humming.HummingBackend and backend.path == "indexed"
    wp, ws = common.make_weights(2, 32, 64, seed=0, device="cpu")
    handle = backend.prepare(S.SCENARIOS["ep8"], S.SCENARIOS["ep8"].projections["down"], wp, ws)
    assert fake_humming[3][1]["gemm_type"].value == "indexed"
    assert json.loads(handle.compute_str) == bench_humming.COMPUTE_CONFIG


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

CEILINGS = {"copy_gbs": 4000.0, "bf16_tflops": 700.0,
            "gpu": {"name": "NVIDIA H200", "sms": 132, "memory_gib": 139.8, "torch": "2.11", "cuda": "13.0",
                    "triton": "3.6"},
            "nvidia_smi": {"clocks.sm": "1980 MHz", "clocks.max.sm": "1980 MHz", "clocks.mem": "3201 MHz"}}


def _rec(side, path, scenario, dist, tokens, proj, us, **kw):
    n, k = {"gate_up": (4096, 7168), "down": (7168, 2048)}[proj]
    rec = {"side": side, "path": path, "family": "grouped", "scenario": scenario, "dist": dist, "tokens": tokens,
           "proj": proj, "n": n, "k": k, "num_experts": 24, "rows": 320, "rows_in": 320, "experts_touched": 24,
           "top_k": 1, "m": 2560, "max_m": 64, "expected_m": 14, "us": us, "us_single": None, "status": "ok",
           "check": "ok", "rel_err": 2e-3, "block_m": None, "config": f"{side}-{path}", "error": None,
           "weights_digest": f"w-{proj}", "routing_digest": "r", "layout_digest": "l"}
    rec.update(kw)
    return rec


def _grouped_sides():
    def side(name, us):
        return {"meta": {"side": name, "family": "grouped", "chord_version": "0.1.0", "humming_version": "0.1.19",
                         "warmup_ms": 10, "rep_ms": 50},
                "points": [_rec(name, path, scn, "uniform", 20, proj, us[path][proj])
                           for path in S.GROUPED_PATHS for scn in ("ep16", "ep8") for proj in S.PROJECTIONS]}
    return {"chord": side("chord", {"grouped_contiguous": {"gate_up": 150.0, "down": 80.0},
                                    "grouped_masked": {"gate_up": 140.0, "down": 70.0}}),
            "humming": side("humming", {"grouped_contiguous": {"gate_up": 120.0, "down": 60.0},
                                        "grouped_masked": {"gate_up": 140.0, "down": 70.0}})}


def test_grouped_report_rows_and_table(tmp_path):
    rows = report.merge_grouped(CEILINGS, _grouped_sides())
    assert [(r["path"], r["scenario"]) for r in rows] == [
        ("grouped_contiguous", "ep8"), ("grouped_contiguous", "ep16"), ("grouped_masked", "ep8"),
        ("grouped_masked", "ep16")]
    contig, masked = rows[0], rows[2]
    assert contig["sides"]["chord"]["sum_us"] == 230.0 and contig["speedup"] == pytest.approx(180 / 230)
    assert masked["speedup"] == pytest.approx(1.0)
    nbytes = 24 * (floors.weight_bytes_per_expert(4096, 7168) + floors.weight_bytes_per_expert(7168, 2048)) \
        + 320 * 7168 * 2 + 320 * 4096 * 2 + 320 * 2048 * 2 + 320 * 7168 * 2
    assert contig["floors"]["nbytes"] == nbytes
    assert contig["pct_floor"]["humming"] == pytest.approx(100 * contig["floors"]["larger_us"] / 180.0)
    md = report.render_grouped_block(rows, CEILINGS, _grouped_sides(), {"date": "d", "commit": "c"})
    assert "| path | scenario | router | T |" in md
    assert "| grouped_contiguous | ep8 | uniform | 20 | 13.33 | 150.0 | 80.0 | 230.0 | 120.0 | 60.0 | 180.0 |" in md
    assert "| grouped_masked | ep16 | uniform | 20 |" in md and "chord-grouped_masked" in md
    assert "0.78×" in md and "1.00×" in md and "Grouped family" in md
    # the indexed report of the same files sees no indexed rows
    assert report.merge(CEILINGS, _grouped_sides()) == []


def test_grouped_report_doc_section_results_and_cli(tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\n{report.BEGIN}\nINDEXED TABLE\n{report.END}\n\nTrailer.\n")
    sides = _grouped_sides()
    paths = {"ceilings": tmp_path / "c.json", "chord": tmp_path / "chord_grouped.json",
             "humming": tmp_path / "humming_grouped.json"}
    for name, data in (("ceilings", CEILINGS), ("chord", sides["chord"]), ("humming", sides["humming"])):
        paths[name].write_text(json.dumps(data))
    copy_to = tmp_path / "out"
    rc = report.main(["--family", "grouped", "--ceilings", str(paths["ceilings"]), "--chord", str(paths["chord"]),
                      "--humming", str(paths["humming"]), "--commit", "abc", "--date", "2026-12-01",
                      "--results-dir", str(tmp_path / "results"), "--doc", str(doc),
                      "--plot-dir", str(tmp_path / "plots"), "--copy-to", str(copy_to)])
    assert rc == 0
    text = doc.read_text()
    assert "INDEXED TABLE" in text and text.rstrip().endswith(report.GROUPED_END)  # indexed section kept
    assert text.count(report.GROUPED_BEGIN) == 1 and "| grouped_masked | ep8 |" in text and "Trailer." in text
    saved = json.loads((tmp_path / "results" / "2026-12-01_h200_abc_grouped.json").read_text())
    assert saved["family"] == "grouped" and len(saved["points"]) == 4 and set(saved["raw"]) == {"chord", "humming"}
    assert (copy_to / "2026-12-01_h200_abc_grouped.json").is_file()
    # a second grouped run replaces only the grouped section
    report.build(CEILINGS, sides, {"date": "2026-12-02", "commit": "def"}, None, doc, None, family="grouped")
    text = doc.read_text()
    assert "INDEXED TABLE" in text and "`def`" in text and "`abc`" not in text
    assert text.count(report.GROUPED_BEGIN) == 1
    assert report.results_name("2026-12-01", "NVIDIA H200", "abc") == "2026-12-01_h200_abc.json"  # indexed: as before


def test_grouped_plot_written_when_matplotlib_available(tmp_path):
    pytest.importorskip("matplotlib")
    rows = report.merge_grouped(CEILINGS, _grouped_sides())
    paths = report.plot_grouped(rows, tmp_path, {"date": "d", "commit": "c", "gpu": "H200"})
    assert [p.name for p in paths] == ["performance_grouped_ep8.png", "performance_grouped_ep16.png"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_grouped_layout_ab_needs_a_gpu_and_says_so(monkeypatch):
    """The layout A/B tool imports without a GPU (no chord_kernels import at module level) and
    refuses clearly instead of failing inside a kernel call."""
    from benchmarks import grouped_layout_ab

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        grouped_layout_ab.main(["--case", "64,256,8,4"])


def _humming_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    runner.add_bench_args(parser, default_out="h.json")
    parser.add_argument("--prewarm", type=int, default=0)
    return parser.parse_args(["--routing-dir", "R", *argv])


def test_humming_prewarm_covers_every_group_of_the_run(capsys):
    """bench_humming --prewarm compiles the tuning table of each (path, scenario, projection) the
    timed side will prepare, and a failed group is reported, not fatal."""
    from benchmarks import bench_humming

    grouped = _humming_args("--family", "grouped", "--scenarios", "ep8,ep32", "--tokens", "8,2048")
    assert bench_humming.prewarm_groups(grouped) == [
        (path, scn, proj) for scn in ("ep8", "ep32") for proj in S.PROJECTIONS for path in S.GROUPED_PATHS]
    indexed = _humming_args("--scenarios", "tp8", "--projections", "down")
    assert bench_humming.prewarm_groups(indexed) == [("indexed", "tp8", "down")]

    seen = []

    def fake(group, seed, levels):
        seen.append((group, seed, levels))
        return 1.5, ("RuntimeError: boom" if group[1] == "ep32" else None)

    assert bench_humming.prewarm(grouped, 1, run_group=fake) == 2 * len(S.PROJECTIONS)
    assert [s[0] for s in seen] == bench_humming.prewarm_groups(grouped) and seen[0][1:] == (0, 16)
    out = capsys.readouterr().out
    assert "prewarm grouped_contiguous/ep8/gate_up: 1.5 s" in out and "FAILED RuntimeError: boom" in out
