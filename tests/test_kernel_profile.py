"""Each kernel's own time in a pass (measure.kernel_profile, `measure_model_efficiency --profile`):
the per-pass and per-token arithmetic by hand on made-up profiler events, real profiles of a known
module and of a tiny Llama's step and generate on the CPU, and the CLI's records and refusals."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from chipcal.measure.device import CPU
from chipcal.measure.kernel_profile import (
    KernelProfile,
    KernelTime,
    per_unit,
    profile_passes,
    summarize,
)

HERE = Path(__file__)
TINY_LINEARS = 7 * 2 + 1    # tiny_llm.TINY: q, k, v, o, gate, up, down in each of 2 layers, and the head


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


def test_one_output_token_is_the_long_call_less_the_short_over_the_tokens_between():
    """A 6-token call runs the prompt's forward and 5 decode forwards: 90 mm calls in 4.0 ms. The
    1-token call runs the prompt's forward alone: 15 mm in 1.0 ms, and an attention kernel that the
    long call ran faster (0.3 against 0.4 ms). Per token: (90 - 15) / 5 = 15 mm calls in
    (4.0 - 1.0) / 5 = 0.6 ms; the attention is left out (0.3 - 0.4 < 0); the cat, which only the
    long call runs, counts whole: 10 / 5 = 2 calls, 0.5 / 5 = 0.1 ms."""
    whole = KernelProfile("cpu", 2, (KernelTime("aten::mm", 90, 4.0e-3), KernelTime("attention", 1, 0.3e-3),
                                     KernelTime("aten::cat", 10, 0.5e-3)))
    part = KernelProfile("cpu", 2, (KernelTime("aten::mm", 15, 1.0e-3), KernelTime("attention", 1, 0.4e-3)))
    token = per_unit(whole, part, 5)
    assert [(k.name, k.calls, k.self_s) for k in token.kernels] == [
        ("aten::mm", 15.0, pytest.approx(0.6e-3)), ("aten::cat", 2.0, pytest.approx(0.1e-3))]
    assert token.clock == "cpu" and token.passes == 2
    with pytest.raises(ValueError, match="different clocks"):
        per_unit(whole, KernelProfile("cuda", 2, ()), 5)


@pytest.fixture
def tiny_llm_config():
    pytest.importorskip("transformers")
    from tiny_llm import TINY

    from chipcal.model.workload.llm_config import parse_config

    return parse_config(TINY, "tiny", "test")


def test_a_decode_step_and_a_generated_token_run_the_same_linear_layers(tiny_llm_config):
    """The tiny Llama's step and one output token of generate each run 15 aten::mm (the config's
    linear layers, by hand above): the step's profile counts a step, generate's a token (from calls
    of 8 tokens, kernel_profile.GENERATE_PROFILE_TOKENS, for a timing of 12)."""
    from chipcal.measure.llm import measure_generate, measure_llm

    step = measure_llm(tiny_llm_config, "decode", 1, 16, 6, 1, max_time_s=0.3, min_samples=3, profile=True)
    token = measure_generate(tiny_llm_config, 1, 16, 12, 1, max_time_s=0.5, profile=True).step   # 8 tokens profiled
    assert step.profile_note is None and token.profile_note is None
    for m in (step, token):
        assert {k.name: k.calls for k in m.kernels.kernels}["aten::mm"] == TINY_LINEARS
    assert (step.kernels.clock, step.kernels.passes, token.kernels.passes) == ("cpu", 5, 2)


@pytest.mark.parametrize("argv", [["--model", "gpt2", "--profile", "--scenario", "offline"],
                                  ["--model", "resnet18", "--profile", "--by-layer"]])
def test_profile_refuses_serving_and_by_layer_in_one_line(cli, argv):
    from chipcal.cli import measure_model_efficiency as mme

    rc, _, err = cli(lambda a: mme.main(a), [*argv, "--no-power", "--peak", "spec"])
    assert rc == 2 and "--profile" in err and len(err.strip().splitlines()) == 1


def test_measure_model_efficiency_profiles_one_generated_token(cli, tmp_path, monkeypatch):
    """--generate --profile: one record per kernel of an output token, with the LLM's phase and lengths."""
    pytest.importorskip("transformers")
    from tiny_llm import write_config

    from chipcal.cli import measure_model_efficiency as mme

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    rc, out, err = cli(lambda a: mme.main(a), ["--model", write_config(tmp_path), "--generate", "--profile",
                                               "--context", "16", "--new-tokens", "6", "--max-time", "0.5",
                                               "--no-power", "--peak", "spec", "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    mm = next(r for r in rows if r["kernel"] == "aten::mm")
    assert mm["calls_per_pass"] == TINY_LINEARS and mm["passes"] == 2
    assert {(r["runtime"], r["phase"], r["context"], r["new_tokens"]) for r in rows} == {("generate", "decode", 16, 6)}


@pytest.mark.gpu
def test_a_gpu_profile_agrees_with_cuda_events():
    """Two 4096² bf16 GEMMs a pass, device-bound: the profiler's kernel time per pass (CUPTI) and the
    CUDA-event timing of the same pass (measure.timing) are two instruments of one busy device; the
    kernels, at least one a GEMM, cover 80-110 % of the pass."""
    from chipcal.measure.device import Device
    from chipcal.measure.timing import time_callable

    cuda = Device("cuda")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def two():
        return a @ a, a @ a

    p = profile_passes(two, cuda)
    timed = time_callable(two, device=cuda, max_time_s=1.0)
    assert p.clock == "cuda" and sum(k.calls for k in p.kernels) >= 2
    assert 0.8 <= p.total_s / timed.median_s <= 1.1, (p.total_s, timed.median_s)


@pytest.mark.gpu
def test_a_tiny_decoder_on_a_gpu_leaves_the_device_mostly_idle(tiny_llm_config):
    """The tiny Llama (2 layers, hidden 64) issues ~200 operators a token, each a few-µs kernel at
    most: generate on a GPU is host-bound, so the device's busy time per token (the profile's
    kernels) is under half the token's time. Issue 55's H100 gap read this way says whose it is."""
    from chipcal.measure.device import Device
    from chipcal.measure.llm import measure_generate

    token = measure_generate(tiny_llm_config, 1, 16, 12, 1, "bf16", Device("cuda"), max_time_s=1.0,
                             profile=True).step
    assert token.profile_note is None and token.kernels.clock == "cuda"
    assert 0 < token.kernels.total_s < 0.5 * token.latency.median_s
