"""Per-CTA timing of a launch (diagnostics): which SM each CTA ran on, when it started and ended.

With ``CHORD_CTA_TRACE=1`` in the environment before a process loads its kernels, every kernel is
compiled with per-CTA stamps around its body (``csrc/common/cta_trace.cuh``; a separate cubin,
the normal build is untouched). Then::

    cta_trace.clear_all()          # zero every loaded traced kernel's records
    call()                         # the launch(es) to look at
    torch.cuda.synchronize()
    traces = cta_trace.read_all()  # {kernel symbol: [CtaRecord, ...]}, launched CTAs only
    print(cta_trace.format_summary(traces))

The stream-K kernels also note each CTA's share of their schedule (``CtaRecord.segments``,
``work``). A kernel keeps one record per CTA index, so read after the call of interest and before the next
launch of the same kernel. Why it exists: ncu gives the SMs' balance (min / avg / max active
cycles) but not which CTAs were slow; a stream-K launch gives each CTA its own run, and lining
the CTAs' durations up with their runs says whether the spread is the work or the SM.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from statistics import mean, pstdev

from .jit.launch import _launcher, loaded_kernels

GLOBAL_NAME = "chord_cta_trace"  # cta_trace.cuh: extern "C" __device__ ChordCtaRecord[kCtaTraceCapacity]
# smid, valid, clock_start, clock_end, time_start, time_end, then the stream-K schedule's notes
# (zeros outside the stream-K kernels): iterations, sk0, sk1, stages, dp_tiles, tiles, col_tiles, unused
_RECORD = struct.Struct("<IIQQQQ8i")
SCHEDULE_FIELDS = ("iterations", "sk0", "sk1", "stages", "dp_tiles", "tiles", "col_tiles")


@dataclass(frozen=True)
class CtaRecord:
    cta: int  # linear CTA index (x fastest)
    sm: int
    clock_start: int  # clock64 of its SM: comparable between the CTAs of one SM only
    clock_end: int  # its last warp's end
    start_ns: int  # %globaltimer: comparable across SMs (coarse ticks)
    end_ns: int
    # The stream-K schedule of the CTA (streamk_schedule.cuh StreamKWork; zeros elsewhere): its
    # iterations, its stream-K run [sk0, sk1), K iterations a tile, the whole tiles before the
    # stream-K part, tiles in all, column tiles a row tile.
    iterations: int = 0
    sk0: int = 0
    sk1: int = 0
    stages: int = 0
    dp_tiles: int = 0
    tiles: int = 0
    col_tiles: int = 0

    @property
    def cycles(self) -> int:
        return max(self.clock_end - self.clock_start, 0)

    def segments(self, grid: int) -> list[tuple[int, int, int]]:
        """(tile, first stage, end stage) of the CTA's work in order: its whole tiles (c, c + grid,
        ... below dp_tiles), then its stream-K run (first and last tiles possibly partial)."""
        if not self.stages:
            return []
        out = [(t, 0, self.stages) for t in range(self.cta, self.dp_tiles, grid)]
        g = self.sk0
        while g < self.sk1:
            tile = g // self.stages
            end = min(self.sk1, (tile + 1) * self.stages)
            out.append((tile, g - tile * self.stages, end - tile * self.stages))
            g = end
        return out

    def work(self, grid: int) -> dict[str, int]:
        """What the CTA's time may depend on besides its iterations: its segments (each an
        epilogue or a partial), the split tiles among them, and the row tiles it reads."""
        segs = self.segments(grid)
        return {"iterations": self.iterations, "segments": len(segs),
                "split": sum(1 for _, s0, s1 in segs if s1 - s0 < self.stages),
                "row_tiles": len({t // self.col_tiles for t, _, _ in segs}) if self.col_tiles else 0}


def parse(raw: bytes) -> list[CtaRecord]:
    """The records of the CTAs that ran (valid = 1), in CTA order."""
    if len(raw) % _RECORD.size:
        raise ValueError(f"{GLOBAL_NAME}: {len(raw)} bytes is not a whole number of {_RECORD.size}-byte records")
    out = []
    for cta, (sm, valid, c0, c1, t0, t1, *schedule) in enumerate(_RECORD.iter_unpack(raw)):
        if valid:
            out.append(CtaRecord(cta, sm, c0, c1, t0, t1, *schedule[:len(SCHEDULE_FIELDS)]))
    return out


def traced_kernels() -> list:
    return [k for k in loaded_kernels() if k.spec.trace]


def clear_all() -> None:
    """Zero the records of every traced kernel this process loaded."""
    for kernel in traced_kernels():
        _launcher().zero_global(kernel.fn, kernel.ctx, GLOBAL_NAME)


def read_all() -> dict[str, list[CtaRecord]]:
    """{symbol: records} of every traced kernel with at least one CTA since the last clear_all
    (synchronize the launches' stream first)."""
    out = {}
    for kernel in traced_kernels():
        records = parse(_launcher().read_global(kernel.fn, kernel.ctx, GLOBAL_NAME))
        if records:
            out[kernel.spec.symbol] = records
    return out


@dataclass(frozen=True)
class SmLoad:
    sm: int
    ctas: tuple[int, ...]
    busy_cycles: int  # first start to last end of its CTAs (one SM clock)


def _by_sm(records: list[CtaRecord]) -> dict[int, list[CtaRecord]]:
    by_sm: dict[int, list[CtaRecord]] = {}
    for r in records:
        by_sm.setdefault(r.sm, []).append(r)
    return by_sm


def sm_loads(records: list[CtaRecord]) -> list[SmLoad]:
    """Per SM: its CTAs and the span of its clock from their first start to their last end."""
    by_sm = _by_sm(records)
    return [SmLoad(sm, tuple(r.cta for r in rs), max(r.clock_end for r in rs) - min(r.clock_start for r in rs))
            for sm, rs in sorted(by_sm.items())]


def summary(records: list[CtaRecord]) -> dict:
    """Balance numbers of one launch: CTA durations (cycles) and SM spans, min / mean / max, the
    slowest and fastest CTAs, and how late the last CTA started (ns after the first)."""
    cycles = [r.cycles for r in records]
    loads = sm_loads(records)
    spans = [s.busy_cycles for s in loads]
    order = sorted(records, key=lambda r: r.cycles)
    first_start = min(r.start_ns for r in records)
    return {
        "ctas": len(records),
        "sms": len(loads),
        "cta_cycles": {"min": min(cycles), "mean": round(mean(cycles)), "max": max(cycles),
                       "std": round(pstdev(cycles))},
        "sm_busy_cycles": {"min": min(spans), "mean": round(mean(spans)), "max": max(spans)},
        "slowest": [(r.cta, r.sm, r.cycles) for r in order[-5:][::-1]],
        "fastest": [(r.cta, r.sm, r.cycles) for r in order[:5]],
        "start_spread_ns": max(r.start_ns for r in records) - first_start,
        "elapsed_ns": max(r.end_ns for r in records) - first_start,
    }


def format_summary(traces: dict[str, list[CtaRecord]]) -> str:
    lines = []
    for symbol, records in traces.items():
        s = summary(records)
        c, b = s["cta_cycles"], s["sm_busy_cycles"]
        lines += [
            f"{symbol}: {s['ctas']} CTAs on {s['sms']} SMs, elapsed {s['elapsed_ns'] / 1e3:.1f} µs "
            f"(last start +{s['start_spread_ns'] / 1e3:.1f} µs)",
            f"  CTA cycles min {c['min']} mean {c['mean']} max {c['max']} (std {c['std']}); "
            f"SM busy min {b['min']} mean {b['mean']} max {b['max']}",
            "  slowest (cta, sm, cycles): " + ", ".join(map(str, s["slowest"])),
            "  fastest (cta, sm, cycles): " + ", ".join(map(str, s["fastest"])),
        ]
    return "\n".join(lines)


def to_json(traces: dict[str, list[CtaRecord]]) -> dict:
    """Compact form for a benchmark record: per kernel, columns of the CTA records (globaltimer
    from the launch's first start)."""
    out = {}
    for symbol, rs in traces.items():
        t0 = min(r.start_ns for r in rs)
        out[symbol] = {"cta": [r.cta for r in rs], "sm": [r.sm for r in rs],
                       "clock_start": [r.clock_start for r in rs], "clock_end": [r.clock_end for r in rs],
                       "start_ns": [r.start_ns - t0 for r in rs], "end_ns": [r.end_ns - t0 for r in rs],
                       **{f: [getattr(r, f) for r in rs] for f in SCHEDULE_FIELDS}}
    return out


_COLUMNS = ("cta", "sm", "clock_start", "clock_end", "start_ns", "end_ns") + SCHEDULE_FIELDS


def from_json(data: dict) -> dict[str, list[CtaRecord]]:
    """to_json's inverse."""
    return {symbol: [CtaRecord(*row) for row in zip(*(cols[c] for c in _COLUMNS), strict=True)]
            for symbol, cols in data.items()}


def index_profile(records: list[CtaRecord], bins: int = 12) -> list[tuple[int, int, int, float]]:
    """Over consecutive CTA-index ranges: (first CTA, last CTA, mean cycles, mean iterations). A
    stream-K run is a contiguous range of the work in CTA order, so work that costs more per
    iteration shows as a range of slow CTAs; an SM effect does not."""
    rs = sorted(records, key=lambda r: r.cta)
    size = -(-len(rs) // bins)
    return [(chunk[0].cta, chunk[-1].cta, round(mean(r.cycles for r in chunk)),
             round(mean(r.iterations for r in chunk), 1))
            for chunk in (rs[i:i + size] for i in range(0, len(rs), size))]


def by_arrival(records: list[CtaRecord]) -> list[tuple[int, int, int, float]]:
    """CTAs grouped by their arrival on their SM (rank 0: the SM's first, by its clock): (rank,
    CTAs, mean cycles, mean iterations). Equal runs that end later at a later rank are the SM's
    scheduling of its CTAs, not their work; the CTA index alone cannot tell the two apart where
    the block scheduler places CTAs in index order (the 2026-12-05 EP8 T=20 trace: the slow
    index range 264-362 is mostly each SM's third CTA)."""
    ranks: dict[int, list[CtaRecord]] = {}
    for rs in _by_sm(records).values():
        for rank, r in enumerate(sorted(rs, key=lambda r: (r.clock_start, r.cta))):
            ranks.setdefault(rank, []).append(r)
    return [(rank, len(rs), round(mean(r.cycles for r in rs)), round(mean(r.iterations for r in rs), 1))
            for rank, rs in sorted(ranks.items())]


def by_work(records: list[CtaRecord]) -> list[tuple[tuple[int, int, int, int], int, int]]:
    """CTAs grouped by their work (iterations, segments, split tiles, row tiles): (work, CTAs,
    mean cycles), most CTAs first. Equal work at unequal cycles is the SMs (or the data)."""
    grid = len(records)
    groups: dict[tuple[int, int, int, int], list[int]] = {}
    for r in records:
        groups.setdefault(tuple(r.work(grid).values()), []).append(r.cycles)
    return sorted(((w, len(c), round(mean(c))) for w, c in groups.items()), key=lambda g: -g[1])
