"""`import humming` (what vLLM's has_humming() does) is cheap and touches no GPU, driver or NVML."""

import subprocess
import sys

ROOT_ONLY = """
import sys, time
t0 = time.perf_counter()
import humming
dt = time.perf_counter() - t0
assert "torch" not in sys.modules, "import humming pulled in torch"
assert "chord_kernels" not in sys.modules, "import humming pulled in chord_kernels"
print(f"{dt:.4f}")
"""

SUBMODULES = """
import sys, torch
import humming
import humming.dtypes, humming.config, humming.config.config, humming.schema, humming.schema.fp8
import humming.schema.modelopt, humming.transform, humming.tune, humming.tune.process_input
import humming.forward, humming.ops, humming.utils.weight, humming.utils.smem, humming.device, humming.layer
from humming.device import DeviceInfo, get_device_index
assert not torch.cuda.is_initialized(), "torch.cuda was initialized by importing humming's modules"
assert "chord_kernels._launcher" not in sys.modules, "the launcher extension was loaded"
maps = open("/proc/self/maps").read()
for lib in ("libcuda.so", "libnvidia-ml"):
    assert lib not in maps, lib + " was mapped by importing humming's modules"
print("clean")
"""


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_humming_is_cheap_and_pure_python():
    assert float(_run(ROOT_ONLY)) < 0.05


def test_every_vllm_module_imports_without_gpu_side_effects():
    assert _run(SUBMODULES) == "clean"
