"""Memory bandwidth (copy, triad) on the local CPU or a CUDA GPU, with the cache knee.

STREAM convention, fp32 arrays: copy b←a moves 2·S bytes, triad a←b+s·c moves 3·S
(write-allocate traffic not counted). Sizes sweep from L1-resident to several times the reported
LLC, in √2 steps from 1 MiB to 64 MiB per array, where last-level caches end. The knee
(`cache_knee`) is the working set at which the bandwidth has fallen half-way, in log, from the
last-level plateau to the memory level: what the model's all-or-nothing residency rule should
take as the on-chip capacity; it uses the stable sizes only when at least half are stable. The
DRAM figure is the median over both kernels of the sizes within DRAM_WINDOW of each kernel's
largest, stable or not (`out_of_cache`).
Results share the GEMM sweep's per-fingerprint cache document (chipcal.measure.cache).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from chipcal.measure import cache
from chipcal.measure.allocator import release_freed_memory
from chipcal.measure.clocks import clock_probe_for
from chipcal.measure.device import CPU, Device
from chipcal.measure.sweep import Sweep
from chipcal.measure.system import (
    Fingerprint,
    OtherLoad,
    fingerprint,
    local_host_identity,
    matches_host_key,
)
from chipcal.measure.timing import Measurement, budget_s, time_callable
from chipcal.model.local import CpuSpec

DRAM_WINDOW = 4          # sizes within 4x of the largest (two octaves) read the DRAM level
_KNEE_RANGE = tuple(round(2**20 * 2 ** (j / 2) / 4096) * 4096 for j in range(13))   # 1 … 64 MiB in √2 steps
# CPU DRAM sizes 256 and 320 MiB per array: copy 512-640 MiB, 2.5x the largest L3 a VM here reports
# (260 MiB, Emerald Rapids). In 39 recorded runs the 256 MiB sizes read 0.91x (quartiles 0.80-1.01) of
# the 1 GiB sizes the sweep once ended at: no cache left in them. 320, not more: the triad's 960 MiB
# keeps a calibration under 2 GB resident (the 1 GiB triad alone held 3-4 GB).
DEFAULT_BANDWIDTH_SIZES = {
    "cpu": (16 * 1024, 64 * 1024, 256 * 1024, *_KNEE_RANGE, 256 * 2**20, 320 * 2**20),    # per array
    "cuda": tuple(64 * 1024 * 4**i for i in range(8))}    # 64 KiB … 1 GiB per array
KERNELS = {"copy": 2, "triad": 3}   # arrays touched = bytes moved per element / 4
BANDWIDTH_TIME_S = 1.0   # the timing budget of one (kernel, size) point


@dataclass(frozen=True)
class BandwidthPoint:
    kernel: str
    size_bytes: int            # per array
    working_set_bytes: int     # all arrays of the kernel
    bytes_moved: int           # per call (STREAM counting)
    measurement: Measurement
    bytes_per_s: float


@dataclass(frozen=True)
class Bandwidth(Sweep):
    points: tuple[BandwidthPoint, ...]
    knee_bytes: Mapping[str, int | None]              # working set at the last-level-cache knee
    sustained_bytes_per_s: Mapping[str, float]        # per kernel: median of its out_of_cache sizes
    memory_bytes_per_s: float | None = None           # the DRAM figure: median of both kernels' out_of_cache sizes

    def curve(self, kernel: str) -> tuple[BandwidthPoint, ...]:
        return tuple(sorted((p for p in self.points if p.kernel == kernel), key=lambda p: p.size_bytes))


def out_of_cache(curve: Sequence[BandwidthPoint]) -> list[float]:
    """The bandwidths of a kernel's sizes within DRAM_WINDOW of its largest (the top two octaves of
    a sweep that ends far past any LLC), stable or not: the DRAM level.

    Not the largest third of the stable sizes, as before: on a shared host the out-of-cache sizes
    are the unstable ones (neighbours' traffic), and with them dropped, and a cache that still
    reads 80-110 GB/s at 64-96 MiB, that third reached into the cache. The Zen 4 VM's figure read
    72-98 GB/s in three runs where its 256 MiB-1 GiB sizes read 26-34 GB/s in every run.
    """
    largest = max(p.size_bytes for p in curve)
    return [p.bytes_per_s for p in curve if p.size_bytes * DRAM_WINDOW >= largest]


def memory_figure(bandwidths_by_size: Sequence[float]) -> float:
    """The knee's memory level: median of the largest third of the sizes (at least the largest
    one) of the curve the knee is found on (its stable sizes).

    A median over several sizes beyond the knee, because one size on a shared machine can be off
    by 2× (neighbours' traffic) even when its own samples agree.
    """
    values = list(bandwidths_by_size)
    return float(statistics.median(values[-max(1, len(values) // 3):]))


def cache_knee(sizes: Sequence[int], bandwidths: Sequence[float], ratio: float = 1.5,
               dram_bytes_per_s: float | None = None,
               left_out: Sequence[tuple[int, float]] = ()) -> int | None:
    """Working set at the last-level-cache knee: where the bandwidth, falling from its highest
    point, crosses the geometric mean of the last-level plateau and the memory figure;
    interpolated linearly in log size and log bandwidth between the two sizes around the crossing.

    `dram_bytes_per_s`, the kernel's figure beyond every cache (`out_of_cache`), is the memory
    figure where `memory_figure` reads at least `ratio` × it: the largest third of the sizes then
    still holds a cache level, and the knee would end the L2 step below it. The √2 grid puts more
    L3 sizes than DRAM sizes in that third where the L3 is large: on the 2-vCPU Xeon VM the copy
    read 49-53 GB/s from 8 to 91 MiB and 21-24 GB/s at 512-640 MiB, the largest third 46 GB/s, and
    the knee fell at 4.6 MiB in one run and at 106-200 MiB in others, as the sizes' stability fell.

    `left_out`: the (working set, bandwidth) pairs the caller dropped from `sizes` as unstable. One
    inside the step where the crossing falls brackets it too, so that the knee is not interpolated
    across the gap they leave (the 2026-11-21 Xeon run's triad kept 51 GB/s at 48 MiB and 29 at
    3 GiB, and dropped 13 at 192 MiB: across the gap the knee came out at 1 GiB).

    The cached run is the sizes from the highest bandwidth upwards that stay at least `ratio` ×
    the memory figure (`memory_figure`); its last size ends the last-level plateau, whose
    bandwidth is the median over the working sets within 8× below it (so an L2 → L3 step further
    down is not the knee). Half-way in log is where half of an access stream's time goes to each
    level: the capacity at which an all-or-nothing residency rule (model.mapping.base.traffic)
    errs least on either side. Walking from the top, not taking the largest size above a
    threshold, keeps one noisy size far beyond the cache (a neighbour's burst) from moving the
    knee. None when no size reaches `ratio` × the memory figure.
    """
    pairs = sorted(zip(sizes, bandwidths, strict=True))
    if len(pairs) < 2:
        return None
    memory = memory_figure([b for _, b in pairs])
    if dram_bytes_per_s and memory >= ratio * dram_bytes_per_s:
        memory = dram_bytes_per_s
    top = max(range(len(pairs)), key=lambda j: pairs[j][1])
    if pairs[top][1] < ratio * memory:
        return None
    end = _run_end(pairs, top, ratio * memory)
    plateau = statistics.median(bw for size, bw in pairs if pairs[end][0] / 8 <= size <= pairs[end][0])
    half_way = math.sqrt(plateau * memory)
    i = _run_end(pairs, top, half_way)
    if i == len(pairs) - 1:
        return pairs[i][0]
    (s0, b0), (s1, b1) = pairs[i], pairs[i + 1]
    gap = sorted((s, b) for s, b in left_out if s0 < s < s1)
    below = next((j for j, (_, b) in enumerate(gap) if b < half_way), None)
    if below is not None:            # the left-out sizes before it read at least half-way
        s1, b1 = gap[below]
        if below:
            s0, b0 = gap[below - 1]
    frac = math.log(b0 / half_way) / math.log(b0 / b1)
    return int(round(math.exp(math.log(s0) + frac * math.log(s1 / s0))))


def _run_end(pairs: Sequence[tuple[int, float]], start: int, floor: float) -> int:
    """The last index of the run from `start` upwards whose bandwidths stay at or above `floor`."""
    end = start
    while end + 1 < len(pairs) and pairs[end + 1][1] >= floor:
        end += 1
    return end


def bandwidth_callable(kernel: str, size_bytes: int, device: Device) -> Callable[[], object]:
    import torch

    numel = size_bytes // 4
    gen = torch.Generator(device=str(device)).manual_seed(1)
    arrays = [torch.rand(numel, generator=gen, device=str(device)).add_(0.5) for _ in range(KERNELS[kernel])]
    if kernel == "copy":
        src, dst = arrays
        return lambda: dst.copy_(src)
    a, b, c = arrays
    return lambda: torch.add(b, c, alpha=3.0, out=a)


def _free_bytes(device: Device) -> int:
    if device.is_cuda:
        import torch

        return int(torch.cuda.mem_get_info(device.index)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def bandwidth_from_points(device: str, slug: str, points: list[BandwidthPoint], from_cache: bool,
                          notes: list[str], llc_bytes: int | None, other_cpus: float | None) -> Bandwidth:
    knees, sustained, dram = {}, {}, []
    for kernel in KERNELS:
        curve = sorted((p for p in points if p.kernel == kernel), key=lambda p: p.size_bytes)
        if not curve:
            continue
        window = out_of_cache(curve)
        dram += window
        sustained[kernel] = float(statistics.median(window))
        stable = [p for p in curve if not p.measurement.unstable]
        left_out: list[BandwidthPoint] = []
        if len(stable) >= max(2, len(curve) // 2):
            curve, left_out = stable, [p for p in curve if p.measurement.unstable]
        else:
            notes.append(f"{kernel}: most sizes are unstable (noise or other processes): the knee and the "
                         "memory figure are unreliable")
        knees[kernel] = cache_knee([p.working_set_bytes for p in curve], [p.bytes_per_s for p in curve],
                                   dram_bytes_per_s=sustained[kernel],
                                   left_out=[(p.working_set_bytes, p.bytes_per_s) for p in left_out])
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
                     sustained_bytes_per_s=sustained, memory_bytes_per_s=float(statistics.median(dram)) if dram else None,
                     from_cache=from_cache, warnings=tuple(dict.fromkeys(notes)),
                     other_cpus=other_cpus)


def measure_bandwidth(device: Device = CPU, sizes: Sequence[int] | None = None, *, remeasure: bool = False,
                      use_cache: bool = True, fp: Fingerprint | None = None,
                      max_time_s: float = BANDWIDTH_TIME_S, min_samples: int = 6,
                      on_point: Callable[[BandwidthPoint], None] | None = None) -> Bandwidth:
    """Copy and triad bandwidth over `sizes` (bytes per array) with the cache knee (cached)."""

    device.require()
    sizes = [int(s) for s in (sizes or DEFAULT_BANDWIDTH_SIZES[device.kind])]
    fp = fp or fingerprint(device.index)
    llc = None if device.is_cuda else fp.l3_bytes
    path, key = cache.cache_path("bandwidth", device, fp.slug), fp.cache_key(device)
    notes: list[str] = []
    entry = cache.load_or_empty(path, key, use_cache, notes).get("bandwidth")
    if entry is not None and not remeasure and entry.get("sizes") == sizes and not cache.holds_unstable(entry):
        try:
            points = [_bw_point_from_dict(d) for d in entry["points"]]
            return bandwidth_from_points(str(device), fp.slug, points, True, notes + list(entry.get("notes", [])), llc,
                                         entry.get("other_cpus"))
        except (KeyError, TypeError, ValueError) as exc:
            cache.warn(f"ignoring corrupt bandwidth entry in measurement cache {path}: {exc!r}", notes)
    points: list[BandwidthPoint] = []
    skipped: list[str] = []
    probe = clock_probe_for(device)
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
        cache.update(path, key, {"bandwidth": {
            "host": fp.host_identity, "sizes": sizes, "notes": skipped, "other_cpus": other.cpus,
            "points": [{"kernel": p.kernel, "size_bytes": p.size_bytes, "measurement": p.measurement.to_dict()}
                       for p in points]}})
    return bandwidth_from_points(str(device), fp.slug, points, False, notes, llc, other.cpus)


def bandwidth_to_dict(bw: Bandwidth) -> dict:
    """A Bandwidth as plain data; `bandwidth_from_dict` recomputes knees and figures from the points."""
    return {**bw.envelope_dict(),
            "points": [{"kernel": p.kernel, "size_bytes": p.size_bytes, "measurement": p.measurement.to_dict()}
                       for p in bw.points]}


def bandwidth_from_dict(d: dict, llc_bytes: int | None) -> Bandwidth:
    return bandwidth_from_points(d["device"], d["fingerprint_slug"], [_bw_point_from_dict(p) for p in d["points"]],
                                 True, list(d["warnings"]), llc_bytes, d["other_cpus"])


def _measure_bandwidth_point(kernel: str, size: int, device: Device, max_time_s: float, min_samples: int,
                             probe) -> BandwidthPoint:

    fn = bandwidth_callable(kernel, size, device)
    meas = time_callable(fn, device=device, min_samples=min_samples, warmup=0, clock_probe=probe,
                         max_time_s=budget_s(fn, device, max_time_s, min_samples))
    del fn
    release_freed_memory(device)    # the next size's arrays are fresh: this one's go back
    moved = KERNELS[kernel] * size
    return BandwidthPoint(kernel, size, moved, moved, meas, moved / meas.median_s)


def _bw_point_from_dict(d: dict) -> BandwidthPoint:
    kernel, size = d["kernel"], int(d["size_bytes"])
    meas = Measurement.from_dict(d["measurement"])
    moved = KERNELS[kernel] * size
    return BandwidthPoint(kernel, size, moved, moved, meas, moved / meas.median_s)


def cached_cpu_bandwidth(spec: CpuSpec) -> Bandwidth | None:
    """This machine's (CPU `spec`) newest cached CPU bandwidth measurement, found without importing torch
    (`predict --hardware local` must not need torch); None when nothing usable is cached.

    The full cache key holds torch's thread count and ATen ISA, which only an imported torch can
    tell, and the machine slug hashes the GPU as torch sees it. So each entry records the CPU
    side of the machine identity (`Fingerprint.host_identity`), and this takes the newest
    `bandwidth-cpu-*` file whose entry has this host's identity and whose key has this torch
    release, ISA overrides and CPU affinity (`system.matches_host_key`); an unstable entry is not served.
    """
    host = local_host_identity(spec)
    prefix = "bandwidth-cpu-"
    for path in sorted(cache.cache_dir().glob(f"{prefix}*.json"), key=_mtime, reverse=True):
        entry = (cache.load_matching(path, matches_host_key) or {}).get("bandwidth")
        if not isinstance(entry, dict) or entry.get("host") != host or cache.holds_unstable(entry):
            continue
        try:
            points = [_bw_point_from_dict(d) for d in entry["points"]]
        except (KeyError, TypeError, ValueError):
            continue
        if points:
            return bandwidth_from_points("cpu", path.stem.removeprefix(prefix), points, True, [],
                                         spec.l3_bytes, None)
    return None


def _mtime(path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def local_overrides(bandwidth: Bandwidth, cpu: CpuSpec) -> dict:
    """Keyword arguments for system.local_chip from a bandwidth measurement on `cpu`.

    The knee measures every cache level the working set spreads over; the model's on-chip
    capacity is L3 + the cores' L2s (model.mapping.cpu.onchip_capacity), so the last-level cache
    it implies is the knee less the L2s (the knee itself where it is no larger than they are)."""
    knees = [k for k in bandwidth.knee_bytes.values() if k]
    l2s = cpu.cores * cpu.l2_bytes_per_core
    knee = max(knees) if knees else None
    return {"memory_bandwidth_bytes_per_s": bandwidth.memory_bytes_per_s,
            "llc_bytes": (knee - l2s if knee > l2s else knee) if knee else None,
            "measured_by": "bandwidth probe" + (", cached" if bandwidth.from_cache else "")}


@dataclass(frozen=True)
class FirstTouch:
    """The cost of writing into freshly mapped memory: fill of a new `size_bytes` buffer per call
    against the same fill of a reused one. rate = size / (fresh − reused) median seconds."""

    size_bytes: int
    fresh: Measurement
    reused: Measurement

    @property
    def bytes_per_s(self) -> float | None:
        extra = self.fresh.median_s - self.reused.median_s
        return self.size_bytes / extra if extra > 0 else None


def measure_first_touch(size_bytes: int = 64 * 2**20, max_time_s: float = 1.0) -> FirstTouch:
    """Time filling a freshly mapped anonymous `size_bytes` mapping (mmap, fill_, munmap: its pages
    fault on the first write) against filling one mapping kept across calls. The mapping is made
    directly, not through malloc, so the figure does not depend on the allocator's thresholds
    (measure.allocator). On the 2-vCPU KVM guests here: ~4.3 GB/s fresh, ~100 GB/s reused."""
    import mmap

    import torch

    def fill_fresh() -> None:
        with mmap.mmap(-1, size_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as mapping:
            buffer = torch.frombuffer(mapping, dtype=torch.float32)
            buffer.fill_(1.0)
            del buffer                      # the mapping cannot close while a tensor exports it

    kept = torch.empty(size_bytes // 4)
    with torch.inference_mode():
        fresh = time_callable(fill_fresh, max_time_s=max_time_s, min_samples=5)
        reused = time_callable(lambda: kept.fill_(1.0), max_time_s=max_time_s, min_samples=5)
    return FirstTouch(size_bytes, fresh, reused)


def onchip_bandwidth(bw, os_llc_bytes: int | None = None) -> float | None:
    """Last-level-cache bandwidth from the probe: the median over working sets within 8x below
    the cache knee (the plateau the knee ends). Where the probe found no knee, the last-level
    cache size the OS reports (/sys/devices/system/cpu/cpu0/cache) stands in for it; None when
    neither exists."""
    knee = max((k for k in bw.knee_bytes.values() if k), default=None) or os_llc_bytes
    if not knee:
        return None
    plateau = [p.bytes_per_s for p in bw.points if knee / 8 <= p.working_set_bytes <= knee]
    return float(statistics.median(plateau)) if plateau else None
