"""Which kernel Chord's dispatch picks at each point of a benchmark run, on any machine (no GPU
needed): the run's own routing (make_routing, seed 0 unless --seed-routing) and host hints
(bench_chord's block_m and expected_m rules, through precompile_points.point_choices) for an
H200 (sm_90a, 132 SMs, 4.8 TB/s) unless --arch / --sms / --memory-tbps say otherwise (an H100:
--memory-tbps 3.35; the tree given to --against must know the memory class). The same argument set as a run
(--family, --scenarios, --tokens, --dists, --paths, --projections, --quick).

    python3 -m benchmarks.dispatch_map --family grouped --scenarios ep32 --tokens 32
    python3 -m benchmarks.dispatch_map --family grouped --against .ab/gv48

With --against TREE (a candidate tree made by ab_tree.sh, or a checkout), it prints only the rows
where TREE's dispatch picks another kernel: the points a candidate changes, which its design-log
entry names and its A/B must cover. Routing files missing from --routing-dir (default: a folder
under the system temp dir, one per routing seed) are drawn first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from chord_kernels.dispatch import DEFAULT_ARCH, H200_SMS

from . import make_routing, runner
from . import scenarios as S
from .precompile_points import point_choices

COLUMNS = ("scenario", "dist", "T", "path", "proj", "hint", "kernel", "tile")


def ensure_routing(routing_dir: Path, points: list[S.Point], seed: int) -> None:
    """Draw the routing files of ``points`` that ``routing_dir`` lacks (make_routing's own draw)."""
    missing = [p for p in points if not (routing_dir / p.routing_file).exists()]
    if missing:
        make_routing.write_all(routing_dir, missing, seed=seed, verbose=False)


def describe(launch) -> str:
    """A Launch as one string: its kernel symbol, and a pair's second kernel."""
    text = launch.spec.symbol
    return text + (f" + {launch.pick[0].spec.symbol}" if launch.pick else "")


def rows(args: argparse.Namespace) -> list[dict]:
    """One row a (point, projection, path) of the run: the hint and the kernel picked."""
    out = []
    for c in point_choices(args, args.arch, args.sms):
        out.append({"scenario": c.point.scenario, "dist": c.point.dist, "T": c.point.tokens,
                    "path": c.path.removeprefix("grouped_"), "proj": c.proj, "hint": c.hint,
                    "kernel": describe(c.launch), "tile": f"{c.launch.rows_per_cta}x{c.launch.cols_per_cta}"})
    return out


def key(row: dict) -> tuple:
    return tuple(row[c] for c in COLUMNS[:5])


def tree_rows(tree: Path, argv: list[str]) -> list[dict]:
    """rows() as TREE's dispatch gives them: this script in a child process importing TREE's
    chord_kernels (the benchmark code stays this checkout's, so hints are computed alike)."""
    package = tree / "packages" / "chord-runtime"
    if not (package / "chord_kernels").is_dir():
        raise SystemExit(f"--against {tree}: no packages/chord-runtime/chord_kernels there")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(package), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-m", "benchmarks.dispatch_map", *argv, "--json"], env=env,
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"--against {tree}: the child run failed:\n{done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def table(found: list[dict], columns: tuple[str, ...] = COLUMNS) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in found]
    return "\n".join(lines)


def changes(base: list[dict], other: list[dict]) -> list[dict]:
    """The rows whose kernel or tile differs between two runs' rows (same points)."""
    other_rows = {key(r): r for r in other}
    out = []
    for row in base:
        theirs = other_rows.get(key(row))
        if theirs is None or (theirs["kernel"], theirs["tile"]) != (row["kernel"], row["tile"]):
            out.append({**row, "against": theirs["kernel"] if theirs else "(no row)",
                        "tile against": theirs["tile"] if theirs else ""})
    return out


def without_against(argv: list[str]) -> list[str]:
    """``argv`` less its --against option (``--against TREE`` or ``--against=TREE``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--against":
            skip = True
        elif not arg.startswith("--against="):
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.add_bench_args(parser, default_out="unused.json", routing_dir_required=False)
    parser.add_argument("--seed-routing", type=int, default=0, help="make_routing's seed (the runs' default: 0)")
    parser.add_argument("--arch", default=DEFAULT_ARCH)
    parser.add_argument("--sms", type=int, default=H200_SMS)
    parser.add_argument("--memory-tbps", type=float, default=None,
                        help="the GPU's memory bandwidth, TB/s (default: the dispatch's, an H200's; an H100: 3.35)")
    parser.add_argument("--against", type=Path, help="a tree whose dispatch to compare with this checkout's")
    parser.add_argument("--json", action="store_true", help="one JSON object a row")
    args = parser.parse_args(argv)
    if args.routing_dir is None:
        args.routing_dir = Path(tempfile.gettempdir()) / f"chord_dispatch_map_routing_seed{args.seed_routing}"
    ensure_routing(args.routing_dir, runner.options_from_args(args).points, args.seed_routing)
    found = rows(args)
    if args.json:
        for row in found:
            print(json.dumps(row))
        return 0
    if args.against is None:
        print(table(found))
        return 0
    child_argv = without_against(argv) + ["--routing-dir", str(args.routing_dir)]  # (the last one counts)
    diff = changes(found, tree_rows(args.against, child_argv))
    print(f"{len(diff)} of {len(found)} rows pick another kernel in {args.against}")
    if diff:
        print(table(diff, COLUMNS[:6] + ("kernel", "tile", "against", "tile against")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
