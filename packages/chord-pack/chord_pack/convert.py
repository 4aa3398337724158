"""``chord-pack convert``: stream a Kimi K2.x INT4 checkpoint into one of Chord's packed layouts.

Order of work: resolve SRC, check OUT, read config + index + every shard header and run every
check that needs no tensor data (nothing is written until all pass), then stream each output
shard into a hidden staging folder and rename it to OUT at the very end.

Memory bound: one expert projection in flight (its source words and scales, the uint8 codes and
``pack_w4a16``'s temporaries: about 210 MB measured at Kimi's N x K = 2048 x 7168, ~30x the packed
bytes), plus one 16 MiB buffer for pass-through copies. Nothing grows with the shard or model size.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from chord_kernels.int4 import GROUP_SIZE
from chord_kernels.layouts import (
    BLOCK_K_BY_MODE,
    FORMAT_VERSION,
    LANES,
    TILE,
    PackedW4A16,
    pack_w4a16,
)
from tqdm import tqdm

from . import __version__
from .checkpoint import INDEX_NAME, TORCH_TO_ST, Reader, open_checkpoint
from .config import CONFIG_NAME, find_chord_block, load_config, read_json
from .errors import ChordPackError
from .model import scan_checkpoint
from .plan import Plan, ProjPlan, Sharding, make_plan, plan_slices
from .source import resolve_source
from .writer import OutEntry, tensor_bytes, write_shard

SETTINGS_KEYS = ("mode", "block_k", "format_version", "source", "sharding")
Log = Callable[[str], None]


@dataclass
class ConvertResult:
    out: Path
    skipped: bool  # OUT already held this conversion
    shards: int = 0
    packed: int = 0  # expert projections packed
    passthrough: int = 0
    bytes_written: int = 0


def shard_metadata(mode: str, block_k: int) -> dict[str, str]:
    return {"chord.mode": mode, "chord.block_k": str(block_k), "chord.format_version": str(FORMAT_VERSION)}


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def staging_dir(out: Path, settings: dict) -> Path:
    return out.parent / f".{out.name}.partial-{settings_hash(settings)}"


def convert(src: str | Path, out: str | Path, mode: str, *, sharding: Sharding | None = None,
            progress: bool | None = None, log: Log = print) -> ConvertResult:
    source = resolve_source(src)
    out = Path(out).expanduser().absolute()
    if out == source.path or source.path in out.parents:
        raise ChordPackError(f"{out}: OUT must not be inside SRC {source.path} (SRC is never modified)")
    cfg = load_config(source.path)
    settings = {"mode": mode, "block_k": BLOCK_K_BY_MODE.get(mode), "format_version": FORMAT_VERSION,
                "source": source.describe(), "sharding": plan_slices(cfg, mode, sharding).block}
    if _existing_is_done(out, settings):
        log(f"chord-pack: {out} already holds this conversion (same settings, complete); nothing to do")
        return ConvertResult(out, skipped=True)
    ckpt = open_checkpoint(source.path)
    scan = scan_checkpoint(ckpt, cfg, check_scales=True)
    if scan.extra_layer_tensors:
        log(f"chord-pack: {scan.extra_layer_tensors} expert tensors of layers beyond num_hidden_layers "
            f"{cfg.num_layers} (MTP?) pass through unchanged")
    plan = make_plan(scan, cfg, mode, sharding)
    block = {**settings, "packer": f"chord-pack {__version__}"}

    staging = staging_dir(out, settings)
    if staging.exists():  # left by a crashed run; resuming is not implemented yet
        shutil.rmtree(staging)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    try:
        result = _write_all(ckpt, cfg, plan, staging, block, progress)
        if out.is_dir():  # an empty folder (checked above) is replaced
            out.rmdir()
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result.out = out
    log(f"chord-pack: wrote {out}: {result.packed} expert projections packed ({mode}, BLOCK_K "
        f"{plan.block_k}), {result.passthrough} tensors passed through, {result.shards} shards, "
        f"{result.bytes_written / 2**20:.1f} MiB")
    return result


def _existing_is_done(out: Path, settings: dict) -> bool:
    """True if OUT holds this very conversion; raise if OUT holds anything else."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise ChordPackError(f"{out}: OUT exists and is not a directory")
    if not any(out.iterdir()):
        return False
    cfg_path = out / CONFIG_NAME
    block = find_chord_block(read_json(cfg_path, "config.json")) if cfg_path.is_file() else None
    if block is None:
        raise ChordPackError(f"{out}: OUT exists and is not a chord-pack output; remove it or choose another OUT")
    differ = {k: (block.get(k), settings[k]) for k in SETTINGS_KEYS if block.get(k) != settings[k]}
    if differ:
        text = "; ".join(f"{k}: existing {a!r}, requested {b!r}" for k, (a, b) in differ.items())
        raise ChordPackError(f"{out}: OUT exists with different settings ({text}); "
                             "remove it or choose another OUT")
    try:
        open_checkpoint(out)
    except ChordPackError as e:
        raise ChordPackError(f"{out}: OUT exists with the same settings but is incomplete ({e}); remove it") from None
    return True


def _out_entries(plan: Plan) -> dict[str, list[tuple[OutEntry, object]]]:
    """Per source shard: the output tensors it will hold (mirroring the source assignment)."""
    shards: dict[str, list[tuple[OutEntry, object]]] = {}
    for info in plan.passthrough:
        shards.setdefault(info.shard, []).append((OutEntry(info.name, info.dtype, info.shape, info.nbytes), info))
    bk = plan.block_k
    for p in plan.experts:
        n, k = p.n, p.k
        shape_src = p.src.shape
        for entry, info in (
            (OutEntry(p.name("weight_packed"), "I32", (n // TILE, k // bk, LANES, bk // TILE), n * k // 2), p.src.packed),
            (OutEntry(p.name("weight_scale"), "BF16", (k // GROUP_SIZE, n), n * k // GROUP_SIZE * 2), p.src.scale),
            (OutEntry(p.name("weight_shape"), shape_src.dtype, (2,), shape_src.nbytes), shape_src),
        ):
            shards.setdefault(info.shard, []).append((entry, p))
    return {name: sorted(items, key=lambda it: it[0].name) for name, items in shards.items()}


def _write_all(ckpt, cfg, plan: Plan, staging: Path, block: dict, progress: bool | None) -> ConvertResult:
    layout = _out_entries(plan)
    total = sum(e.nbytes for items in layout.values() for e, _ in items)
    result = ConvertResult(staging, skipped=False, packed=len(plan.experts), passthrough=len(plan.passthrough))
    weight_map: dict[str, str] = {}
    cache: dict = {}  # the one projection in flight: {ProjPlan: PackedW4A16}

    with Reader(ckpt.root) as reader, tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                           desc="chord-pack convert", disable=None if progress is None else not progress,
                                           dynamic_ncols=True) as bar:

        def produce(entry: OutEntry, what):
            if isinstance(what, ProjPlan):
                return [tensor_bytes(_packed_part(reader, what, entry.name, plan, cache))]
            return reader.chunks(what)

        for shard_name in sorted(layout):
            items = layout[shard_name]
            src_meta = ckpt.shards[shard_name].metadata
            has_packed = any(isinstance(w, ProjPlan) for _, w in items)
            meta = {**src_meta, **(shard_metadata(plan.mode, plan.block_k) if has_packed else {})}
            lookup = {e.name: w for e, w in items}
            result.bytes_written += write_shard(staging / shard_name, [e for e, _ in items], meta,
                                                lambda e, lookup=lookup: produce(e, lookup[e.name]), bar.update)
            weight_map.update({e.name: shard_name for e, _ in items})
            result.shards += 1

    index = {"metadata": {"total_size": total, "chord": {k: block[k] for k in ("mode", "block_k", "format_version")}},
             "weight_map": dict(sorted(weight_map.items()))}
    (staging / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    (staging / CONFIG_NAME).write_text(json.dumps(cfg.with_chord_block(block), indent=2) + "\n", encoding="utf-8")
    _copy_other_files(ckpt.root, staging, skip={INDEX_NAME, CONFIG_NAME, *ckpt.shards})
    return result


def _packed_part(reader: Reader, p: ProjPlan, name: str, plan: Plan, cache: dict) -> torch.Tensor:
    if name.endswith(".weight_shape"):
        return torch.tensor([p.n, p.k], dtype=_torch_dtype(p.src.shape.dtype))
    if p not in cache:
        cache.clear()
        codes, scale = p.read_source(reader)
        cache[p] = pack_w4a16(codes[None], scale[None], plan.mode)
    packed: PackedW4A16 = cache[p]
    return packed.qweight[0] if name.endswith(".weight_packed") else packed.scale[0]


def _torch_dtype(st: str) -> torch.dtype:
    return {v: k for k, v in TORCH_TO_ST.items()}[st]


def _copy_other_files(src: Path, dst: Path, skip: set[str]) -> None:
    """Copy tokenizer, generation_config, code files...: everything but weights and hidden entries."""
    for entry in sorted(src.iterdir()):
        if entry.name.startswith(".") or entry.name in skip or entry.name.endswith(".safetensors"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, dst / entry.name, ignore=shutil.ignore_patterns(".*", "*.safetensors"))
        elif entry.is_file():
            shutil.copyfile(entry, dst / entry.name)
