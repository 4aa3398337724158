"""A wheel install of chord-runtime carries its CUDA sources and the launcher; chord-pack's
wheel carries the bundled checkpoint."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def build_wheel(package: str, out: Path) -> zipfile.ZipFile:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    str(REPO / "packages" / package), "-w", str(out)], check=True, capture_output=True)
    return zipfile.ZipFile(next(out.glob("*.whl")))


@pytest.mark.slow
def test_runtime_wheel_ships_csrc_and_launcher(tmp_path):
    names = build_wheel("chord-runtime", tmp_path).namelist()
    sources = {p.relative_to(REPO / "csrc").as_posix() for p in (REPO / "csrc").rglob("*") if p.is_file()}
    assert {f"chord_kernels/csrc/{s}" for s in sources} <= set(names)
    assert any(n.startswith("chord_kernels/_launcher") and n.endswith(".so") for n in names)
    # Exactly the source tree's modules: none left over in build/ from an older tree's layout.
    package = REPO / "packages" / "chord-runtime"
    modules = {p.relative_to(package).as_posix() for p in (package / "chord_kernels").rglob("*.py")}
    assert {n for n in names if n.startswith("chord_kernels/") and n.endswith(".py")} == modules


@pytest.mark.slow
def test_pack_wheel_ships_bundled_checkpoint(tmp_path):
    names = build_wheel("chord-pack", tmp_path).namelist()
    assert "chord_pack/data/tiny-kimi-k2-thinking/config.json" in names
    assert any(n.endswith(".safetensors") for n in names)
