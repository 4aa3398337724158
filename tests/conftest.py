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
