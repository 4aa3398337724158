"""benchmarks/probes/: the probes (the wgmma k loop alone, the weight stream alone) compile against
today's headers (real nvcc, sm_90a) with no spill and no serialized wgmma, and tables.py reads
their JSON lines. The probes themselves run on the GPU only (run_probe.sh)."""

import importlib.util
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "benchmarks" / "probes"

_spec = importlib.util.spec_from_file_location("probe_tables", PROBES / "tables.py")
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)


def _compile_probe(nvcc: str, source: str, out: Path) -> str:
    """ptxas's -v log of one probe built as run_probe.sh builds it."""
    cmd = [nvcc, "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
           "-I", str(ROOT / "csrc"), "-Xptxas", "-v", str(PROBES / source), "-o", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stderr


def test_mainloop_probe_compiles_clean(tmp_path, real_nvcc):
    log = _compile_probe(real_nvcc, "wgmma_mainloop.cu", tmp_path / "probe")
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(kernels) >= 30, log[-2000:]
    assert set(re.findall(r"(\d+) bytes spill stores", log)) == {"0"}, "a probe kernel spills: it would time the spill"
    assert not re.findall(r"C751\d", log), "ptxas serialized a probe's wgmmas: it would time the serialization"


def test_mainloop_table(tmp_path):
    record = {"tile": "TP8 T=2048 down", "wm": 2, "bn": 56, "cwg": 2, "work": "production", "depth": 1,
              "operands_per_step": False, "grid": 132, "stages": 4096, "registers": 168, "local_bytes": 0,
              "cycles_per_stage": 896.0, "cycles_per_stage_slowest_cta": 910.0, "tensor_cycles_nominal": 448.0,
              "kernel_us": 1900.0, "mhz_estimate": 1930}
    dequant = {**record, "work": "dequant"}
    path = tmp_path / "mainloop.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(dequant) + "\n")
    lines = tables.mainloop_rows([json.loads(x) for x in path.read_text().splitlines()])
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert "| 896 | 910 | 448 | 50 % | 168 | 0 | 1930 |" in lines[2]
    assert "| 448 |  | 168 |" in lines[3]  # no tensor share for the dequantization alone
    assert tables.main([str(path)]) == 0


def test_weight_stream_probe_compiles_clean(tmp_path, real_nvcc):
    log = _compile_probe(real_nvcc, "weight_stream.cu", tmp_path / "probe")
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len([k for k in kernels if "weight_stream" in k]) == 5 and any("read_stream" in k for k in kernels), log
    assert set(re.findall(r"(\d+) bytes spill stores", log)) == {"0"}


def test_weight_stream_table(tmp_path):
    base = {"proj": "gate_up", "rows": 512, "stage_k": 64, "slots": 8, "ctas_per_sm": 1, "bytes": 1 << 30}
    records = [{**base, "pattern": "packed", "gbs": 3600.0}, {**base, "pattern": "contiguous", "gbs": 4000.0},
               {**base, "pattern": "read_stream", "rows": 0, "stage_k": 0, "slots": 0, "ctas_per_sm": 8, "gbs": 4200.0}]
    lines = tables.weight_stream_rows(records)
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == lines[3].count("|")
    assert "| gate_up | 512 | 64 | 8 x 1 | 3600 | 4000 | 90 % | 86 % | 95 % |" == lines[2]
    assert lines[3].startswith("| gate_up | read_stream |")
    path = tmp_path / "weight_stream.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert tables.main([str(path)]) == 0

# The feed-only diagnostic build (CHORD_DIAG_FEED_ONLY=1, chord_kernels.jit.launch): the kernels'
# time without their k loop's work, to set beside the k loop alone.
def test_the_environment_switch_loads_the_feed_only_build(monkeypatch):
    from chord_kernels.dispatch import indexed_wgmma_streamk
    from chord_kernels.jit import compiler, launch

    spec = indexed_wgmma_streamk(2, 56, 8).spec
    monkeypatch.setattr(launch, "_load", lambda s, device, smem: s)
    monkeypatch.delenv("CHORD_DIAG_FEED_ONLY", raising=False)
    assert launch.load_kernel(spec, 0) is spec
    monkeypatch.setenv("CHORD_DIAG_FEED_ONLY", "1")
    feed = launch.load_kernel(spec, 0)
    assert feed.extra_flags == (launch.FEED_ONLY_FLAG,) and feed.symbol == spec.symbol
    assert feed.describe().endswith(" -DCHORD_DIAG_FEED_ONLY=1")
    assert launch.diagnostic_spec(feed) == feed  # the flag once, however often it is asked for
    assert compiler.cache_key(feed, compiler_version="v") != compiler.cache_key(spec, compiler_version="v")


def test_the_no_store_switch_combines_with_feed_only(monkeypatch):
    from chord_kernels.dispatch import indexed_wgmma_streamk
    from chord_kernels.jit import launch

    spec = indexed_wgmma_streamk(2, 56, 8).spec
    monkeypatch.delenv("CHORD_DIAG_FEED_ONLY", raising=False)
    monkeypatch.setenv("CHORD_DIAG_NO_STORE", "1")
    assert launch.diagnostic_spec(spec).extra_flags == (launch.NO_STORE_FLAG,)
    monkeypatch.setenv("CHORD_DIAG_FEED_ONLY", "1")
    assert launch.diagnostic_spec(spec).extra_flags == (launch.FEED_ONLY_FLAG, launch.NO_STORE_FLAG)


def _ptx(spec, tmp_path, nvcc) -> str:
    from chord_kernels.jit import compiler
    from chord_kernels.jit.paths import csrc_dir

    flags = "".join(re.sub(r"\W", "_", flag) for flag in spec.extra_flags)
    src = tmp_path / f"{spec.symbol}{flags}.cu"
    src.write_text(spec.source())
    subprocess.run([nvcc, "-ptx", *compiler.compile_flags(spec, csrc_dir()), "-o", str(src.with_suffix(".ptx")), str(src)],
                   check=True, capture_output=True, text=True)
    return src.with_suffix(".ptx").read_text()


def test_feed_only_builds_have_no_k_loop_work(tmp_path, real_nvcc):
    import dataclasses

    from chord_kernels.dispatch import indexed_mma_streamk, indexed_wgmma_streamk
    from chord_kernels.jit.launch import FEED_ONLY_FLAG

    for spec, mma in ((indexed_wgmma_streamk(2, 56, 8).spec, "wgmma.mma_async"),
                      (indexed_mma_streamk(2, 1, 256, 3).spec, "mma.sync")):
        feed = dataclasses.replace(spec, extra_flags=(FEED_ONLY_FLAG,))
        assert mma in _ptx(spec, tmp_path, real_nvcc)
        feed_ptx = _ptx(feed, tmp_path, real_nvcc)
        assert mma not in feed_ptx and "cp.async" in feed_ptx  # the feed stays


def test_no_store_builds_write_no_output(tmp_path, real_nvcc):
    """The no-store build (CHORD_DIAG_NO_STORE) keeps the loads and the k loop and drops the
    output's global stores: its BF16 stores to `out` are gone (the stream-K fix-up's FP32 partials
    to the workspace stay), and it still runs its MMAs."""
    import dataclasses

    from chord_kernels.dispatch import indexed_mma_streamk, indexed_wgmma_streamk
    from chord_kernels.jit.launch import NO_STORE_FLAG

    out_stores = ("st.global.u16", "st.global.v4.u32")  # BF16 one by one, 16-byte pieces of the staged rows
    for spec, mma in ((indexed_wgmma_streamk(2, 56, 8).spec, "wgmma.mma_async"),
                      (indexed_mma_streamk(2, 1, 256, 3).spec, "mma.sync")):
        plain = _ptx(spec, tmp_path, real_nvcc)
        quiet = _ptx(dataclasses.replace(spec, extra_flags=(NO_STORE_FLAG,)), tmp_path, real_nvcc)
        assert all(s in plain for s in out_stores) and not any(s in quiet for s in out_stores), spec.describe()
        assert mma in quiet and "st.global.cg.v4.f32" in quiet  # the k loop and the fix-up's partials stay

