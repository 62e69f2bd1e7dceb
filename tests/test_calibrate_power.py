"""The power phase on the recorded H100 SXM5 (tests/machines/nvidia-h100-sxm5/sustained-power.json):
each recorded trace (NVML power, SM clock and clock-event reasons every 0.1 s) replayed through a
fake NVML on a fake clock, held by measure.sustained with the calibration's sensor, fitted by
calibrate.sustain and flagged per precision; and the refit of the recorded `calibrate --quick` run,
whose power rows are fp32 only.

Hand-worked figures use the file's own summary (second-half medians, tflops_sustained) and the
model's V-f curve from src/chipcal/model/fitted_constants.toml, not the code under test."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import sys
import tomllib
import types
from pathlib import Path

import pytest
from recorded import MACHINES
from test_measure_system import gpu_fp

from chipcal.calibrate.document import CalibrationDocument
from chipcal.calibrate.power_fit import power_section
from chipcal.calibrate.power_records import HoldRow
from chipcal.calibrate.refit import refit_power
from chipcal.measure.device import Device
from chipcal.measure.power import NvmlSource
from chipcal.measure.power_phase import open_sensor
from chipcal.measure.sustained import FULL_LIMITS, hold
from chipcal.model import power
from chipcal.model.registry import load_registry

H100 = MACHINES / "nvidia-h100-sxm5"
RECORDED = json.loads((H100 / "sustained-power.json").read_text())
PHASES = {p["label"]: p for p in RECORDED["phases"]}
HELD = {"fp32": "gemm_fp32_n8192_random", "tf32": "gemm_tf32_n8192_random", "fp16": "gemm_fp16_n8192_random",
        "bf16": "gemm_bf16_n8192_random", "fp8": "gemm_fp8_e4m3_n8192_random"}
IDLE, COPY = PHASES["idle_start"], PHASES["hbm_copy_4GiB"]
N = 8192
BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
SPEC = {"fp32": 66.9e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12}  # dense, datasheet
BOOST_MHZ, TENSOR_SPEC_MHZ, LIMIT_W = 1980.0, 1830.0, 700.0
PJ = 1e-12


def v(mhz: float) -> float:
    """The shipped V-f curve: v0 up to knee x 1980 MHz, then linear to 1 at 1980 MHz."""
    k = tomllib.loads(Path(power.__file__).with_name("fitted_constants.toml").read_text())["values"]
    knee = k["v_knee"] * BOOST_MHZ
    return k["v_floor"] if mhz <= knee else k["v_floor"] + (1 - k["v_floor"]) * (mhz - knee) / (BOOST_MHZ - knee)


# hand-worked from the file: static = idle second-half median; pJ/byte from the 4 GiB copy at 1980 MHz (V = 1)
STATIC_W = IDLE["power_w_second_half_median"]                                     # 126.8 W
J_PER_BYTE = (COPY["power_w_second_half_median"] - STATIC_W) / (COPY["tbps_sustained"] * 1e12)   # 90.5 pJ/byte


def by_hand(p: str) -> float:
    """(P - S V - e_byte B) / (F V^2): the GEMM's operands and result once each, 3 n^2 bytes(p) a call."""
    phase = PHASES[HELD[p]]
    f, clock = phase["tflops_sustained"] * 1e12, phase["sm_clock_mhz_second_half_median"]
    dram = f / (2 * N**3) * 3 * N * N * BYTES[p]
    return (phase["power_w_second_half_median"] - STATIC_W * v(clock) - J_PER_BYTE * dram) / (f * v(clock) ** 2)


class Replay:
    """One recorded phase on a fake clock: NVML reads the sample at the latest t_s <= now, and its
    energy counter integrates those readings."""

    def __init__(self, phase: dict):
        self.trace, self.t = phase["trace"], 0.0
        self.times = [r[0] for r in self.trace]
        self.joules = [0.0]            # energy at each sample's time
        for a, b in zip(self.trace, self.trace[1:], strict=False):
            self.joules.append(self.joules[-1] + a[1] * (b[0] - a[0]))

    def index(self) -> int:
        return max(bisect.bisect_right(self.times, self.t) - 1, 0)

    def row(self) -> list:
        return self.trace[self.index()]

    def energy_j(self) -> float:
        i = self.index()
        return self.joules[i] + self.trace[i][1] * (self.t - self.times[i])


def fake_pynvml(state) -> types.ModuleType:
    """pynvml with one H100 whose readings come from `state.replay` (mW, mJ, MHz, bitmask)."""
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM = 1
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda i: "h100"
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: "h100"
    nv.nvmlDeviceGetPowerUsage = lambda h: int(state.replay.row()[1] * 1e3)
    nv.nvmlDeviceGetTotalEnergyConsumption = lambda h: int(state.replay.energy_j() * 1e3)
    nv.nvmlDeviceGetClockInfo = lambda h, which: int(state.replay.row()[2])
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: int(state.replay.row()[4])
    return nv


def replayed_hold(state, sensor, phase: dict, kind: str, precision: str | None = None):
    """Hold the phase's kernel: a GEMM call takes its FLOP at the phase's sustained rate scaled by
    the trace's clock now over its second-half median; a copy call moves its bytes at the
    sustained rate; an idle call is a 10 ms nap."""
    replay = state.replay = Replay(phase)
    flop, nbytes = phase["flop_per_call"], phase["bytes_per_call"]
    median_mhz = phase["sm_clock_mhz_second_half_median"]

    def run(n: int) -> None:
        for _ in range(n):
            if kind == "gemm":
                replay.t += flop / (phase["tflops_sustained"] * 1e12 * replay.row()[2] / median_mhz)
            elif kind == "stream":
                replay.t += nbytes / (phase["tbps_sustained"] * 1e12)
            else:
                replay.t += 0.01

    dram = 3 * N * N * BYTES[precision] if precision else nbytes
    return hold(run, sensor, kind=kind, label=phase["label"], precision=precision, flop_per_call=flop,
                bytes_per_call=dram, limits=FULL_LIMITS, clock=lambda: replay.t)


@functools.cache
def _replay() -> dict:
    """{name: Hold}: idle, copy and the five precisions, replayed through the fake NVML."""
    state = types.SimpleNamespace(replay=Replay(IDLE))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake_pynvml(state))
        source = NvmlSource(0)
        assert source.available and source.has_counter
        sensor = open_sensor(source, Device("cuda", 0))
        out = {"idle": replayed_hold(state, sensor, IDLE, "idle"), "copy": replayed_hold(state, sensor, COPY, "stream")}
        out.update({p: replayed_hold(state, sensor, PHASES[label], "gemm", p) for p, label in HELD.items()})
    return out


def h100_fp():
    return dataclasses.replace(gpu_fp("NVIDIA H100 80GB HBM3", 132, 81559, LIMIT_W), gpu_max_sm_clock_hz=BOOST_MHZ * 1e6)


def replayed_holds():
    """(the replayed holds as document rows, the power section fitted on them: section, fit, flags)."""
    rows = tuple(HoldRow.of(h) for h in _replay().values())
    return rows, power_section("nvml", True, "", rows, (), load_registry().get("h100-sxm5"), h100_fp(), "fp32")


@pytest.fixture(scope="module")
def holds():
    return _replay()


@pytest.fixture(scope="module")
def fitted():
    return replayed_holds()[1]


@pytest.mark.parametrize("precision", HELD)
def test_the_hold_records_the_traces_sustained_point(holds, precision):
    """Second-half median power within 1 % (the energy counter's average too), clock within 1.5 %,
    throughput within 2 % of the recorded 4-8 s figures; the power cap seen; settled in 5-8 s."""
    h, phase = holds[precision], PHASES[HELD[precision]]
    assert h.settled and 5.0 <= h.duration_s <= 8.1
    assert h.median_power_w == pytest.approx(phase["power_w_second_half_median"], rel=0.01)
    assert h.energy_power_w == pytest.approx(phase["power_w_second_half_median"], rel=0.01)
    assert h.sm_clock_hz / 1e6 == pytest.approx(phase["sm_clock_mhz_second_half_median"], rel=0.015)
    assert h.sustained_flop_per_s / 1e12 == pytest.approx(phase["tflops_sustained"], rel=0.02)
    assert "sw_power_cap" in h.clock_events
    if precision != "fp32":     # the tensor-core traces start at 1980 MHz and fall by 29-36 %
        assert h.burst_flop_per_s > 1.25 * h.sustained_flop_per_s


def test_the_idle_and_copy_holds(holds):
    assert holds["idle"].power_w == pytest.approx(STATIC_W, rel=0.01) and holds["idle"].clock_events == ()
    assert holds["copy"].power_w == pytest.approx(COPY["power_w_second_half_median"], rel=0.01)
    assert holds["copy"].sustained_bytes_per_s == pytest.approx(COPY["tbps_sustained"] * 1e12, rel=1e-3)


def test_the_fit_gives_each_precision_its_own_energy(fitted):
    section, fit, _ = fitted
    assert section.idle_w == pytest.approx(STATIC_W, rel=0.01)
    assert section.j_per_byte / PJ == pytest.approx(J_PER_BYTE / PJ, rel=0.03)
    energies = {e.precision: e for e in section.precisions}
    assert list(energies) == list(HELD)
    for p, e in energies.items():
        assert e.j_per_flop_at_boost / PJ == pytest.approx(by_hand(p) / PJ, rel=0.03), p
        assert e.engine == ("cuda_cores" if p == "fp32" else "tensor_cores") and e.settled
    # bf16: (698.1 - 126.8 x 0.904 - 90.5 pJ x 246.5 GB/s) / (673.3 TFLOP/s x 0.904^2) = 1.02 pJ/FLOP;
    # fp32 on the CUDA cores: (697.2 - 126.5 - 3.4) / (51.63 TFLOP/s x 0.995) = 11.0 pJ/FLOP, ten times more
    assert energies["bf16"].j_per_flop_at_boost / PJ == pytest.approx(1.02, rel=0.03)
    assert energies["fp32"].j_per_flop_at_boost / PJ == pytest.approx(11.0, rel=0.03)
    assert fit.name == "power" and fit.n == 7 and set(fit.parameters) == {
        "static_w", "j_per_byte", *(f"j_per_flop_{p}" for p in HELD)}


def test_each_precision_beside_the_physics_model(fitted):
    """At the spec clock's voltage with its DRAM bytes, each measured energy is within 25 % of the
    physics model's pj_per_flop_at_spec (fitted on the same chip's sustained throughputs)."""
    for e in fitted[0].precisions:
        assert e.physics_j_per_flop_at_spec / e.j_per_flop_at_spec_clock == pytest.approx(1, abs=0.25), e.precision


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16", "fp8"])
def test_spec_beyond_tdp_quotes_the_measured_sustained_point(fitted, precision):
    _, _, flags = fitted
    (flag,) = [f for f in flags if f.code == "spec_beyond_tdp" and f.message.startswith(f"{precision}:")]
    phase = PHASES[HELD[precision]]
    fraction = phase["tflops_sustained"] * 1e12 / SPEC[precision]        # bf16 0.68, fp8 0.63
    assert flag.values["sustained_fraction_of_spec"] == pytest.approx(fraction, rel=0.02)
    assert f"{flag.values['sustained_fraction_of_spec']:.0%} of spec" in flag.message
    assert flag.values["sustained_clock_hz"] / 1e6 == pytest.approx(phase["sm_clock_mhz_second_half_median"], rel=0.015)
    assert flag.values["spec_flop_per_s"] == SPEC[precision] and flag.values["tdp_w"] == LIMIT_W
    # at the 1830 MHz tensor-core spec clock: S V + spec (e V^2 + e_byte x 3 bytes / 2n per FLOP)
    # (bf16: 123.8 + 989.4 x (0.972 + 0.033) = 1118 W)
    need = STATIC_W * v(TENSOR_SPEC_MHZ) + SPEC[precision] * (
        by_hand(precision) * v(TENSOR_SPEC_MHZ) ** 2 + J_PER_BYTE * 3 * BYTES[precision] / (2 * N))
    assert flag.values["power_at_spec_w"] == pytest.approx(need, rel=0.03) and need > LIMIT_W


def test_every_energy_flag_uses_its_own_precision(fitted):
    """measured_energy_exceeds_tdp: the precision's energy at its sustained clock x that precision's
    spec + idle, never one precision's energy x another's spec."""
    _, _, flags = fitted
    energy_flags = {f.message.split(":")[0]: f for f in flags if f.code == "measured_energy_exceeds_tdp"}
    assert set(energy_flags) == set(HELD)
    for p, f in energy_flags.items():
        clock = PHASES[HELD[p]]["sm_clock_mhz_second_half_median"]
        assert f.values["spec_flop_per_s"] == SPEC[p]
        assert f.values["j_per_flop"] / PJ == pytest.approx(by_hand(p) * v(clock) ** 2 / PJ, rel=0.03)
        assert f.values["needed_w"] == pytest.approx(f.values["j_per_flop"] * SPEC[p] + STATIC_W, rel=0.01)


def test_the_recorded_quick_run_refits_to_an_fp32_energy_only():
    """calibrate --quick of 2026-11-26 (code of bfd8feb) recorded an fp32 power curve and fitted one
    10.8 pJ/FLOP over its sizes (with 389 W 'static' in its sustain fit). Refitted: static = its idle
    row, pJ/byte from its triad row, fp32 from its eight sustained 8192^3 windows (sizes left out)."""
    raw = json.loads((H100 / "calibration-quick.json").read_text())
    rows = raw["observations"]["power"]
    (idle,) = [r["avg_power_w"] for r in rows if r["kind"] == "idle"]            # 139.8 W
    (triad,) = [r for r in rows if r["kind"] == "bandwidth"]                     # no clock samples: V = 1
    e_byte = (triad["avg_power_w"] - idle) / triad["bytes_per_s"]                # 129 pJ/byte
    windows = [r for r in rows if r["kind"] == "sustained"]
    x, y = [], []
    for r in windows:
        clocks = sorted(r["sm_clock_hz"])
        mhz = (clocks[len(clocks) // 2 - 1] + clocks[len(clocks) // 2]) / 2e6     # 20 samples: the median
        x.append(r["flop_per_s"] * v(mhz) ** 2)
        y.append(r["avg_power_w"] - idle * v(mhz) - e_byte * r["bytes_per_s"])
    e_fp32 = sum(a * b for a, b in zip(x, y, strict=True)) / sum(a * a for a in x)     # 11.2 pJ/FLOP

    doc = CalibrationDocument.from_dict(raw)
    section, fit, flags = refit_power(doc, load_registry().get("h100-sxm5"))
    (e,) = section.precisions
    assert e.precision == "fp32" and e.source == "sustained windows" and e.settled is None
    assert section.idle_w == idle and section.j_per_byte / PJ == pytest.approx(e_byte / PJ, rel=0.01)
    assert e.j_per_flop_at_boost / PJ == pytest.approx(e_fp32 / PJ, rel=0.01)
    assert e.j_per_flop_at_boost / PJ == pytest.approx(11.2, rel=0.02)
    assert {f.code for f in flags} == {"spec_beyond_tdp", "measured_energy_exceeds_tdp"}
    for f in flags:
        assert f.message.startswith("fp32:") and f.values["spec_flop_per_s"] == SPEC["fp32"]
        assert not any(p in f.message for p in ("tf32", "fp16", "bf16", "fp8", "int8"))
    assert fit.parameters.keys() == {"static_w", "j_per_byte", "j_per_flop_fp32"}


def test_without_a_sensor_there_is_no_fit():
    section, fit, flags = power_section("unavailable", False, "RAPL: no powercap", (), (),
                                        load_registry().get("h100-sxm5"), h100_fp(), "fp32")
    assert not section.available and section.precisions == () and fit is None and flags == []
