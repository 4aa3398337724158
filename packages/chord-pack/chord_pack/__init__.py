"""chord-pack: convert Kimi K2.x INT4 (compressed-tensors ``pack-quantized``) checkpoints
into Chord's packed W4A16 layouts, offline (``chord-pack convert|inspect|verify``).

The layouts themselves are defined once, in ``chord_kernels.layouts``; this package only
streams tensors through ``pack_w4a16`` / ``unpack_w4a16``.
"""

from .errors import ChordPackError

__all__ = ["ChordPackError"]
__version__ = "0.1.0"
