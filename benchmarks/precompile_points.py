"""Compile, in parallel, the kernels a bench_chord run will pick at its points (same arguments,
same routing files), before the run: the run's first call of each kernel then loads it from the
JIT cache instead of compiling it in series (an A/B of two trees under ncu on a fresh device
machine otherwise spends most of its minutes in nvcc, one kernel at a time).

    python3 -m benchmarks.precompile_points --family grouped --routing-dir R --scenarios ep32 \
        --tokens 128 --dists uniform -j 16

The choice is the dispatch's own (the functions bench_chord's describe() uses), so a tree
imported through PYTHONPATH / CHORD_CSRC_DIR compiles its own kernels.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import common, runner
from . import scenarios as S
from .bench_chord import chord_block_m, chord_launch, grouped_expected_m, grouped_launch


@dataclass(frozen=True)
class Choice:
    """The dispatch's choice at one (point, projection, path) of a run: ``hint`` is the host hint
    it was picked from (the indexed routing block size, or the grouped expected_m)."""

    point: S.Point
    proj: str
    path: str
    hint: int
    launch: Any  # chord_kernels.dispatch.Launch


def point_choices(args: argparse.Namespace, arch: str, sms: int) -> Iterator[Choice]:
    """The dispatch's Choice at every (point, projection[, grouped path]) of the run, in run order:
    the routing files' layouts and bench_chord's hints, through the functions its describe() uses."""
    opts = runner.options_from_args(args)
    paths = runner.family_paths(args)
    for point in opts.points:
        routing = common.load_routing(opts.routing_dir, point)
        experts = point.spec.num_local_experts
        for proj_name in opts.projections:
            proj = S.SCENARIOS[point.scenario].projections[proj_name]
            if S.family_of(paths[0]) == "indexed":
                block_m = chord_block_m({"num_experts": experts, "valid_shape_m": point.valid_shape_m,
                                         "n": proj.n, "k": proj.k})
                yield Choice(point, proj_name, paths[0], block_m,
                             chord_launch(proj.n, proj.k, experts, proj.top_k, block_m, arch,
                                          proj.input_rows(point.num_tokens) * proj.top_k))
                continue
            layout = common.grouped_layout(routing["topk_ids"], routing["expert_map"], experts)
            for path in paths:
                expected_m = grouped_expected_m(path, layout, point)
                yield Choice(point, proj_name, path, expected_m,
                             grouped_launch(path, proj.n, proj.k, experts, expected_m, arch, sms,
                                            getattr(args, "memory_tbps", None)))


def point_launches(args: argparse.Namespace, arch: str, sms: int) -> list:
    """The Launch of every (point, projection[, grouped path]) of the run, in run order (a
    grouped pair: both kernels)."""
    launches = []
    for choice in point_choices(args, arch, sms):
        launches += [choice.launch] + ([choice.launch.pick[0]] if choice.launch.pick else [])
    return launches


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    runner.add_bench_args(parser, default_out="unused.json")
    parser.add_argument("-j", "--jobs", type=int, default=16)
    args = parser.parse_args(argv)
    import torch
    from chord_kernels.cli import precompile
    from chord_kernels.device import kernel_arch
    from chord_kernels.jit.launch import diagnostic_spec

    runner.require_gpu()
    index = torch.cuda.current_device()
    launches = point_launches(args, kernel_arch(index), torch.cuda.get_device_properties(index).multi_processor_count)
    # The builds the runs load: a diagnostic one where the environment asks for it (diagnostic_spec).
    specs = list({launch.spec.symbol: diagnostic_spec(launch.spec) for launch in launches}.values())
    precompile(specs, args.jobs, progress=False)
    print(f"{len(specs)} kernel(s) compiled for {len(launches)} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
