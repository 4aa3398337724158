"""The peer's side: humming-kernels 0.1.19, default configuration, as vLLM drives it: the indexed
path, or with ``--family grouped`` the grouped_contiguous and grouped_masked paths.

``PYTHONPATH=/tmp/humming_site python3 -m benchmarks.bench_humming --routing-dir DIR --out humming.json``

Runs in its own process with the humming-kernels wheel installed into a target folder on
``PYTHONPATH``; it never imports ``chord_kernels`` (checked at exit): humming is a baseline,
not a dependency, and Chord's ``humming-compat`` owns the same import name. The routing
buffers come from Chord's ``routing.py`` loaded by file path (see
``common.load_routing_module_by_path``), so both sides build them with one definition.

Call sequence, following vLLM 0.33's Route A (``--moe-backend humming`` on a compressed-tensors
pack-quantized INT4 group-32 checkpoint; shared/reference/vllm_contract.md sections 1.2, 2.1,
3.1), once per (scenario, projection):

1. ``humming.schema.BaseWeightSchema.from_config(CT_WEIGHT_CONFIG)`` -> compressed-tensors schema;
   ``.convert_humming(tensors={"weight_packed", "weight_scale"}, shape_n_stacks=[I, I] (gate_up)
   or [H] (down), shape_k_stacks=[K], param_dtype=bf16, num_experts=E, device=...)``.
2. ``humming.transform.prepare_and_transform_humming_tensors(tensors, shape_n=N, shape_k=K,
   weight_schema, input_schema=HummingInputSchema(), pad_n_to_multiple=256,
   pad_k_to_multiple=128, has_bias=False, num_experts=E, torch_dtype=bf16, device=...)``
   -> ``(LayerConfig, {"weight", "weight_scale", ...})``.
3. ``humming.tune.get_heuristics_config(layer_config=..., use_f16_accum=False,
   use_batch_invariant=False, gemm_type=GemmType.INDEXED)`` -> the tuning table, a list of
   ``(lower, upper, config)``; JSON-encoded and passed back as ``tuning_config``.

Per point: ``valid_shape_m = ceil(num_tokens * 8 * E_local / 384)`` (vLLM's estimate); the
routing block size is ``config["block_shape"][0]`` of the table entry with
``lower < valid_shape_m <= upper`` (vLLM's rule, fallback 64), then ``moe_align_block_size``
with that block size, then ``humming.forward.humming_forward(layer_config, inputs=...,
weight=..., weight_scale=..., outputs=..., locks=..., sorted_ids=..., expert_ids=...,
num_tokens_padded=..., top_k=8 or 1, valid_shape_m=..., compute_config=COMPUTE_CONFIG (JSON),
tuning_config=...)``. The first call JIT-compiles the whole table (NVRTC); it is kept out of
the timing. The kernel it picked is read back from humming's kernel registry.

Grouped family (vLLM's HummingGroupedExperts / BatchedHummingGroupedExperts, vllm_contract.md
2.2 and 2.3): the same conversion, the table from ``gemm_type=GemmType.GROUPED_CONTIGUOUS`` /
``GROUPED_MASKED`` and ``compute_config`` with that gemm_type; per point ``humming_forward(...,
inputs=<grouped rows>, outputs=..., locks=..., expert_layout=<int64 offsets [E+1]> or <int32
counts [E]>, valid_shape_m=..., compute_config=..., tuning_config=...)`` (no sorted_ids, no
top_k). Both layouts are what vLLM hands over, so nothing is converted inside the timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import common, runner
from . import scenarios as S

# What vLLM's convert_to_humming_moe_kernel_format passes for a Kimi K2.x checkpoint.
CT_WEIGHT_CONFIG = {"quant_method": "compressed-tensors", "format": "pack-quantized", "type": "int",
                    "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": True}
# vLLM's compute_config with VLLM_BATCH_INVARIANT and VLLM_HUMMING_USE_F16_ACCUM unset.
COMPUTE_CONFIG = {"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": "indexed"}
VLLM_FALLBACK_BLOCK_SIZE = 64
PAD_N, PAD_K = 256, 128  # vLLM's pad_n_to_multiple / pad_k_to_multiple for MoE sublayers


def block_size_from_table(table, valid_shape_m: int) -> tuple[int, tuple[int, int] | None]:
    """vLLM's rule: block_shape[0] of the entry with lower < valid_shape_m <= upper
    (fallback 64). Returns (block size, (lower, upper) or None)."""
    for lower, upper, cfg in table:
        if lower < valid_shape_m <= upper:
            return int(cfg["block_shape"][0]), (int(lower), int(upper))
    return VLLM_FALLBACK_BLOCK_SIZE, None


def format_kernel_config(cfg: Any, num_sms: int = 0) -> str:
    """'wgmma 96x256x64 w96x32x64 st4 sk ws tma cta/sm1' from a HummingKernel or a tuning dict
    (the dict's missing keys take TuningConfig's defaults)."""
    def get(name, default=None):
        return cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)

    mma = get("mma_type", "?")
    mma = getattr(mma, "value", mma)
    bm, bn, bk = get("block_shape", ("?", "?", "?"))
    wm, wn, wk = get("warp_shape", ("?", "?", "?"))
    parts = [str(mma), f"{bm}x{bn}x{bk}", f"w{wm}x{wn}x{wk}", f"st{get('num_stages', 2)}"]
    if get("use_stream_k", True):
        parts.append("sk")
    if get("use_warp_spec", False):
        parts.append("ws")
    if get("use_tma", False):
        parts.append("tma")
    parts.append(f"cta/sm{get('num_ctas_per_sm', 1)}")
    if num_sms:
        parts.append(f"sms{num_sms}")
    return " ".join(parts)


@dataclass
class Handle:
    layer_config: Any
    tensors: dict[str, torch.Tensor]
    table: list
    tuning_str: str
    compute_str: str


class HummingBackend:
    """vLLM's HummingIndexedExperts path. The grouped paths (grouped_contiguous with per-expert
    offsets, grouped_masked with per-expert counts) are :class:`HummingGroupedBackend`: they
    differ in ``make_call`` (``expert_layout=`` instead of the sorted ids) and in the gemm_type
    of the tuning table and compute_config."""

    side = "humming"
    path = "indexed"
    compute_config = COMPUTE_CONFIG

    def __init__(self, routing_module) -> None:
        import humming

        _check_is_peer(humming)
        from humming.config import GemmType
        from humming.forward import humming_forward
        from humming.schema import BaseWeightSchema, HummingInputSchema
        from humming.transform import prepare_and_transform_humming_tensors
        from humming.tune import get_heuristics_config

        self.humming = humming
        self.GemmType = GemmType
        self.humming_forward = humming_forward
        self.BaseWeightSchema = BaseWeightSchema
        self.HummingInputSchema = HummingInputSchema
        self.prepare_and_transform = prepare_and_transform_humming_tensors
        self.get_heuristics_config = get_heuristics_config
        self.routing = routing_module
        self._locks: dict[str, torch.Tensor] = {}

    def meta(self) -> dict[str, Any]:
        return {"humming_version": getattr(self.humming, "__version__", "?"),
                "humming_path": os.path.dirname(self.humming.__file__),
                "compute_config": self.compute_config,
                "routing_module": getattr(self.routing, "__file__", "?")}

    def locks(self, device: torch.device) -> torch.Tensor:
        """vLLM's create_humming_locks is num_SMs * 8 int32 zeros; 2048 is humming's own test
        size. The count is only a capacity bound (the kernels leave it zeroed), so the larger
        of the two changes nothing but avoids a capacity assertion."""
        key = str(device)
        if key not in self._locks:
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            self._locks[key] = torch.zeros(max(sms * 8, 2048), dtype=torch.int32, device=device)
        return self._locks[key]

    def prepare(self, scenario, proj, weight_packed, weight_scale) -> Handle:
        num_experts = scenario.num_local_experts
        schema = self.BaseWeightSchema.from_config(dict(CT_WEIGHT_CONFIG))
        # vLLM's stacks: gate and up halves for w13, one block for w2; K is never stacked
        n_stacks = [proj.n // 2, proj.n // 2] if proj.name == "gate_up" else [proj.n]
        # clones: the conversion may reuse the storage it is given; the reference needs ours
        weight_schema, tensors = schema.convert_humming(
            tensors={"weight_packed": weight_packed.clone(), "weight_scale": weight_scale.clone()},
            shape_n_stacks=n_stacks, shape_k_stacks=[proj.k], param_dtype=torch.bfloat16,
            num_experts=num_experts, device=weight_packed.device)
        layer_config, tensors = self.prepare_and_transform(
            tensors=tensors, shape_n=proj.n, shape_k=proj.k, weight_schema=weight_schema,
            input_schema=self.HummingInputSchema(), pad_n_to_multiple=PAD_N, pad_k_to_multiple=PAD_K,
            has_bias=False, num_experts=num_experts, torch_dtype=torch.bfloat16,
            device=weight_packed.device)
        table = self.get_heuristics_config(layer_config=layer_config, use_f16_accum=False,
                                           use_batch_invariant=False, gemm_type=self.GemmType(self.compute_config["gemm_type"]))
        handle = Handle(layer_config, tensors, table, json.dumps(table), json.dumps(self.compute_config))
        self._compile_table(handle, weight_packed.device)
        return handle

    @staticmethod
    def _compile_table(handle: Handle, device) -> None:
        """JIT the whole tuning table now, as the first humming_forward would (same cache key:
        layer config string, compute and tuning JSON, device), so the compile is accounted to
        the preparation, not to the first point. Best effort: if it fails, the first forward
        compiles (or fails) on its own and the point records it."""
        try:
            from humming.kernel.humming import HummingKernel

            HummingKernel.prepare_kernels(handle.layer_config.to_str(), handle.compute_str,
                                          handle.tuning_str, device)
        except Exception as exc:
            print(f"[humming] table pre-compile failed ({type(exc).__name__}: {exc}); "
                  "the first call will compile", flush=True)

    def make_call(self, handle: Handle, a, topk_ids, expert_map, proj, point) -> runner.Call:
        vsm = point.valid_shape_m
        block, interval = block_size_from_table(handle.table, vsm)
        sorted_ids, expert_ids, ntp = self.routing.moe_align_block_size(
            topk_ids, block, S.GLOBAL_EXPERTS, expert_map)
        out = torch.empty((proj.output_rows(point.num_tokens), proj.n), dtype=torch.bfloat16, device=a.device)
        locks = self.locks(a.device)
        forward, cfg, t = self.humming_forward, handle.layer_config, handle.tensors
        weight, scale = t["weight"], t["weight_scale"]
        zero_point, scale_2 = t.get("zero_point"), t.get("weight_scale_2")
        compute_str, tuning_str, top_k = handle.compute_str, handle.tuning_str, proj.top_k

        def fn():
            return forward(cfg, inputs=a, weight=weight, weight_scale=scale, zero_point=zero_point,
                           bias=None, weight_scale_2=scale_2, outputs=out, locks=locks,
                           sorted_ids=sorted_ids, expert_ids=expert_ids, num_tokens_padded=ntp,
                           top_k=top_k, valid_shape_m=vsm, compute_config=compute_str,
                           tuning_config=tuning_str)

        return runner.Call(fn=fn, out=out, block_m=block,
                           extra={"tuning_interval": list(interval) if interval else None,
                                  "b_dtype": str(getattr(cfg, "b_dtype", "?"))})

    def describe(self, handle: Handle, call, point, proj) -> str:
        """The kernel humming launched: the interval of its compiled table containing
        valid_shape_m (the launcher's own rule), read from humming's kernel registry."""
        vsm = point.valid_shape_m
        try:
            from humming.kernel.humming import HummingKernel

            configs = HummingKernel.prepare_kernels(handle.layer_config.to_str(), handle.compute_str,
                                                    handle.tuning_str, call.out.device)  # cached
            values = [int(x) for x in configs.reshape(-1).tolist()]
            for i in range(0, len(values), 4):
                lower, upper, kernel_id, num_sms = values[i:i + 4]
                if lower < vsm <= upper:
                    return format_kernel_config(HummingKernel._id2kernel[kernel_id], num_sms)
            raise LookupError(f"no compiled interval holds valid_shape_m={vsm}")
        except Exception as exc:
            for lower, upper, cfg in handle.table:
                if lower < vsm <= upper:
                    return format_kernel_config(cfg) + f" (table; registry: {type(exc).__name__})"
            return f"unknown ({type(exc).__name__}: {exc})"


class HummingGroupedBackend(HummingBackend):
    """vLLM's grouped Humming experts: ``grouped_contiguous`` (HummingGroupedExperts, the default
    with EP: ``expert_layout`` = int64 offsets [E+1], rows in vLLM's [num_tokens*8, K] buffer,
    rows past offsets[-1] ignored) or ``grouped_masked`` (BatchedHummingGroupedExperts:
    ``expert_layout`` = int32 counts [E], [E*max_m, K] flattened)."""

    def __init__(self, routing_module, path: str) -> None:
        if path not in S.GROUPED_PATHS:
            raise ValueError(f"not a grouped path: {path!r}")
        super().__init__(routing_module)
        self.path = path
        self.compute_config = dict(COMPUTE_CONFIG, gemm_type=path)

    def make_call(self, handle: Handle, a, layout, proj, point) -> runner.Call:
        vsm = point.valid_shape_m  # vLLM's hint on every Humming MoE path
        block, interval = block_size_from_table(handle.table, vsm)  # the table's M tile (info only)
        expert_layout = (layout.offsets if self.path == "grouped_contiguous" else layout.counts).to(a.device)
        out = torch.empty((a.shape[0], proj.n), dtype=torch.bfloat16, device=a.device)
        locks = self.locks(a.device)
        forward, cfg, t = self.humming_forward, handle.layer_config, handle.tensors
        weight, scale = t["weight"], t["weight_scale"]
        zero_point, scale_2 = t.get("zero_point"), t.get("weight_scale_2")
        compute_str, tuning_str = handle.compute_str, handle.tuning_str

        def fn():
            return forward(cfg, inputs=a, weight=weight, weight_scale=scale, zero_point=zero_point,
                           bias=None, weight_scale_2=scale_2, outputs=out, locks=locks,
                           expert_layout=expert_layout, valid_shape_m=vsm, compute_config=compute_str,
                           tuning_config=tuning_str)

        return runner.Call(fn=fn, out=out, block_m=block,
                           extra={"tuning_interval": list(interval) if interval else None,
                                  "b_dtype": str(getattr(cfg, "b_dtype", "?"))})


def backends_for(args, routing_module) -> list:
    if getattr(args, "family", "indexed") == "indexed":
        return [HummingBackend(routing_module)]
    return [HummingGroupedBackend(routing_module, path) for path in runner.family_paths(args)]


def _check_is_peer(humming_module) -> None:
    """Fail loudly if ``import humming`` found Chord's compat package instead of the wheel."""
    path = Path(humming_module.__file__).resolve()
    if getattr(humming_module, "BACKEND", None) == "chord" or (common.REPO_ROOT / "packages") in path.parents:
        raise SystemExit(f"`import humming` resolved to Chord's humming-compat ({path}); put the "
                         "humming-kernels target folder first on PYTHONPATH")
    site = os.environ.get("HUMMING_SITE")
    if site and Path(site).resolve() not in path.parents:
        raise SystemExit(f"`import humming` resolved to {path}, not under HUMMING_SITE={site}")


# --prewarm: the run's tuning tables compiled ahead, several groups at once. Why: humming JITs a
# table when a group is prepared, one group after another, with its kernels in parallel only
# within the table; the grouped grid spent 284 s of ~430 there (ed94d1f, 12 tables). Its cubin
# cache is on disk (HUMMING_CACHE_DIR, file-locked, keyed by the kernel's code), so tables compiled
# in other processes first are loads for the timed side. Nothing is timed in a prewarm.
def prewarm_groups(args) -> list[tuple[str, str, str]]:
    """(path, scenario, projection) of every group the side will prepare, in run order."""
    opts = runner.options_from_args(args)
    paths = ("indexed",) if opts.family == "indexed" else runner.family_paths(args)
    return [(paths[bi], scn, proj) for scn, proj, bi in runner.side_groups(opts, len(paths))]


def _prewarm_group(group: tuple[str, str, str], seed: int, levels: int) -> tuple[float, str | None]:
    """One group's preparation (weights, conversion, the table's JIT): (seconds, error or None)."""
    start = time.perf_counter()
    try:
        path, scn, proj_name = group
        routing = common.load_routing_module_by_path()
        backend = HummingBackend(routing) if path == "indexed" else HummingGroupedBackend(routing, path)
        scenario = S.SCENARIOS[scn]
        proj = scenario.projections[proj_name]
        device = torch.device("cuda", torch.cuda.current_device())
        wp, ws = common.make_weights(scenario.num_local_experts, proj.n, proj.k,
                                     common.weight_seed(scn, proj_name, seed), device, levels)
        backend.prepare(scenario, proj, wp, ws)
        return time.perf_counter() - start, None
    except Exception as exc:  # best effort: the timed side compiles whatever is missing
        return time.perf_counter() - start, f"{type(exc).__name__}: {exc}"


def prewarm(args, jobs: int, run_group=_prewarm_group) -> int:
    """Compile every group's table, ``jobs`` groups at a time in fresh processes (spawned: CUDA);
    returns the number of groups that failed (0: all compiled)."""
    groups = prewarm_groups(args)
    work = [(g, args.seed, args.levels) for g in groups]
    if jobs <= 1:
        results = [run_group(*w) for w in work]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(min(jobs, len(work))) as pool:
            results = pool.starmap(run_group, work, chunksize=1)  # a group a task: the slow ones spread
    for group, (seconds, error) in zip(groups, results, strict=True):
        print(f"[humming] prewarm {'/'.join(group)}: {seconds:.1f} s" + (f" FAILED {error}" if error else ""),
              flush=True)
    return sum(error is not None for _, error in results)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.add_bench_args(parser, default_out="humming.json")
    parser.add_argument("--prewarm", type=int, metavar="JOBS", default=0,
                        help="only compile the tuning tables of the run's groups, JOBS at a time, and exit")
    args = parser.parse_args(argv)
    runner.require_gpu()
    if args.prewarm:
        failed = prewarm(args, args.prewarm)
        print(f"[humming] prewarm done, {failed} group(s) failed", flush=True)
        return 0  # best effort: the timed side compiles what is missing
    routing = common.load_routing_module_by_path()
    runner.run_side(backends_for(args, routing), runner.options_from_args(args))
    leaked = sorted(m for m in sys.modules if m == "chord_kernels" or m.startswith("chord_kernels."))
    if leaked:
        print(f"ERROR: the Humming process imported {leaked}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
