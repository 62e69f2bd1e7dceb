"""Power and energy of a workload: NVML, Linux RAPL powercap, or an explicit "unavailable".

One interface (`PowerSource`): `measure(fn)` runs an idle baseline, then repeats `fn` for a window
long enough for the sensor (never shorter than `min_window_s` nor 10 sensor update periods), and
returns a `PowerReading` (energy, average and peak power, sample count, idle power, per call).
`window()` measures an arbitrary block of code instead.

Energy comes from cumulative energy counters read at the window's ends and by a background
thread every `sample_period_s` (the thread's readings give the power trace and catch counter
wraparounds):
- NVML: `nvmlDeviceGetTotalEnergyConsumption` (mJ since driver load, Volta and later). The trace
  uses `nvmlDeviceGetPowerUsage`, which on Ampere/Hopper is a 1 s running average: it lags the
  workload and smooths peaks. Without the energy counter (pre-Volta) energy is integrated from
  that trace over a window of ≥ 5 s, and the reading says so.
- RAPL (/sys/class/powercap/intel-rapl:*): `energy_uj` per package and DRAM domain, wrapping at
  `max_energy_range_uj`; a reading lower than the previous one means one wrap:
  Δ = now − before + max_energy_range_uj. RAPL covers the whole package, other processes included.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chipcal.measure.device import CPU, Device
from chipcal.measure.nvml import NvmlUnavailable, device_handle, open_nvml
from chipcal.model.errors import MeasurementUnavailable

RAPL_ROOT = Path("/sys/class/powercap")


class PowerUnavailable(MeasurementUnavailable):
    """Asked to measure with a source that cannot; the message is the reason."""


@dataclass(frozen=True)
class PowerReading:
    """Energy over one measurement window (SI units). Per-call fields divide by `repetitions`."""

    source: str
    energy_j: float
    duration_s: float
    avg_power_w: float
    peak_power_w: float | None
    n_samples: int
    repetitions: int
    energy_per_call_j: float
    idle_w: float | None
    idle_duration_s: float
    dynamic_energy_per_call_j: float | None   # (avg_power_w − idle_w) × duration_s / repetitions
    domains: tuple[tuple[str, float], ...]    # energy_j per sensor domain
    method: str
    warnings: tuple[str, ...] = ()


class _Window:
    """Counter readings of one window: accumulates wrap-corrected energy and the power trace."""

    def __init__(self, source: PowerSource):
        self.source = source
        self.lock = threading.Lock()
        self.energy_j: dict[str, float] = {}
        self.trace: list[tuple[float, float]] = []      # (t, W) from counter deltas
        self.instant: list[tuple[float, float]] = []    # (t, W) from the sensor's power reading
        self.last: tuple[float, dict[str, float]] | None = None
        self.t0 = self.t1 = 0.0
        self.reading: PowerReading | None = None
        self.failure: str | None = None     # why the sampler thread stopped early, if it did

    def sample(self) -> None:
        now = time.monotonic()
        raw = self.source._read_counters()
        power = self.source._read_power()
        with self.lock:
            if power is not None:
                self.instant.append((now, power))
            if self.last is not None:
                t_prev, prev = self.last
                step = 0.0
                for domain, value in raw.items():
                    delta = self.source._delta(domain, prev[domain], value)
                    self.energy_j[domain] = self.energy_j.get(domain, 0.0) + delta
                    step += delta
                if raw and now > t_prev:
                    self.trace.append((now, step / (now - t_prev)))
            else:
                self.energy_j = dict.fromkeys(raw, 0.0)
            self.last = (now, raw)


class PowerSource:
    """A power sensor. Subclasses read counters (`_read_counters`, joules or raw units per domain)."""

    name = "power"
    update_period_s = 0.1          # how often the sensor's value changes
    min_window_s = 1.0

    def __init__(self, *, available: bool, reason: str, sample_period_s: float = 0.1,
                 sync: Callable[[], None] | None = None):
        self.available, self.reason = available, reason
        self.sample_period_s = sample_period_s
        self.sync = sync or (lambda: None)

    # --- sensor access (subclasses) ---
    def _read_counters(self) -> dict[str, float]:
        return {}

    def _delta(self, domain: str, before: float, after: float) -> float:
        return after - before

    def _read_power(self) -> float | None:
        return None

    def _method(self) -> str:
        return self.name

    def _energy(self, w: _Window) -> tuple[float, tuple[tuple[str, float], ...], list[str]]:
        return sum(w.energy_j.values()), tuple(sorted(w.energy_j.items())), []

    # --- measuring ---
    @contextlib.contextmanager
    def window(self) -> Iterator[_Window]:
        """Measure the enclosed block; `.reading` is set on exit (repetitions = 1, no idle)."""
        if not self.available:
            raise PowerUnavailable(self.reason)
        w = _Window(self)
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.sample_period_s):
                try:
                    w.sample()
                except Exception as exc:  # a sensor read failing mid-window (driver, permission, sysfs)
                    w.failure = f"{type(exc).__name__}: {exc}"
                    return

        self.sync()
        w.t0 = time.monotonic()
        w.sample()
        thread = threading.Thread(target=loop, name=f"{self.name}-sampler", daemon=True)
        thread.start()
        try:
            yield w
        finally:
            self.sync()
            stop.set()
            thread.join()
            w.sample()
            w.t1 = time.monotonic()
        w.reading = self._reading(w, repetitions=1, idle_w=None, idle_s=0.0)

    def meter(self) -> Callable[[], tuple[float | None, float | None]]:
        """A reader for code that samples on its own schedule (measure.sustained): each call gives
        (the sensor's power now or None, joules since the reader's first call or None without an
        energy counter), the counters wrap-corrected as in a window (read often enough: RAPL wraps
        after minutes, NVML's counter not in practice)."""
        if not self.available:
            raise PowerUnavailable(self.reason)
        last: dict[str, float] = {}
        total = 0.0

        def read() -> tuple[float | None, float | None]:
            nonlocal total
            raw = self._read_counters()
            for domain, value in raw.items():
                if domain in last:
                    total += self._delta(domain, last[domain], value)
                last[domain] = value
            return self._read_power(), (total if raw else None)

        return read

    def idle_power_w(self, seconds: float) -> float:
        """Average power while this process sleeps for `seconds` (the idle baseline)."""
        with self.window() as w:
            time.sleep(seconds)
        return w.reading.avg_power_w

    def measure(self, fn: Callable[[], object], *, min_window_s: float | None = None, idle_s: float = 1.0,
                call_time_s: float | None = None) -> PowerReading:
        """Idle baseline for `idle_s`, then `fn` repeated over a window long enough for the sensor.

        The window lasts at least max(min_window_s, 10 × update_period_s): calls run in chunks,
        synchronized after each, until the window has lasted that long. The first chunk's size comes
        from `call_time_s` (seconds per call; when None, one synchronized call timed after one
        untimed warm-up call, since a first call pays one-off costs: on a GPU, a first `a @ a`
        creates the cuBLAS handle and took ~40x its steady time, which left a 27 ms window of one
        call on an H100).
        """
        if not self.available:
            raise PowerUnavailable(self.reason)
        idle_w = self.idle_power_w(idle_s) if idle_s > 0 else None
        need_s = max(min_window_s if min_window_s is not None else self.min_window_s, 10 * self.update_period_s)
        if call_time_s is None:
            fn()
            self.sync()
            t = time.perf_counter()
            fn()
            self.sync()
            call_time_s = time.perf_counter() - t
        chunk, repetitions = max(1, math.ceil(need_s / max(call_time_s, 1e-9))), 0
        with self.window() as w:
            while True:
                for _ in range(chunk):
                    fn()
                repetitions += chunk
                self.sync()
                elapsed = time.monotonic() - w.t0
                if elapsed >= need_s:
                    break
                chunk = max(1, math.ceil((need_s - elapsed) / (elapsed / repetitions)))
        return self._reading(w, repetitions=repetitions, idle_w=idle_w, idle_s=idle_s, need_s=need_s)

    def _reading(self, w: _Window, *, repetitions: int, idle_w: float | None, idle_s: float,
                 need_s: float | None = None) -> PowerReading:
        duration = w.t1 - w.t0
        energy, domains, notes = self._energy(w)
        if need_s is not None and duration < 0.8 * need_s:
            notes.append(f"window {duration:.2f} s shorter than the {need_s:.2f} s asked for "
                         "(the calls ran faster than in the timing call)")
        if duration < 2 * self.update_period_s:
            notes.append(f"window {duration * 1e3:.1f} ms is shorter than 2 sensor update periods "
                         f"({self.update_period_s * 1e3:.0f} ms): energy is unreliable; use measure(fn)")
        if energy <= 0:
            notes.append("the energy counter did not advance during the window")
        if w.failure:
            notes.append(f"sampler failed: the {self.name} sampler thread stopped during the window ({w.failure}); "
                         "counter wraparounds after that are not tracked, so the energy may be too low")
        avg = energy / duration if duration > 0 else math.nan
        peaks = [p for _, p in (w.instant or w.trace)]
        return PowerReading(
            source=self.name, energy_j=energy, duration_s=duration, avg_power_w=avg,
            peak_power_w=max(peaks) if peaks else None,
            n_samples=len(w.instant) if w.instant else len(w.trace) + 1,
            repetitions=repetitions, energy_per_call_j=energy / repetitions, idle_w=idle_w,
            idle_duration_s=idle_s if idle_w is not None else 0.0,
            dynamic_energy_per_call_j=None if idle_w is None else (avg - idle_w) * duration / repetitions,
            domains=domains, method=self._method(), warnings=tuple(notes))


class UnavailableSource(PowerSource):
    """No power sensor here; `reason` says why. `measure` raises PowerUnavailable."""

    name = "unavailable"

    def __init__(self, reason: str):
        super().__init__(available=False, reason=reason)


@dataclass(frozen=True)
class RaplZone:
    domain: str          # "package-0", "dram-0"
    energy_path: Path
    max_energy_range_uj: float


class RaplSource(PowerSource):
    """Linux powercap RAPL: package and DRAM energy counters (µJ), wraparound-corrected."""

    name = "rapl"
    update_period_s = 0.001   # RAPL energy status updates about every 1 ms (Intel SDM vol. 3B, 15.10)
    min_window_s = 1.0

    def __init__(self, root: Path | str | None = None, sample_period_s: float = 0.1):
        root = Path(root) if root is not None else RAPL_ROOT
        zones, reason = self._discover(root)
        super().__init__(available=bool(zones), reason=reason, sample_period_s=sample_period_s)
        self.root, self.zones = root, {z.domain: z for z in zones}

    @staticmethod
    def _discover(root: Path) -> tuple[list[RaplZone], str]:
        if not root.is_dir():
            return [], (f"{root} does not exist: this kernel exposes no powercap interface (typical in a "
                        "VM, whose hypervisor does not pass the RAPL MSRs through)")
        zones = []
        for d in sorted(root.glob("intel-rapl:*")):
            parts = d.name.split(":")[1:]
            name = (d / "name").read_text().strip() if (d / "name").exists() else ""
            if len(parts) == 1 and name.startswith("package"):
                domain = name
            elif name == "dram":
                domain = f"dram-{parts[0]}"
            else:  # core/uncore are inside the package figure; psys is the whole platform
                continue
            energy = d / "energy_uj"
            try:
                energy.read_text()
                max_range = float((d / "max_energy_range_uj").read_text())
            except PermissionError:
                return [], (f"permission denied reading {energy}: energy_uj is root-only since Linux 5.10 "
                            "(CVE-2020-8694); run as root or make it readable")
            except OSError as exc:
                return [], f"cannot read {d}: {exc}"
            zones.append(RaplZone(domain, energy, max_range))
        if not zones:
            return [], f"{root} has no intel-rapl package zones (RAPL driver not loaded or not supported)"
        return zones, ""

    def _read_counters(self) -> dict[str, float]:
        return {d: float(z.energy_path.read_text()) for d, z in self.zones.items()}

    def _delta(self, domain: str, before: float, after: float) -> float:
        """Joules between two energy_uj readings; one wrap at max_energy_range_uj if it went down."""
        if after < before:
            after += self.zones[domain].max_energy_range_uj
        return (after - before) / 1e6

    def _method(self) -> str:
        return f"RAPL powercap energy_uj counters ({', '.join(self.zones)})"


class NvmlSource(PowerSource):
    """NVIDIA GPU energy: total-energy counter deltas, power trace from nvmlDeviceGetPowerUsage."""

    name = "nvml"
    update_period_s = 0.1     # energy counter granularity (conservative); power usage averages over 1 s
    min_window_s = 1.0
    trace_only_window_s = 5.0

    def __init__(self, cuda_index: int = 0, uuid: str | None = None, sample_period_s: float = 0.05,
                 sync: Callable[[], None] | None = None):
        self.index = cuda_index
        self.has_counter = self.has_power = False
        reason = ""
        try:
            self.nv = open_nvml()
            self.handle = device_handle(self.nv, cuda_index, uuid)
        except NvmlUnavailable as exc:
            reason = str(exc)
        else:
            try:
                self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)
                self.has_counter = True
            except Exception:  # NVMLError_NotSupported before Volta
                pass
            try:
                self.nv.nvmlDeviceGetPowerUsage(self.handle)
                self.has_power = True
            except Exception:
                pass
            if not (self.has_counter or self.has_power):
                reason = f"GPU {cuda_index} supports neither the NVML energy counter nor power readings"
        if not self.has_counter:
            self.update_period_s = 1.0
            self.min_window_s = self.trace_only_window_s
        super().__init__(available=self.has_counter or self.has_power, reason=reason,
                         sample_period_s=sample_period_s, sync=sync)

    def _read_counters(self) -> dict[str, float]:
        if not self.has_counter:
            return {}
        return {f"gpu{self.index}": self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3}

    def _read_power(self) -> float | None:
        return self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1e3 if self.has_power else None

    def _energy(self, w: _Window) -> tuple[float, tuple[tuple[str, float], ...], list[str]]:
        if self.has_counter:
            return super()._energy(w)
        pts = w.instant
        energy = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pts, pts[1:], strict=False))
        return energy, ((f"gpu{self.index}", energy),), [
            "no NVML energy counter on this GPU: energy integrated from nvmlDeviceGetPowerUsage, a 1 s "
            "running average that lags the workload"]

    def _method(self) -> str:
        if self.has_counter:
            return ("NVML nvmlDeviceGetTotalEnergyConsumption deltas; peak from nvmlDeviceGetPowerUsage "
                    "(1 s average on Ampere/Hopper: smoothed, lags)")
        return "NVML nvmlDeviceGetPowerUsage integrated (trapezoid); 1 s averaged readings"


def open_power_source(device: Device = CPU) -> PowerSource:
    """The power sensor for `device`, or UnavailableSource with the reason."""
    if device.is_cuda:
        import torch

        index = device.index
        if not torch.cuda.is_available():
            return UnavailableSource(f"no CUDA device for {str(device)!r}")
        from chipcal.measure.nvml import cuda_uuid

        src = NvmlSource(index, uuid=cuda_uuid(index), sync=lambda: torch.cuda.synchronize(index))
        return src if src.available else UnavailableSource(f"NVML: {src.reason}")
    src = RaplSource()
    return src if src.available else UnavailableSource(f"RAPL: {src.reason}")
