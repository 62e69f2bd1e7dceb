"""NVML paths against a fake pynvml module: the power source and the GPU fingerprint."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest
import torch
from torch import nn

from chipcal.measure import system
from chipcal.measure.device import Device
from chipcal.measure.models import measure_module
from chipcal.measure.power import NvmlSource, UnavailableSource, open_power_source

pytestmark = pytest.mark.timing          # the fake sensor's windows are real seconds


class NVMLError(Exception):
    pass


def fake_pynvml(*, counter: bool = True, idle_w: float = 60.0) -> types.ModuleType:
    """A pynvml stand-in: one H100-like GPU whose power the test sets; energy integrates it."""
    nv = types.ModuleType("pynvml")
    state = {"power_w": idle_w, "energy_mj": 0.0, "t": time.monotonic()}
    lock = threading.Lock()

    def advance():
        now = time.monotonic()
        state["energy_mj"] += state["power_w"] * (now - state["t"]) * 1e3
        state["t"] = now

    def set_power(watts: float) -> None:
        with lock:
            advance()
            state["power_w"] = watts

    def energy(handle):
        if not counter:
            raise NVMLError("Not Supported")
        with lock:
            advance()
            return int(state["energy_mj"])

    def power_mw(handle):
        with lock:
            return int(state["power_w"] * 1e3)

    nv.NVMLError = NVMLError
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 1, 2
    nv.set_power = set_power
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: "handle0"
    nv.nvmlDeviceGetTotalEnergyConsumption = energy
    nv.nvmlDeviceGetPowerUsage = power_mw
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=81559 * 2**20)
    nv.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    nv.nvmlSystemGetCudaDriverVersion = lambda: 12040
    nv.nvmlDeviceGetClockInfo = lambda h, c: {1: 1980, 2: 2619}[c]
    nv.nvmlDeviceGetMaxClockInfo = lambda h, c: 1980
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700000
    nv.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: 700000
    # nvml.h nvmlPciInfo_t.pciDeviceId: device ID in the upper 16 bits, vendor in the lower (H100 SXM5)
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(pciDeviceId=0x233010DE)
    return nv


def busy_at(nv, watts: float, seconds: float):
    def run():
        nv.set_power(watts)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        nv.set_power(60.0)

    return run


def test_energy_counter_deltas_idle_and_repetition(monkeypatch):
    nv = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    src = NvmlSource(0, sample_period_s=0.02)
    assert src.available and src.has_counter
    reading = src.measure(busy_at(nv, 300.0, 0.005), min_window_s=0.3, idle_s=0.2, call_time_s=0.005)
    # extended by repetition to max(0.3 s asked, 10 × 0.1 s counter update) = 1 s: 1 s / 5 ms = 200 calls
    assert reading.repetitions == 200
    assert reading.idle_w == pytest.approx(60.0, rel=0.02)
    assert reading.avg_power_w == pytest.approx(300.0, rel=0.05)
    # per call: 300 W (240 W above idle) over the wall time a call took; a loaded host can stretch
    # the 5 ms busy-wait, so the call time is the window's, not the nominal 5 ms
    call_s = reading.duration_s / reading.repetitions
    assert call_s >= 0.005
    assert reading.energy_per_call_j == pytest.approx(300.0 * call_s, rel=0.10)
    assert reading.dynamic_energy_per_call_j == pytest.approx(240.0 * call_s, rel=0.12)
    assert 60.0 <= reading.peak_power_w <= 300.0
    assert reading.n_samples >= 2 and reading.source == "nvml"
    assert "nvmlDeviceGetTotalEnergyConsumption" in reading.method


def test_a_slow_first_call_does_not_shorten_the_window(monkeypatch):
    """On an H100 the first `a @ a` (cuBLAS handle creation) took ~40x a steady call: timed as the
    call time, it left a window of one 3 ms call (27 ms, counter not advanced). The window must
    still reach max(min_window_s, 10 x the 0.1 s counter update) = 1 s."""
    nv = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    src = NvmlSource(0, sample_period_s=0.02)
    steady = busy_at(nv, 300.0, 0.005)
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.4)        # one-off cost of the first call
        steady()

    reading = src.measure(fn, min_window_s=0.3, idle_s=0.0)
    assert reading.duration_s >= 1.0
    assert reading.energy_j > 0 and not any("shorter" in n for n in reading.warnings)
    # steady calls filled the window, not the one slow call: at 5 ms each ~200 on a quiet host, and
    # a loaded one oversleeps them 2-3x; one call would leave 1
    assert reading.repetitions >= 20


def test_without_energy_counter_integrates_power_and_says_so(monkeypatch):
    nv = fake_pynvml(counter=False)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    src = NvmlSource(0, sample_period_s=0.01)
    assert src.available and not src.has_counter
    assert src.min_window_s >= 5.0 and src.update_period_s == 1.0
    src.update_period_s = 0.01   # keep the test short; the real 1 s period asks for >= 10 s windows
    nv.set_power(200.0)
    with src.window() as w:
        time.sleep(0.3)
    nv.set_power(60.0)
    assert w.reading.avg_power_w == pytest.approx(200.0, rel=0.1)
    assert any("integrated" in n for n in w.reading.warnings)


def test_short_window_is_flagged(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    src = NvmlSource(0, sample_period_s=1.0)
    with src.window() as w:
        pass
    assert any("shorter than 2 sensor update periods" in n for n in w.reading.warnings)


def test_nvml_init_failure_gives_reason(monkeypatch):
    nv = fake_pynvml()

    def fail():
        raise NVMLError("Driver Not Loaded")

    nv.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    src = NvmlSource(0)
    assert not src.available and "Driver Not Loaded" in src.reason


def test_open_power_source_cuda_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    src = open_power_source(Device("cuda"))
    assert isinstance(src, UnavailableSource) and "no CUDA device" in src.reason


def fake_cuda(monkeypatch):
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132,
                                  total_memory=81559 * 2**20, major=9, minor=0, uuid="1234-abcd")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


def test_open_power_source_cuda_with_fake_nvml(monkeypatch):
    fake_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    src = open_power_source(Device("cuda", 0))
    assert src.available and src.name == "nvml"


def test_gpu_fingerprint_fields(monkeypatch):
    fake_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    fp = system.fingerprint()
    assert fp.gpu_name == "NVIDIA H100 80GB HBM3"      # NVML bytes decoded
    assert fp.gpu_sm_count == 132 and fp.gpu_compute_capability == "9.0"
    assert fp.gpu_memory_bytes == 81559 * 2**20
    assert fp.gpu_sm_clock_hz == 1980e6 and fp.gpu_mem_clock_hz == 2619e6
    assert fp.gpu_power_limit_w == 700.0 and fp.gpu_default_power_limit_w == 700.0
    assert fp.driver_version == "550.54.15" and fp.cuda_driver_version == "12.4"
    assert fp.gpu_pci_device_id == "10de:2330"
    assert "nvidia-h100" in fp.slug
    assert fp.cache_key(Device("cuda"))["gpu_power_limit_w"] == 700.0


def test_gpu_fingerprint_survives_unsupported_queries(monkeypatch):
    fake_cuda(monkeypatch)
    nv = fake_pynvml()

    def unsupported(*a):
        raise NVMLError("Not Supported")

    nv.nvmlDeviceGetPowerManagementDefaultLimit = unsupported
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    fp = system.fingerprint()
    assert fp.gpu_default_power_limit_w is None and fp.gpu_power_limit_w == 700.0
    assert any("Not Supported" in n for n in fp.notes)


def test_energy_per_forward_pass_with_fake_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(idle_w=50.0))
    src = NvmlSource(0, sample_period_s=0.05)
    m = measure_module(nn.Linear(64, 64), torch.randn(4, 64), 2 * 4 * 64 * 64, name="l", batch=4,
                       max_time_s=0.05, min_samples=2, power=src)
    # the fake GPU draws 50 W throughout: energy per pass = 50 W × window / repetitions
    r = m.power
    assert m.power_source == "nvml"
    assert m.avg_power_w == pytest.approx(50.0, rel=0.05)
    assert m.energy_j == pytest.approx(50.0 * r.duration_s / r.repetitions, rel=0.05)
    assert m.energy_per_sample_j == pytest.approx(m.energy_j / 4)


@pytest.mark.gpu
def test_real_nvml_power_source():
    src = open_power_source(Device("cuda"))
    assert src.available, src.reason
    a = torch.randn(4096, 4096, device="cuda")
    reading = src.measure(lambda: a @ a, min_window_s=1.0, idle_s=0.5)
    assert reading.energy_j > 0 and reading.avg_power_w > reading.idle_w * 0.5
