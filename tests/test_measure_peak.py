"""GEMM FLOP convention, unsupported precisions, cache round trip / corruption / staleness, knee."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from chipcal.cli.measure_peak import gemm_record
from chipcal.measure import cache, peak, system
from chipcal.measure.bandwidth import cache_knee, measure_bandwidth, memory_figure
from chipcal.measure.cpu import detect_cpu
from chipcal.measure.device import CPU, Device
from chipcal.measure.peak import measure_gemm_peak
from chipcal.measure.reference import ReferencePeaks
from chipcal.measure.system import fingerprint

TINY = [(64, 32, 16), (96, 64, 32)]


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "measurements"


@pytest.fixture(scope="module")
def fp():
    return fingerprint()


def quick(**kw):
    return dict(max_time_s=0.05, min_samples=3, **kw)


@pytest.fixture
def stable_points(monkeypatch):
    """GEMM points timed as a steady 1 GFLOP/s (the cache tests must not depend on a quiet host)."""
    from chipcal.measure.timing import Measurement

    def point(precision, shape, device, **_):
        m, n, k = shape
        flop = 2 * m * n * k
        return peak.GemmPoint(precision, m, n, k, flop, Measurement.from_samples([flop / 1e9] * 6), 1e9)

    monkeypatch.setattr(peak, "measure_gemm_point", point)


def test_flop_is_two_per_mac(user_cache, fp):
    result = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, use_cache=False, **quick())
    first = result.curve("fp32")[0]
    assert (first.m, first.n, first.k) == (64, 32, 16)
    assert first.flop == 65536                       # 2 × 64 × 32 × 16 MACs
    assert first.flop_per_s == pytest.approx(first.flop / first.measurement.median_s)
    assert result.best("fp32") in result.curve("fp32")


def test_gemm_operands_are_random_and_nonzero():
    # the int8 op returns int32 products of ±1..127 operands: compare with an int64 reference
    torch.manual_seed(0)
    fn = peak.gemm_callable("int8", 32, 32, 32, CPU)
    out = fn()
    assert out.dtype == torch.int32 and (out != 0).any()
    a = peak._nonzero((1000,), "cpu", torch.Generator().manual_seed(1))
    assert (a.abs() >= 0.25).all() and (a.abs() < 1).all() and (a > 0).any() and (a < 0).any()


def test_unsupported_precisions_are_rows_not_errors(user_cache, fp):
    result = measure_gemm_peak(CPU, ["tf32", "int4", "fp8"], TINY, fp=fp, use_cache=False, **quick())
    assert result.points == ()
    assert set(result.unsupported) == {"tf32", "int4", "fp8"}
    assert all(r.startswith("unsupported:") for r in result.unsupported.values())


def test_cache_round_trip_in_user_dir(user_cache, fp, stable_points):
    first = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    files = list(user_cache.glob("gemm-cpu-*.json"))
    assert len(files) == 1 and fp.slug in files[0].name
    again = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    assert not first.from_cache and again.from_cache
    assert [p.measurement.samples_s for p in again.points] == [p.measurement.samples_s for p in first.points]
    assert again.peak_flop_per_s("fp32") == first.peak_flop_per_s("fp32")
    assert peak.cached_peak_flop_per_s(CPU, "fp32", fp) == first.peak_flop_per_s("fp32")
    fresh = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, remeasure=True, **quick())
    assert not fresh.from_cache and fresh.cached == ()
    # a precision added to a cached sweep is timed; the cached one is named as cached
    mixed = measure_gemm_peak(CPU, ["fp32", "fp64"], TINY, fp=fp, **quick())
    assert not mixed.from_cache and mixed.cached == ("fp32",)
    assert peak.gemm_peak_from_dict(peak.gemm_peak_to_dict(mixed)).cached == ("fp32",)
    ref = ReferencePeaks(device="cpu", chip=None)
    assert [gemm_record(mixed, p, ref)["from_cache"] for p in ("fp32", "fp64")] == [True, False]


def test_other_shapes_are_not_served_from_cache(user_cache, fp, stable_points):
    measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    other = measure_gemm_peak(CPU, ["fp32"], TINY[:1], fp=fp, **quick())
    assert not other.from_cache and len(other.points) == 1


def test_corrupt_cache_is_ignored_with_warning(user_cache, fp, stable_points):
    path = cache.cache_path("gemm", CPU, fp.slug)
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    with pytest.warns(cache.CacheWarning, match="corrupt"):
        result = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    assert not result.from_cache and any("corrupt" in w for w in result.warnings)
    assert json.loads(path.read_text())["schema"] == cache.SCHEMA      # rewritten whole


def test_corrupt_entry_is_remeasured(user_cache, fp, stable_points):
    measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    path = cache.cache_path("gemm", CPU, fp.slug)
    doc = json.loads(path.read_text())
    doc["payload"]["fp32"]["points"][0]["measurement"]["samples_s"] = []
    path.write_text(json.dumps(doc))
    with pytest.warns(cache.CacheWarning, match="corrupt fp32 entry"):
        result = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    assert not result.from_cache and len(result.points) == len(TINY)


def test_stale_cache_is_ignored_with_warning(user_cache, fp, stable_points):
    measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    path = cache.cache_path("gemm", CPU, fp.slug)
    doc = json.loads(path.read_text())
    doc["key"]["torch_version"] = "1.0.0"
    path.write_text(json.dumps(doc))
    with pytest.warns(cache.CacheWarning, match="stale.*torch_version"):
        result = measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    assert not result.from_cache


def test_unstable_entries_are_never_served(user_cache, fp, monkeypatch):
    from chipcal.measure.timing import Measurement

    def noisy(precision, shape, device, **_):
        m, n, k = shape
        flop = 2 * m * n * k
        meas = Measurement.from_samples([1e-3, 3e-3, 1e-3, 3e-3])        # CV 58 % > 10 %: unstable
        return peak.GemmPoint(precision, m, n, k, flop, meas, flop / meas.median_s)

    monkeypatch.setattr(peak, "measure_gemm_point", noisy)
    measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick())
    assert not measure_gemm_peak(CPU, ["fp32"], TINY, fp=fp, **quick()).from_cache
    assert peak.cached_peak_flop_per_s(CPU, "fp32", fp) is None


def test_concurrent_writers_keep_each_others_entries(user_cache, fp):
    key = fp.cache_key(CPU)
    path = cache.cache_path("gemm", CPU, fp.slug)
    # two runs loaded an empty cache, then each writes the precision it measured
    cache.update(path, key, {"fp32": {"points": []}})
    cache.update(path, key, {"bf16": {"points": []}})
    payload, problem = cache.load(path, key)
    assert problem is None and set(payload) == {"fp32", "bf16"}
    assert not list(path.parent.glob("*.tmp"))


def test_failed_write_leaves_no_temp_file(user_cache, fp):
    path = cache.cache_path("gemm", CPU, fp.slug)
    with pytest.raises(ValueError):
        cache.update(path, fp.cache_key(CPU), {"fp32": {"rate": float("nan")}})     # JSON has no NaN
    assert not list(path.parent.glob("*.tmp")) and not path.exists()


def test_cache_key_holds_the_isa_overrides_and_affinity(fp):
    import dataclasses

    key = fp.cache_key(CPU)
    assert {"aten_cpu_capability", "isa_env", "cpu_affinity"} <= set(key)
    forced = dataclasses.replace(fp, isa_env=(("ONEDNN_MAX_CPU_ISA", "AVX2"),))
    assert forced.cache_key(CPU) != key


def test_isa_overrides_are_read_from_the_environment(monkeypatch):
    """oneMKL's ISA switch is recorded beside ATen's and oneDNN's: on an Intel CPU it changes torch's
    fp32 GEMM kernels, so a peak cached without it must not be served with it."""
    for name in system.ISA_ENV:
        monkeypatch.delenv(name, raising=False)
    assert system._env_fields()["isa_env"] == ()
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert set(system._env_fields()["isa_env"]) == {("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("ONEDNN_MAX_CPU_ISA", "AVX2")}


def test_cache_knee_by_hand():
    mib = 2**20
    sizes = [s * mib for s in (1, 2, 4, 8, 16, 32, 64)]
    bw = [100, 100, 100, 90, 20, 20, 20]
    # memory figure: median of the largest third (2 sizes) = 20; sizes >= 1.5 x 20 end at 8 MiB;
    # plateau: median over 1-8 MiB = 100; half-way in log: sqrt(100 x 20) = 44.72, crossed between
    # 8 MiB (90) and 16 MiB (20) at ln(90/44.72) / ln(90/20) = 0.465 of the log step: 8 x 2**0.465 = 11.04 MiB
    assert memory_figure(bw) == 20
    assert cache_knee(sizes, bw) == pytest.approx(11.04 * mib, rel=1e-3)
    # L2 (120) -> L3 (50) -> DRAM (24): the knee ends the L3 plateau, not the L2 step. Memory 24.5;
    # plateau median(120, 120, 50, 50) = 85 (1-8 MiB); sqrt(85 x 24.5) = 45.63, crossed between
    # 8 MiB (50) and 16 MiB (24): ln(50/45.63) / ln(50/24) = 0.1246, 8 x 2**0.1246 = 8.72 MiB
    assert cache_knee(sizes, [120, 120, 50, 50, 24, 24, 25]) == pytest.approx(8.72 * mib, rel=1e-3)
    assert cache_knee(sizes, [50, 50, 48, 49, 50, 47, 49]) is None      # flat: no knee
    # still above half-way at the largest size: the knee is that size
    assert cache_knee(sizes[:5], [100, 100, 100, 90, 80]) is None       # no memory level in the data
    assert cache_knee(sizes, [100, 100, 100, 100, 100, 100, 30]) == pytest.approx(
        32 * mib * 2 ** (math.log(100 / math.sqrt(100 * 65)) / math.log(100 / 30)), rel=1e-6)
    # a noisy size far beyond the cache (the 20261124T204854Z copy curve: 59 GB/s at 90 MiB between
    # 40 and 38) does not extend the plateau: it is not contiguous with the top
    curve = {22.6: 154.6, 32: 91.2, 45.3: 60.3, 64: 40.4, 90.5: 59.4, 128: 38.2, 512: 30.8, 2048: 37.0}
    # memory: median of the largest third (512, 2048 MiB: 30.8, 37.0) = 33.9; run from the top (22.6)
    # while >= 50.85: 22.6, 32, 45.3; plateau median(154.6, 91.2, 60.3) over 5.7-45.3 MiB = 91.2;
    # half-way sqrt(91.2 x 33.9) = 55.60, crossed between 45.3 (60.3) and 64 (40.4):
    # ln(60.3/55.60) / ln(60.3/40.4) = 0.2026, 45.3 x (64/45.3)**0.2026 = 48.58 MiB
    sizes_ = [int(s * mib) for s in curve]
    assert cache_knee(sizes_, list(curve.values())) == pytest.approx(48.58 * mib, rel=2e-3)


def test_cache_knee_ends_the_l3_where_the_largest_sizes_still_read_it():
    """A large L3 on the probe's grid: the largest third of the sizes holds more L3 sizes than
    DRAM ones, so the memory figure reads a cache level; the kernel's DRAM figure takes its place
    (cache_knee's dram_bytes_per_s) and the knee ends the L3 plateau, not the L2 step."""
    mib = 2**20
    sizes = [2**j * mib for j in range(12)]                      # 1 MiB ... 2 GiB
    bw = [120, 120] + [50] * 8 + [24, 24]                        # L2, L3 (4-512 MiB), DRAM
    # largest third (4 sizes): median(50, 50, 24, 24) = 37; alone it gives the L2 step: run from the
    # top while >= 55.5 ends at 2 MiB, plateau 120, sqrt(120 x 37) = 66.63 crossed between 2 MiB
    # (120) and 4 MiB (50) at ln(120/66.63) / ln(120/50) = 0.6723: 2 x 2**0.6723 = 3.186 MiB
    assert memory_figure(bw) == 37
    assert cache_knee(sizes, bw) == pytest.approx(3.186 * mib, rel=1e-3)
    # with the DRAM figure 24 (37 >= 1.5 x 24): run while >= 36 ends at 512 MiB, plateau median over
    # 64-512 MiB = 50, sqrt(50 x 24) = 34.64 crossed half-way in log between 512 (50) and 1024 (24):
    # ln(50/34.64) / ln(50/24) = 0.5, 512 x 2**0.5 = 724.1 MiB
    assert cache_knee(sizes, bw, dram_bytes_per_s=24) == pytest.approx(724.1 * mib, rel=1e-3)
    # where the largest third reads DRAM already (20 < 1.5 x 14), the DRAM figure changes nothing
    s1, bw1 = [s * mib for s in (1, 2, 4, 8, 16, 32, 64)], [100, 100, 100, 90, 20, 20, 20]
    assert cache_knee(s1, bw1, dram_bytes_per_s=14) == cache_knee(s1, bw1)


def test_cache_knee_is_not_interpolated_across_the_sizes_left_out():
    """Sizes dropped as unstable still bracket the crossing: the knee lies before the first of
    them that reads below half-way."""
    mib = 2**20
    sizes, bw = [s * mib for s in (1, 4, 16, 64, 4096)], [120, 50, 50, 50, 24]
    # memory 24 (largest third: the 4 GiB size); run while >= 36 ends at 64 MiB, plateau median over
    # 8-64 MiB = 50, half-way sqrt(50 x 24) = 34.64; across the gap 64 MiB (50) -> 4 GiB (24):
    # ln(50/34.64) / ln(50/24) = 0.5, 64 x 64**0.5 = 512 MiB
    assert cache_knee(sizes, bw) == pytest.approx(512 * mib, rel=1e-6)
    # 256 MiB read 20 (< 34.64) and was left out: 64 (50) -> 256 (20), ln(50/34.64) / ln(50/20) = 0.4005,
    # 64 x 4**0.4005 = 111.5 MiB
    assert cache_knee(sizes, bw, left_out=[(256 * mib, 20), (1024 * mib, 22)]) == pytest.approx(111.5 * mib, rel=1e-3)
    # 128 MiB read 45 (above half-way) before it: 128 (45) -> 256 (20), ln(45/34.64) / ln(45/20) = 0.3228,
    # 128 x 2**0.3228 = 160.1 MiB
    assert cache_knee(sizes, bw, left_out=[(128 * mib, 45), (256 * mib, 20)]) == pytest.approx(160.1 * mib, rel=1e-3)


def test_recorded_xeon_knee_is_its_l3():
    """The 2-vCPU Xeon VM's recorded probe (tests/machines/intel-xeon-spr-2vcpu-noamx-20261127):
    copy 49-53 GB/s from 8 to 91 MiB of working set, 42.1 at 128 MiB, 23.6 and 21.4 at 512 and
    640 MiB (DRAM figure 22.5). Half-way from the ~50 GB/s plateau, sqrt(50 x 22.5) = 33.5, lies
    between 128 MiB (42.1) and 512 MiB (23.6). Triad: 46.7 at 135.8 MiB, 34.6 at 192, DRAM
    median(24.6, 28.5) = 26.55, half-way sqrt(50.5 x 26.55) = 36.6 crossed at
    ln(46.7/36.6) / ln(46.7/34.6) = 0.813 of the step: 135.8 x (192/135.8)**0.813 = 179.9 MiB."""
    from recorded import MACHINES

    from chipcal.calibrate.document import CalibrationDocument
    from chipcal.calibrate.refit import recorded_bandwidth

    doc = CalibrationDocument.from_dict(json.loads(
        (MACHINES / "intel-xeon-spr-2vcpu-noamx-20261127" / "calibration-quick.json").read_text()))
    knees = recorded_bandwidth(doc).knee_bytes
    mib = 2**20
    assert 128 * mib < knees["copy"] < 512 * mib
    assert knees["triad"] == pytest.approx(179.9 * mib, rel=0.02)


def test_local_overrides_take_the_l2s_out_of_the_knee():
    """The knee holds every cache level; the chip's L3 is the knee less the cores' L2s."""
    from chipcal.measure.bandwidth import bandwidth_from_dict, local_overrides
    from chipcal.measure.timing import Measurement

    mib = 2**20
    curve = {1: 100e9, 2: 100e9, 4: 100e9, 8: 90e9, 16: 20e9, 32: 20e9, 64: 20e9}   # the hand case above
    points = [{"kernel": "copy", "size_bytes": s * mib // 2,
               "measurement": Measurement.from_samples([s * mib / bw] * 6).to_dict()} for s, bw in curve.items()]
    bw = bandwidth_from_dict({"device": "cpu", "fingerprint_slug": "t", "warnings": [], "other_cpus": None,
                              "points": points}, None)
    assert bw.knee_bytes["copy"] == pytest.approx(11.04 * mib, rel=1e-3)
    cpu = dataclasses.replace(detect_cpu(), cores=2, l2_bytes_per_core=mib)
    assert local_overrides(bw, cpu)["llc_bytes"] == pytest.approx(9.04 * mib, rel=1e-3)
    assert local_overrides(bw, dataclasses.replace(cpu, l2_bytes_per_core=8 * mib))["llc_bytes"] == \
        bw.knee_bytes["copy"]          # L2s larger than the knee: the knee itself


def test_bandwidth_bytes_counting(user_cache, fp):
    sizes = [64 * 1024, 256 * 1024]
    bw = measure_bandwidth(CPU, sizes, fp=fp, use_cache=False, **quick())
    for p in bw.points:
        arrays = {"copy": 2, "triad": 3}[p.kernel]
        assert p.bytes_moved == arrays * p.size_bytes          # STREAM: copy 2·S, triad 3·S
        assert p.bytes_per_s == pytest.approx(p.bytes_moved / p.measurement.median_s)
    assert set(bw.sustained_bytes_per_s) == {"copy", "triad"}
    # 256 KiB is far inside any last-level cache: warned when this machine reports one (sysfs
    # often has no L3 on Arm and in containers), and then only
    assert any("last-level cache" in w for w in bw.warnings) == bool(fp.l3_bytes)


def test_small_working_sets_are_warned_about_only_against_a_reported_last_level_cache():
    """The warning compares the largest working set with the L3 the OS reports: 2 x 512 KiB
    (copy) is < 2 x 32 MiB; with no L3 reported there is nothing to compare with."""
    from chipcal.measure.bandwidth import BandwidthPoint, bandwidth_from_points
    from chipcal.measure.timing import Measurement

    points = [BandwidthPoint(kernel, size, arrays * size, arrays * size,
                             Measurement.from_samples([arrays * size / 1e10] * 6), 1e10)
              for size in (64 * 1024, 512 * 1024) for kernel, arrays in (("copy", 2), ("triad", 3))]
    with_llc = bandwidth_from_points("cpu", "t", points, False, [], 32 * 2**20, None)
    without = bandwidth_from_points("cpu", "t", points, False, [], None, None)
    assert sum("last-level cache (32 MiB)" in w for w in with_llc.warnings) == 2     # copy and triad
    assert not any("last-level cache" in w for w in without.warnings)


def test_bandwidth_cache_round_trip(user_cache, fp, monkeypatch):
    from chipcal.measure import bandwidth
    from chipcal.measure.timing import Measurement

    def steady(kernel, size, device, max_time_s, min_samples, probe):      # 10 GB/s, no noise
        moved = bandwidth.KERNELS[kernel] * size
        return bandwidth.BandwidthPoint(kernel, size, moved, moved, Measurement.from_samples([moved / 1e10] * 6), 1e10)

    monkeypatch.setattr(bandwidth, "_measure_bandwidth_point", steady)
    sizes = [64 * 1024]
    first = measure_bandwidth(CPU, sizes, fp=fp, **quick())
    again = measure_bandwidth(CPU, sizes, fp=fp, **quick())
    assert not first.from_cache and again.from_cache
    assert again.sustained_bytes_per_s == first.sustained_bytes_per_s


def test_cuda_without_device_raises(fp, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        measure_gemm_peak(Device("cuda"), ["fp16"], TINY, fp=fp)


@pytest.mark.gpu
def test_gpu_gemm_precisions(user_cache):
    """Every precision is swept or says why not; tensor cores with TF32 and bf16 (Ampere and
    later, compute capability 8.0) outrun the fp32 CUDA cores."""
    result = measure_gemm_peak(Device("cuda"), ["fp32", "tf32", "bf16", "fp16", "fp8", "int8"],
                               [(1024, 1024, 1024), (2048, 2048, 2048)], use_cache=False, max_time_s=0.3)
    swept = set(result.precisions) | set(result.unsupported)
    assert {"fp32", "tf32", "bf16", "fp16", "fp8", "int8"} <= swept
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("no TF32 or bf16 tensor cores before compute capability 8.0")
    assert result.peak_flop_per_s("bf16") > result.peak_flop_per_s("fp32")
    assert result.peak_flop_per_s("tf32") > result.peak_flop_per_s("fp32")


def test_best_prefers_stable_points():
    from chipcal.measure.timing import Measurement

    steady = Measurement.from_samples([1.0] * 8)
    noisy = Measurement.from_samples([0.5, 0.9, 0.4, 1.0, 0.45, 0.95, 0.5, 0.3])   # cv > 10%
    assert noisy.unstable and not steady.unstable
    points = (peak.GemmPoint("fp32", 1, 1, 1, 2, steady, 2.0),
              peak.GemmPoint("fp32", 2, 2, 2, 16, noisy, 16 / noisy.median_s))
    assert peak.GemmPeak(device="cpu", fingerprint_slug="s", points=points).best("fp32").m == 1
    assert peak.GemmPeak(device="cpu", fingerprint_slug="s", points=points[1:]).best("fp32").m == 2     # only unstable ones: still a peak


def test_dram_figure_is_read_beyond_the_cache():
    """The copy curve of results/amd-epyc-2c-53ceb17a/20261124T231213Z (working set MiB, GB/s,
    1 = unstable). The largest third of the stable sizes (16, 22.6, 128 and 2048 MiB: 170, 160,
    36, 32) gave (160 + 36) / 2 = 98 GB/s; the sizes within 4x of the largest, 512 and 2048 MiB,
    read 27 and 32: 29.5. Dropping the unstable sizes first is what slid that third into the cache."""
    from chipcal.measure.bandwidth import bandwidth_from_dict, local_overrides
    from chipcal.measure.timing import Measurement

    mib = 2**20
    curve = [(0.03, 33, 0), (0.125, 70, 0), (0.5, 90, 0), (2, 130, 0), (2.8, 136, 0), (4, 149, 0), (5.7, 161, 0),
             (8, 165, 0), (11.3, 170, 0), (16, 170, 0), (22.6, 160, 0), (32, 56, 1), (45.3, 37, 1), (64, 47, 1),
             (90.5, 34, 1), (128, 36, 0), (512, 27, 1), (2048, 32, 0)]

    def point(ws, bw, unstable):
        size = int(ws * mib / 2)             # copy: two arrays
        samples = [2 * size / (bw * 1e9) * f for f in ((0.5, 1.5) * 3 if unstable else (1.0,) * 6)]
        return {"kernel": "copy", "size_bytes": size, "measurement": Measurement.from_samples(samples).to_dict()}

    bw = bandwidth_from_dict({"device": "cpu", "fingerprint_slug": "t", "warnings": [], "other_cpus": None,
                              "points": [point(*c) for c in curve]}, None)
    assert [p.measurement.unstable for p in bw.curve("copy")] == [bool(u) for _, _, u in curve]
    assert bw.sustained_bytes_per_s["copy"] == pytest.approx(29.5e9, rel=0.01)
    assert bw.memory_bytes_per_s == pytest.approx(29.5e9, rel=0.01)
    assert local_overrides(bw, detect_cpu())["memory_bandwidth_bytes_per_s"] == bw.memory_bytes_per_s
    # pooled over kernels: a triad curve whose two largest sizes read 31 and 35 makes it the
    # median of 27, 32, 31, 35 = 31.5
    triad = [dict(point(ws, bw_, 0), kernel="triad", size_bytes=int(ws * mib / 3)) for ws, bw_ in ((768, 31), (3072, 35))]
    both = bandwidth_from_dict({"device": "cpu", "fingerprint_slug": "t", "warnings": [], "other_cpus": None,
                                "points": [point(*c) for c in curve] + triad}, None)
    assert both.memory_bytes_per_s == pytest.approx(31.5e9, rel=0.01)


def test_a_torch_without_a_private_gemm_op_reports_the_precision_unsupported(monkeypatch):
    """int8 and fp8 run on private ops (torch._int_mm, torch._scaled_mm): a torch release without
    one reports the precision unsupported with the reason, found by trying the op, not by version."""
    monkeypatch.delattr(torch, "_int_mm")
    reason = peak.unsupported_reason("int8", CPU)
    assert reason.startswith("unsupported: torch cannot run it here") and "_int_mm" in reason
