"""Shared test setup. GPU tests are marked ``gpu`` and deselected by default (see pyproject)."""

import importlib.util
import os

import pytest
from hypothesis import settings

if importlib.util.find_spec("torch") is None:
    # A bare interpreter, not the project's venv (bash scripts/test.sh makes that): nothing here
    # can run without torch, so collect nothing rather than fail every import.
    collect_ignore_glob = ["test_*.py", "gpu/*.py", "vllm_contract/*.py", "humming_replay.py"]

settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def real_nvcc() -> str:
    """The installed nvcc for the real-compiler tests: skipped without one, except in CI, where
    a missing compiler is a failure."""
    from chord_kernels.jit import compiler

    try:
        return compiler.find_nvcc()
    except FileNotFoundError:
        if os.environ.get("CI"):
            raise
        pytest.skip("nvcc not installed")


@pytest.fixture
def stub_device(monkeypatch):
    """The CUDA entry points' host side with no GPU: sm_90a, 132 SMs, the H200's bandwidth, 3
    resident CTAs an SM per kernel, stub tensor maps (the address and box bytes they were made
    for); kernels are not loaded (the list records the specs asked for)."""
    import struct

    from chord_kernels import dispatch, ops, tma

    loaded = []
    monkeypatch.setattr(ops, "kernel_arch", lambda index: "sm_90a")
    monkeypatch.setattr(ops, "_load", lambda launch, device: loaded.append(launch.spec) or "kernel")
    monkeypatch.setattr(ops, "_device_index", lambda device: 0)
    monkeypatch.setattr(ops, "_sm_count", lambda index: 132)
    monkeypatch.setattr(ops, "memory_tbps", lambda index: dispatch.H200_MEMORY_TBPS)
    monkeypatch.setattr(ops, "_resident_ctas", lambda kernel, launch, device: 3 * launch.spec.min_blocks_per_sm)
    monkeypatch.setattr(ops, "_streamk_buffers", {})
    # tensor maps need the driver: a stub "map" records the address and box bytes it was made for
    monkeypatch.setattr(tma, "encode", lambda geo, address: struct.pack("@2Q", address, geo.box_bytes).ljust(128, b"\0"))
    monkeypatch.setattr(tma, "_maps", {})
    return loaded


def pytest_collection_modifyitems(config, items):
    if not items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run pytest -m gpu on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
