"""benchmarks/probes/: the wgmma k-loop probe compiles against today's headers (real nvcc, sm_90a)
with no spill and no serialized wgmma, and its table script reads the probe's JSON lines. The
probe itself runs on the GPU only (run_mainloop.sh)."""

import importlib.util
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "benchmarks" / "probes"

_spec = importlib.util.spec_from_file_location("mainloop_table", PROBES / "mainloop_table.py")
mainloop_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mainloop_table)


def test_mainloop_probe_compiles_clean(tmp_path, real_nvcc):
    cmd = [real_nvcc, "-O3", "-std=c++17", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
           "-I", str(ROOT / "csrc"), "-Xptxas", "-v", str(PROBES / "wgmma_mainloop.cu"), "-o", str(tmp_path / "probe")]
    log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
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
    lines = mainloop_table.rows([json.loads(x) for x in path.read_text().splitlines()])
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert "| 896 | 910 | 448 | 50 % | 168 | 0 | 1930 |" in lines[2]
    assert "| 448 |  | 168 |" in lines[3]  # no tensor share for the dequantization alone
    assert mainloop_table.main([str(path)]) == 0
