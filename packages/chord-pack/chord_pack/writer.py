"""A streaming safetensors writer: the header is computed first, then tensors go out one by one.

safetensors' own ``save_file`` needs every tensor of a shard in memory at once; this writes
the same format (8-byte little-endian header length, JSON header padded with spaces to a
multiple of 8, tensor data back to back in header order) while holding one tensor at a time.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import ChordPackError

Chunks = Iterable["bytes | bytearray | memoryview"]


@dataclass(frozen=True)
class OutEntry:
    name: str
    dtype: str  # safetensors dtype string
    shape: tuple[int, ...]
    nbytes: int


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The little-endian bytes of a CPU tensor (no copy when already contiguous)."""
    t = t.contiguous()
    return memoryview(t.view(torch.uint8).reshape(-1).numpy()) if t.numel() else memoryview(b"")


def build_header(entries: list[OutEntry], metadata: dict[str, str]) -> bytes:
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for e in entries:
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_shard(path: Path, entries: list[OutEntry], metadata: dict[str, str],
                produce: Callable[[OutEntry], Chunks], on_bytes: Callable[[int], None],
                digest=None) -> int:
    """Write one shard; ``produce(entry)`` yields that tensor's bytes. Returns the file size.

    ``digest`` (a hashlib object), if given, is fed every byte written.
    """
    with open(path, "wb") as f:
        header = build_header(entries, metadata)
        f.write(header)
        if digest is not None:
            digest.update(header)
        for e in entries:
            written = 0
            for chunk in produce(e):
                f.write(chunk)
                if digest is not None:
                    digest.update(chunk)
                written += len(chunk)
                on_bytes(len(chunk))
            if written != e.nbytes:
                raise ChordPackError(f"internal error: wrote {written} bytes for {e.name}, header says {e.nbytes}")
        f.flush()
        os.fsync(f.fileno())
        return f.tell()
