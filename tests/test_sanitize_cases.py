"""scripts/gpu_sanitize_case.py refuses arguments that select no case (CPU: it exits before any
CUDA call). A name that selected nothing used to run nothing and exit 0, which compute-sanitizer
reports only as "terminated before first instrumented API call"."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_sanitize_case.py"


@pytest.mark.parametrize("args,message", [
    (["mma_sk_long"], "no such case family ['mma_sk_long']"),
    (["wgmma", "nope"], "no such case family ['nope']"),
    (["grouped:no such label"], "no grouped case label holds ['no such label']"),
])
def test_arguments_that_select_no_case_fail(args, message):
    res = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert message in res.stderr
