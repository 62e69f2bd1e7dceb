"""Power vs throughput observations for the energy fit: idle, GEMMs, a streaming kernel, and a
sustained GEMM split into consecutive windows (throttling evidence).

Each row: kind, label, avg_power_w, flop_per_s (2 per MAC), bytes_per_s (DRAM traffic: the
GEMM's operands and result once each — a lower bound; the kernel's STREAM bytes), the window,
the reading's sample count, and the SM clock sampled through the window (CUDA; empty on CPU). Feeds calibrate.fits.fit_power:
P = idle + e_flop·FLOP/s + e_byte·byte/s.
"""

from __future__ import annotations

from chipcal.measure.bandwidth import bandwidth_callable
from chipcal.measure.device import device_kind
from chipcal.measure.peak import clock_probe_for, gemm_callable
from chipcal.measure.power import PowerSource
from chipcal.measure.timing import ClockSampler
from chipcal.model.precision import BYTES_PER_ELEMENT

GEMM_SIZES = {"cpu": (256, 512, 1024, 2048), "cuda": (1024, 2048, 4096, 8192)}
STREAM_BYTES = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}   # per array, beyond the last-level cache
SUSTAINED_WINDOWS = 8


def _row(kind: str, label: str, reading, flop: float, nbytes: float, clocks: ClockSampler | None = None) -> dict:
    calls = reading.repetitions
    d = reading.duration_s
    return {"kind": kind, "label": label, "avg_power_w": reading.avg_power_w,
            "peak_power_w": reading.peak_power_w, "flop_per_s": flop * calls / d, "bytes_per_s": nbytes * calls / d,
            "duration_s": d, "n_samples": reading.n_samples, "warnings": list(reading.warnings),
            "sm_clock_hz": [c for c in (clocks.clocks_hz if clocks else []) if c]}


def _measure(source: PowerSource, fn, window_s: float, device: str):
    """A power reading of `fn` with the device clock sampled through it (NVML SM clock on CUDA)."""
    with ClockSampler(clock_probe_for(device)) as clocks:
        reading = source.measure(fn, min_window_s=window_s, idle_s=0)
    return reading, clocks


def power_curve(source: PowerSource, device: str, precision: str, window_s: float = 2.0) -> list[dict]:
    """Measure power at idle, at several GEMM sizes, on a streaming kernel and sustained."""
    kind = device_kind(device)
    bpe = BYTES_PER_ELEMENT[precision]
    idle = source.idle_power_w(window_s)
    rows = [{"kind": "idle", "label": "sleep", "avg_power_w": idle, "peak_power_w": None, "flop_per_s": 0.0,
             "bytes_per_s": 0.0, "duration_s": window_s, "n_samples": None, "warnings": []}]
    for n in GEMM_SIZES[kind]:
        fn = gemm_callable(precision, n, n, n, device)
        reading, clocks = _measure(source, fn, window_s, device)
        rows.append(_row("gemm", f"gemm {n}^3 {precision}", reading, 2.0 * n**3, 3.0 * n * n * bpe, clocks))
    size = STREAM_BYTES[kind]
    triad = bandwidth_callable("triad", size, device)
    reading = source.measure(triad, min_window_s=window_s, idle_s=0)
    # triad a = b + s*c on fp32: 2 FLOP and 12 bytes per element
    rows.append(_row("bandwidth", "triad", reading, 2.0 * size / 4, 3.0 * size))
    n = GEMM_SIZES[kind][-1]
    fn = gemm_callable(precision, n, n, n, device)
    for i in range(SUSTAINED_WINDOWS):
        reading, clocks = _measure(source, fn, window_s, device)
        rows.append(_row("sustained", f"gemm {n}^3 window {i + 1}/{SUSTAINED_WINDOWS}", reading,
                         2.0 * n**3, 3.0 * n * n * bpe, clocks))
    return rows
