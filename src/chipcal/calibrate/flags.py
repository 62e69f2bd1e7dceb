"""Gap flags: where the datasheet, the physics model and the measurements disagree.

Each check is a pure function that returns a `Flag` carrying the numbers behind it, or None
when the data are consistent. Thresholds are named constants so a report can quote them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from chipcal.calibrate.records import Record
from chipcal.model.tdp import VERDICT_UNSUSTAINABLE, ChipTdpComparison

if TYPE_CHECKING:          # calibrate.document imports Flag from here
    from chipcal.calibrate.power_records import PrecisionEnergy

MEASURED_VS_SPEC_MIN = 0.80      # measured peak below 80% of the datasheet's dense peak
MEASURED_VS_PHYSICS_MIN = 0.70   # measured peak below 70% of the local physics peak
MEASURED_VS_PHYSICS_MAX = 1.05   # measured peak above the local physics peak, beyond timing noise
SAG_MIN_FRACTION = 0.05          # clock or power falling >5% from the first to the last quarter


@dataclass(frozen=True)
class Flag(Record):
    code: str
    severity: str                  # "warning" (a real gap) or "info"
    message: str
    values: dict[str, float | None] = field(default_factory=dict)    # None: not determined (NaN written)


def spec_unsustainable(cmp: ChipTdpComparison) -> Flag | None:
    """The spec peak needs more power than the TDP even at the optimistic end of the all-in
    energy band (model.power): the chip cannot sustain it; it runs at a power-limited clock."""
    if cmp.verdict != VERDICT_UNSUSTAINABLE:
        return None
    return Flag(
        "spec_peak_unsustainable", "warning",
        f"{cmp.chip.name}: its {cmp.precision} spec peak needs {cmp.power_at_spec_w:.0f} W "
        f"({cmp.power_at_spec_low_w:.0f}-{cmp.power_at_spec_high_w:.0f} W over the energy band) > "
        f"{cmp.chip.tdp_w:.0f} W TDP; at the power-limited clock of {cmp.sustained_clock_hz / 1e9:.2f} GHz it "
        f"sustains {cmp.sustainable_peak_flop_per_s / 1e12:.3g} TFLOP/s ({cmp.sustainable_fraction:.0%} of spec)",
        {"power_at_spec_w": cmp.power_at_spec_w, "power_at_spec_low_w": cmp.power_at_spec_low_w,
         "power_at_spec_high_w": cmp.power_at_spec_high_w, "tdp_w": cmp.chip.tdp_w,
         "sustained_clock_hz": cmp.sustained_clock_hz,
         "sustainable_peak_flop_per_s": cmp.sustainable_peak_flop_per_s},
    )


def _measured_below(code: str, what: str, precision: str, measured_flop_per_s: float,
                    reference_flop_per_s: float | None, minimum: float) -> Flag | None:
    if not reference_flop_per_s:
        return None
    fraction = measured_flop_per_s / reference_flop_per_s
    if fraction >= minimum:
        return None
    key = "spec_flop_per_s" if code == "measured_below_spec" else "physics_flop_per_s"
    return Flag(code, "warning",
                f"{precision}: measured GEMM peak {measured_flop_per_s / 1e12:.3g} TFLOP/s is {fraction:.0%} "
                f"of {what} {reference_flop_per_s / 1e12:.3g} TFLOP/s",
                {"measured_flop_per_s": measured_flop_per_s, key: reference_flop_per_s, "fraction": fraction})


def measured_below_spec(precision: str, measured_flop_per_s: float, spec_flop_per_s: float | None,
                        minimum: float = MEASURED_VS_SPEC_MIN) -> Flag | None:
    """Measured GEMM peak far below the vendor's dense peak."""
    return _measured_below("measured_below_spec", "the datasheet's dense", precision, measured_flop_per_s,
                           spec_flop_per_s, minimum)


def measured_below_physics(precision: str, measured_flop_per_s: float, physics_flop_per_s: float | None,
                           minimum: float = MEASURED_VS_PHYSICS_MIN) -> Flag | None:
    """The local chip's derived peak (cores × SIMD × clock) is far above what runs: a VM below
    its nominal clock, fewer FMA pipes than assumed, or a BLAS that misses the fast path."""
    return _measured_below("measured_below_physics_peak", "the physics peak derived for this chip,", precision,
                           measured_flop_per_s, physics_flop_per_s, minimum)


def measured_above_physics(precision: str, measured_flop_per_s: float, physics_flop_per_s: float | None,
                           clock_hz: float | None, maximum: float = MEASURED_VS_PHYSICS_MAX) -> Flag | None:
    """The measured GEMM peak beats the physics peak derived for this chip: the cores ran faster
    than the clock the derivation takes. Under a hypervisor /proc/cpuinfo's 'cpu MHz' is the TSC
    rate, not the running clock, so the derived peak is too low and the fitted efficiencies
    (relative to it) come out above 1. The measured peak implies a clock of at least
    clock × measured / physics (the derivation's units and MACs per clock being right)."""
    if not physics_flop_per_s or not clock_hz:
        return None
    fraction = measured_flop_per_s / physics_flop_per_s
    if fraction <= maximum:
        return None
    return Flag("measured_above_physics_peak", "warning",
                f"{precision}: measured GEMM peak {measured_flop_per_s / 1e12:.3g} TFLOP/s is {fraction:.0%} of "
                f"the physics peak derived for this chip, {physics_flop_per_s / 1e12:.3g} TFLOP/s at "
                f"{clock_hz / 1e9:.2f} GHz: the cores ran at {clock_hz * fraction / 1e9:.2f} GHz or more, "
                f"so that peak and the efficiencies fitted against it are off by that ratio",
                {"measured_flop_per_s": measured_flop_per_s, "physics_flop_per_s": physics_flop_per_s,
                 "fraction": fraction, "clock_hz": clock_hz, "implied_clock_hz": clock_hz * fraction})


def _sustained(e: PrecisionEnergy) -> str:
    """What the precision's held GEMM sustained: throughput (fraction of spec), clock, power, reasons."""
    clock = ("" if e.sustained_clock_hz is None else
             f" at {e.sustained_clock_hz / 1e9:.3g} GHz" + (f" ({e.clock_fraction:.0%} of the "
                                                              f"{e.boost_clock_hz / 1e9:.3g} GHz boost)"
                                                              if e.clock_fraction is not None else ""))
    spec = f" ({e.fraction_of_spec:.0%} of spec)" if e.fraction_of_spec is not None else ""
    reasons = f", clock events: {', '.join(e.clock_events)}" if e.clock_events else ""
    return (f"held back to back it sustained {e.sustained_flop_per_s / 1e12:.4g} TFLOP/s{spec}{clock} and "
            f"{e.sustained_power_w:.0f} W{reasons}")


def _sustained_values(e: PrecisionEnergy) -> dict[str, float | None]:
    return {"sustained_flop_per_s": e.sustained_flop_per_s, "sustained_fraction_of_spec": e.fraction_of_spec,
            "sustained_clock_hz": e.sustained_clock_hz, "boost_clock_hz": e.boost_clock_hz,
            "clock_fraction": e.clock_fraction, "sustained_power_w": e.sustained_power_w}


def energy_exceeds_tdp(e: PrecisionEnergy, idle_w: float) -> Flag | None:
    """The energy per FLOP one precision was measured at, at its sustained point, times that
    precision's spec peak, plus idle, above the power limit: that spec peak cannot be reached
    inside the limit even at the voltage of the lower, sustained clock."""
    if not e.spec_flop_per_s or not e.tdp_w or e.j_per_flop_sustained <= 0:
        return None
    needed = e.j_per_flop_sustained * e.spec_flop_per_s + idle_w
    if needed <= e.tdp_w:
        return None
    return Flag("measured_energy_exceeds_tdp", "warning",
                f"{e.precision}: measured {e.j_per_flop_sustained * 1e12:.3g} pJ/FLOP at its sustained point x spec "
                f"{e.spec_flop_per_s / 1e12:.4g} TFLOP/s + {idle_w:.0f} W idle = {needed:.0f} W > {e.tdp_w:.0f} W "
                f"limit; {_sustained(e)}",
                {"j_per_flop": e.j_per_flop_sustained, "spec_flop_per_s": e.spec_flop_per_s, "idle_w": idle_w,
                 "needed_w": needed, "tdp_w": e.tdp_w, **_sustained_values(e)})


def spec_beyond_tdp(e: PrecisionEnergy, static_w: float) -> Flag | None:
    """The energy one precision was measured at (at boost voltage), taken to its spec clock's
    voltage, with the static power, puts that precision's spec peak above the power limit."""
    need = e.power_at_spec_w
    if need is None or not e.tdp_w or need <= e.tdp_w:
        return None
    at_spec = (f" ({e.j_per_flop_at_spec_clock * 1e12:.3g} at the {e.spec_clock_hz / 1e9:.3g} GHz spec clock)"
               if e.spec_clock_hz and e.sustained_clock_hz is not None else "")
    return Flag(
        "spec_beyond_tdp", "warning",
        f"{e.precision}: measured {e.j_per_flop_at_boost * 1e12:.3g} pJ/FLOP at boost voltage{at_spec} and "
        f"{static_w:.0f} W static put the {e.spec_flop_per_s / 1e12:.4g} TFLOP/s spec peak at {need:.0f} W > "
        f"{e.tdp_w:.0f} W limit; {_sustained(e)}",
        {"j_per_flop_at_boost": e.j_per_flop_at_boost, "j_per_flop_at_spec_clock": e.j_per_flop_at_spec_clock,
         "static_w": static_w, "power_at_spec_w": need, "tdp_w": e.tdp_w, "spec_flop_per_s": e.spec_flop_per_s,
         **_sustained_values(e)})


def sag(quantity: str, samples: Sequence[float], unit: str,
        minimum: float = SAG_MIN_FRACTION) -> Flag | None:
    """Throttling evidence: the last quarter of a sustained run's samples (clock or power)
    average more than `minimum` below the first quarter."""
    x = np.asarray([s for s in samples if s is not None and np.isfinite(s)], dtype=float)
    if len(x) < 8:
        return None
    q = len(x) // 4
    first, last = float(np.mean(x[:q])), float(np.mean(x[-q:]))
    if first <= 0 or (first - last) / first <= minimum:
        return None
    return Flag("sustained_sag", "warning",
                f"{quantity} fell {(first - last) / first:.0%} during sustained GEMM "
                f"({first:.4g} -> {last:.4g} {unit}): throttling",
                {"first_quarter": first, "last_quarter": last, "drop_fraction": (first - last) / first})


def unstable_timing(what: str, cv: float, threshold: float) -> Flag | None:
    if cv <= threshold:
        return None
    return Flag("unstable_timing", "info",
                f"{what}: coefficient of variation {cv:.0%} > {threshold:.0%}; the machine was noisy",
                {"cv": cv, "threshold": threshold})


THREAD_SCALING_MIN = 0.75   # of the ideal speedup (the thread count): below it the cores were shared


def threads_not_scaling(threads: int, speedup: float, minimum: float = THREAD_SCALING_MIN) -> Flag | None:
    """The torch threads gave fewer cores' worth than they number (measure.threads): the vCPUs
    shared a core or the host time-shared them while the run timed. The physics peak counts every
    core, so fractions of it and efficiencies fitted against it read low by that ratio."""
    if speedup >= minimum * threads:
        return None
    return Flag("threads_not_scaling", "info",
                f"{threads} torch threads ran a GEMM only {speedup:.2f}x as fast as one (ideal {threads}x): "
                f"the run had about {speedup:.1f} cores' worth of {threads}",
                {"threads": float(threads), "speedup": speedup, "minimum": minimum * threads})


def run_to_run_drift(median_abs_change: float, max_abs_change: float, n: int, previous_run: str,
                     median_abs_error: float | None) -> Flag | None:
    """The held-out models' timings moved more since the previous run on this machine
    (calibrate.rerun) than the calibrated median error: that error is within the host's drift."""
    if median_abs_error is None or median_abs_change <= median_abs_error:
        return None
    return Flag("run_to_run_drift", "info",
                f"the held-out models' timings moved by median {median_abs_change:.1%} (max {max_abs_change:.1%}, "
                f"{n} cases) since the previous run on this machine ({previous_run}): the calibrated median "
                f"error {median_abs_error:.1%} is within the host's drift",
                {"median_abs_change": median_abs_change, "max_abs_change": max_abs_change,
                 "median_abs_error": median_abs_error})


def noise_flags(verdict, extra_time_s: float, median_abs_error: float | None) -> list[Flag]:
    """`noise_limits_accuracy` when the noise left after every round (calibrate.noise.NoiseVerdict)
    is more than the target allows; `error_within_noise` when the validation median |error| is no
    larger than the accuracy that noise permits: the run cannot tell the model's error from the
    host's noise."""
    from chipcal.calibrate.noise import TARGET_MEDIAN_ERROR, allowed

    flags = []
    values = {"round_noise": verdict.round_noise, "median_ci": verdict.median_ci,
              "permitted": verdict.permitted, "rounds": float(verdict.rounds)}
    if np.isfinite(verdict.permitted) and verdict.permitted > allowed():
        added = (f"{verdict.added_rounds} rounds added within {extra_time_s:.0f} s" if verdict.added_rounds
                 else "no round added (the rounds agreed, or no further round fitted the time left)")
        flags.append(Flag(
            "noise_limits_accuracy", "warning",
            f"after {verdict.rounds} rounds ({added}) the timing noise permits an accuracy of "
            f"{verdict.permitted:.1%} (between rounds {verdict.round_noise:.1%}, CI of the median "
            f"±{verdict.median_ci:.1%}); a check of the {TARGET_MEDIAN_ERROR:.0%} target needs at most "
            f"{allowed():.0%}", {**values, "allowed": allowed()}))
    within = error_within_noise(median_abs_error, verdict.permitted, values)
    return flags + ([within] if within else [])


def error_within_noise(median_abs_error: float | None, permitted: float, values: dict[str, float]) -> Flag | None:
    """`error_within_noise` when the validation median |error| is no larger than the accuracy the
    timing noise permits (calibrate.noise.explains); `values`: the noise figures behind it."""
    from chipcal.calibrate.noise import explains

    if not explains(median_abs_error, permitted):
        return None
    return Flag("error_within_noise", "warning",
                f"the validation median |error| {median_abs_error:.1%} is within the {permitted:.1%} "
                "the timing noise permits: it is explained by noise alone, and says nothing about the model "
                "beyond that", {**values, "permitted": permitted, "median_abs_error": median_abs_error})


def spec_flags(chip) -> list[Flag]:
    """The flags from the spec side: a spec peak the TDP cannot sustain (model.tdp)."""
    from chipcal.model.tdp import compare_chip

    flag = spec_unsustainable(compare_chip(chip)) if chip.stated_peak_flop_per_s else None
    return [flag] if flag else []
