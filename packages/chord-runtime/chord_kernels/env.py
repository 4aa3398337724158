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
    return text(raw(name), default)


def raw(name: str):
    """The variable's value as the process stores it (bytes on POSIX, not decoded; None when
    unset): the launch paths put it in their plan keys as is and decode only on a plan miss."""
    if _RAW is None:
        return os.environ.get(name)
    return _RAW.get(_KEYS.get(name) or name.encode())


def text(value, default: str = "") -> str:
    """A raw() value as text (default when unset)."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else value


VALIDATE_ROUTING = "CHORD_VALIDATE_ROUTING"
INDEXED_KERNEL = "CHORD_W4A16_INDEXED_KERNEL"
TUNING = "CHORD_W4A16_TUNING"
BLOCK_M = "CHORD_W4A16_BLOCK_M"
PRINT_CONFIGS = "CHORD_PRINT_CONFIGS"
GROUPED_SPLIT_K = "CHORD_GROUPED_SPLIT_K"
CTA_TRACE = "CHORD_CTA_TRACE"  # the diagnostic build: per-CTA start/end records (chord_kernels.cta_trace)
DIAG_FEED_ONLY = "CHORD_DIAG_FEED_ONLY"  # the diagnostic build without the k loop's work (jit.launch)
DIAG_NO_STORE = "CHORD_DIAG_NO_STORE"  # the diagnostic build without the output's stores (jit.launch)
FAST_CALL = "CHORD_FAST_CALL"  # 0: the entry points' Python launch path alone (jit.fast_call)
_KEYS = {name: name.encode() for name in (VALIDATE_ROUTING, INDEXED_KERNEL, TUNING, BLOCK_M, PRINT_CONFIGS,
                                          GROUPED_SPLIT_K, CTA_TRACE, DIAG_FEED_ONLY, DIAG_NO_STORE, FAST_CALL)}


_FLAG_VALUES: dict = {}  # raw value -> bool: a switch read per call decodes each value once


def flag(name: str) -> bool:
    value = raw(name)
    known = _FLAG_VALUES.get(value)
    if known is None:
        known = _FLAG_VALUES[value] = text(value).strip().lower() in _TRUTHY
    return known
