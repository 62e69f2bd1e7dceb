"""The calibration's power section on a fake NVML GPU: the sustain fit is wired to the power
curve, reports the measured sustained clock and flags spec_beyond_tdp with the figures."""

from __future__ import annotations

import dataclasses

import pytest
from test_measure_system import gpu_fp

from chipcal.calibrate.power_fit import power_section
from chipcal.measure import power
from chipcal.model.registry import load_registry

STATIC_W, J_PER_FLOP = 100.0, 1.0e-12       # the fake board: P = 100 W + 1 pJ/FLOP × FLOP/s at boost voltage
BOOST_HZ = 1.98e9


class FakeNvml(power.PowerSource):
    name = "nvml"

    def __init__(self):
        super().__init__(available=True, reason="")


def rows():
    """Power-curve rows of the fake board, every window at the boost clock (V = 1)."""
    out = [{"kind": "idle", "label": "sleep", "avg_power_w": STATIC_W, "peak_power_w": None, "flop_per_s": 0.0,
            "bytes_per_s": 0.0, "duration_s": 2.0, "n_samples": 20, "warnings": [], "sm_clock_hz": []}]
    for kind, tflops in (("gemm", 100), ("gemm", 300), ("gemm", 500), ("sustained", 550), ("sustained", 550)):
        f = tflops * 1e12
        out.append({"kind": kind, "label": kind, "avg_power_w": STATIC_W + J_PER_FLOP * f, "peak_power_w": None,
                    "flop_per_s": f, "bytes_per_s": 1e11, "duration_s": 2.0, "n_samples": 20, "warnings": [],
                    "sm_clock_hz": [BOOST_HZ] * 20})
    return out


def test_power_section_fits_the_board_and_flags_the_spec():
    chip = load_registry().get("h100-sxm5")
    fp = dataclasses.replace(gpu_fp("NVIDIA H100 80GB HBM3", 132, 81559, 700), gpu_max_sm_clock_hz=BOOST_HZ)
    doc, fit, flags = power_section(FakeNvml(), rows(), chip, fp, "bf16")
    sustain = doc.sustain
    assert sustain.j_per_flop_at_boost == pytest.approx(J_PER_FLOP, rel=1e-6)
    assert sustain.static_w == pytest.approx(STATIC_W, rel=1e-6)
    assert sustain.sustained_clock_hz == BOOST_HZ and sustain.clock_fraction == pytest.approx(1.0)
    # H100 SXM5 bf16 dense spec 989.4 TFLOP/s (datasheet) at 1.83 GHz, below boost: V(1.83 GHz) <= 1,
    # so the need is at most 100 + 989.4 = 1089 W; at least the static 100 W + the dynamic power
    # at the lowest voltage the model allows. Either way above the 700 W limit for this board
    (flag,) = [f for f in flags if f.code == "spec_beyond_tdp"]
    assert STATIC_W < flag.values["power_at_spec_w"] <= STATIC_W + 989.4 + 1e-6
    assert flag.values["power_at_spec_w"] > 700 and flag.values["tdp_w"] == 700
    assert fit.parameters["idle_w"] == pytest.approx(STATIC_W, rel=0.05)


def test_cpu_power_rows_without_clock_samples_give_no_sustain_fit():
    cpu_rows = [{**r, "sm_clock_hz": []} for r in rows()]
    chip = load_registry().get("h100-sxm5")
    doc, _, flags = power_section(FakeNvml(), cpu_rows, chip, gpu_fp("x", 132, 81559, 700), "bf16")
    assert doc.sustain is None and not [f for f in flags if f.code == "spec_beyond_tdp"]
