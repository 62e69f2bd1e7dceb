"""Estimators: hand-worked roofline cases, liveness, concurrency, energy, the seeds' validations."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_mapping import (
    chip,
    custom_params,
    elementwise_subgraph,
    gemm_subgraph,
    mlp,
    workload,
)

from chipcal.calibrate.document import SCHEMA as CALIBRATION_SCHEMA
from chipcal.calibrate.store import load_calibration
from chipcal.model import power, tdp, technology
from chipcal.model.estimate.memory import memory_profile
from chipcal.model.estimate.opportunities import opportunities, top_consumers, unfused
from chipcal.model.estimate.prediction import predict
from chipcal.model.estimate.roofline import estimate_subgraph
from chipcal.model.estimate.schedule import stage_time
from chipcal.model.mapping import default_params, map_subgraph
from chipcal.model.workload.types import GemmShape, Op, Parallelism, Subgraph, TensorSpec

# H100 SXM5 (registry): CUDA cores 16,896 × 1 fp32 MAC/clk × 1.98 GHz; tensor cores 528 × 512 fp16
# MAC/clk × 1.83 GHz; HBM3 3.35 TB/s; L2 50 MiB.
H100_FP32_CUDA = 2 * 16_896 * 1.98e9      # 66.9 TFLOP/s
H100_FP16_TENSOR = 2 * 528 * 512 * 1.83e9  # 989.4 TFLOP/s
H100_BW = 3.35e12


def test_memory_bound_elementwise_latency_is_bytes_over_bandwidth_plus_overhead():
    h100 = chip("h100-sxm5")
    params = custom_params("gpu", efficiency=0.5, overhead_s=2e-6, bw=1.0)
    n = 2**26  # c = a + b over 67,108,864 fp32 elements, nothing on chip yet (no producer)
    sg = elementwise_subgraph(0, n, inputs=2)
    e = estimate_subgraph(sg, h100, "fp32", params)
    # bytes: read 2 × 4n, write 4n = 12 × 2^26 = 805,306,368 B (> 50 MiB L2: all DRAM)
    assert e.dram_bytes == 805_306_368
    assert e.memory_time_s == pytest.approx(805_306_368 / H100_BW)           # 240.4 us
    # compute: n FLOP on the CUDA cores at 50%: 2^26 / (66.9e12 × 0.5) = 2.0 us, far below
    assert e.compute_time_s == pytest.approx(n / (H100_FP32_CUDA * 0.5))
    # a GPU's per-class 2 us is the host's cost of issuing the op (eager), not the device's
    assert e.latency_s == pytest.approx(805_306_368 / H100_BW) and e.host_issue_s == 2e-6
    assert e.bottleneck == "memory"
    # seed 000: every SM has threads (262,144 blocks in 249 waves; the last has 256 blocks ≥ 132
    # SMs), yet the FLOP rate is a sliver of the peak: 2^26 FLOP / 240.4 us = 0.28 TFLOP/s,
    # 0.4% of 66.9: utilization ≠ efficiency
    assert e.utilization == 1.0
    assert e.compute_efficiency == pytest.approx(n / (805_306_368 / H100_BW) / H100_FP32_CUDA)
    assert e.compute_efficiency < 0.005


def test_cache_resident_elementwise_pays_onchip_bandwidth():
    h100 = chip("h100-sxm5")
    params = custom_params("gpu", efficiency=0.5, overhead_s=2e-6, bw=1.0, onchip=3.0)
    n = 2**20  # c = a + b on 1,048,576 fp32 elements produced by an earlier kernel: 12 MiB < 50 MiB L2
    sg = elementwise_subgraph(1, n, deps=(0,), inputs=2)
    e = estimate_subgraph(sg, h100, "fp32", params)
    assert e.dram_bytes == 0 and e.onchip_bytes == 12 * n
    # on-chip time = 12,582,912 B / (3.35 TB/s × 3) = 1.252 us, not zero
    assert e.memory_time_s == pytest.approx(12 * n / (H100_BW * 3.0))
    assert e.latency_s == pytest.approx(max(12 * n / (H100_BW * 3.0), n / (H100_FP32_CUDA * 0.5)))


def test_large_gemm_latency_is_flop_over_peak_times_efficiency():
    h100 = chip("h100-sxm5")
    params = custom_params("gpu", efficiency=0.8, overhead_s=2e-6, half=0.0, bw=1.0)
    # M = 128 × 132, N = 1024, K = 4096: 132 × 8 = 1056 tiles of 128 × 128 = 8 full waves, no padding
    sg = gemm_subgraph(0, 16_896, 1024, 4096)
    e = estimate_subgraph(sg, h100, "fp16", params)
    flop = 2 * 16_896 * 1024 * 4096                     # 141,733,920,768
    assert e.flop == flop
    assert (e.utilization, e.lane_fill, e.engine) == (1.0, 1.0, "tensor_cores")
    # fp16 bytes: A 16,896·4096·2 + B 4096·1024·2 + C 16,896·1024·2 = 181,403,648 B → 54 us < 179 us
    assert e.dram_bytes == 181_403_648
    assert e.compute_time_s == pytest.approx(flop / (H100_FP16_TENSOR * 0.8))   # 179.1 us
    assert e.latency_s == pytest.approx(flop / (H100_FP16_TENSOR * 0.8))   # the 2 us is the host's
    assert e.bottleneck == "compute"


def test_wave_quantization_doubles_a_grid_just_over_one_wave():
    h100 = chip("h100-sxm5")
    params = custom_params("gpu", efficiency=0.5, overhead_s=0.0, bw=1.0)
    # 10,000 FLOP per output makes the kernel compute-bound. One wave = 132 SMs × 8 blocks × 256.
    full = estimate_subgraph(elementwise_subgraph(0, 270_336, flop_per_element=10_000), h100, "fp32", params)
    over = estimate_subgraph(elementwise_subgraph(0, 270_337, flop_per_element=10_000), h100, "fp32", params)
    assert full.compute_time_s == pytest.approx(270_336 * 10_000 / (H100_FP32_CUDA * 0.5))
    # one extra thread: 2 waves (utilization 133/264) and a 256-thread block holding 1 thread
    # (fill 270,337 / 270,592): time ratio = (270,337/270,336) · (264/133) · (270,592/270,337)
    assert over.compute_time_s / full.compute_time_s == pytest.approx((264 / 133) * (270_592 / 270_336))
    assert over.waves == 2 and full.waves == 1


def diamond():
    """s0 → (s1, s2) → s3; fp32 bytes chosen for a hand walk."""
    sgs = [
        dataclasses.replace(elementwise_subgraph(0, 100, weight_bytes=1000), input_bytes=100, output_bytes=400),
        dataclasses.replace(elementwise_subgraph(1, 50, deps=(0,)), output_bytes=200),
        dataclasses.replace(elementwise_subgraph(2, 75, deps=(0,)), output_bytes=300),
        dataclasses.replace(elementwise_subgraph(3, 12, deps=(1, 2), weight_bytes=500), output_bytes=50),
    ]
    return workload(sgs, stages=[(0,), (1, 2), (3,)])


def test_peak_memory_of_a_hand_built_graph():
    m = memory_profile(diamond(), 1.0)
    # weights 1000 + 500 = 1500 resident throughout.
    # after s0: input 100 (s0 is the only reader) + out0 400            → 1500 + 500 = 2000
    # after s1: out0 400 + out1 200 (out0 still needed by s2)           → 1500 + 600 = 2100
    # after s2: out0 400 + out1 200 + out2 300; then out0 is freed      → 1500 + 900 = 2400
    # after s3: out1 200 + out2 300 + out3 50; then out1, out2 freed    → 1500 + 550 = 2050
    assert [p.live_bytes for p in m.timeline] == [2000, 2100, 2400, 2050]
    assert (m.peak_bytes, m.peak_index, m.weight_bytes, m.peak_activation_bytes) == (2400, 2, 1500, 900)
    # training: all outputs kept = 950; √4 = 2 subgraphs per segment: boundaries out1 + out3 = 250,
    # largest segment 400 + 200 = 600 → 850
    assert (m.training_activation_bytes, m.checkpointed_activation_bytes) == (950, 850)
    # int8 weights (fp32 activations): weights 1500/4 = 375, same peak point → 375 + 900
    assert memory_profile(diamond(), 1.0, weight_scale=0.25).peak_bytes == 1275
    assert predict(diamond(), chip("h100-sxm5"), "fp32").peak_memory_bytes == 2400
    # bf16 halves every tensor
    assert predict(diamond(), chip("h100-sxm5"), "bf16").peak_memory_bytes == 1200


def test_concurrent_stage_shares_units_and_bandwidth():
    def est(c, m, u, o):
        return SimpleNamespace(compute_time_s=c, memory_time_s=m, utilization=u, overhead_s=o)

    # half-chip kernels side by side: the longer one sets the time; launches serialize (+1 +1)
    assert stage_time([est(10, 4, 0.5, 1), est(8, 5, 0.5, 1)]) == (12, "subgraph")
    # whole-chip kernels cannot overlap: unit-seconds add up, 10·1 + 8·1 = 18, + 2
    assert stage_time([est(10, 4, 1.0, 1), est(8, 5, 1.0, 1)]) == (20, "units")
    # memory-bound pair: DRAM bandwidth is shared, 6 + 7 = 13, + 0
    assert stage_time([est(1, 6, 0.2, 0), est(1, 7, 0.2, 0)]) == (13, "bandwidth")


def test_prediction_totals_energy_and_determinism():
    h100 = chip("h100-sxm5")
    w = diamond()
    p = predict(w, h100, "fp32")
    assert p == predict(w, h100, "fp32")
    assert json.dumps(p.record(), sort_keys=True) == json.dumps(predict(w, h100, "fp32").record(), sort_keys=True)
    # stages (s1, s2) run concurrently, so the total is below the serial sum
    assert p.latency_s <= p.serial_latency_s
    assert p.energy_j == pytest.approx(p.compute_energy_j + p.memory_energy_j + p.static_energy_j)
    assert p.clock_energy_j == pytest.approx(sum(e.clock_energy_j for e in p.subgraphs))
    assert 0 < p.clock_energy_j < p.compute_energy_j
    assert p.static_energy_j == pytest.approx(tdp.static_power_w(h100) * p.latency_s)
    assert 0 <= p.wasted_energy_j <= p.static_energy_j
    assert p.avg_power_w == pytest.approx(p.energy_j / p.latency_s)
    assert p.throughput_per_s == pytest.approx(1 / p.latency_s)


def test_subgraph_energy_terms():
    h100 = chip("h100-sxm5")
    sg = elementwise_subgraph(0, 2**26, inputs=2)
    e = estimate_subgraph(sg, h100, "fp32", default_params("gpu"))
    # n FLOP on CUDA cores at half an all-in fp32 FMA each (4 nm, the shipped constants s and c):
    #   datapath 4.6 x (4/45)^0.5383 x 0.95 = 1.1880 pJ; issue x 70/32/4.6 = 0.5650;
    #   register file s x 3 reads + 1 write x 4 B x 7.5 x (4/7)^0.1539 / 8 = s x 13.7568 pJ;
    #   L1 s x (1/8 + 1/8) x 4 B x 8.5 x (4/7)^0.4592 / 8 = s x 0.8214 pJ -> E_op = 1.7530 + 14.5782 s.
    # Per FLOP: E_op / 2. The clock/control share c x E_op is charged per busy second instead:
    # c x E_op x 16,896 lanes x 1.98 GHz (V = 1 at boost) on every SM (utilization 1) over the
    # kernel's DRAM time, 805,306,368 B at 3.35 TB/s x 0.85
    k = tomllib.loads(Path(power.__file__).with_name("fitted_constants.toml").read_text())["values"]
    s, c = k["delivery_scale"], k["clock_control_fraction"]
    op_pj = 1.1880 + 0.5650 + s * (13.7568 + 0.8214)
    dram_s = 805_306_368 / (3.35e12 * 0.85)
    assert e.utilization == 1.0 and e.memory_time_s == pytest.approx(dram_s)
    clock_w = c * op_pj * 1e-12 * 16_896 * 1.98e9
    assert e.compute_energy_j == pytest.approx(2**26 * op_pj * 1e-12 / 2 + clock_w * dram_s, rel=1e-4)
    assert e.clock_energy_j == pytest.approx(clock_w * dram_s, rel=1e-4)
    # 805,306,368 B through HBM3 and the L2 level (+ 10 mm of 0.1 pJ/bit/mm wire, x (1 + c) clock/control)
    assert e.dram_energy_j == pytest.approx(805_306_368 * technology.dram_energy_per_byte_j("hbm3"), rel=1e-9)
    l2 = technology.sram_energy_per_byte_j(4, "l2")
    assert e.onchip_energy_j == pytest.approx(805_306_368 * (1 + c) * (s * l2 + 8e-12), rel=1e-9)
    assert e.static_energy_j == pytest.approx(tdp.static_power_w(h100) * e.latency_s, rel=1e-9)


def test_unsupported_precision_is_an_explicit_row():
    p = predict(mlp(16), chip("v100-sxm2"), "fp8")
    assert p.status == "unsupported" and not p.supported
    assert "fp8" in p.reason and "fp16" in p.reason
    assert math.isnan(p.latency_s) and math.isnan(p.energy_j)
    assert p.record()["status"] == "unsupported"


def test_seed_mlp_int8_at_30w_accelerators_beat_the_cpu():
    """Seed 000's validation: 1024×1024 MLP, batch 16, INT8, ~30 W parts: every accelerator is
    faster than the CPU (here the Orin module's own 12-core Cortex-A78AE cluster)."""
    w = mlp(16)
    cpu = predict(w, chip("jetson-agx-orin-64gb-cpu"), "int8")
    assert cpu.supported
    for name in ("jetson-agx-orin-64gb@30W", "tpu-edge-pro", "kpu-t256"):
        p = predict(w, chip(name), "int8")
        assert p.supported, name
        assert p.latency_s < cpu.latency_s, (name, p.latency_s, cpu.latency_s)


def test_large_memory_bound_workload_full_utilization_low_efficiency():
    # eight chained residual adds over 2^26 fp32 elements each (805 MB per op ≫ 50 MiB L2)
    sgs = [elementwise_subgraph(i, 2**26, inputs=2, deps=(i - 1,) if i else ()) for i in range(8)]
    p = predict(workload(sgs), chip("h100-sxm5"), "fp32")
    assert p.bottleneck == "memory"
    assert p.compute_utilization > 0.95      # every SM has threads ...
    assert p.compute_efficiency < 0.01       # ... stalled on HBM
    assert p.bandwidth_utilization > 0.8


def resnet_like(batch):
    """Four layer shapes from ResNet-50 (3×3 conv at 56×56, 1×1 at 56×56, 3×3 at 7×7, the fc)."""
    layers = [(batch * 3136, 64, 576, "conv", 64), (batch * 3136, 64, 256, "conv1x1", 256),
              (batch * 49, 512, 4608, "conv", 512), (batch, 1000, 2048, "matmul", 2048)]
    sgs = [gemm_subgraph(i, m, n, k, deps=(i - 1,) if i else (), op_class=c, input_elems=batch * 3136 * c_in
                         if i < 2 else m * c_in) for i, (m, n, k, c, c_in) in enumerate(layers)]
    return workload(sgs, batch=batch)


def test_big_gpu_utilization_is_low_at_batch_1_and_grows_with_batch():
    h100 = chip("h100-sxm5")
    utils = [predict(resnet_like(b), h100, "fp16").compute_utilization for b in (1, 8, 64)]
    assert utils[0] < 0.5
    assert utils[0] < utils[1] < utils[2]


def test_every_registry_chip_predicts_or_says_unsupported():
    from test_mapping import REGISTRY

    w = mlp(8)
    for name in REGISTRY.names:
        for precision in ("fp32", "bf16", "int8"):
            p = predict(w, chip(name), precision)
            if p.supported:
                assert p.latency_s > 0 and math.isfinite(p.energy_j) and p.units_total > 0, (name, precision)
            else:
                assert precision in p.reason


def test_calibration_changes_only_its_chip(tmp_path):
    fitted = custom_params("gpu", efficiency=0.1, overhead_s=1e-3, source="calibration: test")
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "h100-sxm5", "family_params": fitted.to_dict()}}))
    cal = load_calibration(tmp_path)
    w = mlp(16)
    h100 = predict(w, chip("h100-sxm5"), "fp16", calibration=cal, runtime="eager")
    a100 = predict(w, chip("a100-sxm4-80gb"), "fp16", calibration=cal, runtime="eager")
    assert h100.params_source == "calibration: test"
    assert a100.params_source.startswith("default")
    assert a100 == predict(w, chip("a100-sxm4-80gb"), "fp16", runtime="eager")
    # 3 ops x 1 ms fitted per-class issue cost on the host
    assert h100.latency_s >= 3e-3


# --- opportunities -------------------------------------------------------------------------------


def test_batch_opportunity_finds_the_smallest_batch_reaching_the_target():
    h100 = chip("h100-sxm5")
    params = default_params("gpu")
    p = predict(resnet_like(1), h100, "fp16")
    batch = next(o for o in opportunities(p, resnet_like(1), h100, params, workload_at=resnet_like)
                 if o.kind == "batch")
    b = batch.metrics["batch"]
    assert batch.metrics["reached_target"] and batch.metrics["utilization"] >= 0.8
    assert predict(resnet_like(b // 2), h100, "fp16").compute_utilization < 0.8
    assert batch.metrics["throughput_per_s"] == pytest.approx(predict(resnet_like(b), h100, "fp16").throughput_per_s)


def fused_pair(elements):
    """One fused kernel of two elementwise ops (x → y = relu(x) → z = y * 2) and its ops."""
    par = Parallelism(batch=1, channels=1, spatial=elements, output_elements=elements, depthwise=False,
                      grouped=False, groups=1, vector_dim=elements)
    t = TensorSpec((elements,), "float32", 4 * elements)
    ops = tuple(Op(index=i, name=f"op{i}", target="t", kind="elementwise", op_class="elementwise", inputs=(t,),
                   weights=(), outputs=(t,), macs=0, flop=elements, bytes_read=4 * elements,
                   bytes_written=4 * elements, parallelism=par, gemm=None, classified=True) for i in range(2))
    sg = Subgraph(index=0, name="relu_mul", pattern="relu_mul", op_class="elementwise", op_indices=(0, 1), macs=0,
                  flop=2 * elements, input_bytes=4 * elements, weight_bytes=0, output_bytes=4 * elements,
                  bytes_saved_by_fusion=8 * elements, parallelism=par, gemm=None, depends_on=(), stage=0,
                  threads=elements)
    return workload([sg], ops=ops)


def test_fusion_opportunity_saves_the_intermediate_traffic_and_a_launch():
    h100 = chip("h100-sxm5")
    params = default_params("gpu")
    w = fused_pair(2**25)   # 128 MiB per tensor: nothing stays in the 50 MiB L2
    p = predict(w, h100, "fp32")
    fusion = next(o for o in opportunities(p, w, h100, params) if o.kind == "fusion")
    # unfused: op0 writes y (4n) and op1 reads it back (4n) = bytes_saved_by_fusion = 8n
    assert fusion.metrics["saved_dram_bytes"] == 8 * 2**25
    assert (fusion.metrics["kernels"], fusion.metrics["unfused_kernels"]) == (1, 2)
    # time saved = the extra traffic at the achievable bandwidth + one more launch: the per-kernel
    # cycles at the CUDA cores' 1.98 GHz boost clock (H100 SXM5 datasheet)
    assert fusion.metrics["saved_s"] == pytest.approx(8 * 2**25 / (H100_BW * params.bandwidth_efficiency)
                                                      + params.overhead_s["elementwise"]
                                                      + params.overhead_cycles / 1.98e9)
    assert len(unfused(w).subgraphs) == 2


def test_precision_and_memory_opportunities():
    h100 = chip("h100-sxm5")
    w = diamond()
    p = predict(w, h100, "fp32")
    found = opportunities(p, w, h100, default_params("gpu"))
    kinds = [o.kind for o in found]
    assert kinds.count("precision") == 5                 # tf32, bf16, fp16, fp8, int8 on H100
    int8w = next(o for o in found if o.kind == "int8_weights")
    assert int8w.metrics["saved_bytes"] == 2400 - 1275   # see test_peak_memory_of_a_hand_built_graph
    ckpt = next(o for o in found if o.kind == "checkpointing")
    assert ckpt.metrics["saved_bytes"] == 950 - 850
    assert top_consumers(p, 2)[0].energy_j >= top_consumers(p, 2)[1].energy_j
    assert opportunities(predict(w, chip("v100-sxm2"), "fp8"), w, chip("v100-sxm2"), default_params("gpu")) == ()


def test_gemm_padding_lowers_efficiency_not_utilization_on_a_systolic_array():
    tpu = chip("tpu-v4")  # 8 MXUs of 128 × 128
    # N = 129 needs 2 column tiles, the second 1/128 full: spatial fill 129/256
    e = estimate_subgraph(gemm_subgraph(0, 8192, 129, 128), tpu, "bf16", default_params("tpu"))
    assert e.lane_fill < 0.55 and e.utilization == 1.0
    assert GemmShape(8192, 129, 128).macs == e.macs


# --- host side of an eager runtime ---------------------------------------------------------------


def _host(per_op_s, synchronous=False):
    from chipcal.model.estimate.host import HostCost

    return HostCost(per_op_s, synchronous, "server", "test")


def test_host_queue_device_bound_pays_only_the_first_issue():
    from chipcal.model.estimate.host import run_queue

    # h = 2 us, device 10, 1, 1 us. Issued at 2, 4, 6; op0 runs 2..12, op1 12..13, op2 13..14.
    q = run_queue([10e-6, 1e-6, 1e-6], _host(2e-6))
    assert q.latency_s == pytest.approx(14e-6)
    assert q.host_wait_s == pytest.approx(2e-6)          # only before op0
    assert q.device_busy_s == pytest.approx(12e-6) and not q.host_bound


def test_host_queue_host_bound_is_issue_time_plus_last_op():
    from chipcal.model.estimate.host import run_queue

    # h = 5 us, device 1 us each: issued at 5, 10, 15; ends 6, 11, 16. The device waits
    # 5 + 4 + 4 = 13 us and works 3 us: the host sets the pace, not the sum 15 + 3.
    q = run_queue([1e-6] * 3, _host(5e-6))
    assert q.latency_s == pytest.approx(16e-6)
    assert q.host_wait_s == pytest.approx(13e-6) and q.host_bound
    # same cores (a CPU): nothing overlaps, 3 × (5 + 1) us
    assert run_queue([1e-6] * 3, _host(5e-6, synchronous=True)).latency_s == pytest.approx(18e-6)


def test_eager_prediction_is_host_bound_when_issue_dominates():
    from chipcal.model.estimate.host import HostError

    w = mlp(1)
    v100 = chip("v100-sxm2")
    fused = predict(w, v100, "fp32")
    device = predict(w, v100, "fp32", runtime="eager", host_overhead_s=0.0)
    # no host cost: one stream in program order = Σ per-kernel latencies
    assert device.latency_s == pytest.approx(device.serial_latency_s)
    slow = predict(w, v100, "fp32", runtime="eager", host_overhead_s=1e-3)
    n = len(w.subgraphs)
    last = max(slow.subgraphs, key=lambda e: e.index).latency_s
    assert slow.latency_s == pytest.approx(n * 1e-3 + last)   # every op waits for its issue
    assert slow.bottleneck == "host" and slow.host_s == pytest.approx(n * 1e-3)
    assert fused.bottleneck != "host" and fused.host_s == 0.0
    # compiled replays a captured graph: no host term
    compiled = predict(w, v100, "fp32", runtime="compiled")
    assert compiled.host_s == 0.0 and compiled.bottleneck != "host" and compiled.runtime == "compiled"
    with pytest.raises(HostError):
        predict(w, v100, "fp32", runtime="eager", host_overhead_s=-1.0)


def test_gpu_kernel_overhead_is_cycles_of_the_engine_clock():
    # the same fc kernel (fp16: tensor cores) pays 10.5k cycles: 7.45 us at A100's 1.41 GHz,
    # 5.15 us at L4's 2.04 GHz (clocks from the datasheets)
    params = default_params("gpu")
    assert params.overhead_cycles == 10.5e3 and all(v == 0.0 for v in params.overhead_s.values())
    fc = mlp(1).subgraphs[0]
    assert estimate_subgraph(fc, chip("a100-sxm4-80gb"), "fp16", params).overhead_s == pytest.approx(7.447e-6, rel=1e-3)
    assert estimate_subgraph(fc, chip("l4"), "fp16", params).overhead_s == pytest.approx(5.147e-6, rel=1e-3)
    again = type(params).from_dict(params.to_dict())
    assert again.overhead_cycles == 10.5e3 and again.k_loop_cycles_per_byte == 3.1


def test_gemm_k_loop_bounds_a_batch_1_gemm_and_not_a_large_one():
    """A CTA walks its K bytes tile by tile: a GEMM takes at least K x bytes x 3.1 cycles."""
    params = default_params("gpu")
    assert params.k_loop_cycles_per_byte == 3.1
    a100 = chip("a100-sxm4-80gb")
    fc = mlp(1).subgraphs[0]                  # 1 x 1024 @ 1024 x 1024
    # fp16: K 1024 x 2 B = 2048 B x 3.1 = 6348.8 cycles at 1.41 GHz = 4.503 us; int8 (1 B): half
    assert estimate_subgraph(fc, a100, "fp16", params).compute_time_s == pytest.approx(6348.8 / 1.41e9)
    assert estimate_subgraph(fc, a100, "int8", params).compute_time_s == pytest.approx(3174.4 / 1.41e9)
    # the same GEMM at M = 8192 is throughput-bound: 17.2 GFLOP take > 50 us even at A100's dense
    # fp16 peak (312 TFLOP/s), ten times the K loop, which changes nothing there
    big = gemm_subgraph(0, 8192, 1024, 1024)
    with_loop = estimate_subgraph(big, a100, "fp16", params).compute_time_s
    without = estimate_subgraph(big, a100, "fp16", dataclasses.replace(params, k_loop_cycles_per_byte=0.0))
    assert with_loop > 2 * 8192 * 1024 * 1024 / 312e12 > 10 * 6348.8 / 1.41e9
    assert with_loop == without.compute_time_s
    # a depthwise convolution runs a thread per output on CUDA cores: no K loop is charged
    dw = gemm_subgraph(0, 56 * 56, 1, 9, op_class="depthwise", count=144)
    assert map_subgraph(dw, a100, "fp16", 1.0).serial_k_bytes == 0


def test_autocast_issues_one_weight_cast_before_each_op_with_weights():
    w = mlp(1)                      # fc1, relu, fc2: two ops carry 1024 x 1025 weights
    v100 = chip("v100-sxm2")
    plain = predict(w, v100, "fp16", runtime="eager", host_overhead_s=1e-3)
    amp = predict(w, v100, "fp16", runtime="eager", host_overhead_s=1e-3, autocast=True)
    last = max(plain.subgraphs, key=lambda e: e.index).latency_s
    # host-bound: 3 ops issued 1 ms apart; under autocast 6: the fp32 graph input is cast before fc1,
    # each weight before its op; relu runs in fp16 on fc1's fp16 output, so fc2's input needs none
    assert plain.latency_s == pytest.approx(3e-3 + last) and amp.latency_s == pytest.approx(6e-3 + last)
    assert amp.autocast and amp.host_s == pytest.approx(6e-3) and amp.bottleneck == "host"
    # no host cost: the device runs the casts too; each reads fp32 and writes fp16 (6 B per element)
    # at 85 % of V100's 900 GB/s, plus a PyTorch kernel's 8.8k cycles at 1.53 GHz: two of 1024 x 1025
    # weights, one of the 1 x 1024 input
    kernel = 8.8e3 / 1.53e9
    casts = (2 * 1024 * 1025 + 1024) * 6 / (900e9 * 0.85) + 3 * kernel
    free = predict(w, v100, "fp16", runtime="eager", host_overhead_s=0.0)
    free_amp = predict(w, v100, "fp16", runtime="eager", host_overhead_s=0.0, autocast=True)
    assert free_amp.latency_s - free.latency_s == pytest.approx(casts, rel=1e-6)
    # a captured graph pays no host cost for it
    assert predict(w, v100, "fp16", autocast=True).latency_s == predict(w, v100, "fp16").latency_s


def test_host_cost_defaults_by_host_class_and_calibration_overrides():
    from chipcal.model.estimate.host import HOST_CLASSES, host_cost

    gpu = default_params("gpu")
    # today's PyTorch by default: the H100 host's dispatch probe (18.5 us, torch 2.11); the corpus's
    # PyTorch 1.8 hosts (47 us) on request
    assert host_cost(chip("h100-sxm5"), "eager", gpu).per_op_s == 18.5e-6 == HOST_CLASSES["server", "pytorch2"].per_op_s
    assert host_cost(chip("h100-sxm5"), "eager", gpu, framework="pytorch1").per_op_s == 47e-6
    orin = host_cost(chip("jetson-agx-orin-64gb"), "eager", gpu)
    assert orin.host_class == "embedded" and orin.per_op_s > HOST_CLASSES["server", "pytorch2"].per_op_s
    assert host_cost(chip("h100-sxm5"), "fused", gpu) is None
    assert host_cost(chip("h100-sxm5"), "compiled", gpu) is None
    cpu = host_cost(chip("epyc-9654"), "eager", default_params("cpu"))
    assert cpu.synchronous and cpu.per_op_s == 0.0            # dispatch is in the CPU's overhead_s
    probed = dataclasses.replace(gpu, host_overhead_s=7e-6, source="calibration: probe")
    assert host_cost(chip("h100-sxm5"), "eager", probed).per_op_s == 7e-6
    assert host_cost(chip("h100-sxm5"), "eager", probed, override_s=3e-6).per_op_s == 3e-6
    again = type(gpu).from_dict(probed.to_dict())
    assert again.host_overhead_s == 7e-6


def test_the_corpus_frameworks_transpose_nchw_tensor_core_convolutions():
    """cuDNN 8 under the corpus's eager frameworks (PyTorch 1.x, Paddle) transposes an NCHW
    tensor-core convolution's input and output to NHWC (NVIDIA, Convolutional Layers User's Guide):
    one pass each, read and written, 2 × (input + output) bytes. Today's PyTorch carries NCHW in
    its efficiency instead; channels-last, a fused runtime and CUDA-core fp32 pay none."""
    m = 64 * 56 * 56                                   # a 1x1 conv 64 -> 256 at 56x56, batch 64
    w = workload([gemm_subgraph(0, m, 256, 64, op_class="conv1x1")], batch=64)
    v100 = chip("v100-sxm2")

    def dram(precision="fp16", runtime="eager", **kw):
        return predict(w, v100, precision, runtime=runtime, host_overhead_s=0.0, **kw).dram_bytes

    a_in, out = 2 * m * 64, 2 * m * 256                # fp16 bytes, far larger than the V100's 6 MB L2
    transposes = 2 * (a_in + out)
    assert dram(framework="pytorch1") - dram(framework="pytorch2") == pytest.approx(transposes)
    assert dram(framework="pytorch1") - dram(framework="pytorch1", memory_format="channels_last") \
        == pytest.approx(transposes)
    assert dram(framework="pytorch1", runtime="fused") == pytest.approx(dram(framework="pytorch2", runtime="fused"))
    assert dram("fp32", framework="pytorch1") == pytest.approx(dram("fp32", framework="pytorch2"))  # CUDA cores


def test_a_cpu_matmul_streams_its_activations_after_its_arithmetic_and_its_weights_under_it():
    """roofline.SERIAL_STREAMS: PyTorch's CPU matmul (a BLAS) packs its input and writes its output
    apart from the FMA loop; a oneDNN 1x1 convolution of the same GEMM overlaps them. Xeon 8480+
    (307.2 GB/s, on-chip at 4x), the recorded sweep's 4096 x 4096 x 256 fp32 (m, n, k): the 64 MiB
    output stays on chip, so the stream is (4 MiB input + 64 MiB output) / 1228.8 GB/s = 58.03 us
    over the convolution's time. A matrix-vector product's 64 MiB of weights from DRAM bound both
    alike: weights are not part of the stream (their pack is weight_layout_s)."""
    xeon = chip("xeon-platinum-8480-plus")
    params = custom_params("cpu", efficiency=0.8, overhead_s=0.0, bw=1.0, onchip=4.0)

    def both(m, n, k):
        return [estimate_subgraph(dataclasses.replace(gemm_subgraph(0, m, n, k), op_class=c), xeon, "fp32", params)
                for c in ("matmul", "conv1x1")]

    mm, conv = both(4096, 4096, 256)
    assert conv.latency_s == pytest.approx(conv.compute_time_s)        # compute-bound, streams hidden
    assert mm.latency_s == pytest.approx(conv.latency_s + (4 * 2**20 + 64 * 2**20) / (307.2e9 * 4.0))
    mm, conv = both(1, 4096, 4096)
    assert mm.latency_s == pytest.approx(conv.latency_s) == pytest.approx(4 * 4096 * 4096 / 307.2e9, rel=0.01)
