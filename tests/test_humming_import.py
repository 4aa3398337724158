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

def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_humming_is_cheap_and_pure_python():
    assert float(_run(ROOT_ONLY)) < 0.05

