"""Chord's environment switches, read cheaply enough for the launch path.

``os.environ.get`` costs ~1 µs (it encodes the key and decodes the value), several times over
budget for a per-call check. Where CPython keeps the raw bytes mapping behind ``os.environ``
(POSIX), the switches are read from it directly with pre-encoded keys; values stay live (a
``setenv`` in-process is seen on the next call). Elsewhere this falls back to ``os.environ``.
"""

from __future__ import annotations

import os

_RAW = getattr(os.environ, "_data", None) if os.name == "posix" else None
_TRUTHY = ("1", "true", "yes", "on")


def get(name: str, default: str = "") -> str:
    if _RAW is None:
        return os.environ.get(name, default)
    value = _RAW.get(_KEYS.get(name) or name.encode())
    return default if value is None else value.decode()


VALIDATE_ROUTING = "CHORD_VALIDATE_ROUTING"
INDEXED_KERNEL = "CHORD_W4A16_INDEXED_KERNEL"
TUNING = "CHORD_W4A16_TUNING"
BLOCK_M = "CHORD_W4A16_BLOCK_M"
PRINT_CONFIGS = "CHORD_PRINT_CONFIGS"
_KEYS = {name: name.encode() for name in (VALIDATE_ROUTING, INDEXED_KERNEL, TUNING, BLOCK_M, PRINT_CONFIGS)}


def flag(name: str) -> bool:
    return get(name).strip().lower() in _TRUTHY
