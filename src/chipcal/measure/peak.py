"""GEMM peak per precision on the local CPU or a CUDA GPU (bandwidth: src/chipcal/measure/bandwidth.py).

GEMM: C = A·B over square and tall/skinny shapes; FLOP = 2·m·n·k (1 MAC = 2 FLOP; integer
precisions count ops the same way). Inputs are random with magnitudes in [0.25, 1) and random
signs (int8: ±1…127): no zeros, no denormals, so the datapath toggles as in real use. The peak of a
precision is the best *sustained* rate: the highest median FLOP/s over the shapes.
Precision → op: fp64/fp32/bf16/fp16 `torch.matmul` (fp32 with TF32 off:
`set_float32_matmul_precision("highest")`; tf32 with "high", CUDA only), int8 `torch._int_mm`
(int32 accumulate), fp8 `torch._scaled_mm` (e4m3 operands, unit scales, bf16 out).
A precision torch cannot run here is reported as unsupported with torch's reason.

Bounded on any machine: shapes run in order of work, and a shape whose single call, predicted
from the rate of the previous shape of the sweep (never below the one-thread trial GEMM's),
would exceed `max_call_s` is skipped and listed in `GemmPeak.skipped`. A precision without a hardware unit
here (`emulated`: Fingerprint.cpu_precisions) is timed once, at the largest default shape whose
call is predicted under EMULATED_CALL_S, and reported with its rate; it is not a peak.

Results are cached per machine fingerprint (chipcal.measure.cache) and reused unless
`remeasure=True`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from chipcal.measure import cache
from chipcal.measure.allocator import release_freed_memory
from chipcal.measure.clocks import clock_events_probe_for, clock_probe_for
from chipcal.measure.cpu import CPU_SWEEP_PRECISIONS
from chipcal.measure.device import CPU, Device
from chipcal.measure.sweep import Sweep
from chipcal.measure.system import Fingerprint, OtherLoad, fingerprint
from chipcal.measure.throttle import ThrottleWatch
from chipcal.measure.timing import Measurement, budget_s, fixed_threads, time_callable
from chipcal.model.precision import FLOP_PER_MAC, check_precision

Shape = tuple[int, int, int]

CUDA_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
TRIAL_SIZE = 64            # m = n = k of the trial GEMM that says whether, and how fast, a precision runs
TRIAL_CALLS, TRIAL_TIME_S = 20, 0.05   # trial calls: at most this many, stopping after this long
EMULATED_CALL_S = 0.25     # an emulated precision's one shape: predicted call time under this
EMULATED_TIME_S = 1.0      # ... and its whole timing budget
GEMM_TIME_S = 2.0          # the timing budget of one swept shape
_SQUARE = {"cpu": (256, 512, 1024, 2048, 4096), "cuda": (1024, 2048, 4096, 8192, 16384)}
# tall (large M, small N), short-wide (small M: batch-like), small-K
_RECT = {"cpu": ((16384, 256, 1024), (256, 4096, 4096), (4096, 4096, 256)),
         "cuda": ((65536, 1024, 4096), (1024, 16384, 16384), (16384, 16384, 1024))}


def default_shapes(device: Device) -> tuple[Shape, ...]:
    kind = device.kind
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
class SkippedShape:
    """A shape not run because its one call was predicted to take longer than the bound."""

    precision: str
    m: int
    n: int
    k: int
    predicted_call_s: float
    limit_s: float


@dataclass(frozen=True)
class GemmPeak(Sweep):
    points: tuple[GemmPoint, ...]
    unsupported: Mapping[str, str] = field(default_factory=dict)   # precision -> reason
    emulated: Mapping[str, str] = field(default_factory=dict)      # precision -> why it has no unit here
    skipped: tuple[SkippedShape, ...] = ()
    throttle: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # precision -> throttling seen
    throttle_note: str = ""      # why throttling cannot be observed here, when it cannot
    cached: tuple[str, ...] = ()   # precisions read from the measurement cache, not timed by this call

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

    @property
    def native_precisions(self) -> tuple[str, ...]:
        """Measured precisions that ran on a hardware unit: the ones a peak or a fit may use."""
        return tuple(p for p in self.precisions if p not in self.emulated)


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


def gemm_callable(precision: str, m: int, n: int, k: int, device: Device, seed: int = 0) -> Callable[[], object]:
    """A no-argument function computing one m×k · k×n product at `precision` on `device`."""
    import torch

    cuda, device = device.is_cuda, str(device)     # torch takes the device's text
    gen = torch.Generator(device=device).manual_seed(seed)
    if precision == "int8":
        def ints(shape):
            mag = torch.randint(1, 128, shape, generator=gen, dtype=torch.int16, device=device)
            sign = torch.randint(0, 2, shape, generator=gen, dtype=torch.int16, device=device) * 2 - 1
            return (mag * sign).to(torch.int8)
        # CUDA: B column-major (an n×k row-major buffer, transposed): cuBLASLt's int8 tensor-core
        # kernels take A row-major and B column-major ("TN"); a row-major B ran at 7 % of the H100's
        # dense int8 peak (137 TOPS). The CPU path (oneDNN) keeps the row-major B it was measured with.
        a = ints((m, k))
        b = ints((n, k)).t() if cuda else ints((k, n))
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


@dataclass(frozen=True)
class Trial:
    """A TRIAL_SIZE³ GEMM: why the precision cannot run (`reason`), else its per-call time."""

    reason: str | None
    call_s: float | None = None

    @property
    def flop_per_s(self) -> float | None:
        return None if not self.call_s else FLOP_PER_MAC * TRIAL_SIZE**3 / self.call_s


def trial(precision: str, device: Device) -> Trial:
    """Run one small GEMM (after a warm-up call): unsupported with torch's reason, or its rate.

    The rate of a tiny GEMM is a lower bound on the rate of a large one (fixed per-call costs
    dominate it), so predicting a large call from it errs on the long side: safe for skipping.
    Up to TRIAL_CALLS calls within TRIAL_TIME_S (one call at least); the fastest one counts. One
    thread: on a shared host a multithreaded tiny call waits milliseconds at its barrier for a
    descheduled thread, which says nothing about the rate; one thread's rate is a lower bound.
    """
    import time

    import torch

    reason = unsupported_reason(precision, device)
    if reason:
        return Trial(reason)
    fn = gemm_callable(precision, TRIAL_SIZE, TRIAL_SIZE, TRIAL_SIZE, device)
    calls: list[float] = []
    with matmul_precision(precision), torch.inference_mode(), fixed_threads(1):
        fn()
        _sync(device)
        deadline = time.perf_counter() + TRIAL_TIME_S
        while len(calls) < TRIAL_CALLS and (not calls or time.perf_counter() < deadline):
            start = time.perf_counter()
            fn()
            _sync(device)
            calls.append(time.perf_counter() - start)
    # the fastest call: on a shared host one call can wait milliseconds for a descheduled thread
    return Trial(None, max(min(calls), 1e-9))


def _sync(device: Device) -> None:
    if device.is_cuda:
        import torch

        torch.cuda.synchronize(device.index)


def unsupported_reason(precision: str, device: Device) -> str | None:
    """Why `precision` cannot be measured on `device` (None when a tiny trial GEMM runs)."""
    import torch

    kind = device.kind
    if precision == "int4":
        return "unsupported: torch has no dense int4 GEMM op"
    if precision == "tf32" and kind == "cpu":
        return "unsupported: TF32 is an NVIDIA tensor-core mode; no CPU equivalent"
    if precision == "fp8" and kind == "cpu":
        return ("unsupported: no CPU fp8 matrix hardware; torch._scaled_mm on CPU is a reference "
                "emulation (~0.1 GFLOP/s here), not a peak")
    if kind == "cuda" and precision == "fp8" and torch.cuda.get_device_capability(device.index) < (8, 9):
        return "unsupported: fp8 GEMM needs compute capability ≥ 8.9 (Ada/Hopper)"
    try:
        with matmul_precision(precision):
            gemm_callable(precision, 32, 32, 32, device)()
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError) as exc:
        # AttributeError: a torch without the private op (torch._int_mm, torch._scaled_mm)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"unsupported: torch cannot run it here ({first})"
    return None


# --- GEMM sweep ---------------------------------------------------------------------------------

def _point_to_dict(p: GemmPoint) -> dict:
    return {"m": p.m, "n": p.n, "k": p.k, "measurement": p.measurement.to_dict()}


def _point_from_dict(precision: str, d: dict) -> GemmPoint:
    m = Measurement.from_dict(d["measurement"])
    flop = FLOP_PER_MAC * int(d["m"]) * int(d["n"]) * int(d["k"])
    return GemmPoint(precision, int(d["m"]), int(d["n"]), int(d["k"]), flop, m, flop / m.median_s)


def measure_gemm_point(precision: str, shape: Shape, device: Device, *, max_time_s: float = 2.0,
                       min_samples: int = 6, clock_probe=None) -> GemmPoint:
    """Time one GEMM shape at `precision`: FLOP = 2·m·n·k, FLOP/s from the median time."""

    m, n, k = shape
    fn = gemm_callable(precision, m, n, k, device)
    with matmul_precision(precision):
        meas = time_callable(fn, device=device, min_samples=min_samples, warmup=0, clock_probe=clock_probe,
                             max_time_s=budget_s(fn, device, max_time_s, min_samples))
    del fn
    release_freed_memory(device)    # the next shape's buffers are fresh: this one's go back
    flop = FLOP_PER_MAC * m * n * k
    return GemmPoint(precision, m, n, k, flop, meas, flop / meas.median_s)


def default_precisions(device: Device, fp: Fingerprint) -> tuple[str, ...]:
    """CUDA: every GEMM precision torch has. CPU: fp32, bf16, fp16 and int8; those with a hardware
    unit here get the full sweep, the others are timed once as emulated (`emulated_reasons`)."""
    return CUDA_PRECISIONS if device.is_cuda else CPU_SWEEP_PRECISIONS


def emulated_reasons(device: Device, fp: Fingerprint, precisions: Sequence[str]) -> dict[str, str]:
    """Requested CPU precisions without a hardware unit here, each with the reason."""
    if device.is_cuda:
        return {}
    support = fp.cpu_precisions
    why = (f"emulated: no {{p}} hardware unit on this CPU (features: {', '.join(fp.cpu_features) or 'none'}; "
           f"ATen {fp.aten_cpu_capability}, oneDNN bf16 {fp.mkldnn_bf16}); timed once at one small shape")
    return {p: why.format(p=p) for p in precisions if support.get(p) == "emulated"}


def _emulated_shape(shapes: Sequence[Shape], rate: float) -> Shape:
    """The largest shape whose one call is predicted under EMULATED_CALL_S (else the trial shape)."""
    fits = [s for s in shapes if FLOP_PER_MAC * s[0] * s[1] * s[2] / rate <= EMULATED_CALL_S]
    return max(fits, key=lambda s: s[0] * s[1] * s[2], default=(TRIAL_SIZE,) * 3)


def _sweep(precision: str, shapes: Sequence[Shape], device: Device, rate: float, max_call_s: float,
           timing: dict, on_point, advance) -> tuple[list[GemmPoint], list[SkippedShape]]:
    """Shapes in order of work; each call predicted from the previous shape's rate, skipped when
    the prediction exceeds `max_call_s`.

    The previous shape's rate is taken at its fastest sample, and never below the one-thread
    trial `rate`: on a shared host a small multithreaded call can wait milliseconds at a barrier,
    a fixed cost that would otherwise be extrapolated in proportion to the work."""
    curve, skipped = [], []
    trial_rate = rate
    for shape in sorted(shapes, key=lambda s: s[0] * s[1] * s[2]):
        predicted = FLOP_PER_MAC * shape[0] * shape[1] * shape[2] / rate
        if predicted > max_call_s:
            skipped.append(SkippedShape(precision, *shape, predicted_call_s=predicted, limit_s=max_call_s))
        else:
            point = measure_gemm_point(precision, shape, device, **timing)
            curve.append(point)
            rate = max(trial_rate, point.flop / min(point.measurement.samples_s))
            if on_point:
                on_point(point)
        advance()
    return curve, skipped


@dataclass
class _Sweeps:
    """What a sweep over precisions gathers, precision by precision, for its GemmPeak."""

    points: list[GemmPoint] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    skipped: list[SkippedShape] = field(default_factory=list)
    others: list[float] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    throttle: dict[str, tuple[str, ...]] = field(default_factory=dict)
    throttle_note: str = ""


@dataclass(frozen=True)
class _SweepPlan:
    """One call's settings, the same for every precision it sweeps."""

    device: Device
    shapes: list[Shape]
    max_call_s: float
    emulated: dict[str, str]
    timing: dict
    events: Callable[[], int] | None
    on_point: Callable[[GemmPoint], None] | None
    on_shape: Callable[[str], None] | None

    def wanted(self, precision: str) -> dict:
        """The settings a cached entry of `precision` must have been measured with."""
        return {"shapes": [list(s) for s in self.shapes], "max_call_s": self.max_call_s,
                "emulated": self.emulated.get(precision)}

    def advance(self, precision: str, shape: Shape | None = None) -> None:
        if self.on_shape:
            self.on_shape(f"{precision} GEMM {'x'.join(map(str, shape))}" if shape else f"{precision} GEMM")


def measure_gemm_peak(device: Device = CPU, precisions: Sequence[str] | None = None,
                      shapes: Sequence[Shape] | None = None, *, remeasure: bool = False,
                      use_cache: bool = True, fp: Fingerprint | None = None,
                      max_time_s: float = GEMM_TIME_S, min_samples: int = 6, max_call_s: float | None = None,
                      on_point: Callable[[GemmPoint], None] | None = None,
                      on_shape: Callable[[str], None] | None = None) -> GemmPeak:
    """GEMM FLOP/s curves and best sustained peak per precision (cached per fingerprint).

    Default precisions: `default_precisions`. `max_call_s` bounds one GEMM call (default: what
    the stretched timing budget holds `min_samples` times, 4·max_time_s / min_samples).
    `on_point` is called after each measured shape (row-by-row output); `on_shape` once for every
    (precision, shape) slot, measured, skipped, cached or not run (progress bars). Each precision
    is written to the cache as soon as its sweep completes.
    """
    device.require()
    fp = fp or fingerprint(device.index)
    precisions = [check_precision(p) for p in (precisions or default_precisions(device, fp))]
    shapes = [tuple(int(v) for v in s) for s in (shapes or default_shapes(device))]
    max_call_s = max_call_s or 4 * max_time_s / min_samples
    emulated = emulated_reasons(device, fp, precisions)
    path, key = cache.cache_path("gemm", device, fp.slug), fp.cache_key(device)
    notes: list[str] = []
    gemm_doc = cache.load_or_empty(path, key, use_cache, notes)
    probe = clock_probe_for(device)
    plan = _SweepPlan(device, shapes, max_call_s, emulated,
                      {"max_time_s": max_time_s, "min_samples": min_samples, "clock_probe": probe},
                      clock_events_probe_for(device), on_point, on_shape)
    found = _Sweeps()
    for precision in precisions:
        entry = gemm_doc.get(precision)
        if entry is not None and not remeasure and all(entry.get(k) == v for k, v in plan.wanted(precision).items()) \
                and not cache.holds_unstable(entry):
            try:
                _from_cache(precision, entry, plan, found)
                continue
            except (KeyError, TypeError, ValueError) as exc:
                cache.warn(f"ignoring corrupt {precision} entry in measurement cache {path}: {exc!r}", notes)
        gemm_doc[precision] = _measure_precision(precision, plan, found)
        if use_cache:
            cache.update(path, key, {precision: gemm_doc[precision]})
    return GemmPeak(device=str(device), fingerprint_slug=fp.slug, points=tuple(found.points),
                    unsupported=found.unsupported, from_cache=len(found.cached) == len(precisions),
                    warnings=tuple(notes), other_cpus=max(found.others, default=None), emulated=emulated,
                    skipped=tuple(found.skipped), throttle=found.throttle, throttle_note=found.throttle_note,
                    cached=tuple(found.cached))


def _from_cache(precision: str, entry: dict, plan: _SweepPlan, found: _Sweeps) -> None:
    """A cached entry of `precision` read into `found` (KeyError, TypeError, ValueError: corrupt)."""
    if entry.get("unsupported"):
        found.unsupported[precision] = entry["unsupported"]
    else:
        found.points.extend([_point_from_dict(precision, d) for d in entry["points"]])
        found.skipped.extend(SkippedShape(precision, *d) for d in entry.get("skipped", []))
        found.throttle[precision] = tuple(entry.get("throttle", ()))
        if entry.get("other_cpus") is not None:
            found.others.append(float(entry["other_cpus"]))
    for _ in plan.shapes:
        plan.advance(precision)
    found.cached.append(precision)


def _measure_precision(precision: str, plan: _SweepPlan, found: _Sweeps) -> dict:
    """Sweep `precision` (one small shape when it is emulated; nothing when a trial GEMM cannot
    run), gathered into `found`; returns its cache entry."""
    device, shapes = plan.device, plan.shapes
    t = trial(precision, device)
    if t.reason:
        found.unsupported[precision] = t.reason
        for _ in shapes:
            plan.advance(precision)
        return {**plan.wanted(precision), "unsupported": t.reason}
    watch = ThrottleWatch(device, nvml_reasons=plan.events)
    with OtherLoad() as other, watch.watch():
        if precision in plan.emulated:
            shape = _emulated_shape(shapes, t.flop_per_s)
            curve, skipped_here = [measure_gemm_point(precision, shape, device, max_time_s=EMULATED_TIME_S,
                                                      min_samples=3, clock_probe=plan.timing["clock_probe"])], []
            if plan.on_point:
                plan.on_point(curve[0])
            for _ in shapes:
                plan.advance(precision, shape)
        else:
            curve, skipped_here = _sweep(precision, shapes, device, t.flop_per_s, plan.max_call_s, plan.timing,
                                         plan.on_point, lambda p=precision: plan.advance(p))
    found.points.extend(curve)
    found.skipped.extend(skipped_here)
    found.throttle[precision], found.throttle_note = watch.reasons, watch.note
    if other.cpus is not None:
        found.others.append(other.cpus)
    return {**plan.wanted(precision), "other_cpus": other.cpus, "throttle": list(watch.reasons),
            "points": [_point_to_dict(p) for p in curve],
            "skipped": [[s.m, s.n, s.k, s.predicted_call_s, s.limit_s] for s in skipped_here]}


def gemm_peak_to_dict(g: GemmPeak) -> dict:
    """A GemmPeak as plain data (measurements as their to_dict forms); `gemm_peak_from_dict` inverts it."""
    return {**g.envelope_dict(), "unsupported": dict(g.unsupported), "emulated": dict(g.emulated),
            "points": [{"precision": p.precision, **_point_to_dict(p)} for p in g.points],
            "skipped": [dataclasses.asdict(s) for s in g.skipped],
            "throttle": {k: list(v) for k, v in g.throttle.items()}, "throttle_note": g.throttle_note,
            "cached": list(g.cached)}


def gemm_peak_from_dict(d: dict) -> GemmPeak:
    return GemmPeak(device=d["device"], fingerprint_slug=d["fingerprint_slug"],
                    points=tuple(_point_from_dict(p["precision"], p) for p in d["points"]),
                    unsupported=d["unsupported"], from_cache=True, warnings=tuple(d["warnings"]),
                    other_cpus=d["other_cpus"], emulated=d["emulated"],
                    skipped=tuple(SkippedShape(**s) for s in d["skipped"]),
                    throttle={k: tuple(v) for k, v in d["throttle"].items()}, throttle_note=d["throttle_note"],
                    cached=tuple(d.get("cached", ())))


def cached_peak_flop_per_s(device: Device, precision: str, fp: Fingerprint) -> float | None:
    """The cached peak of `precision` (any shape sweep), None when nothing valid is cached."""
    payload, _ = cache.load(cache.cache_path("gemm", device, fp.slug), fp.cache_key(device))
    try:
        entry = (payload or {})[precision]
        if entry.get("emulated") or cache.holds_unstable(entry):
            return None    # an emulated rate is not a peak; an unstable one is not served
        points = [_point_from_dict(precision, d) for d in entry["points"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return GemmPeak(device=str(device), fingerprint_slug=fp.slug, points=tuple(points),
                    from_cache=True).peak_flop_per_s(precision)
