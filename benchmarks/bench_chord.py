"""Chord's side of the benchmark: ``chord_kernels.indexed`` on every grid point.

``python3 -m benchmarks.bench_chord --routing-dir DIR --out chord.json [--quick] ...``

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

from . import common
from . import scenarios as S


def chord_block_m(problem: dict[str, Any]) -> int:
    """The routing block size (``moe_align_block_size``'s block_size) Chord is benchmarked with:
    what Chord's dispatch asks the framework for (``dispatch.indexed_block_m``, by routed rows
    per expert; ``CHORD_W4A16_BLOCK_M`` overrides it there, for experiments).

    ``problem``: ``n``, ``k``, ``num_experts`` (local), ``top_k`` (8 gate_up, 1 down),
    ``num_routes`` (topk_ids.numel()) and ``valid_shape_m`` (vLLM's estimate of the routes this
    GPU computes, what Humming's table is indexed by).
    """
    from chord_kernels import dispatch

    return dispatch.indexed_block_m(problem["valid_shape_m"], problem["num_experts"])


def chord_config(n: int, k: int, num_experts: int, top_k: int, block_m: int, device: torch.device) -> str:
    """The kernel Chord's dispatch picks for this call (the same pure functions ``indexed`` uses,
    with the same environment overrides)."""
    try:
        from chord_kernels import dispatch
        from chord_kernels.device import kernel_arch

        index = device.index if device.index is not None else torch.cuda.current_device()
        problem = dispatch.IndexedProblem(n=n, k=k, num_experts=num_experts, top_k=top_k, block_m=block_m)
        launch = dispatch.select_indexed(problem, kernel_arch(index), dispatch.indexed_family(),
                                         dispatch.indexed_tuning())
        return f"{launch.spec.describe()} tile={launch.rows_per_cta}x{launch.cols_per_cta} bm={block_m}"
    except Exception as exc:  # describing must never fail a measurement
        return f"bm={block_m} (config unknown: {type(exc).__name__}: {exc})"


class ChordBackend:
    side = "chord"
    path = "indexed"  # the grouped families (issue 5) get their own backend classes

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

    def make_call(self, packed, a, topk_ids, expert_map, proj, point) -> common.Call:
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

        return common.Call(fn=fn, out=out, block_m=block_m)

    def describe(self, packed, call, point, proj) -> str:
        return chord_config(packed.n, packed.k, packed.num_experts, proj.top_k, call.block_m, call.out.device)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_bench_args(parser, default_out="chord.json")
    args = parser.parse_args(argv)
    common.require_gpu()
    common.run_side(ChordBackend(), common.options_from_args(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
