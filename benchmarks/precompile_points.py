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

from . import common, runner
from . import scenarios as S
from .bench_chord import chord_block_m, chord_launch, grouped_expected_m, grouped_launch


def point_launches(args: argparse.Namespace, arch: str, sms: int) -> list:
    """The Launch of every (point, projection[, grouped path]) of the run, in run order."""
    opts = runner.options_from_args(args)
    paths = runner.family_paths(args)
    launches = []
    for point in opts.points:
        routing = common.load_routing(opts.routing_dir, point)
        experts = point.spec.num_local_experts
        for proj_name in opts.projections:
            proj = S.SCENARIOS[point.scenario].projections[proj_name]
            if S.family_of(paths[0]) == "indexed":
                block_m = chord_block_m({"num_experts": experts, "valid_shape_m": point.valid_shape_m,
                                         "n": proj.n, "k": proj.k})
                launches.append(chord_launch(proj.n, proj.k, experts, proj.top_k, block_m, arch,
                                             proj.input_rows(point.num_tokens) * proj.top_k))
                continue
            layout = common.grouped_layout(routing["topk_ids"], routing["expert_map"], experts)
            for path in paths:
                launch = grouped_launch(path, proj.n, proj.k, experts, grouped_expected_m(path, layout, point), arch,
                                        sms)
                launches += [launch] + ([launch.pick[0]] if launch.pick else [])  # a pair: both kernels
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
