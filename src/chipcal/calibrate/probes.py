"""The measuring phases of a calibration, before its timing rounds: identify the machine, sweep
GEMM shapes, probe bandwidth, hold power, probe the host (first touch, layout, dispatch, threads).

Each phase is a function of the RunContext and the results before it, returning a frozen record;
each reads its steps back from the journal on a resumed run (RunContext.journaled). The measure
functions are looked up in their modules when a phase runs, so that a test can stand in for them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from chipcal.calibrate import document as cd
from chipcal.calibrate import flags as gap
from chipcal.calibrate.context import RunContext
from chipcal.calibrate.layer_fits import gemm_fits, gemm_informed, host_in_overheads
from chipcal.calibrate.power_fit import power_section
from chipcal.calibrate.power_records import HoldRow
from chipcal.calibrate.threads import thread_section
from chipcal.model.mapping.params import CalibrationError, FamilyParams

UNSTABLE_CV = 0.10


@dataclass(frozen=True)
class Machine:
    """What `identify` found: the fingerprint, the pinned allocator, the chip it is modelled as."""

    fp: object                # measure.system.Fingerprint
    allocator: object         # measure.allocator's pinned settings
    chip: object              # model.chip.Chip
    origin: str               # why this chip (registry match, or built locally)


@dataclass(frozen=True)
class Sweep:
    """The GEMM sweep: the measured peaks, the document's rows, the efficiency fits."""

    gemm: object              # measure.peak.GemmPeak
    peaks: tuple[cd.PeakRow, ...]
    rows: tuple[cd.GemmRow, ...]
    fits: dict                # "gemm_efficiency_<precision>" -> FitResult
    skipped: tuple[cd.SkippedShape, ...]


@dataclass(frozen=True)
class Memory:
    """The bandwidth probe and the chip as modelled after it (a locally built chip takes the
    measured DRAM bandwidth and last-level cache)."""

    bw: object                # measure.bandwidth.Bandwidth
    chip: object
    origin: str
    assumed_bw: float | None  # the chip's DRAM bandwidth before the probe replaced it
    onchip_bw: float | None


@dataclass(frozen=True)
class Power:
    """The power phase's holds and what they give the document."""

    holds: tuple[HoldRow, ...]
    section: object           # calibrate.power_records.PowerSection
    fit: cd.FitRecord | None


@dataclass(frozen=True)
class Host:
    """The host probes (CPU: first touch and layout; any device: dispatch; CPU: threads) and the
    fit's base parameters with their costs charged in, and the overhead floor."""

    first_touch: cd.FirstTouchSection | None
    layout: cd.LayoutSection | None
    gemv: cd.GemvSection | None
    dispatch: cd.DispatchSection
    threads: object           # calibrate.document.ThreadsSection or None
    base: FamilyParams
    floor: float


# --- identify ----------------------------------------------------------------------------------

def identify(run: RunContext) -> Machine:
    """The machine's fingerprint (checked against a resumed journal's), the allocator pinned so
    that page faults of eager passes do not depend on the process's history, and the chip."""
    from chipcal.calibrate.journal import same_machine
    from chipcal.measure.allocator import pin_allocator
    from chipcal.measure.identify import identify as identify_chip
    from chipcal.measure.system import fingerprint

    run.clock.start("identify")
    fp = fingerprint()
    same_machine(run.journal, fp.slug, fp.torch_version)
    allocator = pin_allocator()
    identity = identify_chip(fp, run.device)
    return Machine(fp, allocator, identity.chip, identity.origin)


# --- GEMM sweep --------------------------------------------------------------------------------

def sweep(run: RunContext, machine: Machine) -> Sweep:
    """The GEMM peak sweep per precision, its saturating efficiency fits and its flags."""
    from chipcal.measure import peak
    from chipcal.measure.allocator import release_freed_memory

    config, chip = run.config, machine.chip
    run.clock.start("GEMM sweep")
    precisions = config.gemm_precisions or peak.default_precisions(run.device, machine.fp)
    run.progress.phase("GEMM peak sweep", len(precisions) * len(peak.default_shapes(run.device)))

    def measure():
        gemm = peak.measure_gemm_peak(run.device, precisions, fp=machine.fp, on_shape=run.step,
                                      **config.probe_budget(peak.GEMM_TIME_S))
        release_freed_memory()      # the pinned heap keeps what a phase freed; give it back between phases
        return gemm

    gemm = run.journaled("gemm", measure, peak.gemm_peak_to_dict, peak.gemm_peak_from_dict)
    fits = gemm_fits({p: gemm.curve(p) for p in gemm.native_precisions}, chip)
    peaks, rows = [], []
    for p in gemm.precisions:
        peaks.append(_peak_row(gemm, p, chip))
        rows += [cd.GemmRow(precision=p, m=pt.m, k=pt.k, flop=pt.flop, flop_per_s=pt.flop_per_s,
                            **cd.timing(pt.measurement)) for pt in gemm.curve(p)]
        run.flags.extend(_sweep_flags(gemm, p, chip))
    peaks += [_unsupported_row(p, reason, chip) for p, reason in gemm.unsupported.items()]
    skipped = tuple(cd.SkippedShape(precision=sk.precision, shape=(sk.m, sk.n, sk.k),
                                    predicted_call_s=sk.predicted_call_s, limit_s=sk.limit_s)
                    for sk in gemm.skipped)
    return Sweep(gemm, tuple(peaks), tuple(rows), fits, skipped)


def _peak_row(gemm, p: str, chip) -> cd.PeakRow:
    """The best shape of precision `p` against the physics and spec peaks; an emulated precision
    has no hardware unit: its rate is reported, never judged against a peak."""
    best, emulated = gemm.best(p), gemm.emulated.get(p)
    physics = None if emulated else chip.peak_flop_per_s(p)
    spec = chip.stated_peak_flop_per_s.get(p)
    return cd.PeakRow(precision=p, support="emulated" if emulated else "native",
                      measured_flop_per_s=best.flop_per_s, physics_flop_per_s=physics,
                      fraction_of_physics=best.flop_per_s / physics if physics else None,
                      spec_flop_per_s=spec, fraction_of_spec=best.flop_per_s / spec if spec else None,
                      best_shape=(best.m, best.n, best.k), n=best.measurement.n,
                      cv=best.measurement.cv, note=emulated or None,
                      cached=(p in gemm.cached) or None)


def _unsupported_row(p: str, reason: str, chip) -> cd.PeakRow:
    return cd.PeakRow(precision=p, support="unsupported", measured_flop_per_s=None,
                      physics_flop_per_s=chip.peak_flop_per_s(p), fraction_of_physics=None,
                      spec_flop_per_s=chip.stated_peak_flop_per_s.get(p), fraction_of_spec=None,
                      best_shape=None, n=0, cv=None, unsupported=reason)


def _sweep_flags(gemm, p: str, chip) -> list[gap.Flag]:
    """Throttling seen while `p` was swept; for a native precision, its peak against spec and
    physics, clock sag and unstable timing."""
    flags = []
    if gemm.throttle.get(p):
        flags.append(gap.Flag("throttled", "warning", f"{p} GEMM sweep ran throttled: {', '.join(gemm.throttle[p])}",
                              {"reasons": float(len(gemm.throttle[p]))}))
    if gemm.emulated.get(p):
        return flags
    best = gemm.best(p)
    physics, spec = chip.peak_flop_per_s(p), chip.stated_peak_flop_per_s.get(p)
    clock = chip.engine_for(p).clock_hz if physics else None
    return flags + [f for f in (gap.measured_below_spec(p, best.flop_per_s, spec),
                                gap.measured_below_physics(p, best.flop_per_s, physics),
                                gap.measured_above_physics(p, best.flop_per_s, physics, clock),
                                gap.sag(f"{p} GEMM clock", best.measurement.clocks_hz, "Hz"),
                                gap.unstable_timing(f"{p} GEMM peak", best.measurement.cv, UNSTABLE_CV)) if f]


# --- bandwidth ---------------------------------------------------------------------------------

def bandwidth(run: RunContext, machine: Machine) -> Memory:
    """The bandwidth probe; a locally built chip takes its measured figures where it only had
    assumptions."""
    from chipcal.measure import bandwidth as probe
    from chipcal.measure.allocator import release_freed_memory
    from chipcal.measure.system import local_chip
    from chipcal.model.local import LOCAL_CHIP_NAME

    fp, chip, origin = machine.fp, machine.chip, machine.origin
    llc = None if run.device.is_cuda else fp.l3_bytes
    run.clock.start("bandwidth")
    sizes = run.config.bandwidth_sizes(probe.DEFAULT_BANDWIDTH_SIZES[run.device.kind])
    run.progress.phase("memory bandwidth", len(probe.KERNELS) * len(sizes))

    def measure():
        bw = probe.measure_bandwidth(run.device, sizes, fp=fp, on_point=lambda pt: run.step(pt.kernel),
                                     **run.config.probe_budget(probe.BANDWIDTH_TIME_S))
        release_freed_memory()
        return bw

    bw = run.journaled("bandwidth", measure, probe.bandwidth_to_dict, lambda d: probe.bandwidth_from_dict(d, llc))
    assumed_bw = chip.memory.bandwidth_bytes_per_s
    if chip.name == LOCAL_CHIP_NAME:
        chip = local_chip(**probe.local_overrides(bw, fp.cpu), support=fp.cpu_precisions, cpu=fp.cpu)
        origin += "; DRAM bandwidth and last-level cache from the bandwidth probe"
    return Memory(bw, chip, origin, assumed_bw, probe.onchip_bandwidth(bw, llc))


def prior(run: RunContext, sweep: Sweep, memory: Memory) -> FamilyParams:
    """The layer fit's prior centre: the family defaults informed by the GEMM efficiency fit at
    the run's precision, with the measured bandwidth (calibrate.layer_fits.gemm_informed)."""
    from chipcal.model.mapping.params import default_params

    chip = memory.chip
    model_bw = chip.memory.bandwidth_bytes_per_s
    precision_fit = sweep.fits.get(f"gemm_efficiency_{run.config.precision}")
    base = gemm_informed(default_params(chip.kind), precision_fit)
    return dataclasses.replace(
        base,
        # seed only: the layer fit refits it through the predictor
        half_efficiency_flop=(precision_fit.parameters["w_half_flop"]
                              if precision_fit and "w_half_flop" not in precision_fit.unconstrained
                              else base.half_efficiency_flop),
        bandwidth_efficiency=memory.bw.memory_bytes_per_s / model_bw,
        onchip_bandwidth_ratio=(memory.onchip_bw / model_bw if memory.onchip_bw else base.onchip_bandwidth_ratio),
        source="calibration",
    )


# --- power -------------------------------------------------------------------------------------

def power(run: RunContext, machine: Machine, chip, sweep: Sweep) -> Power:
    """Idle, the triad and each native GEMM precision, held until clock and power settle, where
    a power source exists (measure.power_phase); the power fit (calibrate.power_fit)."""
    from chipcal.measure import power as sensors
    from chipcal.measure import power_phase as phase
    from chipcal.measure.allocator import release_freed_memory
    from chipcal.measure.sustained import FULL_LIMITS, QUICK_LIMITS

    run.clock.start("power")
    source = sensors.open_power_source(run.device)
    held = sweep.gemm.native_precisions if source.available else ()
    run.progress.phase("power: idle, triad and each GEMM precision held until clock and power settle",
                       2 + len(held) if source.available else 1)
    if (holds := _journaled_holds(run.journal.get("power"))) is None:
        holds = ()
        if source.available:
            limits = QUICK_LIMITS if run.config.quick else FULL_LIMITS
            holds = tuple(HoldRow.of(h) for h in phase.power_phase(source, run.device, held, limits,
                                                                   on_hold=lambda h: run.step(h.label)))
        run.journal.put("power", [h.to_dict() for h in holds])
        release_freed_memory()
    if not source.available:
        run.step(source.name)
    section, fit, flags = power_section(source.name, source.available, source.reason, holds, (), chip, machine.fp,
                                        run.config.precision)
    run.flags.extend(flags)
    return Power(holds, section, fit)


def _journaled_holds(recorded) -> tuple[HoldRow, ...] | None:
    """The power phase's holds as the journal has them; None when it has none, or has the power
    curve of older code (a list of windows, not holds: the phase is measured again)."""
    if not isinstance(recorded, list):
        return None
    try:
        return tuple(HoldRow.from_dict(d) for d in recorded)
    except CalibrationError:
        return None


# --- host probes -------------------------------------------------------------------------------

def host(run: RunContext, machine: Machine, base: FamilyParams) -> Host:
    """The host side of eager execution: on a CPU the first touch of freshly mapped memory and
    oneDNN's layout reorders (charged into `base`); the per-op dispatch cost (on a GPU it seeds
    the overheads: host_in_overheads); on a CPU the thread-scaling probe."""
    from chipcal.measure.allocator import release_freed_memory

    run.clock.start("host probes: first touch, layout, GEMV, dispatch, threads")
    first_touch = layout = gemv = None
    if not run.device.is_cuda:
        first_touch = cd.FirstTouchSection(**run.journaled("first_touch", lambda: _first_touch(machine)))
        base = first_touch.charged_in(base)
        layout = cd.LayoutSection(**run.journaled("layout", _layout))
        base = layout.charged_in(base)
        gemv = cd.GemvSection(**run.journaled("gemv", lambda: _gemv(run)))
        base = gemv.charged_in(base)
    dispatch = cd.DispatchSection(**run.journaled("dispatch", lambda: _dispatch(run)))
    release_freed_memory()
    base, floor = host_in_overheads(base, run.device, dispatch.per_op_s)
    threads = None if run.device.is_cuda else thread_section(run.journal)
    if threads and (flag := gap.threads_not_scaling(threads.threads, threads.speedup)):
        run.flags.append(flag)
    return Host(first_touch, layout, gemv, dispatch, threads, base, floor)


def _first_touch(machine: Machine) -> dict:
    """First touch of freshly mapped memory (CPU eager: outputs above the mmap threshold)."""
    from chipcal.measure import bandwidth as probe

    ft = probe.measure_first_touch()
    return {"bytes_per_s": ft.bytes_per_s, "size_bytes": ft.size_bytes,
            "fresh_median_s": ft.fresh.median_s, "reused_median_s": ft.reused.median_s,
            "fresh_iqr_s": ft.fresh.iqr_s, "n": ft.fresh.n,
            "mmap_threshold_bytes": machine.allocator.mmap_threshold_bytes}


def _gemv(run: RunContext) -> dict:
    """A matrix-vector product's weight stream from DRAM, and a few-row GEMM's read and pack of the
    same weights (measure.gemv.measure_gemv, measure_packed_gemm)."""
    from chipcal.measure import gemv as probe

    budget = 0.25 if run.config.smoke else 1.0
    rate, packed = probe.measure_gemv(max_time_s=budget), probe.measure_packed_gemm(max_time_s=budget)
    stream, row = rate.split()
    return {"bytes_per_s": rate.bytes_per_s, "weight_bytes": rate.weight_bytes, "shape": rate.shape,
            "median_s": rate.median_s, "iqr_s": rate.wide.iqr_s + rate.tall.iqr_s,
            "n": min(rate.wide.n, rate.tall.n), "stream_bytes_per_s": stream, "row_s": row,
            "wide_median_s": rate.wide.median_s, "tall_median_s": rate.tall.median_s,
            "k_major_bytes_per_s": rate.k_major_bytes_per_s, "k_major_median_s": rate.k_major.median_s,
            "packed_bytes_per_s": packed.bytes_per_s, "packed_shape": packed.shape,
            "packed_median_s": packed.few.median_s, "packed_more_median_s": packed.more.median_s,
            "packed_n": packed.few.n}


def _layout() -> dict:
    """The layout reorders around each oneDNN convolution (measure.layout)."""
    from chipcal.measure import layout

    found = layout.conv_layout_passes()
    return {"passes": found.passes, "detail": found.detail, "weight_bytes_per_s": found.weight_bytes_per_s,
            "pointwise_weight_bytes_per_s": found.pointwise_weight_bytes_per_s,
            "call_overhead_s": found.call_overhead_s}


def _dispatch(run: RunContext) -> dict:
    """The eager per-op dispatch cost (measure.dispatch)."""
    from chipcal.measure.dispatch import probe_dispatch

    cost = probe_dispatch(max_time_s=1.0, device=run.device)
    return {"per_op_s": cost.per_op_s, "iqr_s": cost.per_op.iqr_s, "n": cost.per_op.n, "method": cost.method}
