"""Floors and targets of a grid point, as pure functions (CPU-tested in tests/test_benchmarks.py).

Two ceilings are measured in the same run (benchmarks/ceilings.py): the device copy bandwidth
(GB/s, read + write bytes counted) and the dense BF16 GEMM rate (TFLOP/s, 8192^3 matmul).
For one projection with ``rows`` routed pairs kept on this GPU:

- bytes = every touched expert's INT4 weight and BF16 group-32 scales
  (``N*K/2 + N*K/32*2`` bytes per expert that received >= 1 row), plus the activation rows
  read (``rows_in * K * 2``) and the output rows written (``rows * N * 2``). ``rows_in`` is the
  number of distinct input rows the routes read: distinct tokens for gate_up (a token routed
  to two local experts is read from HBM once at best), ``rows`` for down (one row per route).
- flops = ``2 * rows * N * K``.

A point's floors are the sums over its projections (gate_up + down), over the ceilings. The
larger floor is the one a kernel can hope to approach; ``%floor`` = larger floor / time.
(These definitions reproduce the humming-0.1.19-h200 reference table in shared/reference.)
"""

from __future__ import annotations

from dataclasses import dataclass

LAUNCH_BOUND_US = 60.0  # both floors below this: the point is launch/latency bound
BYTES_TARGET = 0.90  # fraction of the bytes floor to reach where it is the larger floor
COMPUTE_TARGET = 0.85  # fraction of the compute floor to reach where it is the larger floor
LAUNCH_BOUND_SPEEDUP = 1.3  # required speedup over Humming at launch-bound points
MIN_SPEEDUP = 1.0  # never slower than Humming


def weight_bytes_per_expert(n: int, k: int) -> int:
    """INT4 codes (K/2 bytes per row) plus one BF16 scale per 32 input channels."""
    return n * k // 2 + (n * k // 32) * 2


def projection_bytes(n: int, k: int, experts_touched: int, rows_in: int, rows_out: int) -> int:
    return experts_touched * weight_bytes_per_expert(n, k) + rows_in * k * 2 + rows_out * n * 2


def projection_flops(n: int, k: int, rows: int) -> int:
    return 2 * rows * n * k


def bytes_floor_us(nbytes: float, copy_gbs: float) -> float:
    """Time to move ``nbytes`` at the copy bandwidth (GB/s = 1e9 bytes/s), in microseconds."""
    return nbytes / (copy_gbs * 1e9) * 1e6


def compute_floor_us(flops: float, tflops: float) -> float:
    return flops / (tflops * 1e12) * 1e6


@dataclass(frozen=True)
class Floors:
    bytes_us: float
    compute_us: float
    nbytes: int
    flops: int

    @property
    def larger_us(self) -> float:
        return max(self.bytes_us, self.compute_us)

    @property
    def bound(self) -> str:
        """Which floor decides the target: 'bytes', 'compute' or 'launch' (both < 60 us)."""
        if self.larger_us < LAUNCH_BOUND_US:
            return "launch"
        return "bytes" if self.bytes_us >= self.compute_us else "compute"


def point_floors(projections, copy_gbs: float, tflops: float) -> Floors:
    """``projections``: iterable of dicts (or objects) with n, k, rows, rows_in, experts_touched."""
    nbytes = flops = 0
    for p in projections:
        get = p.get if isinstance(p, dict) else lambda name, _p=p: getattr(_p, name)
        n, k, rows = get("n"), get("k"), get("rows")
        nbytes += projection_bytes(n, k, get("experts_touched"), get("rows_in"), rows)
        flops += projection_flops(n, k, rows)
    return Floors(bytes_floor_us(nbytes, copy_gbs), compute_floor_us(flops, tflops), nbytes, flops)


def pct_of_floor(floors: Floors, time_us: float | None) -> float | None:
    """Larger floor / measured time, in percent (None when there is no time)."""
    if time_us is None or time_us <= 0:
        return None
    return 100.0 * floors.larger_us / time_us


@dataclass(frozen=True)
class Target:
    met: bool | None  # None: not enough data (a side missing)
    rule: str  # the rule that applies, e.g. ">=90% bytes floor, >=1.0x Humming"
    detail: str  # what failed, or "" when met


def target_status(floors: Floors, chord_us: float | None, humming_us: float | None) -> Target:
    """Issue 4's targets for one point (sum of gate_up and down).

    Larger floor >= 60 us: >= 90 % of the bytes floor where it is the larger floor, >= 85 % of
    the compute floor where that is; both floors < 60 us: >= 1.3x faster than Humming; and at
    every point never slower than Humming (>= 1.0x).
    """
    bound = floors.bound
    if bound == "launch":
        need = LAUNCH_BOUND_SPEEDUP
        rule = f">={need:.1f}x Humming (launch-bound)"
    else:
        frac = BYTES_TARGET if bound == "bytes" else COMPUTE_TARGET
        need = MIN_SPEEDUP
        rule = f">={frac * 100:.0f}% {bound} floor, >={need:.1f}x Humming"
    if chord_us is None or humming_us is None:
        return Target(None, rule, "missing " + ("Chord" if chord_us is None else "Humming") + " time")
    failures = []
    speedup = humming_us / chord_us
    if speedup < need:
        failures.append(f"{speedup:.2f}x < {need:.1f}x")
    if bound != "launch":
        got = floors.larger_us / chord_us
        if got < frac:
            failures.append(f"{got * 100:.0f}% < {frac * 100:.0f}%")
    return Target(not failures, rule, "; ".join(failures))
