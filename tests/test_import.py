"""Importing chord_kernels or any module of humming (everything vLLM's facade reaches) touches no
GPU, no driver and no NVML. (That `import humming` alone stays torch-free and fast is
tests/test_humming_import.py.)"""

import subprocess
import sys

CHECK = """
import sys, torch
import chord_kernels, chord_kernels.ops, chord_kernels.operator, chord_kernels.routing, humming
from chord_kernels import contiguous, masked, indexed
from chord_kernels.operator import pack_w4a16_grouped
import humming.dtypes, humming.config, humming.config.config, humming.schema, humming.schema.fp8
import humming.schema.modelopt, humming.transform, humming.tune, humming.tune.process_input
import humming.forward, humming.ops, humming.utils.weight, humming.utils.smem, humming.device, humming.layer
from humming.device import DeviceInfo, get_device_index
assert not torch.cuda.is_initialized(), "torch.cuda was initialized by import"
assert "chord_kernels._launcher" not in sys.modules, "the launcher extension was loaded by import"
maps = open("/proc/self/maps").read()
for lib in ("libcuda.so", "libnvidia-ml"):
    assert lib not in maps, lib + " was mapped by import"
from chord_kernels import _launcher
assert not _launcher.driver_loaded()
print("clean")
"""


def test_import_has_no_gpu_side_effects():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"
