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

from . import common
from . import scenarios as S
from .bench_chord import GROUPED_FORMS, chord_block_m, grouped_expected_m


def point_launches(args: argparse.Namespace, arch: str, sms: int) -> list:
    """The Launch of every (point, projection[, grouped path]) of the run, in run order."""
    from chord_kernels import dispatch, env
    from chord_kernels.layouts import BLOCK_K_BY_MODE

    opts = common.options_from_args(args)
    launches = []
    for point in opts.points:
        routing = common.load_routing(opts.routing_dir, point)
        scenario = S.SCENARIOS[point.scenario]
        for proj_name in opts.projections:
            proj = scenario.projections[proj_name]
            if S.family_of(common.family_paths(args)[0]) == "indexed":
                problem = {"n": proj.n, "k": proj.k, "num_experts": point.spec.num_local_experts,
                           "top_k": proj.top_k, "valid_shape_m": point.valid_shape_m}
                indexed = dispatch.IndexedProblem(n=proj.n, k=proj.k, num_experts=point.spec.num_local_experts,
                                                  top_k=proj.top_k, block_m=chord_block_m(problem))
                launches.append(dispatch.select_indexed(indexed, arch, dispatch.indexed_family(),
                                                        dispatch.indexed_tuning()))
                continue
            layout = common.grouped_layout(routing["topk_ids"], routing["expert_map"], point.spec.num_local_experts)
            for path in common.family_paths(args):
                routing_name, mode = GROUPED_FORMS[path]
                problem = dispatch.GroupedProblem(routing_name, proj.n, proj.k, point.spec.num_local_experts,
                                                  max(1, grouped_expected_m(path, layout, point)),
                                                  BLOCK_K_BY_MODE[mode])
                launches.append(dispatch.select_grouped(problem, arch, sms, env.get(env.GROUPED_SPLIT_K, "auto")))
    return launches


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_bench_args(parser, default_out="unused.json")
    parser.add_argument("-j", "--jobs", type=int, default=16)
    args = parser.parse_args(argv)
    import torch
    from chord_kernels.cli import precompile
    from chord_kernels.device import kernel_arch

    common.require_gpu()
    index = torch.cuda.current_device()
    launches = point_launches(args, kernel_arch(index), torch.cuda.get_device_properties(index).multi_processor_count)
    specs = list({launch.spec.symbol: launch.spec for launch in launches}.values())
    precompile(specs, args.jobs, progress=False)
    print(f"{len(specs)} kernel(s) compiled for {len(launches)} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
