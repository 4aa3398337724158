"""The SM clock and board power while a point is timed, read from NVML.

Why: under do_bench a prefill call runs back to back against the H200's 700 W power limit, and
the clock the GPU settles at decides the time. One tree read EP8 T=8192 gate_up 4988 and 5736 µs
in two runs of one sweep, and a single clean call under ncu profiles us 2.5 % faster than Humming
where do_bench reads us 10 % slower (benchmarks/results/ncu/2026-12-04_ep8_gate_up.md). Recording
the clock and power during each side's timing tells a kernel's speed from the clock it was given.

The first probe on the H200 (benchmarks/results/sweeps/2026-12-04_nvml_clock_probe/: two points a
side, a cool GPU) read 1980 MHz in every sample, so the SM clock alone may not show a cap: the
sampler also records the clock-event reasons NVML reports (power cap, thermal), OR-ed over the
samples.

The first full grouped grid with the sampler (df75b42) showed what the power state does to the
points after a prefill: Chord's decode calls that followed its T=8192 calls ran at 1515-1900 MHz
with the power cap reported, in 57 of 96 calls; Humming's at 1980 MHz in 90 of 96. :func:`settle`
therefore waits, before each point's timing, until NVML no longer reports the clocks held down by
power or heat (both sides alike), and the record keeps how long it waited.

NVML comes from the driver (libnvidia-ml.so.1) through ctypes, so there is no package to install;
where it cannot be loaded (the CPU machines), :class:`ClockSampler` records nothing and says so
once. A background thread samples every ``period_s`` while the timed code runs. The power is the
mean of NVML's power readings; the energy counter's difference is used only over windows of
ENERGY_MIN_S or more, because it advances in coarse steps (over do_bench's ~60 ms windows it read
0 W and 946 W in the df75b42 run).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from typing import Any

NVML_SUCCESS = 0
NVML_CLOCK_SM = 1  # nvmlClockType_t
# nvmlClocksEventReasons bits: the clocks held down by power (software cap, hardware brake) ...
POWER_CAP_BITS = 0x4 | 0x80
# ... or by heat or a hardware slowdown (0x8 hardware slowdown, 0x20 software thermal, 0x40 hardware thermal)
HELD_DOWN_BITS = POWER_CAP_BITS | 0x8 | 0x20 | 0x40
ENERGY_MIN_S = 1.0  # the shortest window whose power comes from the energy counter


class Nvml:
    """The NVML calls the sampler needs, on one device: by its UUID where torch gives one (the
    CUDA index and NVML's order can disagree), else by index."""

    def __init__(self, device_index: int = 0, uuid: str | None = None, lib: Any = None):
        self.lib = lib if lib is not None else ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        if not uuid or self.lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle)) != NVML_SUCCESS:
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(device_index, ctypes.byref(self.handle)),
                        "nvmlDeviceGetHandleByIndex_v2")

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != NVML_SUCCESS:
            raise OSError(f"{what} returned NVML error {rc}")

    def sm_mhz(self) -> int:
        v = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(v)), "nvmlDeviceGetClockInfo")
        return v.value

    def power_mw(self) -> int:
        v = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(v)), "nvmlDeviceGetPowerUsage")
        return v.value

    def clock_events(self) -> int | None:
        """Why the clocks are held down now (nvmlClocksEventReasons bits: 0x4 software power cap,
        0x20 / 0x40 thermal, 0x80 hardware power brake), or None where NVML does not say."""
        v = ctypes.c_ulonglong()
        try:
            rc = self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(v))
        except AttributeError:
            return None
        return v.value if rc == NVML_SUCCESS else None

    def energy_mj(self) -> int | None:
        """Energy since the driver loaded (Volta and later), or None where the GPU has no counter."""
        v = ctypes.c_ulonglong()
        rc = self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(v))
        return v.value if rc == NVML_SUCCESS else None


def open_nvml(device_index: int = 0) -> Nvml | None:
    """NVML on the CUDA device ``device_index``, or None (with one line on stderr) where the
    driver's library or the device cannot be opened."""
    try:
        uuid = None
        try:
            import torch

            raw = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
            if raw is not None:  # torch prints the bare UUID; NVML names it "GPU-<uuid>"
                uuid = str(raw) if str(raw).startswith("GPU-") else f"GPU-{raw}"
        except Exception:  # noqa: BLE001 - no torch or no GPU: NVML's own index
            uuid = None
        return Nvml(device_index, uuid)
    except (OSError, AttributeError) as exc:
        print(f"gpu_clocks: no NVML ({exc}); clocks and power are not recorded", file=sys.stderr)
        return None


class ClockSampler:
    """``with ClockSampler(nvml) as s: <timed code>``; then ``s.summary()`` is ``{"sm_mhz": mean,
    "sm_mhz_min": lowest, "power_w": mean, "clock_events": the reason bits seen}`` over the block
    ({} without NVML or samples; no clock_events where NVML does not report them)."""

    def __init__(self, nvml: Nvml | None, period_s: float = 0.005):
        self.nvml, self.period_s = nvml, period_s
        self.clocks: list[int] = []
        self.powers: list[int] = []
        self.events: int | None = None  # the clock-event reason bits seen in any sample (None: not reported)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0
        self._e0 = self._e1 = None

    def _sample(self) -> bool:
        """One reading; False (and no more) once NVML fails: a point is never lost to its clocks."""
        try:
            clock, power = self.nvml.sm_mhz(), self.nvml.power_mw()
        except OSError:
            return False
        self.clocks.append(clock)
        self.powers.append(power)
        events = self.nvml.clock_events()
        if events is not None:
            self.events = (self.events or 0) | events
        return True

    def _run(self) -> None:
        while not self._stop.is_set() and self._sample():
            self._stop.wait(self.period_s)

    def __enter__(self) -> ClockSampler:
        if self.nvml is not None:
            self._e0, self._t0 = self.nvml.energy_mj(), time.perf_counter()
            self._sample()  # at least one reading, however short the block
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._e1, self._t1 = self.nvml.energy_mj(), time.perf_counter()

    def summary(self) -> dict[str, float]:
        if not self.clocks:
            return {}
        out = {"sm_mhz": round(sum(self.clocks) / len(self.clocks), 1), "sm_mhz_min": float(min(self.clocks))}
        wall = self._t1 - self._t0
        if self._e0 is not None and self._e1 is not None and wall >= ENERGY_MIN_S and self._e1 >= self._e0:
            out["power_w"] = round((self._e1 - self._e0) / 1e3 / wall, 1)
        else:
            out["power_w"] = round(sum(self.powers) / len(self.powers) / 1e3, 1)
        if self.events is not None:
            out["clock_events"] = self.events
        return out


def settle(nvml: Nvml | None, timeout_s: float, period_s: float = 0.02, sleep=time.sleep,
           clock=time.monotonic) -> float | None:
    """Wait, with the GPU idle, until NVML stops reporting the clocks held down (HELD_DOWN_BITS),
    at most ``timeout_s``: each point's timing then starts from the same power state whatever ran
    before it. Returns the seconds waited (``timeout_s`` or more: it did not clear), or None
    where there is no NVML, no clock-event reasons, or ``timeout_s`` is 0."""
    if nvml is None or timeout_s <= 0:
        return None
    start = clock()
    while True:
        events = nvml.clock_events()
        if events is None:
            return None
        waited = clock() - start
        if not events & HELD_DOWN_BITS or waited >= timeout_s:
            return round(waited, 3)
        sleep(period_s)
