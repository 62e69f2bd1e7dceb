"""Model measurement: delivered FLOP/s from the workload counter's 2-per-MAC FLOP, precision, power."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from chipcal.measure.models import UnsupportedPrecision, measure_model, measure_module
from chipcal.measure.power import UnavailableSource
from chipcal.model.errors import OutOfMemory
from chipcal.model.workload import characterize


def test_delivered_flop_per_s_uses_two_flop_per_mac():
    torch.manual_seed(0)
    layer = nn.Linear(256, 128, bias=False)
    x = torch.randn(4, 256)
    # by hand: 4 rows × 256 inputs × 128 outputs = 131072 MACs = 262144 FLOP
    m = measure_module(layer, x, 2 * 4 * 256 * 128, name="linear", batch=4, max_time_s=0.1, min_samples=3)
    assert m.flop == 262144
    assert m.delivered_flop_per_s == pytest.approx(262144 / m.latency.median_s)
    assert m.power is None and m.power_source == "unavailable"


def test_workload_counter_agrees_with_hand_count():
    w = characterize(nn.Sequential(nn.Linear(256, 128, bias=False)), (torch.randn(4, 256),))
    assert w.macs == 4 * 256 * 128 and w.flop == 2 * w.macs


class NoBf16(nn.Module):
    def forward(self, x):
        if x.dtype == torch.bfloat16:
            raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'BFloat16'")
        return x * 2


def test_unsupported_precision_is_reported():
    with pytest.raises(UnsupportedPrecision, match="unsupported: tiny at bf16 on cpu"):
        measure_module(NoBf16(), torch.randn(2, 2), 4, name="tiny", batch=2, precision="bf16")


def test_bf16_runs_in_bf16():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(8, 8))

        def forward(self, x):
            seen.append((x.dtype, self.w.dtype, torch.is_inference_mode_enabled()))
            return x @ self.w

    measure_module(Probe(), torch.randn(2, 8), 2 * 2 * 8 * 8, name="probe", batch=2, precision="bf16",
                   max_time_s=0.05, min_samples=2)
    assert seen and all(s == (torch.bfloat16, torch.bfloat16, True) for s in seen)


def test_unavailable_power_source_reason_is_kept():
    m = measure_module(nn.Linear(8, 8), torch.randn(2, 8), 256, name="l", batch=2, max_time_s=0.05, min_samples=2,
                       power=UnavailableSource("RAPL: no powercap"))
    assert m.power is None and m.power_source == "unavailable" and m.power_note == "RAPL: no powercap"
    assert m.energy_j is None and m.avg_power_w is None


@pytest.mark.slow
def test_measure_model_resnet18_end_to_end():
    m = measure_model("resnet18", batch=1, max_time_s=1.0, min_samples=3)
    # torchvision: resnet18 is 1.81 "GFLOPS" (= GMACs) at 224×224 -> 3.6 GFLOP
    assert m.flop == pytest.approx(3.64e9, rel=0.02)
    assert m.delivered_flop_per_s == pytest.approx(m.flop / m.latency.median_s)


class _Exhausts(nn.Module):
    """A module whose forward pass fails the way CUDA's caching allocator does when memory runs out."""

    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_out_of_memory_is_not_reported_as_unsupported_precision():
    with pytest.raises(OutOfMemory, match="out of memory: big at batch 64 .*smaller --batch") as info:
        measure_module(_Exhausts(), torch.ones(2, 2), 8, name="big", batch=64, precision="fp32")
    assert not isinstance(info.value, UnsupportedPrecision)


def test_input_larger_than_the_address_space_is_out_of_memory():
    # 1e12 images of 3x224x224 fp32 = 6e17 bytes, beyond any 48-bit address space: the CPU
    # allocator refuses at once (no pages are touched, whatever the overcommit policy).
    with pytest.raises(OutOfMemory, match="resnet18 at batch 1000000000000"):
        measure_model("resnet18", batch=10**12, flop=1)


def test_a_compiled_module_is_timed_compiled_with_its_compile_time_apart():
    """`runtime="compiled"` times torch.compile of the module (the default mode on a CPU): a Linear
    with bias lowers to one extern addmm, so no C++ is compiled; the first call's time is kept as
    compile_s, not as a sample; under autocast the row says so."""
    torch.manual_seed(0)
    layer, x = nn.Linear(64, 32), torch.randn(4, 64)
    m = measure_module(layer, x, 2 * 4 * 64 * 32, name="linear", batch=4, max_time_s=0.05, min_samples=3,
                       runtime="compiled")
    assert (m.runtime, m.compile_mode, m.autocast) == ("compiled", "default", False)
    assert m.compile_s > 0 and m.latency.n >= 3
    eager = measure_module(layer, x, 1, name="linear", batch=4, max_time_s=0.05, min_samples=3, autocast=True)
    assert (eager.runtime, eager.compile_s, eager.autocast) == ("eager", None, True)
    with pytest.raises(ValueError, match="hooks would split a compiled graph"):
        measure_module(layer, x, 1, name="linear", batch=4, runtime="compiled", by_layer=True)
