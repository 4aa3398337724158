"""Which GPUs Chord's kernels run on. Asked at call time, never at import."""

from __future__ import annotations

import functools

import torch

SUPPORTED_CAPABILITIES = {(9, 0): "sm_90a"}


class UnsupportedDeviceError(RuntimeError):
    """The tensors live on a GPU Chord has no kernels for."""


@functools.cache
def kernel_arch(device_index: int) -> str:
    """The nvcc target for ``device_index``, or a clear error on anything but SM90 (Hopper)."""
    cap = torch.cuda.get_device_capability(device_index)
    arch = SUPPORTED_CAPABILITIES.get(cap)
    if arch is None:
        name = torch.cuda.get_device_name(device_index)
        raise UnsupportedDeviceError(
            f"Chord W4A16 kernels need an SM90 (Hopper) GPU; cuda:{device_index} is {name} "
            f"(compute capability {cap[0]}.{cap[1]}). There is no fallback kernel."
        )
    return arch


@functools.cache
def memory_tbps(device_index: int) -> float:
    """The peak memory bandwidth the dispatch assumes for ``device_index`` (by its name:
    dispatch.memory_tbps_of)."""
    from .dispatch import memory_tbps_of

    return memory_tbps_of(torch.cuda.get_device_name(device_index))
