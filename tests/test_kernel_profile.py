"""Each kernel's own time in a pass (measure.kernel_profile, `measure_model_efficiency --profile`):
the per-pass arithmetic by hand on made-up profiler events, a real profile of a known module on the
CPU, and the CLI's records and refusals."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from chipcal.measure.device import CPU
from chipcal.measure.kernel_profile import profile_passes, summarize

HERE = Path(__file__)


def factory(batch: int = 1):
    """Two Linear layers and a ReLU between them: per pass, two aten::addmm calls and one aten::relu."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    return net, torch.randn(batch, 64)


def event(key: str, count: int, device: DeviceType, cpu_us: float, device_us: float):
    return SimpleNamespace(key=key, count=count, device_type=device, self_cpu_time_total=cpu_us,
                           self_device_time_total=device_us)


EVENTS = [event("aten::mm", 8, DeviceType.CPU, 40.0, 600.0),            # device time of the kernel it launched
          event("sm90_xmma_gemm_bf16", 8, DeviceType.CUDA, 0.0, 600.0),
          event("triton_poi_fused_add_0", 4, DeviceType.CUDA, 0.0, 100.0),
          event("cudaLaunchKernel", 12, DeviceType.CPU, 30.0, 0.0)]


def test_a_gpu_profile_counts_the_kernels_once_per_pass():
    """4 passes: the GEMM 8 calls / 600 µs -> 2 a pass, 150 µs; the Triton kernel 25 µs; the CPU op's
    device time (its kernel's) and the launches are not counted again."""
    p = summarize(EVENTS, "cuda", passes=4)
    assert [(k.name, k.calls, k.self_s) for k in p.kernels] == [
        ("sm90_xmma_gemm_bf16", 2.0, pytest.approx(150e-6)), ("triton_poi_fused_add_0", 1.0, pytest.approx(25e-6))]
    assert p.total_s == pytest.approx(175e-6)


def test_a_cpu_profile_counts_each_operators_own_cpu_time():
    p = summarize(EVENTS, "cpu", passes=4)
    assert [(k.name, k.self_s) for k in p.kernels] == [("aten::mm", pytest.approx(10e-6)),
                                                      ("cudaLaunchKernel", pytest.approx(7.5e-6))]


def test_a_real_profile_of_a_known_module():
    net, x = factory(8)
    with torch.inference_mode():
        p = profile_passes(lambda: net(x), CPU, passes=3)
    calls = {k.name: k.calls for k in p.kernels}
    assert (p.clock, p.passes, calls["aten::addmm"], calls["aten::relu"]) == ("cpu", 3, 2.0, 1.0)
    assert [k.self_s for k in p.kernels] == sorted((k.self_s for k in p.kernels), reverse=True)


def test_measure_model_efficiency_profile_prints_a_record_per_kernel(cli, tmp_path, monkeypatch):
    from chipcal.cli import measure_model_efficiency as mme

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    spec = f"{HERE}:factory"
    rc, out, err = cli(lambda a: mme.main(a), ["--model", spec, "--profile", "--max-time", "0.3", "--no-power",
                                               "--peak", "spec", "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    addmm = next(r for r in rows if r["kernel"] == "aten::addmm")
    assert addmm["calls_per_pass"] == 2.0 and addmm["passes"] == 5 and addmm["clock"] == "cpu"
    assert sum(r["share_of_kernels"] for r in rows) == pytest.approx(1.0)
    assert {(r["model"], r["runtime"]) for r in rows} == {(spec, "eager")}


@pytest.mark.parametrize("argv", [["--model", "gpt2", "--profile"],
                                  ["--model", "resnet18", "--profile", "--by-layer"]])
def test_profile_refuses_an_llm_and_by_layer_in_one_line(cli, argv):
    from chipcal.cli import measure_model_efficiency as mme

    rc, _, err = cli(lambda a: mme.main(a), [*argv, "--no-power", "--peak", "spec"])
    assert rc == 2 and "--profile" in err and len(err.strip().splitlines()) == 1
