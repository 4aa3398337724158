"""Synthetic multi-GB checkpoints at true Kimi K2 expert dims, for the memory-bound test and the benchmark.

The expert tensors are random packed int32 words and random finite BF16 scales (a handful of
random buffers reused across experts: the bytes do not matter for speed or memory, only the
shapes do). gate/up are [2048, 7168], down is [7168, 2048], as in K2. Layer 0 is dense and holds
no tensors; layer 1 holds ``num_experts`` routed experts; one norm tensor passes through.

    python -m chord_pack.synthetic bench --size-gb 4 [--workers N] [--mode indexed]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

from .fixtures import Dims, model_config
from .writer import OutEntry, tensor_bytes, write_shard

HIDDEN, INTER = 7168, 2048
EXPERT_BYTES = 3 * (HIDDEN * INTER // 2 + HIDDEN * INTER // 32 * 2 + 4)  # one expert, all three projections


def experts_for_size(size_bytes: int) -> int:
    return max(1, -(-size_bytes // EXPERT_BYTES))


def make_synthetic_k2(out_dir: str | Path, num_experts: int, *, shards: int = 1, seed: int = 0) -> Path:
    """Write a K2-Thinking-shaped checkpoint with ``num_experts`` true-dim experts in one MoE layer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    bufs = {}
    for proj, (n, k) in (("gate_proj", (INTER, HIDDEN)), ("up_proj", (INTER, HIDDEN)), ("down_proj", (HIDDEN, INTER))):
        packed = torch.randint(-2**31, 2**31 - 1, (n, k // 8), generator=g, dtype=torch.int32)
        scale = (torch.rand(n, k // 32, generator=g) * 0.01 + 1e-4).to(torch.bfloat16)
        bufs[proj] = (packed, scale, torch.tensor([n, k], dtype=torch.int32))
    names: list[tuple[str, str, str]] = []  # (tensor name, proj, param)
    for e in range(num_experts):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            for param in ("weight_packed", "weight_scale", "weight_shape"):
                names.append((f"model.layers.1.mlp.experts.{e}.{proj}.{param}", proj, param))
    files = [f"model-{i + 1:05d}-of-{shards:06d}.safetensors" for i in range(shards)]
    per = -(-len(names) // 9 // shards) * 9  # whole experts per shard
    weight_map = {}
    norm = torch.ones(HIDDEN, dtype=torch.bfloat16)
    for i, fname in enumerate(files):
        part = names[i * per:(i + 1) * per]
        entries, lookup = [], {}
        if i == 0:
            entries.append(OutEntry("model.norm.weight", "BF16", (HIDDEN,), HIDDEN * 2))
            lookup["model.norm.weight"] = norm
        for name, proj, param in part:
            t = bufs[proj][("weight_packed", "weight_scale", "weight_shape").index(param)]
            entries.append(OutEntry(name, {torch.int32: "I32", torch.bfloat16: "BF16"}[t.dtype], tuple(t.shape),
                                    t.numel() * t.element_size()))
            lookup[name] = t
        entries.sort(key=lambda e: e.name)
        write_shard(out / fname, entries, {"format": "pt"}, lambda e, lookup=lookup: [tensor_bytes(lookup[e.name])],
                    lambda _n: None)
        weight_map.update({e.name: fname for e in entries})
    d = Dims(HIDDEN, INTER, num_experts, 2, min(8, num_experts))
    index = {"metadata": {"total_size": sum((out / f).stat().st_size for f in files)}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    (out / "config.json").write_text(json.dumps(model_config("k2-thinking", d), indent=2) + "\n", encoding="utf-8")
    return out


def rss_bytes() -> int:
    """Current resident set size (Linux /proc; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def bench(size_gb: float, mode: str, workers: int | None, keep: str | None) -> dict:
    from .convert import convert

    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="chord-pack-bench-"))
    src, out = root / "src", root / "out"
    if not (src / "config.json").is_file():
        t0 = time.perf_counter()
        make_synthetic_k2(src, experts_for_size(int(size_gb * 1e9)))
        print(f"generated {src} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    base = rss_bytes()
    t0 = time.perf_counter()
    r = convert(src, out, mode, progress=False, workers=workers, log=lambda _m: None)
    dt = time.perf_counter() - t0
    stats = {"source_bytes": size, "written_bytes": r.bytes_written, "seconds": round(dt, 2),
             "GB_per_s": round(size / dt / 1e9, 3), "workers": r.workers, "mode": mode,
             "rss_base_MB": round(base / 1e6), "peak_rss_growth_MB": round((peak_rss_bytes() - base) / 1e6)}
    if not keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    else:
        import shutil

        shutil.rmtree(out, ignore_errors=True)
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chord_pack.synthetic")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="convert a synthetic true-dims checkpoint; print GB/s and peak RSS growth")
    b.add_argument("--size-gb", type=float, default=2.0)
    b.add_argument("--mode", default="indexed")
    b.add_argument("--workers", type=int)
    b.add_argument("--keep", help="folder to keep the synthetic source in (reused on the next run)")
    m = sub.add_parser("make", help="write a synthetic checkpoint")
    m.add_argument("out")
    m.add_argument("--size-gb", type=float, default=2.0)
    m.add_argument("--shards", type=int, default=1)
    a = ap.parse_args(argv)
    if a.cmd == "bench":
        print(json.dumps(bench(a.size_gb, a.mode, a.workers, a.keep)))
    else:
        make_synthetic_k2(a.out, experts_for_size(int(a.size_gb * 1e9)), shards=a.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
