"""Mappers and their parameters: hand-worked allocations on registry chips.

Builders for hand-made subgraphs/workloads live here and are reused by test_predict*.py. Byte
counts are fp32 (4 B/element), as a traced workload records them.
"""

from __future__ import annotations

import json
import math

import pytest

from chipcal.calibrate.document import SCHEMA as CALIBRATION_SCHEMA
from chipcal.calibrate.store import load_calibration
from chipcal.model.mapping import default_params, map_subgraph, onchip_capacity
from chipcal.model.mapping.base import UnsupportedPrecision, wave_schedule
from chipcal.model.mapping.params import (
    CalibrationError,
    FamilyParams,
    params_for,
)
from chipcal.model.registry import load_registry
from chipcal.model.workload.types import OP_CLASSES, GemmShape, Parallelism, Subgraph, Workload

REGISTRY = load_registry()


def chip(name: str):
    return REGISTRY.get(name)


def gemm_subgraph(index, m, n, k, deps=(), op_class="matmul", count=1, name=None, weight_elems=None,
                  input_elems=None):
    """A GEMM-like subgraph: input m×k, weights k×n, output m×n (fp32 bytes)."""
    par = Parallelism(batch=1, channels=n, spatial=m, output_elements=m * n * count,
                      depthwise=op_class == "depthwise", grouped=count > 1, groups=count, vector_dim=n)
    macs = m * n * k * count
    return Subgraph(index=index, name=name or f"gemm{index}", pattern="single", op_class=op_class,
                    op_indices=(index,), macs=macs, flop=2 * macs,
                    input_bytes=4 * (m * k * count if input_elems is None else input_elems),
                    weight_bytes=4 * (k * n * count if weight_elems is None else weight_elems),
                    output_bytes=4 * m * n * count, bytes_saved_by_fusion=0, parallelism=par,
                    gemm=GemmShape(m, n, k, count), depends_on=tuple(deps), stage=index,
                    threads=m * n * count)


def elementwise_subgraph(index, elements, deps=(), inputs=1, flop_per_element=1, name=None,
                         weight_bytes=0):
    par = Parallelism(batch=1, channels=1, spatial=elements, output_elements=elements, depthwise=False,
                      grouped=False, groups=1, vector_dim=elements)
    return Subgraph(index=index, name=name or f"ew{index}", pattern="single", op_class="elementwise",
                    op_indices=(index,), macs=0, flop=flop_per_element * elements,
                    input_bytes=4 * inputs * elements, weight_bytes=weight_bytes, output_bytes=4 * elements,
                    bytes_saved_by_fusion=0, parallelism=par, gemm=None, depends_on=tuple(deps),
                    stage=index, threads=elements)


def workload(subgraphs, model="hand", batch=1, stages=None, ops=()):
    subgraphs = tuple(subgraphs)
    return Workload(model=model, batch=batch, input_shape=(batch,), dtype="float32", capture="fx", ops=ops,
                    subgraphs=subgraphs,
                    stages=tuple(stages) if stages is not None else tuple((s.index,) for s in subgraphs),
                    critical_path=tuple(s.index for s in subgraphs), params=0)


def mlp(batch: int, features: int = 1024):
    """The seeds' validation MLP: Linear(features, features) → ReLU → Linear(features, features)."""
    return workload([gemm_subgraph(0, batch, features, features, name="fc1", weight_elems=features * (features + 1)),
                     elementwise_subgraph(1, batch * features, deps=(0,), name="relu"),
                     gemm_subgraph(2, batch, features, features, deps=(1,), name="fc2",
                                   weight_elems=features * (features + 1))],
                    model="mlp1024", batch=batch)


def custom_params(family, efficiency=0.8, overhead_s=1e-6, half=0.0, bw=1.0, source="test", onchip=4.0):
    return FamilyParams(family=family, efficiency=dict.fromkeys(OP_CLASSES, efficiency),
                        overhead_s=dict.fromkeys(OP_CLASSES, overhead_s), half_efficiency_flop=half,
                        bandwidth_efficiency=bw, onchip_bandwidth_ratio=onchip, source=source)


# --- shared rules ----------------------------------------------------------------------------------


def test_wave_schedule_just_over_one_wave():
    # 132 units, 1 item each per wave: 133 items need 2 waves; the second keeps 1 of 132 busy.
    # utilization = (132 + 1) / (2 × 132) = 133/264
    assert wave_schedule(133, 132, 1) == (2, 132, 133 / 264)
    # exactly one wave: every unit busy the whole time
    assert wave_schedule(132, 132, 1) == (1, 132, 1.0)
    # fewer items than units: 10 of 132 busy
    assert wave_schedule(10, 132, 1) == (1, 10, 10 / 132)
    # 8 resident per unit: 1057 items = one full wave of 1056 + 1
    assert wave_schedule(1057, 132, 8) == (2, 132, 133 / 264)


# --- GPU ---------------------------------------------------------------------------------------


def test_gpu_elementwise_grid_just_over_one_wave():
    h100 = chip("h100-sxm5")
    # H100: 2048 threads/SM → 8 blocks of 256 per SM; one wave = 132 × 8 × 256 = 270,336 threads.
    full = elementwise_subgraph(0, 270_336)
    over = elementwise_subgraph(0, 270_337)
    a_full = map_subgraph(full, h100, "fp32", 1.0)
    a_over = map_subgraph(over, h100, "fp32", 1.0)
    assert (a_full.waves, a_full.utilization, a_full.lane_fill) == (1, 1.0, 1.0)
    # 270,337 threads → 1057 blocks → 2 waves, second wave has 1 block on 1 SM: util 133/264;
    # the last block holds 1 of 256 threads: fill 270,337 / (1057 × 256)
    assert a_over.waves == 2 and a_over.units_allocated == 132
    assert a_over.utilization == pytest.approx(133 / 264)
    assert a_over.lane_fill == pytest.approx(270_337 / (1057 * 256))
    assert a_over.engine == "cuda_cores"
    assert a_full.occupancy == 1.0  # 8 resident blocks × 256 = 2048 threads


def test_gpu_tile_quantization_picks_smaller_tiles_for_skinny_gemm():
    orin = chip("jetson-agx-orin-64gb")
    # M = 16 (batch 16): a 128-row tile would be 1/8 full; the mapper keeps the 16-row tile.
    a = map_subgraph(gemm_subgraph(0, 16, 1024, 1024), orin, "int8", 0.25)
    assert a.engine == "tensor_cores"
    assert "16x" in a.detail
    # 16x64 tiles: 1 × 16 = 16 CTAs on 16 SMs → every SM busy, one wave
    assert (a.units_allocated, a.waves, a.utilization) == (16, 1, 1.0)


def test_gpu_depthwise_runs_on_cuda_cores_promoted_to_fp32():
    h100 = chip("h100-sxm5")
    dw = gemm_subgraph(0, 56 * 56, 1, 9, op_class="depthwise", count=64)
    assert map_subgraph(dw, h100, "fp16", 0.5).engine == "cuda_cores"
    # the CUDA cores list no int8 rate: int8 depthwise is computed promoted to fp32
    a = map_subgraph(dw, h100, "int8", 0.25)
    assert (a.engine, a.compute_precision) == ("cuda_cores", "fp32")
    assert map_subgraph(gemm_subgraph(0, 4096, 4096, 4096), h100, "fp16", 0.5).engine == "tensor_cores"


def test_no_engine_for_the_precision_raises():
    # TPU v4 MXUs run bf16/int8 only and a systolic array does not promote
    with pytest.raises(UnsupportedPrecision, match="int4"):
        map_subgraph(gemm_subgraph(0, 64, 64, 64), chip("tpu-v4"), "int4", 0.125)


# --- CPU ---------------------------------------------------------------------------------------


def test_cpu_elementwise_grain_limits_cores():
    cpu = chip("jetson-agx-orin-64gb-cpu")  # 12 cores, 128-bit NEON
    # 16,384 outputs < one 32,768-element grain → one core; 12 × 32,768 + 1 → 13 chunks → 2 rounds
    small = map_subgraph(elementwise_subgraph(0, 16_384), cpu, "fp32", 1.0)
    assert (small.units_allocated, small.utilization) == (1, 1 / 12)
    big = map_subgraph(elementwise_subgraph(0, 12 * 32_768 + 1), cpu, "fp32", 1.0)
    assert big.waves == 2 and big.utilization == pytest.approx(13 / 24)


def test_cpu_simd_lane_fill_and_amx_choice():
    cpu = chip("jetson-agx-orin-64gb-cpu")
    # N = 6 over 4 fp32 lanes → 2 vectors hold 8 lanes, 6 used
    a = map_subgraph(gemm_subgraph(0, 64, 6, 64), cpu, "fp32", 1.0)
    assert a.lane_fill == pytest.approx(6 / 8)
    xeon = chip("xeon-platinum-8480-plus")
    big = gemm_subgraph(0, 4096, 4096, 4096)
    assert map_subgraph(big, xeon, "bf16", 0.5).engine == "amx"
    assert map_subgraph(big, xeon, "fp32", 1.0).engine != "amx"


# --- TPU ---------------------------------------------------------------------------------------


def test_tpu_array_fill_grows_with_batch():
    tpu = chip("tpu-edge-pro")  # one 128 × 128 MXU
    fills = [map_subgraph(gemm_subgraph(0, m, 1024, 1024), tpu, "int8", 0.25).lane_fill for m in (1, 16, 128, 1024)]
    assert fills == sorted(fills) and fills[0] < 0.01 and fills[-1] > 0.8
    # M = 16: 64 weight tiles streamed one after another on 1 MXU; each tile pass takes
    # max(16, 128) cycles for 16 useful rows, plus 128 + 128 fill/drain once:
    # temporal = 64·16 / (64·128 + 256) = 1024 / 8448; spatial fill 1 (K, N multiples of 128)
    a = map_subgraph(gemm_subgraph(0, 16, 1024, 1024), tpu, "int8", 0.25)
    assert a.lane_fill == pytest.approx(1024 / 8448)
    assert (a.units_allocated, a.waves) == (1, 64)


# --- KPU ---------------------------------------------------------------------------------------


def test_kpu_blocks_and_scratchpad_chunks():
    kpu = chip("kpu-t256")  # 256 tiles of 16 × 16 PEs, 256 KiB scratchpad each
    # M=16, N=1024: 1 × 64 output blocks on 256 tiles → 64 busy, utilization 1/4.
    # K=1024 int8 panels: (16+16)·1024 B = 32 KiB + 1 KiB accumulators fit: 1 pass,
    # temporal = 1024 / (1024 + 32)
    a = map_subgraph(gemm_subgraph(0, 16, 1024, 1024), kpu, "int8", 0.25)
    assert (a.units_allocated, a.utilization) == (64, 0.25)
    assert a.lane_fill == pytest.approx(1024 / 1056)
    # K = 65536 fp32: room = 262144 − 4·256 = 261,120 B; per K step (16+16)·4 = 128 B →
    # kc = 2040, chunks = ceil(65536 / 2040) = 33; temporal = 65536 / (65536 + 33·32)
    b = map_subgraph(gemm_subgraph(0, 16, 16, 65536), kpu, "fp32", 1.0)
    assert b.lane_fill == pytest.approx(65536 / (65536 + 33 * 32))


def test_onchip_capacities_follow_the_registry():
    assert onchip_capacity(chip("h100-sxm5")) == 52_428_800  # 50 MiB L2
    # 12 × 256 KiB L2 + 6 MiB L3
    assert onchip_capacity(chip("jetson-agx-orin-64gb-cpu")) == 12 * 262_144 + 6_291_456
    assert onchip_capacity(chip("kpu-t256")) == 256 * 262_144


# --- parameters --------------------------------------------------------------------------------


def test_default_params_cover_every_class_and_family():
    for family in ("cpu", "gpu", "tpu", "kpu"):
        p = default_params(family)
        assert set(p.efficiency) == set(OP_CLASSES) == set(p.overhead_s)
        assert all(0 < v <= 1 for v in p.efficiency.values())
        assert p.source.startswith("default:")
    with pytest.raises(CalibrationError):
        default_params("npu")


def test_family_params_round_trip_and_validation():
    p = custom_params("gpu", efficiency=0.5, overhead_s=2e-6, half=1e6, bw=0.9)
    assert FamilyParams.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    bad = p.to_dict()
    bad["efficiency"]["conv"] = 0.0
    with pytest.raises(CalibrationError, match="efficiency.conv"):
        FamilyParams.from_dict(bad)
    bad["efficiency"]["conv"] = float("nan")
    with pytest.raises(CalibrationError, match="efficiency.conv"):
        FamilyParams.from_dict(bad)
    # a measurement may beat an assumed peak or bandwidth: fractions above 1 are kept
    above = {**p.to_dict(), "bandwidth_efficiency": 1.3}
    assert FamilyParams.from_dict(above).bandwidth_efficiency == 1.3
    missing = p.to_dict()
    del missing["overhead_s"]["pool"]
    with pytest.raises(CalibrationError, match="missing pool"):
        FamilyParams.from_dict(missing)
    # size curve: 1/2 at W = h
    assert p.size_factor(1e6) == 0.5 and custom_params("gpu").size_factor(123.0) == 1.0


def test_calibration_applies_to_its_chip_only(tmp_path):
    fitted = custom_params("gpu", efficiency=0.3, source="calibration: test")
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "h100-sxm5", "family_params": fitted.to_dict()}}))
    cal = load_calibration(tmp_path)
    assert (cal.chip, cal.params, cal.path) == ("h100-sxm5", fitted, tmp_path / "calibration.json")
    assert params_for("h100-sxm5", "gpu", cal) == fitted
    assert params_for("a100-sxm4-80gb", "gpu", cal) == default_params("gpu")
    with pytest.raises(CalibrationError, match="no calibration.json"):
        load_calibration(tmp_path / "nowhere")
    (tmp_path / "calibration.json").write_text(json.dumps({"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "x"}}))
    with pytest.raises(CalibrationError, match="family_params"):
        load_calibration(tmp_path)


def test_calibration_for_another_family_is_refused(tmp_path):
    fitted = custom_params("cpu")
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "h100-sxm5", "family_params": fitted.to_dict()}}))
    with pytest.raises(CalibrationError, match="family 'cpu'"):
        params_for("h100-sxm5", "gpu", load_calibration(tmp_path))


def test_every_registry_chip_maps_a_gemm_and_an_elementwise_op():
    for name in REGISTRY.names:
        c = chip(name)
        for precision in c.precisions:
            for sg in (gemm_subgraph(0, 256, 256, 256), elementwise_subgraph(1, 100_000, deps=(0,))):
                try:
                    a = map_subgraph(sg, c, precision, 1.0)
                except UnsupportedPrecision:
                    continue  # e.g. a precision only a GPU's DLA runs
                assert 0 < a.utilization <= 1 and 0 < a.lane_fill <= 1, (name, precision)
                assert a.units_allocated <= a.units_total and math.isfinite(a.peak_flop_per_s)


def test_traffic_is_a_named_record():
    """8x8x8 fp32 GEMM after a producer: 256 B each of input, weights, output (worked by hand)."""
    from chipcal.model.mapping.base import Traffic, traffic

    g = gemm_subgraph(1, 8, 8, 8, deps=(0,))
    # fits on chip (256 + 256 <= 1024): only the weights come from DRAM; 768 B pass the on-chip level
    held = traffic(g, 1.0, 1024, 1024, "fp32", weights_on_chip=False)
    assert held == Traffic(dram_bytes=256.0, onchip_bytes=768.0, activations_on_chip=True)
    # 100 B on chip: all 768 B from DRAM, plus the Hong-Kung excess 2*8*8*8*4/sqrt(100/4) - 768 = 51.2 B
    spilled = traffic(g, 1.0, 100, 100, "fp32", weights_on_chip=False)
    assert spilled.dram_bytes == pytest.approx(819.2) and spilled.onchip_bytes == pytest.approx(819.2)
    assert spilled.activations_on_chip is False


def test_graph_input_stays_on_chip_with_the_weights():
    """The first subgraph (no producer) of an 8x8x8 fp32 GEMM: 256 B each of input, weights, output.
    Weights re-read from DRAM: the graph input comes from DRAM too (512 B). A steady-state run that
    keeps its weights on chip reuses its input buffer as well: nothing from DRAM."""
    from chipcal.model.mapping.base import traffic

    first = gemm_subgraph(0, 8, 8, 8)
    assert traffic(first, 1.0, 1024, 1024, "fp32", weights_on_chip=False).dram_bytes == 512.0
    held = traffic(first, 1.0, 1024, 1024, "fp32", weights_on_chip=True)
    assert held.dram_bytes == 0.0 and held.onchip_bytes == 768.0
    # input + output (512 B) beyond 400 B on chip: both go through DRAM whatever the weights do
    assert traffic(first, 1.0, 400, 400, "fp32", weights_on_chip=True).dram_bytes == 512.0
