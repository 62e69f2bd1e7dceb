"""First touch of freshly mapped output buffers and the memory term: the roofline terms by hand,
the probe's arithmetic, the parameter's round trip."""

from __future__ import annotations

import dataclasses

import pytest

from chipcal.measure.bandwidth import FirstTouch
from chipcal.measure.timing import Measurement
from chipcal.model.estimate.cpu_passes import first_touch_s
from chipcal.model.mapping.params import FRESH_ALLOCATION_BYTES, FamilyParams, default_params


def test_first_touch_term_by_hand():
    params = dataclasses.replace(default_params("cpu"), first_touch_bytes_per_s=4e9)
    # glibc's mmap threshold tops out at 32 MiB on 64-bit (mallopt(3)): a 64 MiB output is mapped
    # fresh by every call, 64 MiB / 4 GB/s = 16.78 ms; a 16 MiB one comes from the heap: 0
    assert FRESH_ALLOCATION_BYTES == 32 * 2**20
    assert first_touch_s(64 * 2**20, params) == pytest.approx(64 * 2**20 / 4e9)
    assert first_touch_s(16 * 2**20, params) == 0.0
    assert first_touch_s(64 * 2**20, default_params("cpu")) == 0.0       # not measured: not charged


def test_probe_rate_is_size_over_the_extra_time():
    # 64 MiB filled fresh in 17 ms, reused in 1.5 ms: 67,108,864 B / 15.5 ms = 4.33 GB/s
    fresh, reused = Measurement.from_samples([0.017] * 5), Measurement.from_samples([0.0015] * 5)
    assert FirstTouch(64 * 2**20, fresh, reused).bytes_per_s == pytest.approx(67_108_864 / 0.0155)
    assert FirstTouch(64 * 2**20, reused, reused).bytes_per_s is None     # no extra cost: nothing to charge


def test_first_touch_round_trips_with_the_parameters():
    params = dataclasses.replace(default_params("cpu"), first_touch_bytes_per_s=4.4e9)
    again = FamilyParams.from_dict(params.to_dict())
    assert again.first_touch_bytes_per_s == 4.4e9 and again.fresh_allocation_bytes == FRESH_ALLOCATION_BYTES


def test_memory_term_by_hand():
    """memory_time_s: the network memory factor scales the on-chip stream, not the DRAM stream."""
    from chipcal.model.estimate.roofline import memory_time_s

    params = dataclasses.replace(default_params("cpu"), bandwidth_efficiency=0.5, onchip_bandwidth_ratio=4.0,
                                 network_memory_factor=3.0)
    # 100 MB from DRAM at 10 GB/s x 0.5 = 20 ms; 100 MB on chip at 10 x 4 GB/s = 2.5 ms, x 3 = 7.5 ms
    assert memory_time_s(100e6, 100e6, 10e9, params) == pytest.approx(0.020)
    # resident: nothing from DRAM; 100 MB on chip: 7.5 ms (2.5 ms timed alone, factor 1)
    assert memory_time_s(0.0, 100e6, 10e9, params) == pytest.approx(0.0075)
    assert memory_time_s(0.0, 100e6, 10e9, params.alone()) == pytest.approx(0.0025)
