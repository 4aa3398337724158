"""The per-point loop both benchmark processes run, and their shared command line.

For each (scenario, projection) a side builds the weights once (``common.make_weights``), then per
point: the routing from its file, a warm call (JIT, compile and load kept out of the timing), a
NaN-poisoned checked call against the fp32 reference, do_bench, and one record in the results
file. Like ``common``, it imports only torch and the standard library: ``bench_humming`` runs it in
a process that must never import ``chord_kernels``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from . import scenarios as S
from .common import (
    REL_ERR_TOL,
    ResultsFile,
    activation_seed,
    bench_us,
    clean_float,
    event_time_ms,
    flush_mode,
    grouped_layout,
    kept_routes,
    load_routing,
    make_activations,
    make_grouped_activations,
    make_weights,
    reference_rows,
    relative_error,
    sync,
    tensor_digest,
    trace_ctas,
    weight_seed,
)
from .gpu_clocks import ClockSampler, open_nvml, settle

# ---------------------------------------------------------------------------------------
# The per-point loop, shared by both sides
# ---------------------------------------------------------------------------------------


@dataclass
class Call:
    """One prepared GEMM call: ``fn()`` writes ``out`` (rows = routes, vLLM buffer shape)."""

    fn: Callable[[], Any]
    out: torch.Tensor
    block_m: int  # routing block size the side used for moe_align_block_size
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """One side's kernel path. Indexed paths implement ``make_call(handle, a, topk_ids,
    expert_map, proj, point)``; grouped paths (``scenarios.family_of(path) == "grouped"``)
    implement ``make_call(handle, a, layout, proj, point)`` with ``a`` the grouped input buffer
    and ``layout`` a :class:`GroupedLayout`. Whatever the side must convert per call (a layout
    a real caller hands over in another form) belongs inside ``Call.fn``, the timed region."""

    side: str  # "chord" or "humming"
    path: str  # routing layout: "indexed", "grouped_contiguous" or "grouped_masked"

    def meta(self) -> dict[str, Any]: ...

    def prepare(self, scenario: S.Scenario, proj: S.Projection, weight_packed: torch.Tensor,
                weight_scale: torch.Tensor) -> Any: ...

    def make_call(self, handle: Any, a: torch.Tensor, *routing: Any) -> Call: ...

    def describe(self, handle: Any, call: Call, point: S.Point, proj: S.Projection) -> str: ...


@dataclass
class Options:
    routing_dir: Path
    out: Path
    points: list[S.Point]
    warmup_ms: float = 10.0
    rep_ms: float = 50.0
    slow_ms: float = 250.0  # one call slower than this: record its single-call time, skip do_bench
    budget_s: float = 240.0  # wall time for the whole side; points past it are skipped
    settle_s: float = 3.0  # longest wait before a point's timing for the power cap to clear (gpu_clocks.settle)
    seed: int = 0
    projections: tuple[str, ...] = S.PROJECTIONS
    device: str = "cuda"
    levels: int = 16  # 15: Kimi-like codes without -8 (see make_weights)
    family: str = "indexed"  # which kernel family the side's backends belong to (metadata)


def base_record(side: str, point: S.Point, proj: S.Projection, rmeta: dict[str, Any],
                path: str = "indexed") -> dict[str, Any]:
    spec = point.spec
    rows = rmeta["routes_kept"]
    grouped = S.family_of(path) == "grouped"
    return {
        "side": side, "path": path, "family": S.family_of(path), "scenario": point.scenario, "dist": point.dist,
        "tokens": point.tokens, "num_tokens": point.num_tokens, "proj": proj.name, "n": proj.n, "k": proj.k,
        "num_experts": spec.num_local_experts,
        # grouped GEMMs read row i and write row i (the scatter happened before them)
        "top_k": 1 if grouped else proj.top_k,
        "m": None if grouped else proj.input_rows(point.num_tokens),  # grouped: the buffer's rows, set per call
        "rows": rows,
        # distinct input rows the routes read: tokens for gate_up, one row per route for down
        # (grouped: one row per route for both projections)
        "rows_in": rows if grouped else (rmeta["tokens_touched"] if proj.top_k == S.TOP_K else rows),
        "experts_touched": rmeta["experts_touched"],
        "valid_shape_m": point.valid_shape_m,
        "routing_digest": rmeta.get("digest"),
        "block_m": None, "us": None, "us_single": None, "first_call_s": None,
        "rel_err": None, "check": None, "status": None, "config": None, "error": None,
        "weights_digest": None,
    }


def run_side(backend: Backend | list[Backend], opts: Options) -> Path:
    """Weights once per (scenario, projection, path), reused across T; then per point: routing
    from its file, a warm call (JIT/compile/load kept out of timing), a NaN-poisoned checked
    call, do_bench. Groups share the wall budget: each gets an equal share of what is left.

    ``backend``: one backend, or several of one side (the grouped family's two paths), written
    to one results file; their groups run scenario by scenario, both paths of a scenario and
    projection next to each other."""
    backends = list(backend) if isinstance(backend, (list, tuple)) else [backend]
    first = backends[0]
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(opts.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    results = ResultsFile(opts.out, dict(first.meta(), side=first.side, path=",".join(b.path for b in backends),
                                         family=S.family_of(first.path),
                                         warmup_ms=opts.warmup_ms, flush=flush_mode(),
                                         rep_ms=opts.rep_ms, slow_ms=opts.slow_ms, budget_s=opts.budget_s,
                                         settle_s=opts.settle_s,
                                         seed=opts.seed, levels=opts.levels, rel_err_tol=REL_ERR_TOL,
                                         gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                                         torch=torch.__version__, cuda=torch.version.cuda,
                                         started=time.strftime("%Y-%m-%dT%H:%M:%S")))
    groups = side_groups(opts, len(backends))
    t_start = time.monotonic()

    def deadline_for(groups_left: int) -> float:
        """An equal share of the budget left; computed after the group's preparation (weights,
        packing, JIT), so a slow compile shrinks every later share, not only its own group's."""
        left = opts.budget_s - (time.monotonic() - t_start)
        return time.monotonic() + max(0.0, left) / groups_left

    for gi, ((scn_name, proj_name, bi), pts) in enumerate(groups.items()):
        scenario = S.SCENARIOS[scn_name]
        proj = scenario.projections[proj_name]
        groups_left = len(groups) - gi
        _run_group(backends[bi], opts, results, scenario, proj, sorted(pts, key=lambda p: (p.tokens, p.dist)),
                   functools.partial(deadline_for, groups_left), device)
    print(f"[{first.side}] done in {time.monotonic() - t_start:.0f} s -> {opts.out}", flush=True)
    return opts.out


def side_groups(opts: Options, n_backends: int) -> dict[tuple[str, str, int], list[S.Point]]:
    """A side's groups in run order, (scenario, projection, backend index) -> its points: each
    group is one weight preparation (and for Humming one tuning table)."""
    groups: dict[tuple[str, str, int], list[S.Point]] = {}
    for point in opts.points:
        for proj in opts.projections:
            for bi in range(n_backends):
                groups.setdefault((point.scenario, proj, bi), []).append(point)
    return groups


def _log(side: str, rec: dict[str, Any]) -> None:
    us = f"{rec['us']:9.1f} us" if rec["us"] is not None else (
        f"{rec['us_single']:9.1f} us*" if rec["us_single"] is not None else "        - us")
    rel = f"{rec['rel_err']:.2e}" if rec["rel_err"] is not None else "   -    "
    check = rec["check"] or "-"
    check = check if check in ("ok", "-") else check + " !"
    path = "" if rec.get("path", "indexed") == "indexed" else f"{rec['path']:18} "
    print(f"[{side}] {path}{rec['scenario']:5} {rec['dist']:7} T={rec['tokens']:<5} {rec['proj']:7} "
          f"{us} rel={rel} check={check:<6} {rec['status']:<16} bm={rec['block_m']} {rec['config'] or ''}"
          + (f" ERROR {rec['error']}" if rec["error"] else ""), flush=True)


class _OverBudget(Exception):
    pass


def _run_group(backend, opts, results, scenario, proj, pts, make_deadline, device) -> None:
    side = backend.side
    handle = wp = ws = None
    prep_error = None
    digest = None
    prepare_s = None
    over_budget = make_deadline() <= time.monotonic()  # no budget left: do not even build the weights
    try:
        if over_budget:
            raise _OverBudget()
        wp, ws = make_weights(scenario.num_local_experts, proj.n, proj.k,
                              weight_seed(scenario.name, proj.name, opts.seed), device, opts.levels)
        digest = tensor_digest(wp, ws)
        t0 = time.perf_counter()
        handle = backend.prepare(scenario, proj, wp, ws)
        sync(device)
        prepare_s = round(time.perf_counter() - t0, 2)
        print(f"[{side}] prepared {scenario.name} {proj.name} in {prepare_s:.1f} s", flush=True)
    except _OverBudget:
        pass
    except Exception as exc:  # keep going: the other groups may still run
        prep_error = _short_error(exc)
        traceback.print_exc()
    deadline = make_deadline()
    for pi, point in enumerate(pts):
        rmeta = None
        try:
            routing = load_routing(opts.routing_dir, point)
            rmeta = routing["meta"]
        except Exception as exc:
            rec = base_record(side, point, proj, {"routes_kept": None, "tokens_touched": None,
                                                  "experts_touched": None}, backend.path)
            rec.update(status="error", error=f"routing: {_short_error(exc)}")
            results.add(rec)
            _log(side, rec)
            continue
        rec = base_record(side, point, proj, rmeta, backend.path)
        rec["weights_digest"] = digest
        rec["prepare_s"] = prepare_s  # the group's weight packing (+ Humming's table JIT)
        if prep_error is not None:
            rec.update(status="error", error=f"prepare: {prep_error}")
        elif over_budget or time.monotonic() > deadline:
            rec.update(status="skipped (budget)")
        else:
            # The wait for the power cap (gpu_clocks.settle) takes at most half of this point's share
            # of the group's time left: a GPU that stays capped costs waits, never skipped points.
            settle_s = min(opts.settle_s, max(0.0, deadline - time.monotonic()) / (2 * (len(pts) - pi)))
            _measure(backend, opts, handle, wp, ws, routing, point, proj, rec, device, settle_s)
        results.add(rec)
        _log(side, rec)
    del handle, wp, ws
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _prepare_indexed(backend, opts, handle, routing, point, proj, rec, device):
    """vLLM's indexed call: ``a`` the framework's input rows, routes read from topk_ids."""
    topk_ids = routing["topk_ids"].to(device)
    emap = routing["expert_map"]
    emap = emap.to(device) if emap is not None else None
    a = make_activations(proj.input_rows(point.num_tokens), proj.k,
                         activation_seed(point, proj.name, opts.seed), device)
    call = backend.make_call(handle, a, topk_ids, emap, proj, point)
    routes, experts = kept_routes(topk_ids, emap, point.spec.num_local_experts)
    return a, call, routes, experts, proj.top_k


def _prepare_grouped(backend, opts, handle, routing, point, proj, rec, device):
    """A grouped call: ``a`` the grouped input buffer of the side's path, the valid rows from
    the routing's grouped layout (the same on both sides: same file, same code)."""
    layout = grouped_layout(routing["topk_ids"], routing["expert_map"], point.spec.num_local_experts)
    rec.update(m=layout.buffer_rows(backend.path), max_m=layout.max_m, expected_m=layout.expected_m,
               layout_digest=layout.digest())
    a = make_grouped_activations(layout, backend.path, proj.k, activation_seed(point, proj.name, opts.seed), device)
    call = backend.make_call(handle, a, layout, proj, point)
    rows, experts = layout.valid_rows(backend.path)
    return a, call, rows.to(device), experts.to(device), 1


def _measure(backend, opts, handle, wp, ws, routing, point, proj, rec, device, settle_s: float = 0.0) -> None:
    call = a = None
    started = time.perf_counter()  # the point's wall time (point_s; check_s: the reference check)
    try:
        prepare = _prepare_grouped if S.family_of(backend.path) == "grouped" else _prepare_indexed
        a, call, routes, experts, top_k = prepare(backend, opts, handle, routing, point, proj, rec, device)
        rec["block_m"] = call.block_m
        t0 = time.perf_counter()
        call.fn()  # warm: JIT compile / module load / first launch stay out of the timing
        sync(device)
        rec["first_call_s"] = round(time.perf_counter() - t0, 4)
        rec["config"] = backend.describe(handle, call, point, proj)
        call.out.fill_(float("nan"))  # poison: any routed row the kernel skips shows as NaN
        # BENCH_NVTX=1 (benchmarks/ncu_point.sh): ncu --nvtx-include "bench_point/" profiles this call only
        with torch.cuda.nvtx.range("bench_point") if os.environ.get("BENCH_NVTX") else contextlib.nullcontext():
            single_ms = event_time_ms(call.fn)
        if rec["rows"] is not None and routes.numel() != rec["rows"]:
            raise RuntimeError(f"routing file says {rec['rows']} kept routes, recomputed {routes.numel()}")
        t_check = time.perf_counter()
        ref = reference_rows(a, wp, ws, routes, experts, top_k)
        rel = relative_error(call.out, routes, ref)
        del ref
        rec["check_s"] = round(time.perf_counter() - t_check, 3)
        rec["rel_err"] = clean_float(rel)
        rec["check"] = "ok" if rel <= REL_ERR_TOL else ("nan" if math.isnan(rel) else "fail")
        trace_ctas(call.fn, device, rec)
        if single_ms > opts.slow_ms:
            rec["us_single"] = single_ms * 1e3
            rec["status"] = "skipped (slow)"
        else:
            waited = settle(_nvml(device), settle_s)  # the same power state before every point
            if waited is not None:
                rec["settle_s"] = waited
            with ClockSampler(_nvml(device)) as clocks:
                rec["us"] = bench_us(call.fn, opts.warmup_ms, opts.rep_ms)
            rec.update(clocks.summary())  # sm_mhz, sm_mhz_min, power_w, clock_events (benchmarks/gpu_clocks.py)
            rec["status"] = "ok"
        rec.update({f"extra_{k}": v for k, v in call.extra.items()})
    except Exception as exc:
        rec["status"] = "error"
        rec["error"] = _short_error(exc)
        traceback.print_exc()
    finally:
        del call, a  # free the output buffer (up to 7.5 GB) before the next point
        rec["point_s"] = round(time.perf_counter() - started, 3)


@functools.cache
def _nvml(device: torch.device):
    """NVML on ``device``, opened once per process (None off the GPU machine)."""
    return open_nvml(device.index or 0) if device.type == "cuda" else None


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text[:500]


# ---------------------------------------------------------------------------------------
# CLI shared by bench_chord and bench_humming
# ---------------------------------------------------------------------------------------


def add_bench_args(parser: argparse.ArgumentParser, default_out: str, routing_dir_required: bool = True) -> None:
    parser.add_argument("--routing-dir", required=routing_dir_required, type=Path, help="folder written by make_routing")
    parser.add_argument("--out", default=default_out, type=Path, help="results JSON")
    parser.add_argument("--family", choices=tuple(S.FAMILIES), default="indexed",
                        help="kernel family: indexed (default) or grouped (grouped_contiguous + grouped_masked)")
    parser.add_argument("--paths", help="comma list of the family's paths to run (default: all of them)")
    parser.add_argument("--scenarios", help="comma list (default: ep8,tp8 indexed; ep8,ep16,ep32 grouped)")
    parser.add_argument("--quick", action="store_true", help="T in 1,20,128,2048 uniform + skew at 128")
    parser.add_argument("--tokens", help="comma list of T to keep (filter)")
    parser.add_argument("--dists", help="comma list of distributions to keep (uniform,skew)")
    parser.add_argument("--projections", default=",".join(S.PROJECTIONS))
    parser.add_argument("--warmup-ms", type=float, default=10.0)
    parser.add_argument("--rep-ms", type=float, default=50.0)
    parser.add_argument("--slow-ms", type=float, default=250.0,
                        help="a single call slower than this is recorded as 'skipped (slow)'")
    parser.add_argument("--budget-s", type=float, default=240.0, help="wall-time budget of this side")
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="before each point's timing, wait up to this long for NVML to stop reporting the "
                             "clocks held down by power or heat (0: do not wait)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of weights and activations")
    parser.add_argument("--levels", type=int, choices=(15, 16), default=16,
                        help="INT4 codes used: 16 (0..15) or 15 (1..15, Kimi-like, no -8)")


def options_from_args(args: argparse.Namespace) -> Options:
    family = getattr(args, "family", "indexed")
    scenarios = S.parse_list(getattr(args, "scenarios", None)) or S.default_scenarios(family)
    if family == "grouped":
        not_ep = [s for s in scenarios if s in S.SCENARIOS and not S.SCENARIOS[s].is_ep]
        if not_ep:
            raise SystemExit(f"the grouped family is EP-only; drop {', '.join(not_ep)} from --scenarios")
    points = S.grid(scenarios, quick=args.quick,
                    tokens=S.parse_list(args.tokens, int), dists=S.parse_list(args.dists))
    return Options(routing_dir=args.routing_dir, out=args.out, points=points, warmup_ms=args.warmup_ms,
                   rep_ms=args.rep_ms, slow_ms=args.slow_ms, budget_s=args.budget_s, settle_s=args.settle_s,
                   seed=args.seed,
                   projections=S.parse_list(args.projections) or S.PROJECTIONS, levels=args.levels,
                   family=family)


def family_paths(args: argparse.Namespace) -> tuple[str, ...]:
    """The paths a side runs: the family's, filtered by ``--paths``."""
    family = getattr(args, "family", "indexed")
    paths = S.FAMILIES[family]
    wanted = S.parse_list(getattr(args, "paths", None))
    if wanted is None:
        return paths
    unknown = [p for p in wanted if p not in paths]
    if unknown:
        raise SystemExit(f"--paths {','.join(unknown)}: not a path of the {family} family ({', '.join(paths)})")
    return tuple(p for p in paths if p in wanted)


def require_gpu() -> None:
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
