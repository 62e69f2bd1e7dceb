"""Throttling evidence: NVML clock-event bits by hand, CPU throttle counters on a fake sysfs, a clock
sampled throughout a sustained run so the sag flag can fire."""

from __future__ import annotations

import itertools
import time

import pytest

from chipcal.calibrate import flags as gap
from chipcal.measure.device import CPU, Device
from chipcal.measure.throttle import ThrottleWatch, cpu_throttle_count, decode_clock_events
from chipcal.measure.timing import ClockSampler, time_callable


def test_decode_nvml_clock_event_bits():
    # nvml.h: 0x4 SwPowerCap, 0x40 HwThermalSlowdown, 0x1 GpuIdle
    assert decode_clock_events(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_clock_events(0x1) == ("gpu_idle",)
    assert decode_clock_events(0x1000) == ("0x1000",)


def throttle_tree(root, counts):
    for cpu, n in enumerate(counts):
        d = root / f"devices/system/cpu/cpu{cpu}/thermal_throttle"
        d.mkdir(parents=True, exist_ok=True)
        (d / "core_throttle_count").write_text(f"{n}\n")
        (d / "package_throttle_count").write_text("0\n")


def test_cpu_throttle_counter_rise_is_seen(tmp_path):
    throttle_tree(tmp_path, [3, 4])
    assert cpu_throttle_count(tmp_path) == 7
    watch = ThrottleWatch(CPU, sys=tmp_path)
    with watch.watch():
        throttle_tree(tmp_path, [5, 4])                  # two more events on cpu0 during the run
    assert watch.observable and watch.reasons == ("cpu_thermal_throttle (+2 events)",)


def test_vm_without_counters_says_throttling_is_not_observable(tmp_path):
    watch = ThrottleWatch(CPU, sys=tmp_path)
    with watch.watch():
        pass
    assert not watch.observable and watch.reasons == () and "not observable" in watch.note


def test_gpu_power_cap_reason_is_reported_idle_is_not(tmp_path):
    watch = ThrottleWatch(Device("cuda"), sys=tmp_path, nvml_reasons=lambda: 0x4 | 0x1)
    with watch.watch():
        pass
    assert watch.reasons == ("sw_power_cap",)


@pytest.mark.timing
def test_sustained_run_has_enough_clock_samples_for_the_sag_flag():
    # a 1.2 s run sampled every 0.1 s: ~11 samples; a clock falling 3.0 -> 2.0 GHz halfway is a sag
    clocks = itertools.chain([3.0e9] * 6, itertools.repeat(2.0e9))
    m = time_callable(lambda: time.sleep(0.01), max_time_s=1.2, min_samples=100, target_rel_ci=1e-9,
                      clock_probe=lambda: next(clocks))
    assert len(m.clocks_hz) >= 8
    flag = gap.sag("clock", m.clocks_hz, "Hz")
    assert flag is not None and flag.code == "sustained_sag"


def test_clock_sampler_records_a_failing_probe():
    def broken():
        raise OSError("sysfs went away")

    with ClockSampler(broken, period_s=0.01) as sampler:
        time.sleep(0.1)
    assert sampler.failure and "sysfs went away" in sampler.failure
