"""What both benchmark processes share: deterministic weights and activations, routing files,
the fp32 reference check, grouped layouts, timing and the results file (the per-point loop that
uses them is ``runner``).

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

import importlib.util
import json
import math
import os
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import scenarios as S

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
