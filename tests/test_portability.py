"""Recorded CPUs other than the host: which precisions have hardware units, the chip each gets,
and GEMM sweeps that stay bounded where a precision is emulated (issue: works on any machine)."""

from __future__ import annotations

import pytest
from recorded import recorded_fingerprint

from chipcal.measure import peak
from chipcal.measure.cpu import cpu_precision_support
from chipcal.measure.device import CPU
from chipcal.model.local import chip_from_cpu

# name, arch, torch's oneDNN answers, expected support (from the recorded feature flags by hand)
CASES = [
    # Zen 3 EPYC, AVX2 only: no avx512_bf16/avx512_vnni/avx_vnni/avx512_fp16 in its flags
    ("amd-epyc-avx2-2vcpu", "x86_64", {"mkldnn_bf16": False, "mkldnn_fp16": False},
     {"fp32": "native", "bf16": "emulated", "fp16": "emulated", "int8": "emulated"}),
    # Zen 5 EPYC: avx512_bf16, avx512_vnni and avx_vnni, no avx512_fp16
    ("amd-epyc-zen5-2vcpu", "x86_64", {"mkldnn_bf16": True, "mkldnn_fp16": False},
     {"fp32": "native", "bf16": "native", "fp16": "emulated", "int8": "native"}),
    # Neoverse N1: asimdhp (fp16 arithmetic) and asimddp (int8 dot product), no bf16
    ("arm-neoverse-n1-4cpu", "aarch64", {},
     {"fp32": "native", "bf16": "emulated", "fp16": "native", "int8": "native"}),
    # Neoverse V1: bf16 and i8mm as well
    ("arm-neoverse-v1-4cpu", "aarch64", {},
     {"fp32": "native", "bf16": "native", "fp16": "native", "int8": "native"}),
]


@pytest.mark.parametrize(("name", "arch", "torch_says", "expected"), CASES)
def test_precision_support_of_recorded_cpus(tmp_path, name, arch, torch_says, expected):
    spec, fp = recorded_fingerprint(tmp_path, name, arch=arch, **torch_says)
    assert fp.cpu_precisions == expected
    # the local chip has engines exactly for fp64/fp32 and the native sub-fp32 precisions
    native = {p for p, s in expected.items() if s == "native"}
    chip = chip_from_cpu(spec.__class__(**{**spec.__dict__, "native_precisions": frozenset(native)}))
    assert set(chip.precisions) == {"fp64"} | native
    # the default GEMM sweep sweeps those and times the others once, as emulated
    assert set(peak.default_precisions(CPU, fp)) == {"fp32", "bf16", "fp16", "int8"}
    assert set(peak.emulated_reasons(CPU, fp, peak.default_precisions(CPU, fp))) == set(expected) - native


def test_avx2_epyc_fp32_peak_by_hand(tmp_path):
    spec, _ = recorded_fingerprint(tmp_path, "amd-epyc-avx2-2vcpu")
    # 2 cores x 2 FMA pipes x 8 fp32 lanes (256-bit) x 2 FLOP x 2.44543 GHz ('cpu MHz', the TSC)
    assert (spec.cores, spec.simd_bits, spec.fma_units_per_core) == (2, 256, 2)
    assert chip_from_cpu(spec).peak_flop_per_s("fp32") == pytest.approx(2 * 2 * 8 * 2 * 2445.430e6)
    # that machine measured 167 GFLOP/s fp32 (shared/machines/amd-epyc-avx2-2vcpu/README.md):
    # within 10 % of this physics peak, as a sustained AVX2 clock a little above the TSC allows
    assert 167e9 / chip_from_cpu(spec).peak_flop_per_s("fp32") == pytest.approx(1.0, abs=0.1)


def test_arm_n1_chip_has_neon_engine(tmp_path):
    spec, _ = recorded_fingerprint(tmp_path, "arm-neoverse-n1-4cpu", arch="aarch64")
    assert (spec.cores, spec.simd_bits, spec.l2_bytes_per_core, spec.l3_bytes) == (4, 128, 2**20, 32 * 2**20)
    chip = chip_from_cpu(spec)
    assert chip.engines[0].circuit == "arm_core"
    # no clock readable in an Arm cpuinfo without cpufreq: stated as an assumption
    assert spec.clock_source.startswith("assumed")
    # NEON: 2 pipes x 4 fp32 lanes x 2 FLOP x 4 cores x clock; fp16 8 lanes; int8 (sdot) 16 lanes
    assert chip.peak_flop_per_s("fp32") == pytest.approx(2 * 4 * 2 * 4 * spec.clock_hz)
    assert chip.peak_flop_per_s("fp16") == pytest.approx(2 * 8 * 2 * 4 * spec.clock_hz)
    assert chip.peak_flop_per_s("int8") == pytest.approx(2 * 16 * 2 * 4 * spec.clock_hz)


def test_flag_without_torch_kernels_is_emulated():
    # avx512_bf16 in the flags, but oneDNN says no bf16 (ONEDNN_MAX_CPU_ISA=AVX2, an old torch)
    support = cpu_precision_support({"avx2", "avx512f", "avx512_bf16"}, "x86_64", mkldnn_bf16=False)
    assert support["bf16"] == "emulated"
    # not asked (None): the flag decides
    assert cpu_precision_support({"avx512_bf16"}, "x86_64")["bf16"] == "native"
    # VNNI in the flags, but oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA): no int8 unit in use
    assert cpu_precision_support({"avx512_vnni"}, "x86_64", onednn_max_isa="avx2")["int8"] == "emulated"
    assert cpu_precision_support({"avx512_vnni"}, "x86_64", onednn_max_isa="AVX512_CORE_VNNI")["int8"] == "native"


def test_emulated_precision_is_timed_once_at_a_small_shape(tmp_path, monkeypatch):
    _, fp = recorded_fingerprint(tmp_path, "amd-epyc-avx2-2vcpu", mkldnn_bf16=False, mkldnn_fp16=False)
    shapes = ((32, 32, 32), (64, 64, 64), (128, 128, 128))
    result = peak.measure_gemm_peak(CPU, ["fp32", "bf16"], shapes, fp=fp, use_cache=False,
                                    max_time_s=0.05, min_samples=3)
    assert "bf16" in result.emulated and "emulated" in result.emulated["bf16"]
    assert len(result.curve("bf16")) == 1 and len(result.curve("fp32")) == 3
    assert result.native_precisions == ("fp32",)


def test_emulated_shape_is_the_largest_predicted_under_the_bound():
    shapes = ((256, 256, 256), (512, 512, 512), (1024, 1024, 1024))
    # at 1 GFLOP/s: 512^3 x 2 = 0.268 s > 0.25 s bound; 256^3 x 2 = 0.034 s fits
    assert peak._emulated_shape(shapes, 1e9) == (256, 256, 256)
    # at 5 GFLOP/s: 512^3 takes 0.054 s, 1024^3 0.43 s; at 10 GFLOP/s 1024^3 takes 0.215 s
    assert peak._emulated_shape(shapes, 5e9) == (512, 512, 512)
    assert peak._emulated_shape(shapes, 10e9) == (1024, 1024, 1024)
    assert peak._emulated_shape(shapes, 1e3) == (peak.TRIAL_SIZE,) * 3     # nothing fits: the trial shape


def test_shapes_predicted_too_slow_are_skipped_never_run(tmp_path, monkeypatch):
    _, fp = recorded_fingerprint(tmp_path, "amd-epyc-zen5-2vcpu", mkldnn_bf16=True)
    ran = []
    real_point = peak.measure_gemm_point
    monkeypatch.setattr(peak, "trial", lambda precision, device: peak.Trial(None, 2 * 64**3 / 1e9))  # 1 GFLOP/s
    monkeypatch.setattr(peak, "measure_gemm_point",
                        lambda precision, shape, device, **kw: ran.append(shape) or real_point(
                            precision, (32, 32, 32), device, **kw))
    shapes = ((4096, 4096, 4096), (128, 128, 128))
    result = peak.measure_gemm_peak(CPU, ["fp32"], shapes, fp=fp, use_cache=False, max_time_s=0.05,
                                    min_samples=3, max_call_s=0.5)
    # 128^3 x 2 = 4.2 MFLOP -> 4 ms at the trial's 1 GFLOP/s: run first (order of work); 4096^3 is
    # then predicted from the rate measured at the 32^3 stand-in, far over 0.5 s: skipped
    assert ran == [(128, 128, 128)]
    (skipped,) = result.skipped
    assert (skipped.m, skipped.n, skipped.k) == (4096, 4096, 4096) and skipped.predicted_call_s > 0.5


def test_zen5_epyc_has_two_full_width_fma_pipes(tmp_path):
    spec, _ = recorded_fingerprint(tmp_path, "amd-epyc-zen5-2vcpu", mkldnn_bf16=True)
    # family 26 (0x1A) with AVX-512: Zen 5, 2 x 512-bit FMA pipes per core (Zen 4 double-pumps one)
    assert (spec.cpu_family, spec.simd_bits, spec.fma_units_per_core) == (26, 512, 2)
    chip = chip_from_cpu(spec)
    clock = spec.clock_hz       # 'cpu MHz' of the recording, the TSC rate under KVM
    assert chip.peak_flop_per_s("fp32") == pytest.approx(2 * 2 * 16 * 2 * clock)      # cores x pipes x lanes x 2
    assert chip.peak_flop_per_s("bf16") == pytest.approx(2 * 2 * 32 * 2 * clock)      # VDPBF16PS: 32 MAC/pipe
    assert chip.peak_flop_per_s("int8") == pytest.approx(2 * 2 * 64 * 2 * clock)      # VPDPBUSD: 64 MAC/pipe
