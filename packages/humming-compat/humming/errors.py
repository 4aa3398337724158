"""The errors the Chord-backed ``humming`` raises (pure Python, import-safe)."""

from __future__ import annotations


class NotSupportedError(NotImplementedError):
    """vLLM asked for a scheme, dtype or option that Chord's ``humming`` does not implement.

    Raised at load time (schema conversion, transform, tuning) wherever possible, never
    answered with a different kernel or a silent fallback.
    """


class ModeMismatchError(ValueError):
    """The weights were packed for one gemm type and vLLM runs them with another."""


def not_supported(what: str, hint: str = "") -> NotSupportedError:
    msg = (f"{what} is not supported by Chord's humming (it implements Kimi K2.x W4A16 only: BF16 "
           "activations, uint4 weights with group-32 BF16 scales, symmetric, MoE gemm types "
           "indexed / grouped_contiguous / grouped_masked, SiLU-and-mul)")
    if hint:
        msg += f"; {hint}"
    return NotSupportedError(msg)
