"""How much of its bytes floor a grid point can reach at best under the benchmark's own timing.

The bytes floor prices a point's bytes at the bandwidth of a 2 GiB device copy. A call pays more
than its bytes: do_bench's event pair around a launch, the first bytes' latency, the tail, and
the write-back of the dirty L2 lines its flush (a 256 MB memset) leaves behind. A device copy pays
them too: timed like the benchmark on the H200 (`benchmarks/results/sweeps/2026-12-04_flush_modes/
probe.json`), a copy of 8 MB took 4.4 µs more than its bytes at the 2 GiB rate, 44 MB 5.8 µs,
176 MB 7.3 µs, 352 MB 9.0 µs. A kernel that moved each projection's bytes exactly as fast as that
copy moves as many bytes would reach

    attainable = bytes floor / sum over projections of (bytes / copy rate + overhead(bytes))

of the floor, with overhead() read off the probe (linear in log bytes between its sizes, its end
values beyond them). It is a yardstick for a streaming kernel, not a model of ours, and not a hard
bound (a stream that mostly reads may beat a copy by a few percent): a point whose attainable share
is under the target (90 %) is not expected to meet it under this timing method, whatever the kernel. The bound leaves the MMAs out: the table also gives the compute floor over the
bytes floor, and where that is near 1 (about 43 routed rows an expert on Kimi's shapes) a kernel
at 90 % of its bytes floor must also run its tensor cores at about that share of the dense rate
all through the stream. For the launch-bound points (both floors under 60 µs; target 1.3x
Humming) it gives the copy-speed time instead, and the speedup over Humming that time would be.

    python3 -m benchmarks.attainable benchmarks/results/2026-12-05_h200_18e989a.json [more.json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
from pathlib import Path

from . import floors as F

PROBE = Path(__file__).parent / "results" / "sweeps" / "2026-12-04_flush_modes" / "probe.json"
COPY_KIND = "copy(read n/2, write n/2)"
CEILING_KIND = "copy2GiB"
MB = 1 << 20


def copy_overheads(probe: list[dict], mode: str = "zero") -> list[tuple[int, float]]:
    """(bytes, µs over the bytes at the probe's own 2 GiB copy rate) of each copy size the probe
    timed under ``mode`` (do_bench's flush: ``zero``), by size."""
    rows = [r for r in probe if r["mode"] == mode]
    ceiling = next(r for r in rows if r["kind"] == CEILING_KIND)
    gbs = ceiling["gbs"]
    out = [(r["mb"] * MB, r["us"] - F.bytes_floor_us(r["mb"] * MB, gbs)) for r in rows if r["kind"] == COPY_KIND]
    if not out:
        raise ValueError(f"the probe has no {COPY_KIND!r} rows under mode {mode!r}")
    return sorted(out)


def overhead_us(table: list[tuple[int, float]], nbytes: float) -> float:
    """The copy's overhead at ``nbytes``: linear in log(bytes) between the probe's sizes, the end
    values outside them."""
    sizes = [b for b, _ in table]
    if nbytes <= sizes[0]:
        return table[0][1]
    if nbytes >= sizes[-1]:
        return table[-1][1]
    i = bisect.bisect_right(sizes, nbytes)
    (b0, o0), (b1, o1) = table[i - 1], table[i]
    t = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
    return o0 + t * (o1 - o0)


def projection_nbytes(p: dict) -> int:
    return F.projection_bytes(p["n"], p["k"], p["experts_touched"], p["rows_in"], p["rows"])


def copy_time_us(projs: list[dict], copy_gbs: float, table: list[tuple[int, float]]) -> float:
    """The time copies of each projection's bytes take, timed like the benchmark (the module doc)."""
    return sum(F.bytes_floor_us(b, copy_gbs) + overhead_us(table, b) for b in map(projection_nbytes, projs))


def attainable_share(projs: list[dict], copy_gbs: float, table: list[tuple[int, float]]) -> float:
    """Bytes floor over copy_time_us: the share of its bytes floor a copy-speed kernel reaches."""
    floor = F.bytes_floor_us(sum(map(projection_nbytes, projs)), copy_gbs)
    return floor / copy_time_us(projs, copy_gbs, table)


def point_rows(results: dict, table: list[tuple[int, float]]) -> list[dict]:
    """One row a bytes-bound or launch-bound point of a results JSON (the compute-bound ones are
    left out): its floors, the copy-speed time and share, and each side's time and share."""
    ceil = results["ceilings"]
    out = []
    for p in results["points"]:
        projs = list(p["projs"].values())
        fl = F.point_floors(projs, ceil["copy_gbs"], ceil["bf16_tflops"])
        if fl.bound == "compute":
            continue
        times = {side: (s["sum_us"] if s and s.get("sum_us") else None) for side, s in p["sides"].items()}
        copy_us = copy_time_us(projs, ceil["copy_gbs"], table)
        out.append({"path": p["path"], "scenario": p["scenario"], "dist": p["dist"], "T": p["tokens"], "bound": fl.bound,
                    "floor_us": fl.bytes_us, "mb": fl.nbytes / MB, "compute_share": fl.compute_us / fl.bytes_us,
                    "copy_us": copy_us, "attainable": fl.bytes_us / copy_us,  # attainable_share, its parts at hand
                    "chord_us": times.get("chord"), "humming_us": times.get("humming"),
                    "chord": fl.bytes_us / times["chord"] if times.get("chord") else None,
                    "humming": fl.bytes_us / times["humming"] if times.get("humming") else None})
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def render(rows: list[dict], target: float = F.BYTES_TARGET, speedup: float = F.LAUNCH_BOUND_SPEEDUP) -> str:
    """The bytes-bound points against the bytes-floor target, then the launch-bound ones against
    theirs (the speedup over Humming a copy-speed kernel would have)."""
    lines = ["| path | scenario | router | T | bytes floor µs (MB) | compute / bytes floor | attainable | Chord | Humming "
             "| Chord / attainable | 90 % reachable |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    bytes_rows = [r for r in rows if r["bound"] == "bytes"]
    for r in bytes_rows:
        rel = _pct(r["chord"] / r["attainable"]) if r["chord"] else "-"
        lines.append(f"| {r['path']} | {r['scenario']} | {r['dist']} | {r['T']} | {r['floor_us']:.1f} ({r['mb']:.0f}) | "
                     f"{r['compute_share']:.2f} | {_pct(r['attainable'])} | {_pct(r['chord'])} | {_pct(r['humming'])} | {rel} | "
                     f"{'yes' if r['attainable'] >= target else 'no'} |")
    reachable = sum(r["attainable"] >= target for r in bytes_rows)
    lines += ["", f"{len(bytes_rows)} bytes-bound points; {reachable} could reach {100 * target:.0f} % of the bytes floor "
              f"at a copy's speed, {len(bytes_rows) - reachable} could not."]
    launch_rows = [r for r in rows if r["bound"] == "launch"]
    if launch_rows:
        lines += ["", f"| path | scenario | router | T | bytes floor µs | copy-speed µs | Chord µs | Humming µs | "
                  f"Humming / copy-speed | {speedup:.1f}x reachable |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in launch_rows:
            best = r["humming_us"] / r["copy_us"] if r["humming_us"] else None
            lines.append(f"| {r['path']} | {r['scenario']} | {r['dist']} | {r['T']} | {r['floor_us']:.1f} | {r['copy_us']:.1f} | "
                         f"{_us(r['chord_us'])} | {_us(r['humming_us'])} | {'-' if best is None else f'{best:.2f}x'} | "
                         f"{'-' if best is None else ('yes' if best >= speedup else 'no')} |")
        short = sum(1 for r in launch_rows if r["humming_us"] and r["humming_us"] / r["copy_us"] < speedup)
        lines += ["", f"{len(launch_rows)} launch-bound points; at {short} even a copy-speed kernel would be under "
                  f"{speedup:.1f}x Humming."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="results JSON files (benchmarks/results/*.json)")
    parser.add_argument("--probe", default=str(PROBE), help="the copy probe (flush_modes/probe.json)")
    parser.add_argument("--mode", default="zero", help="the probe's flush mode (the tables' method: zero)")
    args = parser.parse_args(argv)
    table = copy_overheads(json.loads(Path(args.probe).read_text()), args.mode)
    for path in args.results:
        results = json.loads(Path(path).read_text())
        run = results["run"]
        print(f"## {Path(path).name}: {run['gpu']}, {run['commit']}, {run['date']}\n")
        print(render(point_rows(results, table)))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
