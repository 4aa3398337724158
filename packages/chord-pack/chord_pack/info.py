"""``chord-pack inspect PATH``: what a Chord-packed checkpoint holds."""

from __future__ import annotations

from pathlib import Path

from .checkpoint import open_checkpoint
from .config import load_config
from .convert import shard_metadata
from .errors import ChordPackError
from .model import EXPERT_RE
from .verify import read_chord_block


def inspect_checkpoint(path: str | Path) -> dict:
    root = Path(path).expanduser().absolute()
    if not root.is_dir():
        raise ChordPackError(f"{root}: no such checkpoint folder")
    block = read_chord_block(root)
    ckpt = open_checkpoint(root)
    num_layers = load_config(root, allow_chord=True).num_layers
    counts = {"weight_packed": 0, "weight_scale": 0, "weight_shape": 0}
    passthrough = 0
    want_meta = shard_metadata(block["mode"], block["block_k"])
    for name, shard in ckpt.weight_map.items():
        m = EXPERT_RE.match(name)
        if m is None or m["param"] not in counts or int(m["layer"]) >= num_layers:
            passthrough += 1  # incl. expert tensors of layers beyond num_hidden_layers (MTP): copied as is
            continue
        counts[m["param"]] += 1
        meta = {k: v for k, v in ckpt.shards[shard].metadata.items() if k.startswith("chord.")}
        if meta != want_meta:
            raise ChordPackError(f"shard {shard}: holds packed tensor {name} but its metadata {meta} "
                                 f"disagrees with config.json's chord block {want_meta}")
    return {
        "path": str(root), "mode": block["mode"], "block_k": block["block_k"],
        "format_version": block["format_version"], "source": block.get("source"),
        "sharding": block.get("sharding"), "shards": len(ckpt.shards),
        "packed_tensors": counts, "passthrough_tensors": passthrough,
        "total_bytes": sum(s.size for s in ckpt.shards.values()),
        "packer": block.get("packer"),
    }


def format_summary(s: dict) -> str:
    src = s["source"] or {}
    sh = s["sharding"]
    if sh is None:
        sharding = "none (full checkpoint)"
    elif sh.get("kind") == "ep":
        sharding = f"EP {sh['size']}, rank {sh['rank']} (experts [{sh['experts'][0]}, {sh['experts'][1]}))"
    else:
        lo, hi = sh.get("intermediate", ["?", "?"])
        sharding = f"TP {sh['size']}, rank {sh['rank']} (intermediate [{lo}, {hi}))"
    c = s["packed_tensors"]
    lines = [
        f"path:            {s['path']}",
        f"mode:            {s['mode']}",
        f"block_k:         {s['block_k']}",
        f"format version:  {s['format_version']}",
        f"source:          {src.get('repo') or src.get('path')} (revision: {src.get('revision') or '-'})",
        f"sharding:        {sharding}",
        f"shards:          {s['shards']} ({s['total_bytes'] / 2**20:.1f} MiB)",
        f"packed tensors:  {sum(c.values())} ({c['weight_packed']} weight_packed, "
        f"{c['weight_scale']} weight_scale, {c['weight_shape']} weight_shape)",
        f"passthrough:     {s['passthrough_tensors']} tensors",
        f"packer:          {s['packer']}",
    ]
    return "\n".join(lines)
