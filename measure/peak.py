"""GEMM peak per precision and memory bandwidth (copy, triad) on the local CPU or a CUDA GPU.

GEMM: C = A·B over square and tall/skinny shapes; FLOP = 2·m·n·k (1 MAC = 2 FLOP; integer
precisions count ops the same way). Inputs are random with magnitudes in [0.25, 1) and random
signs (int8: ±1…127): no zeros, no denormals, so the datapath toggles as in real use. The peak of a
precision is the best *sustained* rate: the highest median FLOP/s over the shapes.
Precision → op: fp64/fp32/bf16/fp16 `torch.matmul` (fp32 with TF32 off:
`set_float32_matmul_precision("highest")`; tf32 with "high", CUDA only), int8 `torch._int_mm`
(int32 accumulate), fp8 `torch._scaled_mm` (e4m3 operands, unit scales, bf16 out).
A precision torch cannot run here is reported as unsupported with torch's reason.

Bandwidth (STREAM convention, fp32 arrays): copy b←a moves 2·S bytes, triad a←b+s·c moves 3·S
(write-allocate traffic not counted). Sizes sweep from L1-resident to several times the reported
LLC; the knee is the largest size whose bandwidth is still ≥ 1.5× the memory figure (median over
the largest third of the sizes). Both use the stable sizes only when at least half are stable.

Results are cached per machine fingerprint (chipcal.measure.cache) and reused unless
`remeasure=True`.
"""

from __future__ import annotations

import contextlib
import statistics
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from chipcal.measure import cache
from chipcal.measure.system import Fingerprint, OtherLoad, fingerprint
from chipcal.measure.timing import Measurement, budget_s, time_callable
from chipcal.model.precision import FLOP_PER_MAC, check_precision

Shape = tuple[int, int, int]

DEFAULT_PRECISIONS = {"cpu": ("fp32", "bf16", "int8"),
                      "cuda": ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")}
_SQUARE = {"cpu": (256, 512, 1024, 2048, 4096), "cuda": (1024, 2048, 4096, 8192, 16384)}
# tall (large M, small N), short-wide (small M: batch-like), small-K
_RECT = {"cpu": ((16384, 256, 1024), (256, 4096, 4096), (4096, 4096, 256)),
         "cuda": ((65536, 1024, 4096), (1024, 16384, 16384), (16384, 16384, 1024))}
DEFAULT_BANDWIDTH_SIZES = {"cpu": tuple(16 * 1024 * 4**i for i in range(9)),     # 16 KiB … 1 GiB per array
                           "cuda": tuple(64 * 1024 * 4**i for i in range(8))}    # 64 KiB … 1 GiB per array
KERNELS = {"copy": 2, "triad": 3}   # arrays touched = bytes moved per element / 4


def device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def default_shapes(device: str) -> tuple[Shape, ...]:
    kind = device_kind(device)
    return tuple((s, s, s) for s in _SQUARE[kind]) + _RECT[kind]


@dataclass(frozen=True)
class GemmPoint:
    precision: str
    m: int
    n: int
    k: int
    flop: int
    measurement: Measurement
    flop_per_s: float      # flop / median seconds


@dataclass(frozen=True)
class GemmPeak:
    device: str
    fingerprint_slug: str
    points: tuple[GemmPoint, ...]
    unsupported: Mapping[str, str] = field(default_factory=dict)   # precision -> reason
    from_cache: bool = False
    warnings: tuple[str, ...] = ()
    other_cpus: float | None = None     # most CPUs other work used during a precision's sweep (OtherLoad)

    def curve(self, precision: str) -> tuple[GemmPoint, ...]:
        return tuple(p for p in self.points if p.precision == precision)

    def best(self, precision: str) -> GemmPoint | None:
        """The shape with the highest sustained (median) FLOP/s for `precision`.

        Chosen among the stable points when there are any: the maximum over noisy points is biased
        upward (a lucky shape wins), so an unstable point is the peak only if all are unstable.
        """
        curve = self.curve(precision)
        stable = [p for p in curve if not p.measurement.unstable]
        return max(stable or curve, key=lambda p: p.flop_per_s, default=None)

    def peak_flop_per_s(self, precision: str) -> float | None:
        best = self.best(precision)
        return None if best is None else best.flop_per_s

    @property
    def precisions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.precision for p in self.points))


@dataclass(frozen=True)
class BandwidthPoint:
    kernel: str
    size_bytes: int            # per array
    working_set_bytes: int     # all arrays of the kernel
    bytes_moved: int           # per call (STREAM counting)
    measurement: Measurement
    bytes_per_s: float


@dataclass(frozen=True)
class Bandwidth:
    device: str
    fingerprint_slug: str
    points: tuple[BandwidthPoint, ...]
    knee_bytes: Mapping[str, int | None]              # working set at the last-level-cache knee
    sustained_bytes_per_s: Mapping[str, float]        # out of cache: memory_figure of the curve
    from_cache: bool = False
    warnings: tuple[str, ...] = ()
    other_cpus: float | None = None                   # CPUs other work used during the sweep (OtherLoad)

    def curve(self, kernel: str) -> tuple[BandwidthPoint, ...]:
        return tuple(sorted((p for p in self.points if p.kernel == kernel), key=lambda p: p.size_bytes))


# --- operands -----------------------------------------------------------------------------------

def _nonzero(shape: tuple[int, ...], device: str, gen) -> object:
    """fp32 values with magnitude in [0.25, 1) and random sign, generated on `device`."""
    import torch

    mag = torch.rand(shape, generator=gen, device=device) * 0.75 + 0.25
    sign = torch.randint(0, 2, shape, generator=gen, device=device) * 2 - 1
    return mag * sign


def _float_dtype(precision: str):
    import torch

    return {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
            "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def gemm_callable(precision: str, m: int, n: int, k: int, device: str, seed: int = 0) -> Callable[[], object]:
    """A no-argument function computing one m×k · k×n product at `precision` on `device`."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    if precision == "int8":
        def ints(shape):
            mag = torch.randint(1, 128, shape, generator=gen, dtype=torch.int16, device=device)
            sign = torch.randint(0, 2, shape, generator=gen, dtype=torch.int16, device=device) * 2 - 1
            return (mag * sign).to(torch.int8)
        a, b = ints((m, k)), ints((k, n))
        out = torch.empty((m, n), dtype=torch.int32, device=device)
        return lambda: torch._int_mm(a, b, out=out)
    if precision == "fp8":
        a = _nonzero((m, k), device, gen).to(torch.float8_e4m3fn)
        b = _nonzero((n, k), device, gen).to(torch.float8_e4m3fn).t()   # column-major, as _scaled_mm needs
        one = torch.tensor(1.0, device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if precision in ("fp64", "fp32", "tf32", "bf16", "fp16"):
        dtype = _float_dtype(precision)
        a, b = _nonzero((m, k), device, gen).to(dtype), _nonzero((k, n), device, gen).to(dtype)
        out = torch.empty((m, n), dtype=dtype, device=device)
        return lambda: torch.matmul(a, b, out=out)
    raise ValueError(f"no GEMM op for precision {precision!r}")


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """fp32 matmuls in true fp32 ("highest"), or TF32 ("high") for precision tf32; restored after."""
    import torch

    prior = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(prior)


def unsupported_reason(precision: str, device: str) -> str | None:
    """Why `precision` cannot be measured on `device` (None when a small trial GEMM runs)."""
    import torch

    kind = device_kind(device)
    if precision == "int4":
        return "unsupported: torch has no dense int4 GEMM op"
    if precision == "tf32" and kind == "cpu":
        return "unsupported: TF32 is an NVIDIA tensor-core mode; no CPU equivalent"
    if precision == "fp8" and kind == "cpu":
        return ("unsupported: no CPU fp8 matrix hardware; torch._scaled_mm on CPU is a reference "
                "emulation (~0.1 GFLOP/s here), not a peak")
    if kind == "cuda" and precision == "fp8" and torch.cuda.get_device_capability(device) < (8, 9):
        return "unsupported: fp8 GEMM needs compute capability ≥ 8.9 (Ada/Hopper)"
    try:
        with matmul_precision(precision):
            gemm_callable(precision, 32, 32, 32, device)()
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"unsupported: torch cannot run it here ({first})"
    return None


def gpu_clock_probe(device: str) -> Callable[[], float | None] | None:
    """NVML SM clock reader (Hz) for clock-change detection, None without NVML."""
    from chipcal.measure.nvml import NvmlUnavailable, cuda_uuid, device_handle, open_nvml

    index = int(device.partition(":")[2] or 0)
    try:
        nv = open_nvml()
        handle = device_handle(nv, index, cuda_uuid(index))
    except NvmlUnavailable:
        return None

    def probe() -> float | None:
        try:
            return float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)) * 1e6
        except Exception:
            return None

    return probe


def _check_device(device: str) -> None:
    import torch

    if device_kind(device) == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but no CUDA device is available")


def _warn(message: str, notes: list[str]) -> None:
    warnings.warn(message, cache.CacheWarning, stacklevel=3)
    notes.append(message)


def _load_doc(path, key: dict, use_cache: bool, notes: list[str]) -> dict:
    """The cached document (a fresh one when absent, stale, corrupt or not wanted)."""
    if not use_cache:
        return {}
    payload, problem = cache.load(path, key)
    if problem:
        _warn(problem, notes)
    return payload or {}


def _clock_probe(device: str):
    return gpu_clock_probe(device) if device_kind(device) == "cuda" else None


# --- GEMM sweep ---------------------------------------------------------------------------------

def _point_to_dict(p: GemmPoint) -> dict:
    return {"m": p.m, "n": p.n, "k": p.k, "measurement": p.measurement.to_dict()}


def _point_from_dict(precision: str, d: dict) -> GemmPoint:
    m = Measurement.from_dict(d["measurement"])
    flop = FLOP_PER_MAC * int(d["m"]) * int(d["n"]) * int(d["k"])
    return GemmPoint(precision, int(d["m"]), int(d["n"]), int(d["k"]), flop, m, flop / m.median_s)


def measure_gemm_point(precision: str, shape: Shape, device: str, *, max_time_s: float = 2.0,
                       min_samples: int = 6, clock_probe=None) -> GemmPoint:
    """Time one GEMM shape at `precision`: FLOP = 2·m·n·k, FLOP/s from the median time."""
    import torch

    m, n, k = shape
    fn = gemm_callable(precision, m, n, k, device)
    with matmul_precision(precision):
        meas = time_callable(fn, device=device, min_samples=min_samples, warmup=0, clock_probe=clock_probe,
                             max_time_s=budget_s(fn, device, max_time_s, min_samples))
    del fn
    if device_kind(device) == "cuda":
        torch.cuda.empty_cache()
    flop = FLOP_PER_MAC * m * n * k
    return GemmPoint(precision, m, n, k, flop, meas, flop / meas.median_s)


def measure_gemm_peak(device: str = "cpu", precisions: Sequence[str] | None = None,
                      shapes: Sequence[Shape] | None = None, *, remeasure: bool = False,
                      use_cache: bool = True, fp: Fingerprint | None = None, max_time_s: float = 2.0,
                      min_samples: int = 6, on_point: Callable[[GemmPoint], None] | None = None) -> GemmPeak:
    """GEMM FLOP/s curves and best sustained peak per precision (cached per fingerprint).

    `on_point` is called after each measured shape (for progress bars and row-by-row output);
    each precision is written to the cache as soon as its sweep completes.
    """
    _check_device(device)
    precisions = [check_precision(p) for p in (precisions or DEFAULT_PRECISIONS[device_kind(device)])]
    shapes = [tuple(int(v) for v in s) for s in (shapes or default_shapes(device))]
    fp = fp or fingerprint(_gpu_index(device))
    path, key = cache.cache_path("peak", device, fp.slug), fp.cache_key(device)
    notes: list[str] = []
    doc = _load_doc(path, key, use_cache, notes)
    gemm_doc: dict = doc.setdefault("gemm", {})
    points: list[GemmPoint] = []
    unsupported: dict[str, str] = {}
    others: list[float] = []
    all_cached = True
    probe = _clock_probe(device)
    for precision in precisions:
        entry = gemm_doc.get(precision)
        if entry is not None and not remeasure and entry.get("shapes") == [list(s) for s in shapes]:
            try:
                if entry.get("unsupported"):
                    unsupported[precision] = entry["unsupported"]
                else:
                    points.extend([_point_from_dict(precision, d) for d in entry["points"]])
                    if entry.get("other_cpus") is not None:
                        others.append(float(entry["other_cpus"]))
                continue
            except (KeyError, TypeError, ValueError) as exc:
                _warn(f"ignoring corrupt {precision} entry in measurement cache {path}: {exc!r}", notes)
        all_cached = False
        reason = unsupported_reason(precision, device)
        if reason:
            unsupported[precision] = reason
            gemm_doc[precision] = {"shapes": [list(s) for s in shapes], "unsupported": reason}
        else:
            curve = []
            with OtherLoad() as other:
                for shape in shapes:
                    point = measure_gemm_point(precision, shape, device, max_time_s=max_time_s,
                                               min_samples=min_samples, clock_probe=probe)
                    curve.append(point)
                    if on_point:
                        on_point(point)
            points.extend(curve)
            if other.cpus is not None:
                others.append(other.cpus)
            gemm_doc[precision] = {"shapes": [list(s) for s in shapes], "other_cpus": other.cpus,
                                   "points": [_point_to_dict(p) for p in curve]}
        if use_cache:
            cache.save(path, key, doc)
    return GemmPeak(device=device, fingerprint_slug=fp.slug, points=tuple(points), unsupported=unsupported,
                    from_cache=all_cached, warnings=tuple(notes), other_cpus=max(others, default=None))


def cached_peak_flop_per_s(device: str, precision: str, fp: Fingerprint) -> float | None:
    """The cached peak of `precision` (any shape sweep), None when nothing valid is cached."""
    payload, _ = cache.load(cache.cache_path("peak", device, fp.slug), fp.cache_key(device))
    try:
        points = [_point_from_dict(precision, d) for d in (payload or {})["gemm"][precision]["points"]]
    except (KeyError, TypeError, ValueError):
        return None
    return GemmPeak(device, fp.slug, tuple(points), from_cache=True).peak_flop_per_s(precision)


def cached_bandwidth(device: str, fp: Fingerprint) -> Bandwidth | None:
    """The cached bandwidth measurement of this machine, None when nothing valid is cached."""
    payload, _ = cache.load(cache.cache_path("peak", device, fp.slug), fp.cache_key(device))
    try:
        points = [_bw_point_from_dict(d) for d in (payload or {})["bandwidth"]["points"]]
    except (KeyError, TypeError, ValueError):
        return None
    llc = fp.l3_bytes if device_kind(device) == "cpu" else None
    return _bandwidth_from_points(device, fp.slug, points, True, [], llc, None) if points else None


def local_overrides(bandwidth: Bandwidth) -> dict:
    """Keyword arguments for system.local_chip from a bandwidth measurement."""
    knees = [k for k in bandwidth.knee_bytes.values() if k]
    return {"memory_bandwidth_bytes_per_s": max(bandwidth.sustained_bytes_per_s.values(), default=None),
            "llc_bytes": max(knees) if knees else None,
            "measured_by": "bandwidth probe" + (", cached" if bandwidth.from_cache else "")}


def _gpu_index(device: str) -> int:
    return int(device.partition(":")[2] or 0) if device_kind(device) == "cuda" else 0


# --- bandwidth ----------------------------------------------------------------------------------

def memory_figure(bandwidths_by_size: Sequence[float]) -> float:
    """Bandwidth out of cache: median of the largest third of the sizes (at least the largest one).

    A median over several sizes beyond the knee, because one size on a shared machine can be off
    by 2× (neighbours' traffic) even when its own samples agree.
    """
    values = list(bandwidths_by_size)
    return float(statistics.median(values[-max(1, len(values) // 3):]))


def cache_knee(sizes: Sequence[int], bandwidths: Sequence[float], ratio: float = 1.5) -> int | None:
    """Working set at the last-level-cache knee: the largest size still `ratio`× above memory.

    The memory figure is `memory_figure` (median over the largest third of the sizes); sizes whose
    bandwidth is at least ratio × that figure are still served by some cache, so the largest of them
    is where the last-level cache stops holding the working set (an L2→L3 step above it is not the
    knee). None when no size reaches ratio × the memory figure.
    """
    pairs = sorted(zip(sizes, bandwidths, strict=True))
    if len(pairs) < 2:
        return None
    threshold = ratio * memory_figure([b for _, b in pairs])
    cached = [size for size, bw in pairs if bw >= threshold]
    return max(cached) if cached else None


def bandwidth_callable(kernel: str, size_bytes: int, device: str) -> Callable[[], object]:
    import torch

    numel = size_bytes // 4
    gen = torch.Generator(device=device).manual_seed(1)
    arrays = [torch.rand(numel, generator=gen, device=device) + 0.5 for _ in range(KERNELS[kernel])]
    if kernel == "copy":
        src, dst = arrays
        return lambda: dst.copy_(src)
    a, b, c = arrays
    return lambda: torch.add(b, c, alpha=3.0, out=a)


def _free_bytes(device: str) -> int:
    if device_kind(device) == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(_gpu_index(device))[0])
    import psutil

    return int(psutil.virtual_memory().available)


def _bandwidth_from_points(device: str, slug: str, points: list[BandwidthPoint], from_cache: bool,
                           notes: list[str], llc_bytes: int | None, other_cpus: float | None) -> Bandwidth:
    knees, sustained = {}, {}
    for kernel in KERNELS:
        curve = sorted((p for p in points if p.kernel == kernel), key=lambda p: p.size_bytes)
        if not curve:
            continue
        stable = [p for p in curve if not p.measurement.unstable]
        if len(stable) >= max(2, len(curve) // 2):
            curve = stable
        else:
            notes.append(f"{kernel}: most sizes are unstable (noise or other processes): the knee and the "
                         "memory figure are unreliable")
        knees[kernel] = cache_knee([p.working_set_bytes for p in curve], [p.bytes_per_s for p in curve])
        sustained[kernel] = memory_figure([p.bytes_per_s for p in curve])
        largest = curve[-1].working_set_bytes
        if knees[kernel] is None:
            notes.append(f"{kernel}: no cache knee within the sizes measured; the largest working set "
                         f"({largest / 2**20:.0f} MiB) may still be cache-resident")
        elif largest < 2 * knees[kernel]:
            notes.append(f"{kernel}: largest working set is < 2× the knee; memory bandwidth may be overstated")
        if llc_bytes and largest < 2 * llc_bytes:
            notes.append(f"{kernel}: largest working set {largest / 2**20:.0f} MiB is < 2× the reported "
                         f"last-level cache ({llc_bytes / 2**20:.0f} MiB)")
    return Bandwidth(device=device, fingerprint_slug=slug, points=tuple(points), knee_bytes=knees,
                     sustained_bytes_per_s=sustained, from_cache=from_cache, warnings=tuple(dict.fromkeys(notes)),
                     other_cpus=other_cpus)


def measure_bandwidth(device: str = "cpu", sizes: Sequence[int] | None = None, *, remeasure: bool = False,
                      use_cache: bool = True, fp: Fingerprint | None = None, max_time_s: float = 1.0,
                      min_samples: int = 6,
                      on_point: Callable[[BandwidthPoint], None] | None = None) -> Bandwidth:
    """Copy and triad bandwidth over `sizes` (bytes per array) with the cache knee (cached)."""

    _check_device(device)
    sizes = [int(s) for s in (sizes or DEFAULT_BANDWIDTH_SIZES[device_kind(device)])]
    fp = fp or fingerprint(_gpu_index(device))
    llc = fp.l3_bytes if device_kind(device) == "cpu" else None
    path, key = cache.cache_path("peak", device, fp.slug), fp.cache_key(device)
    notes: list[str] = []
    doc = _load_doc(path, key, use_cache, notes)
    entry = doc.get("bandwidth")
    if entry is not None and not remeasure and entry.get("sizes") == sizes:
        try:
            points = [_bw_point_from_dict(d) for d in entry["points"]]
            return _bandwidth_from_points(device, fp.slug, points, True, notes + list(entry.get("notes", [])), llc,
                                          entry.get("other_cpus"))
        except (KeyError, TypeError, ValueError) as exc:
            _warn(f"ignoring corrupt bandwidth entry in measurement cache {path}: {exc!r}", notes)
    points: list[BandwidthPoint] = []
    skipped: list[str] = []
    probe = _clock_probe(device)
    with OtherLoad() as other:
        for size in sizes:
            for kernel, arrays in KERNELS.items():
                if arrays * size > 0.5 * _free_bytes(device):
                    skipped.append(f"{kernel} at {size / 2**20:.0f} MiB skipped: needs more than half the free memory")
                    continue
                point = _measure_bandwidth_point(kernel, size, device, max_time_s, min_samples, probe)
                points.append(point)
                if on_point:
                    on_point(point)
    notes.extend(skipped)
    if use_cache:
        doc["bandwidth"] = {"sizes": sizes, "notes": skipped, "other_cpus": other.cpus,
                            "points": [{"kernel": p.kernel, "size_bytes": p.size_bytes,
                                        "measurement": p.measurement.to_dict()} for p in points]}
        cache.save(path, key, doc)
    return _bandwidth_from_points(device, fp.slug, points, False, notes, llc, other.cpus)


def _measure_bandwidth_point(kernel: str, size: int, device: str, max_time_s: float, min_samples: int,
                             probe) -> BandwidthPoint:
    import torch

    fn = bandwidth_callable(kernel, size, device)
    meas = time_callable(fn, device=device, min_samples=min_samples, warmup=0, clock_probe=probe,
                         max_time_s=budget_s(fn, device, max_time_s, min_samples))
    del fn
    if device_kind(device) == "cuda":
        torch.cuda.empty_cache()
    moved = KERNELS[kernel] * size
    return BandwidthPoint(kernel, size, moved, moved, meas, moved / meas.median_s)


def _bw_point_from_dict(d: dict) -> BandwidthPoint:
    kernel, size = d["kernel"], int(d["size_bytes"])
    meas = Measurement.from_dict(d["measurement"])
    moved = KERNELS[kernel] * size
    return BandwidthPoint(kernel, size, moved, moved, meas, moved / meas.median_s)
