"""The calibration's power phase: idle, a streaming kernel and each native GEMM precision, each
held until clock and power settle (measure.sustained) and read on the device's power sensor.

- idle: the process sleeps; its power is the static power the energy fit starts from.
- stream: the triad a = b + 3c on fp32 arrays of STREAM_BYTES each (beyond the last-level cache):
  2 FLOP and 12 bytes of DRAM traffic per element.
- gemm: one square GEMM_SIZE³ product per precision, with the GEMM sweep's operands (random,
  non-zero; fp32 strict, tf32 through torch's matmul precision: measure.peak): FLOP = 2 n³ (1 MAC =
  2 FLOP), DRAM bytes = the operands and the result once each, 3 n² x bytes per element (a lower
  bound). The largest size of the former power curve; the recorded H100 traces are of 8192³ too.
The sensor: the power source's power reading and energy counter, and on CUDA NVML's SM clock and
clock-event reasons (measure.peak's probes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from chipcal.measure.device import Device
from chipcal.measure.power import PowerSource
from chipcal.measure.sustained import (
    FULL_LIMITS,
    BatchRunner,
    Hold,
    HoldLimits,
    Sensor,
    SensorReading,
    hold,
)
from chipcal.model.precision import BYTES_PER_ELEMENT, FLOP_PER_MAC

GEMM_SIZE = {"cpu": 2048, "cuda": 8192}
STREAM_BYTES = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}   # per array
IDLE_NAP_S = 0.01        # an idle "call": the batch runner sleeps this long


def open_sensor(source: PowerSource, device: Device) -> Sensor:
    """The sensor a hold reads: `source`'s power and energy, NVML's SM clock and clock events on CUDA."""
    from chipcal.measure.clocks import clock_events_probe_for, clock_probe_for

    meter = source.meter()
    clock, events = clock_probe_for(device), clock_events_probe_for(device)

    def read() -> SensorReading:
        power_w, energy_j = meter()
        mask = None
        if events is not None:
            try:
                mask = int(events())
            except Exception:   # NVMLError_NotSupported on older boards: reasons unknown, not fatal
                mask = None
        return SensorReading(power_w, energy_j, clock() if clock else None, mask)

    return read


def batch_runner(fn: Callable[[], object], sync: Callable[[], None]) -> BatchRunner:
    """Run `fn` n times, then wait for the device."""
    def run(n: int) -> None:
        for _ in range(n):
            fn()
        sync()

    return run


def power_phase(source: PowerSource, device: Device, precisions: Sequence[str], limits: HoldLimits = FULL_LIMITS,
                on_hold: Callable[[Hold], None] | None = None) -> tuple[Hold, ...]:
    """Idle, the triad and a GEMM of each precision in `precisions` (the native ones of the sweep),
    each held (measure.sustained); `on_hold` is called after each."""
    import torch

    from chipcal.measure.bandwidth import bandwidth_callable
    from chipcal.measure.peak import gemm_callable, matmul_precision

    kind = device.kind
    sensor = open_sensor(source, device)
    sync = source.sync
    holds = []

    def done(h: Hold) -> None:
        holds.append(h)
        if on_hold:
            on_hold(h)

    done(hold(lambda n: time.sleep(n * IDLE_NAP_S), sensor, kind="idle", label="idle (sleep)", limits=limits))
    size = STREAM_BYTES[kind]
    triad = bandwidth_callable("triad", size, device)
    with torch.inference_mode():
        triad()
        sync()
        done(hold(batch_runner(triad, sync), sensor, kind="stream", label="triad", flop_per_call=2.0 * size / 4,
                  bytes_per_call=3.0 * size, limits=limits))
    del triad
    n = GEMM_SIZE[kind]
    for precision in precisions:
        fn = gemm_callable(precision, n, n, n, device)
        with matmul_precision(precision), torch.inference_mode():
            fn()            # warm-up: a first call pays one-off costs (cuBLAS handle, heuristics)
            sync()
            done(hold(batch_runner(fn, sync), sensor, kind="gemm", label=f"gemm {n}^3 {precision}",
                      precision=precision, flop_per_call=FLOP_PER_MAC * n**3,
                      bytes_per_call=3.0 * n * n * BYTES_PER_ELEMENT[precision], limits=limits))
        del fn
        if kind == "cuda":
            torch.cuda.empty_cache()
    return tuple(holds)
