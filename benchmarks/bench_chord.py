"""Chord's side of the benchmark: ``chord_kernels.indexed`` on every grid point, or with
``--family grouped`` the grouped family (``contiguous_offsets`` and ``masked``).

``python3 -m benchmarks.bench_chord --routing-dir DIR --out chord.json [--quick] ...``
``python3 -m benchmarks.bench_chord --family grouped --routing-dir DIR --out chord_grouped.json ...``

Per (scenario, projection) the weights are generated once (benchmarks.common.make_weights, the
same seed the Humming process uses) and packed with
``chord_kernels.layouts.pack_w4a16(unpack_codes_along_k(weight_packed), weight_scale, "indexed")``;
per point the routing file is turned into vLLM ``moe_align_block_size`` buffers by
``chord_kernels.routing`` with the block size :func:`chord_block_m` picks.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch

from . import common, runner
from . import scenarios as S


def chord_block_m(problem: dict[str, Any]) -> int:
    """The routing block size (``moe_align_block_size``'s block_size) Chord is benchmarked with:
    what Chord's dispatch asks the framework for (``dispatch.indexed_block_m``, by routed rows
    per expert and the projection's shape; ``CHORD_W4A16_BLOCK_M`` overrides it there, for
    experiments).

    ``problem``: ``n``, ``k``, ``num_experts`` (local), ``top_k`` (8 gate_up, 1 down),
    ``num_routes`` (topk_ids.numel()) and ``valid_shape_m`` (vLLM's estimate of the routes this
    GPU computes, what Humming's table is indexed by).
    """
    from chord_kernels import dispatch

    return dispatch.indexed_block_m(problem["valid_shape_m"], problem["num_experts"], problem["n"], problem["k"])


def chord_launch(n: int, k: int, num_experts: int, top_k: int, block_m: int, arch: str, num_routes: int):
    """The Launch Chord's dispatch picks for an indexed call of ``num_routes`` routes (input rows x
    top_k; the same pure functions ``indexed`` uses, with the same environment overrides)."""
    from chord_kernels import dispatch

    problem = dispatch.IndexedProblem(n=n, k=k, num_experts=num_experts, top_k=top_k, block_m=block_m,
                                      num_routes=num_routes)
    return dispatch.select_indexed(problem, arch, dispatch.indexed_family(), dispatch.indexed_tuning())


def chord_config(n: int, k: int, num_experts: int, top_k: int, block_m: int, device: torch.device,
                 num_routes: int) -> str:
    """The kernel Chord's dispatch picks for this call (chord_launch), described."""
    try:
        from chord_kernels.device import kernel_arch

        index = device.index if device.index is not None else torch.cuda.current_device()
        launch = chord_launch(n, k, num_experts, top_k, block_m, kernel_arch(index), num_routes)
        return f"{launch.spec.describe()} tile={launch.rows_per_cta}x{launch.cols_per_cta} bm={block_m}"
    except Exception as exc:  # describing must never fail a measurement
        return f"bm={block_m} (config unknown: {type(exc).__name__}: {exc})"


class ChordBackend:
    side = "chord"
    path = "indexed"  # the grouped family: ChordGroupedBackend

    def __init__(self) -> None:
        import chord_kernels
        from chord_kernels import int4, layouts, routing

        self.ck = chord_kernels
        self.int4 = int4
        self.layouts = layouts
        self.routing = routing

    def meta(self) -> dict[str, Any]:
        return {"chord_version": getattr(self.ck, "__version__", "?"),
                "chord_path": os.path.dirname(self.ck.__file__),
                "format_version": self.layouts.FORMAT_VERSION}

    def prepare(self, scenario, proj, weight_packed, weight_scale):
        codes = self.int4.unpack_codes_along_k(weight_packed)
        packed = self.layouts.pack_w4a16(codes, weight_scale, "indexed")
        del codes
        return packed

    def make_call(self, packed, a, topk_ids, expert_map, proj, point) -> runner.Call:
        problem = {"n": proj.n, "k": proj.k, "num_experts": packed.num_experts, "top_k": proj.top_k,
                   "num_routes": topk_ids.numel(), "valid_shape_m": point.valid_shape_m}
        block_m = chord_block_m(problem)
        sorted_ids, expert_ids, ntp = self.routing.moe_align_block_size(
            topk_ids, block_m, S.GLOBAL_EXPERTS, expert_map)
        out = torch.empty((proj.output_rows(point.num_tokens), proj.n), dtype=torch.bfloat16, device=a.device)
        indexed = self.ck.indexed
        top_k = proj.top_k

        def fn():
            return indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, block_m, out)

        return runner.Call(fn=fn, out=out, block_m=block_m)

    def describe(self, packed, call, point, proj) -> str:
        return chord_config(packed.n, packed.k, packed.num_experts, proj.top_k, call.block_m, call.out.device,
                            proj.input_rows(point.num_tokens) * proj.top_k)


def grouped_expected_m(path: str, layout: common.GroupedLayout, point) -> int:
    """The host hint Chord gets: ``contiguous_offsets``: vLLM's valid_shape_m / E rounded up (what
    humming-compat passes on vLLM's grouped_contiguous path); ``masked``: the mean count."""
    if path == "grouped_contiguous":
        return max(1, -(-point.valid_shape_m // layout.num_experts))
    return layout.expected_m


def grouped_launch(path: str, n: int, k: int, num_experts: int, expected_m: int, arch: str, sms: int,
                   memory_tbps: float | None = None):
    """The Launch Chord's grouped dispatch picks (the pure function the entry points use), on a
    GPU of ``memory_tbps`` (None: the dispatch's default, the H200's; a tree from before the
    memory class, as A/B runs import, takes no such argument)."""
    from chord_kernels import dispatch, env
    from chord_kernels.layouts import BLOCK_K_BY_MODE

    routing_name, mode = GROUPED_FORMS[path]
    problem = dispatch.GroupedProblem(routing_name, n, k, num_experts, max(1, expected_m), BLOCK_K_BY_MODE[mode])
    memory = {} if memory_tbps is None else {"memory_tbps": memory_tbps}
    return dispatch.select_grouped(problem, arch, sms, env.get(env.GROUPED_SPLIT_K, "auto"), **memory)


def grouped_config(path: str, n: int, k: int, num_experts: int, expected_m: int, device: torch.device) -> str:
    """The grouped kernel Chord's dispatch picks (grouped_launch), described."""
    try:
        from chord_kernels import device as chord_device

        index = device.index if device.index is not None else torch.cuda.current_device()
        sms = torch.cuda.get_device_properties(index).multi_processor_count
        memory = chord_device.memory_tbps(index) if hasattr(chord_device, "memory_tbps") else None  # (older trees)
        launch = grouped_launch(path, n, k, num_experts, expected_m, chord_device.kernel_arch(index), sms, memory)
        desc = f"{launch.spec.describe()} tile={launch.rows_per_cta}x{launch.cols_per_cta}"
        if launch.pick:  # two tile loops, the device runs one (dispatch.Launch.pick)
            other = launch.pick[0]
            desc += f"; paired with {other.spec.describe()} tile={other.rows_per_cta}x{other.cols_per_cta}"
        return f"{desc} em={expected_m}"
    except Exception as exc:  # describing must never fail a measurement
        return f"em={expected_m} (config unknown: {type(exc).__name__}: {exc})"


# benchmark path -> (Chord's routing name in dispatch, packing mode)
GROUPED_FORMS = {"grouped_contiguous": ("contiguous_offsets", "contiguous"), "grouped_masked": ("masked", "masked")}


class ChordGroupedBackend(ChordBackend):
    """``chord_kernels.contiguous_offsets`` (vLLM's grouped_contiguous form: int64 offsets [E+1]
    on the device, unaligned rows in vLLM's [num_tokens*8, K] buffer) or ``chord_kernels.masked``
    (int32 counts [E] on the device, [E*max_m, K]). Both take vLLM's layout tensors as they are,
    so the timed call is the entry point alone (no conversion a real call would need)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        from chord_kernels import operator

        self.operator = operator
        if path not in GROUPED_FORMS:
            raise ValueError(f"not a grouped path: {path!r}")
        self.path = path
        self.mode = GROUPED_FORMS[path][1]

    def prepare(self, scenario, proj, weight_packed, weight_scale):
        codes = self.int4.unpack_codes_along_k(weight_packed)
        packed = self.operator.pack_w4a16_grouped(codes, weight_scale, self.mode)
        del codes
        return packed

    def make_call(self, packed, a, layout, proj, point) -> runner.Call:
        out = torch.empty((a.shape[0], proj.n), dtype=torch.bfloat16, device=a.device)
        expected_m = grouped_expected_m(self.path, layout, point)
        if self.path == "grouped_contiguous":
            offsets = layout.offsets.to(a.device)
            fn_impl = self.ck.contiguous_offsets

            def fn():
                return fn_impl(a, packed, offsets, out, expected_m=expected_m)
        else:
            counts = layout.counts.to(a.device)
            fn_impl = self.ck.masked

            def fn():
                return fn_impl(a, packed, counts, expected_m, out)

        # no routing block size on the grouped path: the tile height follows expected_m (see describe)
        return runner.Call(fn=fn, out=out, block_m=None, extra={"expected_m_hint": expected_m})

    def describe(self, packed, call, point, proj) -> str:
        return grouped_config(self.path, packed.n, packed.k, packed.num_experts, call.extra["expected_m_hint"],
                              call.out.device)


def backends_for(args) -> list:
    if getattr(args, "family", "indexed") == "indexed":
        return [ChordBackend()]
    return [ChordGroupedBackend(path) for path in runner.family_paths(args)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.add_bench_args(parser, default_out="chord.json")
    args = parser.parse_args(argv)
    runner.require_gpu()
    runner.run_side(backends_for(args), runner.options_from_args(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
