"""What both benchmark processes share: deterministic weights and activations, routing files,
the fp32 reference check, timing, the per-point loop and the results file.

This module imports only torch and the standard library (triton lazily, for ``do_bench``):
``bench_humming`` runs it in a process that must never import ``chord_kernels``.

Identical inputs on both sides without passing tensors between processes: weights are drawn on
the GPU from a seed derived from (scenario, projection), directly in compressed-tensors
``pack-quantized`` form (``weight_packed`` int32 [E, N, K/8], eight offset-binary nibbles per
word along K, low nibble first; ``weight_scale`` bf16 [E, N, K/32]). Uniform random bytes are
uniform random nibbles, so the codes are uniform on 0..15 without a 5.6 GB unpacked
intermediate. Each side records a digest of the weights it used; the report checks they match.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import math
import os
import sys
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from . import scenarios as S
from .gpu_clocks import ClockSampler, open_nvml, settle

GROUP = 32  # input channels per BF16 scale
REL_ERR_TOL = 5e-3  # relative Frobenius error allowed on the routed rows
SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[1]
CHORD_ROUTING_PY = REPO_ROOT / "packages" / "chord-runtime" / "chord_kernels" / "routing.py"


# ---------------------------------------------------------------------------------------
# Deterministic inputs
# ---------------------------------------------------------------------------------------


def stable_seed(*parts, base: int = 0) -> int:
    """A seed from strings/ints that is the same in every process (unlike ``hash``)."""
    text = "/".join(str(p) for p in parts)
    return (zlib.crc32(text.encode()) + base * 1_000_003) % (2**31 - 1)


def weight_seed(scenario: str, proj: str, base: int = 0) -> int:
    return stable_seed("weights", scenario, proj, base=base)


def make_weights(num_experts: int, n: int, k: int, seed: int, device,
                 levels: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Compressed-tensors form: (weight_packed int32 [E, N, K/8], weight_scale bf16 [E, N, K/32]).

    ``levels`` 16: codes uniform on 0..15 (value = (code - 8) * scale), the benchmark default.
    ``levels`` 15: codes uniform on 1..15 (values -7..7), what Kimi's QAT checkpoints are
    reported to contain; it matters for the peer, whose converter re-encodes a weight with no
    code 0 as sign-magnitude (float4e0m3) and so runs a different kernel variant.
    Scales uniform in [1e-3, 2.1e-2). Same seed + device type + torch -> same tensors.
    """
    if k % GROUP or n <= 0:
        raise ValueError(f"need K % {GROUP} == 0 and N > 0, got N={n} K={k}")
    if levels not in (15, 16):
        raise ValueError(f"levels must be 15 or 16, got {levels}")
    g = torch.Generator(device=device).manual_seed(seed)
    if levels == 16:  # uniform random bytes are uniform random nibbles: no unpacked copy needed
        raw = torch.randint(0, 256, (num_experts, n, k // 2), dtype=torch.uint8, device=device, generator=g)
    else:
        codes = torch.randint(1, 16, (num_experts, n, k // 2, 2), dtype=torch.uint8, device=device, generator=g)
        raw = codes[..., 0] | (codes[..., 1] << 4)  # element 2j in the low nibble of byte j
        del codes
    weight_packed = raw.view(torch.int32)  # 4 bytes = 8 nibbles per word, little-endian
    scale = torch.rand((num_experts, n, k // GROUP), device=device, generator=g) * 0.02 + 1e-3
    return weight_packed, scale.to(torch.bfloat16)


def tensor_digest(*tensors: torch.Tensor, chunk: int = 1 << 26) -> str:
    """Order-sensitive checksum of raw tensor bits, computed on the tensors' device.

    Not cryptographic: it only has to tell "both processes built the same weights" apart from
    "they did not" without copying gigabytes to the host.
    """
    acc = []
    for t in tensors:
        words = t.contiguous().reshape(-1).view(torch.uint8)
        pad = (-words.numel()) % 4
        if pad:
            words = torch.cat([words, words.new_zeros(pad)])
        words = words.view(torch.int32)
        total = torch.zeros((), dtype=torch.int64, device=t.device)
        weighted = torch.zeros((), dtype=torch.int64, device=t.device)
        for start in range(0, words.numel(), chunk):
            w = words[start:start + chunk].to(torch.int64)
            pos = torch.arange(start, start + w.numel(), device=t.device, dtype=torch.int64) % 65521 + 1
            total += w.sum()
            weighted += (w * pos).sum()
        acc.append(f"{tuple(t.shape)}:{int(total) & 0xFFFFFFFFFFFF:x}:{int(weighted) & 0xFFFFFFFFFFFF:x}")
    return "|".join(acc)


def activation_seed(point: S.Point, proj: str, base: int = 0) -> int:
    return stable_seed("act", point.scenario, point.dist, point.tokens, proj, base=base)


def make_activations(m: int, k: int, seed: int, device) -> torch.Tensor:
    """Fresh random BF16 activations (never zeros), standard normal."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn((m, k), generator=g, device=device, dtype=torch.bfloat16)


# ---------------------------------------------------------------------------------------
# Routing files (written by make_routing.py, read by both sides)
# ---------------------------------------------------------------------------------------


def load_routing(routing_dir: str | Path, point: S.Point) -> dict[str, Any]:
    """{'topk_ids': int32 [num_tokens, 8], 'expert_map': int32 [384] or None, 'meta': dict}."""
    path = Path(routing_dir) / point.routing_file
    if not path.is_file():
        raise FileNotFoundError(f"no routing file {path}: write it with benchmarks.make_routing "
                                f"(same --scenarios/--tokens/--dists as this run)")
    data = torch.load(path, map_location="cpu", weights_only=True)
    meta = data["meta"]
    if (meta["scenario"], meta["dist"], meta["tokens"]) != point.key:
        raise ValueError(f"{path} holds {meta['scenario']}/{meta['dist']}/T{meta['tokens']}, expected {point.key}")
    return data


def load_routing_module_by_path(path: Path = CHORD_ROUTING_PY):
    """Chord's routing helpers (pure torch) loaded from their file, NOT as ``chord_kernels``.

    The Humming process builds its vLLM ``moe_align_block_size`` buffers with the same code as
    the Chord process (one definition of the routing), but may not import the
    ``chord_kernels`` package: that would pull Chord's runtime into the peer's process, and an
    installed ``humming-compat`` shares the ``humming`` name with the peer. ``routing.py``
    imports only ``os`` and ``torch``, so loading the file on its own is safe.
    """
    spec = importlib.util.spec_from_file_location("chord_bench_routing", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------
# Reference check
# ---------------------------------------------------------------------------------------

_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)


def unpack_nibbles(weight_packed: torch.Tensor) -> torch.Tensor:
    """int32 [..., K/8] -> uint8 codes [..., K] (compressed-tensors order, low nibble first)."""
    shifted = torch.bitwise_right_shift(weight_packed.unsqueeze(-1), _SHIFTS.to(weight_packed.device))
    return (shifted & 0xF).to(torch.uint8).reshape(*weight_packed.shape[:-1], weight_packed.shape[-1] * 8)


def dequant(weight_packed: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """BF16 weight: (code - 8) * scale, rounded once to BF16 (the checkpoint's semantics)."""
    q = unpack_nibbles(weight_packed).to(torch.float32) - 8.0
    s = weight_scale.to(torch.float32).repeat_interleave(GROUP, dim=-1)
    return (q * s).to(torch.bfloat16)


def kept_routes(topk_ids: torch.Tensor, expert_map: torch.Tensor | None, num_local: int):
    """(route ids int64 [R], local expert of each int64 [R]) of the routes this GPU computes."""
    flat = topk_ids.reshape(-1).long()
    local = flat if expert_map is None else expert_map.to(flat.device).long()[flat]
    keep = (local >= 0) & (local < num_local)
    routes = keep.nonzero().squeeze(1)
    return routes, local[routes]


def reference_rows(a: torch.Tensor, weight_packed: torch.Tensor, weight_scale: torch.Tensor,
                   routes: torch.Tensor, experts: torch.Tensor, top_k: int) -> torch.Tensor:
    """fp32 [R, N]: row i = a[routes[i] // top_k] @ W[experts[i]]^T, one expert at a time
    (a dequantized expert is up to 117 MB in fp32)."""
    n = weight_packed.shape[1]
    ref = torch.empty((routes.numel(), n), dtype=torch.float32, device=a.device)
    rows = routes // top_k
    for e in torch.unique(experts).tolist():
        sel = (experts == e).nonzero().squeeze(1)
        w = dequant(weight_packed[e], weight_scale[e]).float()
        ref[sel] = a[rows[sel]].float() @ w.t()
    return ref


def relative_error(out: torch.Tensor, routes: torch.Tensor, ref: torch.Tensor) -> float:
    """||out[routes] - ref||_F / ||ref||_F; NaN (poison left in a routed row) stays NaN."""
    if routes.numel() == 0:
        return 0.0
    got = out[routes].float()
    denom = ref.norm().item()
    diff = (got - ref).norm().item()
    if not math.isfinite(diff):
        return float("nan")
    return diff / denom if denom > 0 else (0.0 if diff == 0 else float("inf"))


# ---------------------------------------------------------------------------------------
# Grouped layouts (the grouped family): one definition, used by both processes
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupedLayout:
    """This GPU's routes of one point, grouped by local expert (CPU tensors, host ints).

    vLLM's grouped forms (shared/reference/vllm_contract.md 2.2, 2.3): ``grouped_contiguous``
    reads rows [offsets[e], offsets[e+1]) of a [num_routes, K] buffer (vLLM sizes it
    num_tokens * top_k; rows past offsets[-1] are not read); ``grouped_masked`` reads rows
    [e*max_m, e*max_m + counts[e]) of a [E*max_m, K] buffer.
    """

    counts: torch.Tensor  # int32 [E]: rows per local expert
    offsets: torch.Tensor  # int64 [E + 1]: exclusive prefix sum of counts
    rows: int  # routes kept on this GPU (offsets[-1])
    max_m: int  # masked row budget per expert: largest count rounded up to MASKED_ALIGN
    expected_m: int  # mean count per expert, rounded up (>= 1): the masked form's host hint
    num_routes: int  # rows of vLLM's grouped_contiguous buffers (num_tokens * top_k)

    @property
    def num_experts(self) -> int:
        return self.counts.numel()

    def buffer_rows(self, path: str) -> int:
        """Rows of the input and output buffers a call of ``path`` gets."""
        if path == "grouped_contiguous":
            return self.num_routes
        if path == "grouped_masked":
            return self.num_experts * self.max_m
        raise ValueError(f"not a grouped path: {path!r}")

    def valid_rows(self, path: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(buffer rows int64 [rows], local expert of each int64 [rows]) a call computes."""
        experts = torch.repeat_interleave(torch.arange(self.num_experts), self.counts.long())
        rank = torch.arange(self.rows) - self.offsets[:-1].repeat_interleave(self.counts.long())
        if path == "grouped_contiguous":
            return torch.arange(self.rows), experts
        if path == "grouped_masked":
            return experts * self.max_m + rank, experts
        raise ValueError(f"not a grouped path: {path!r}")

    def digest(self) -> str:
        return tensor_digest(self.counts)


def grouped_layout(topk_ids: torch.Tensor, expert_map: torch.Tensor | None, num_local: int,
                   align: int = S.MASKED_ALIGN) -> GroupedLayout:
    """The grouped layout of one routing (computed on the CPU: it is problem setup, outside the
    timing; the routes kept are exactly :func:`kept_routes`'s)."""
    ids = topk_ids.reshape(-1).long().cpu()
    local = ids if expert_map is None else expert_map.long().cpu()[ids]
    keep = (local >= 0) & (local < num_local)
    counts = torch.bincount(local[keep], minlength=num_local)
    offsets = torch.zeros(num_local + 1, dtype=torch.int64)
    offsets[1:] = counts.cumsum(0)
    rows = int(offsets[-1])
    largest = int(counts.max()) if num_local else 0
    max_m = max(align, -(-largest // align) * align)
    return GroupedLayout(counts=counts.to(torch.int32), offsets=offsets, rows=rows, max_m=max_m,
                         expected_m=max(1, -(-rows // max(num_local, 1))), num_routes=ids.numel())


def make_grouped_activations(layout: GroupedLayout, path: str, k: int, seed: int, device) -> torch.Tensor:
    """The grouped input buffer: fresh random rows (the same seed as the indexed point's,
    one row per kept route) where a call reads, NaN in every row it must not read."""
    a = torch.full((layout.buffer_rows(path), k), float("nan"), dtype=torch.bfloat16, device=device)
    rows, _ = layout.valid_rows(path)
    a[rows.to(a.device)] = make_activations(layout.rows, k, seed, device)
    return a


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def event_time_ms(fn: Callable[[], Any]) -> float:
    """One call, timed with CUDA events (a warm call is assumed to have happened)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


# CHORD_CTA_TRACE=1 (Chord's side; chord_kernels.cta_trace): one more call after the checked
# one, behind do_bench's own L2 flush (a 256 MB memset), with the traced kernels' per-CTA records
# read back into the point's record and a summary printed.
CTA_TRACE_FLUSH_BYTES = 256 * 1024 * 1024


def trace_ctas(fn: Callable[[], Any], device: torch.device, rec: dict[str, Any]) -> None:
    if "chord_kernels" not in sys.modules:  # the Humming process
        return
    from chord_kernels import cta_trace, env

    if not env.flag(env.CTA_TRACE):  # the switch as the kernels' loader reads it
        return

    torch.empty(CTA_TRACE_FLUSH_BYTES, dtype=torch.int8, device=device).zero_()
    cta_trace.clear_all()
    fn()
    sync(device)
    traces = cta_trace.read_all()
    rec["cta_trace"] = cta_trace.to_json(traces)
    rec["cta_trace_summary"] = {symbol: cta_trace.summary(rs) for symbol, rs in traces.items()}
    print(cta_trace.format_summary(traces), flush=True)


# How do_bench empties the L2 between timed calls (env CHORD_BENCH_FLUSH; recorded in the JSON):
# "zero" is do_bench's own (a 256 MB memset: the L2 is left full of dirty lines, which the timed
# call then writes back while it reads), "read" sums the same buffer instead (the L2 is left
# full of clean lines). Both sides of a run take the same mode from the same environment.
FLUSH_MODES = ("zero", "read")


def flush_mode() -> str:
    mode = os.environ.get("CHORD_BENCH_FLUSH", "zero")
    if mode not in FLUSH_MODES:
        raise ValueError(f"CHORD_BENCH_FLUSH={mode!r}: expected one of {FLUSH_MODES}")
    return mode


def bench_us(fn: Callable[[], Any], warmup_ms: float, rep_ms: float) -> float:
    """Median of ``triton.testing.do_bench`` in microseconds.

    do_bench empties the L2 before every timed call (:func:`flush_mode`) and times each call
    with its own CUDA events; ``warmup``/``rep`` are milliseconds of GPU time.
    """
    from triton import runtime
    from triton.testing import do_bench

    driver = runtime.driver.active
    if flush_mode() == "read":
        driver.clear_cache = lambda cache: cache.sum()  # shadows the class's zero_() for this call
    try:
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")) * 1e3
    finally:
        driver.__dict__.pop("clear_cache", None)


# ---------------------------------------------------------------------------------------
# Results file
# ---------------------------------------------------------------------------------------


class ResultsFile:
    """``{"meta": {...}, "points": [...]}``, rewritten atomically after every point so a run
    that is killed (time limit) still leaves everything measured so far."""

    def __init__(self, path: str | Path, meta: dict[str, Any]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.data = {"meta": dict(meta, schema_version=SCHEMA_VERSION), "points": []}
        self.flush()

    def add(self, record: dict[str, Any]) -> None:
        self.data["points"].append(record)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=_json_default) + "\n")
        os.replace(tmp, self.path)


def _json_default(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (torch.dtype, torch.device, Path)):
        return str(obj)
    return repr(obj)


def clean_float(x: float | None) -> float | None:
    """JSON has no NaN/inf: store them as None (the status field says why)."""
    if x is None or not math.isfinite(x):
        return None
    return x


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


def add_bench_args(parser: argparse.ArgumentParser, default_out: str) -> None:
    parser.add_argument("--routing-dir", required=True, type=Path, help="folder written by make_routing")
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
