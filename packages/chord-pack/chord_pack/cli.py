"""``chord-pack``: convert, inspect and verify Chord-packed Kimi K2.x checkpoints."""

from __future__ import annotations

import argparse
import json
import sys

from chord_kernels.layouts import MODES

from . import __version__
from .errors import ChordPackError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chord-pack", description="Convert, inspect and verify Chord-packed Kimi K2.x checkpoints.")
    p.add_argument("--version", action="version", version=f"chord-pack {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="pack a compressed-tensors INT4 checkpoint into a Chord layout")
    c.add_argument("src", help="checkpoint folder, or a Hugging Face Hub repo id (org/name)")
    c.add_argument("--revision", help="Hub branch, tag or commit (default: main); recorded as the resolved commit")
    c.add_argument("out", help="output folder (written to a hidden staging folder, renamed at the end)")
    c.add_argument("--mode", required=True, choices=MODES)
    c.add_argument("--ep-size", type=int)
    c.add_argument("--ep-rank", type=int)
    c.add_argument("--tp-size", type=int)
    c.add_argument("--tp-rank", type=int)
    c.add_argument("--workers", type=int, help="packing threads (default: usable cores, at most 16); "
                   "peak memory grows by about 192 MiB per worker")
    bar = c.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show the progress bar (default: only on a terminal)")
    bar.add_argument("--no-progress", dest="progress", action="store_false")

    i = sub.add_parser("inspect", help="show mode, BLOCK_K, format version, source, sharding, counts")
    i.add_argument("path")
    i.add_argument("--json", action="store_true", help="print the summary as JSON")

    v = sub.add_parser("verify", help="unpack OUT and compare with SRC bit for bit")
    v.add_argument("src")
    v.add_argument("out")
    v.add_argument("--revision", help="Hub revision of SRC (default: the commit OUT records)")

    f = sub.add_parser("make-fixture", help="write a tiny format-faithful Kimi checkpoint "
                                            "(needs compressed-tensors)")
    f.add_argument("out")
    f.add_argument("--variant", default="k2-thinking", choices=("k2-thinking", "k2.5"))
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--weight-shape-dtype", default="int32", choices=("int32", "int64"))
    return p


def run(args: argparse.Namespace) -> int:
    if args.command == "convert":
        from .convert import convert
        from .plan import Sharding

        sharding = Sharding.from_args(args.ep_size, args.ep_rank, args.tp_size, args.tp_rank)
        convert(args.src, args.out, args.mode, sharding=sharding, progress=args.progress, workers=args.workers,
                revision=args.revision)
    elif args.command == "inspect":
        from .info import format_summary, inspect_checkpoint

        summary = inspect_checkpoint(args.path)
        print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    elif args.command == "verify":
        from .verify import verify

        verify(args.src, args.out, revision=args.revision)
    elif args.command == "make-fixture":
        import torch

        from .fixtures import make_tiny_kimi_checkpoint

        path = make_tiny_kimi_checkpoint(args.out, args.variant, seed=args.seed,
                                         weight_shape_dtype=getattr(torch, args.weight_shape_dtype))
        print(f"chord-pack: wrote {args.variant} fixture to {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ChordPackError as e:
        print(f"chord-pack: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("chord-pack: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
