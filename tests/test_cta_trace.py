"""The per-CTA trace (chord_kernels.cta_trace, CHORD_CTA_TRACE=1): the traced build is its own
source and cubin (the normal one byte for byte as before), compiles for sm_90a with the records'
global under its C name, and the host side parses, summarizes and round-trips the records. The
device half (stamps, read-back) runs on the GPU only: benchmarks/cta_trace.sh."""

import dataclasses
import json
import struct

import pytest
from chord_kernels import _launcher, cta_trace, dispatch
from chord_kernels.dispatch import indexed_simple
from chord_kernels.jit import compiler, launch

from benchmarks import common, cta_trace_report

SPEC = indexed_simple().spec
TRACED = dataclasses.replace(SPEC, trace=True)


def test_traced_source_wraps_the_body_and_the_plain_one_is_unchanged():
    plain = SPEC.source()
    assert "cta_trace" not in plain
    assert plain == (f'#include "{SPEC.header}"\n\nextern "C" __global__ void __launch_bounds__(128, 1)\n'
                     f"{SPEC.symbol}(const __grid_constant__ chord::MoeParams params) {{\n"
                     f"  chord::IndexedSimple<64>::run(chord::moe_params(params));\n}}\n")
    traced = TRACED.source()
    begin, run, end = (traced.index(s) for s in ("cta_trace_begin();", "::run(", "cta_trace_end();"))
    assert begin < run < end and '#include "common/cta_trace.cuh"' in traced
    assert TRACED.symbol == SPEC.symbol and TRACED.describe().endswith(" trace")
    assert compiler.cache_key(TRACED, compiler_version="v") != compiler.cache_key(SPEC, compiler_version="v")


def test_the_environment_switch_loads_the_traced_build(monkeypatch):
    loaded = []
    monkeypatch.setattr(launch, "_load", lambda spec, device, smem: loaded.append(spec) or spec)
    monkeypatch.delenv("CHORD_CTA_TRACE", raising=False)
    assert launch.load_kernel(SPEC, 0) is SPEC
    monkeypatch.setenv("CHORD_CTA_TRACE", "1")
    assert launch.load_kernel(SPEC, 0) == TRACED


# The stream-K kernels note their schedule in the traced build (#ifdef CHORD_CTA_TRACE in their
# headers): both tiles, both families, compiled that way too.
STREAM_K = (dispatch.indexed_mma_streamk(2, 1, 256, 3), dispatch.indexed_wgmma_streamk(2, 56, 8),
            dispatch.grouped_mma_streamk("contiguous_offsets", 4, 1, 128, 64, 3))


@pytest.mark.parametrize("spec", [SPEC] + [launch.spec for launch in STREAM_K], ids=lambda s: s.family)
def test_traced_kernel_compiles_with_its_records_global(spec, tmp_path, monkeypatch, real_nvcc):
    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path))
    cubin = compiler.compile_kernel(dataclasses.replace(spec, trace=True)).read_bytes()
    assert cta_trace.GLOBAL_NAME.encode() + b"\0" in cubin  # the ELF symbol cuModuleGetGlobal looks up
    assert cta_trace.GLOBAL_NAME.encode() not in compiler.compile_kernel(spec).read_bytes()


def test_the_launcher_reads_and_zeroes_module_globals():
    assert callable(_launcher.read_global) and callable(_launcher.zero_global)


def record(smid, c0, c1, t0, t1, valid=1, schedule=(0,) * 7):
    return struct.pack("<IIQQQQ8i", smid, valid, c0, c1, t0, t1, *schedule, 0)


def sample() -> list[cta_trace.CtaRecord]:
    # CTAs 0 and 2 on SM 5 (clock 1000..), CTA 1 on SM 7, CTA 3 never ran.
    raw = (record(5, 1000, 1600, 10_000, 10_300) + record(7, 50, 450, 10_010, 10_210)
           + record(5, 1010, 2010, 10_005, 10_505) + record(0, 0, 0, 0, 0, valid=0))
    return cta_trace.parse(raw)


def test_parse_keeps_the_ctas_that_ran():
    records = sample()
    assert [(r.cta, r.sm, r.cycles) for r in records] == [(0, 5, 600), (1, 7, 400), (2, 5, 1000)]
    with pytest.raises(ValueError, match="whole number of 72-byte records"):
        cta_trace.parse(b"\0" * 73)


def test_summary_and_sm_spans():
    records = sample()
    loads = {s.sm: s for s in cta_trace.sm_loads(records)}
    assert loads[5].ctas == (0, 2) and loads[5].busy_cycles == 2010 - 1000
    assert loads[7].busy_cycles == 400
    s = cta_trace.summary(records)
    assert s["ctas"] == 3 and s["sms"] == 2
    assert s["cta_cycles"] == {"min": 400, "mean": 667, "max": 1000, "std": 249}
    assert s["sm_busy_cycles"] == {"min": 400, "mean": 705, "max": 1010}
    assert s["slowest"][0] == (2, 5, 1000) and s["fastest"][0] == (1, 7, 400)
    assert s["start_spread_ns"] == 10 and s["elapsed_ns"] == 505
    assert cta_trace.index_profile(records, bins=2) == [(0, 1, 500, 0), (2, 2, 1000, 0)]
    # SM 5's CTAs 0 (clock 1000) then 2 (1010); SM 7's CTA 1 alone
    assert cta_trace.by_arrival(records) == [(0, 2, 500, 0), (1, 1, 1000, 0)]
    assert "3 CTAs on 2 SMs" in cta_trace.format_summary({"k": records})


def test_stream_k_schedule_notes():
    # 3 CTAs, 10 tiles of 4 stages (2 column tiles a row tile): whole tiles 0-5 (two waves), then
    # the 16 stream-K iterations from 24 on in runs of 6, 6, 4 (tile 7 split between CTAs 0 and 1).
    notes = [(2 * 4 + 6, 24, 30), (2 * 4 + 6, 30, 36), (2 * 4 + 4, 36, 40)]
    raw = b"".join(record(c, 0, 100 + c, 0, 1, schedule=(it, sk0, sk1, 4, 6, 10, 2)) for c, (it, sk0, sk1) in enumerate(notes))
    r0, r1, r2 = cta_trace.parse(raw)
    assert r0.segments(3) == [(0, 0, 4), (3, 0, 4), (6, 0, 4), (7, 0, 2)]
    assert r1.segments(3) == [(1, 0, 4), (4, 0, 4), (7, 2, 4), (8, 0, 4)]
    assert r2.segments(3) == [(2, 0, 4), (5, 0, 4), (9, 0, 4)]
    assert r1.work(3) == {"iterations": 14, "segments": 4, "split": 1, "row_tiles": 4}
    assert r2.work(3) == {"iterations": 12, "segments": 3, "split": 0, "row_tiles": 3}
    assert cta_trace.by_work([r0, r1, r2])[0][1] == 1
    assert cta_trace.from_json(cta_trace.to_json({"k": [r1]}))["k"][0].work(3) == r1.work(3)


def test_json_round_trip_and_report(tmp_path):
    records = sample()
    data = cta_trace.to_json({"k": records})
    back = cta_trace.from_json(json.loads(json.dumps(data)))["k"]
    assert [r.cycles for r in back] == [r.cycles for r in records]
    assert [r.start_ns for r in back] == [0, 10, 5]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"points": [{"scenario": "ep8", "tokens": 20, "dist": "skew", "proj": "gate_up",
                                            "config": "cfg", "cta_trace": data}, {"scenario": "tp8"}]}))
    text = cta_trace_report.report(str(path), bins=3, sms=1)
    assert text.startswith("## ep8 T=20 skew gate_up: cfg") and "busiest SMs" in text and "tp8" not in text
    assert "by arrival on its SM (rank, CTAs, mean cycles, mean iterations): (0, 2, 500, 0), (1, 1, 1000, 0)" in text


def test_benchmark_hook_is_off_without_the_switch(monkeypatch):
    monkeypatch.delenv("CHORD_CTA_TRACE", raising=False)
    rec = {}
    common.trace_ctas(lambda: pytest.fail("called"), None, rec)
    assert rec == {}
