"""Chord: W4A16 MoE kernels (BF16 activations, INT4 weights, group-32 BF16 scales) for Kimi K2.x.

Importing this package touches no GPU and no driver: the launcher opens libcuda on the
first launch and kernels are compiled on first use (or ahead of time with
``chord-runtime precompile``).
"""

from .layouts import FORMAT_VERSION, PackedW4A16
from .ops import contiguous, contiguous_offsets, indexed, masked

__all__ = ["FORMAT_VERSION", "PackedW4A16", "contiguous", "contiguous_offsets", "indexed", "masked"]
__version__ = "0.1.0"
