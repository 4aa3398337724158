"""Reading safetensors checkpoints by hand: headers, sizes and the index, checked before any work.

Only headers are parsed up front (8 + N bytes per shard); tensor data is read later one
tensor (or one row range) at a time, so memory stays bounded by the largest single read.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import ChordPackError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit
CHUNK = 16 * 1024 * 1024  # bytes per read when copying or comparing large tensors

# safetensors dtype -> (bits per element, torch dtype or None when chord-pack never decodes it)
DTYPES: dict[str, tuple[int, torch.dtype | None]] = {
    "BOOL": (8, torch.bool), "U8": (8, torch.uint8), "I8": (8, torch.int8),
    "I16": (16, torch.int16), "U16": (16, None), "F16": (16, torch.float16),
    "BF16": (16, torch.bfloat16), "I32": (32, torch.int32), "U32": (32, None),
    "F32": (32, torch.float32), "I64": (64, torch.int64), "U64": (64, None),
    "F64": (64, torch.float64), "F8_E4M3": (8, None), "F8_E5M2": (8, None),
    "F8_E8M0": (8, None), "F6_E2M3": (6, None), "F6_E3M2": (6, None), "F4": (4, None),
}
TORCH_TO_ST = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int32: "I32",
               torch.int64: "I64", torch.float16: "F16", torch.uint8: "U8"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shard: str  # file name inside the checkpoint folder
    dtype: str  # safetensors dtype string
    shape: tuple[int, ...]
    begin: int  # absolute byte offsets in the shard file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    def where(self) -> str:
        return f"{self.shard}: tensor {self.name}"


@dataclass
class Shard:
    name: str
    path: Path
    size: int
    metadata: dict[str, str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)


@dataclass
class Checkpoint:
    """The index plus the headers of the shards that were opened.

    ``shards`` holds every shard the index names, or only the selected ones (an EP rank's
    slice: see :func:`open_checkpoint`); a tensor of an unopened shard is known by name only.
    """

    root: Path
    index_name: str | None  # None for a single model.safetensors
    weight_map: dict[str, str]
    shards: dict[str, Shard]

    def info(self, name: str) -> TensorInfo:
        return self.shards[self.weight_map[name]].tensors[name]

    def has(self, name: str) -> bool:
        return name in self.weight_map

    def is_open(self, name: str) -> bool:
        """Is the shard holding tensor ``name`` opened (its header read and checked)?"""
        return self.weight_map[name] in self.shards

    def where(self, name: str) -> str:
        """``shard: tensor name``, from the index alone (works for tensors of unopened shards)."""
        return f"{self.weight_map[name]}: tensor {name}"

    def unopened(self) -> list[str]:
        """Shards the index names that were not opened (not needed by the selected slice)."""
        return sorted(set(self.weight_map.values()) - set(self.shards))

    def shard_names(self) -> list[str]:
        return sorted(self.shards)


def expected_nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.ceil(math.prod(shape) * DTYPES[dtype][0] / 8)


def read_shard_header(path: Path, name: str) -> Shard:
    """Parse one shard's header and check the file is exactly as long as the header says."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ChordPackError(f"shard {name} truncated: {size} bytes, too short for a safetensors header")
            (hlen,) = struct.unpack("<Q", head)
            if hlen > MAX_HEADER:
                raise ChordPackError(f"shard {name}: corrupt safetensors header (header length {hlen})")
            if 8 + hlen > size:
                raise ChordPackError(f"shard {name} truncated: {size} bytes, header alone needs {8 + hlen}")
            raw = f.read(hlen)
    except OSError as e:
        raise ChordPackError(f"shard {name}: cannot read ({e})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except (UnicodeDecodeError, ValueError) as e:
        raise ChordPackError(f"shard {name}: corrupt safetensors header ({e})") from None
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise ChordPackError(f"shard {name}: corrupt safetensors header (__metadata__ is not an object)")
    shard = Shard(name=name, path=path, size=size, metadata=metadata)
    base, data_end, last = 8 + hlen, 0, None
    for tname, entry in header.items():
        shard.tensors[tname] = info = _tensor_entry(name, tname, entry, base)
        if info.end - base > data_end:
            data_end, last = info.end - base, tname
    need = base + data_end
    if size < need:
        raise ChordPackError(f"shard {name} truncated: {size} bytes, header needs {need} "
                             f"(tensor {last} ends at byte {need})")
    if size > need:
        raise ChordPackError(f"shard {name}: corrupt safetensors file ({size - need} bytes after the last tensor)")
    return shard


def _tensor_entry(shard: str, tname: str, entry, base: int) -> TensorInfo:
    try:
        dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        ok = (dtype in DTYPES and all(isinstance(d, int) and d >= 0 for d in shape)
              and isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end)
    except (TypeError, KeyError, ValueError):
        ok = False
    if not ok:
        raise ChordPackError(f"shard {shard}: corrupt safetensors header entry for tensor {tname}: {entry!r}")
    if end - begin != expected_nbytes(dtype, shape):
        raise ChordPackError(f"shard {shard}: tensor {tname} has {end - begin} data bytes, "
                             f"{dtype} {list(shape)} needs {expected_nbytes(dtype, shape)}")
    return TensorInfo(tname, shard, dtype, shape, base + begin, base + end)


def read_index(index_path: Path) -> dict[str, str]:
    """The ``weight_map`` of a safetensors index (tensor name -> plain shard file name)."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise ValueError("weight_map must map tensor names to file names")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise ChordPackError(f"{index_path}: not a valid safetensors index ({e})") from None
    for fname in sorted(set(weight_map.values())):
        if Path(fname).name != fname or fname in (".", ".."):
            raise ChordPackError(f"{index_path}: index names {fname!r}, which is not a plain file name")
    return weight_map


ShardSelect = Callable[[dict[str, str]], set[str]]


def open_checkpoint(root: Path, select: ShardSelect | None = None, *, require_unopened: bool = True) -> Checkpoint:
    """Read the index and the shard headers; cross-check them. Reads no tensor data.

    ``select(weight_map)`` names the shards to open (default: all). The other shards the index
    names are not read at all; with ``require_unopened`` they must still exist as files (a local
    folder), without it they may be absent (a partial Hub download).
    """
    index_path = root / INDEX_NAME
    if index_path.is_file():
        weight_map = read_index(index_path)
        index_name = INDEX_NAME
    elif (root / SINGLE_NAME).is_file():
        shard = read_shard_header(root / SINGLE_NAME, SINGLE_NAME)
        return Checkpoint(root, None, {t: SINGLE_NAME for t in shard.tensors}, {SINGLE_NAME: shard})
    else:
        raise ChordPackError(f"{root}: no {INDEX_NAME} (or {SINGLE_NAME}) in the checkpoint folder")

    named = set(weight_map.values())
    wanted = named if select is None else set(select(weight_map)) & named
    shards: dict[str, Shard] = {}
    for fname in sorted(named):
        path = root / fname
        if fname not in wanted and not require_unopened:
            continue
        if not path.is_file():
            users = sorted(t for t, f in weight_map.items() if f == fname)
            raise ChordPackError(f"{index_path}: index names {fname} which does not exist "
                                 f"(for {len(users)} tensors, e.g. {users[0]})")
        if fname in wanted:
            shards[fname] = read_shard_header(path, fname)
    for tname, fname in weight_map.items():
        if fname in shards and tname not in shards[fname].tensors:
            raise ChordPackError(f"{index_path}: index says tensor {tname} is in {fname}, not found there")
    return Checkpoint(root, index_name, dict(weight_map), shards)


class Reader:
    """Reads tensors of one checkpoint, keeping one open descriptor per shard (use as a context manager).

    Reads are positional (``os.pread``), so one Reader may serve several threads at once.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def _fd(self, shard: str) -> int:
        with self._lock:
            if shard not in self._fds:
                self._fds[shard] = os.open(self.root / shard, os.O_RDONLY)
            return self._fds[shard]

    def read_into(self, info: TensorInfo, begin: int, nbytes: int) -> bytearray:
        buf = bytearray(nbytes)
        view, fd, done = memoryview(buf), self._fd(info.shard), 0
        while done < nbytes:
            got = os.preadv(fd, [view[done:]], begin + done)
            if got <= 0:
                raise ChordPackError(f"{info.where()}: short read (file changed while reading?)")
            done += got
        return buf

    def tensor(self, info: TensorInfo, rows: tuple[int, int] | None = None) -> torch.Tensor:
        """One tensor (or rows [r0, r1) of dim 0) as a torch tensor that owns its memory."""
        dtype = DTYPES[info.dtype][1]
        if dtype is None:
            raise ChordPackError(f"{info.where()}: dtype {info.dtype} cannot be decoded here")
        shape, begin, nbytes = list(info.shape), info.begin, info.nbytes
        if rows is not None:
            row_bytes = nbytes // shape[0] if shape[0] else 0
            begin += rows[0] * row_bytes
            nbytes = (rows[1] - rows[0]) * row_bytes
            shape[0] = rows[1] - rows[0]
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self.read_into(info, begin, nbytes), dtype=dtype).reshape(shape)

    def chunks(self, info: TensorInfo, chunk: int = CHUNK) -> Iterator[bytearray]:
        """The raw bytes of one tensor, in chunks (bounded memory for multi-GB embeddings)."""
        pos, end = info.begin, info.end
        while pos < end:
            n = min(chunk, end - pos)
            data = self.read_into(info, pos, n)
            pos += n
            yield data
