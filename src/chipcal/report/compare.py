"""Two calibration runs of one machine side by side, each change judged against its noise.

What counts as noise differs by quantity, and each rule uses what the runs themselves recorded:

- GEMM peak: the 95 % confidence interval of the median timing of the shape that gave the peak
  (measure.timing), as FLOP/s. A change is marked when the two intervals do not overlap.
- Memory bandwidth: the figure is the median of the sizes at the DRAM level (within DRAM_WINDOW of
  each kernel's largest, measure.bandwidth); its noise is the range of those sizes' figures. Marked
  when the two ranges do not overlap.
- Fitted parameters: the 1σ of each fit (its covariance). Marked when |b - a| > 2·sqrt(σa² + σb²);
  a parameter without σ in either run (held at its prior, unconstrained) is not judged.
- Held-out model latency: each run's noise between its interleaved rounds (validation.noise_rel,
  half the spread of the round medians). Marked when |b / a - 1| > noise_a + noise_b.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chipcal.calibrate.document import CalibrationDocument
from chipcal.measure.bandwidth import DRAM_WINDOW
from chipcal.model.errors import ChipcalError
from chipcal.report.calibration import pct, si
from chipcal.report.render import Block, Bullets, Heading, Paragraph, table

PARAMETER_SIGMAS = 2.0
MARK = "*"


class DifferentMachinesError(ChipcalError):
    """Two runs of different machines (or devices): their figures are not one machine's drift."""


Interval = tuple[float, float]


@dataclass(frozen=True)
class PeakChange:
    precision: str
    a_flop_per_s: float | None
    b_flop_per_s: float | None
    a_ci: Interval | None
    b_ci: Interval | None
    beyond_noise: bool | None


@dataclass(frozen=True)
class BandwidthChange:
    a_bytes_per_s: float | None
    b_bytes_per_s: float | None
    a_range: Interval | None
    b_range: Interval | None
    beyond_noise: bool | None


@dataclass(frozen=True)
class ParameterChange:
    fit: str
    parameter: str
    a: float | None
    b: float | None
    a_sigma: float | None
    b_sigma: float | None
    beyond_noise: bool | None


@dataclass(frozen=True)
class ModelChange:
    model: str
    batch: int
    a_s: float
    b_s: float
    a_error: float | None
    b_error: float | None
    beyond_noise: bool | None


@dataclass(frozen=True)
class FlagPresence:
    code: str
    in_a: bool
    in_b: bool


@dataclass(frozen=True)
class Comparison:
    a: CalibrationDocument
    b: CalibrationDocument
    a_path: str
    b_path: str
    peaks: tuple[PeakChange, ...]
    bandwidth: BandwidthChange
    parameters: tuple[ParameterChange, ...]
    models: tuple[ModelChange, ...]
    flags: tuple[FlagPresence, ...]


def disjoint(a: Interval | None, b: Interval | None) -> bool | None:
    """Whether two noise intervals do not overlap: the rule a change is judged by (None: an
    interval is not known)."""
    if a is None or b is None:
        return None
    return a[1] < b[0] or b[1] < a[0]


def peak_interval(doc: CalibrationDocument, precision: str) -> Interval | None:
    """FLOP/s from the 95 % CI of the median timing of the shape that gave the peak."""
    peak = next((p for p in doc.peaks if p.precision == precision), None)
    if peak is None or peak.best_shape is None:
        return None
    m, n, k = peak.best_shape
    rows = [g for g in doc.observations.gemm if g.precision == precision and g.m == m and g.k == k
            and math.isclose(g.flop, 2.0 * m * n * k, rel_tol=1e-9) and g.ci_low_s and g.ci_high_s]
    if not rows:
        return None
    best = max(rows, key=lambda g: g.flop_per_s or 0.0)
    return best.flop / best.ci_high_s, best.flop / best.ci_low_s


def bandwidth_range(doc: CalibrationDocument) -> Interval | None:
    """The range of the DRAM-level sizes' figures, whose median is the run's bandwidth."""
    values = []
    for kernel in {r.kernel for r in doc.observations.bandwidth}:
        rows = [r for r in doc.observations.bandwidth if r.kernel == kernel and r.bytes_per_s]
        if rows:
            largest = max(r.working_set_bytes for r in rows)
            values += [r.bytes_per_s for r in rows if r.working_set_bytes * DRAM_WINDOW >= largest]
    return (min(values), max(values)) if values else None


def _parameters(a: CalibrationDocument, b: CalibrationDocument) -> list[ParameterChange]:
    out = []
    for name, fit_a in a.fits.items():
        fit_b = b.fits.get(name)
        if fit_a is None or fit_b is None:
            continue
        for parameter, value_a in fit_a.parameters.items():
            if parameter not in fit_b.parameters:
                continue
            value_b = fit_b.parameters[parameter]
            sa, sb = fit_a.stderr.get(parameter), fit_b.stderr.get(parameter)
            judged = sa is not None and sb is not None and parameter not in fit_a.unconstrained \
                and parameter not in fit_b.unconstrained
            beyond = abs(value_b - value_a) > PARAMETER_SIGMAS * math.hypot(sa, sb) if judged else None
            out.append(ParameterChange(name, parameter, value_a, value_b, sa, sb, beyond))
    return out


def _models(a: CalibrationDocument, b: CalibrationDocument) -> list[ModelChange]:
    before = {(r.model, r.batch): r for r in a.observations.models}
    noise = [d.validation.noise_rel for d in (a, b)]
    out = []
    for r in b.observations.models:
        old = before.get((r.model, r.batch))
        if old is None or not old.median_s or not r.median_s:
            continue
        beyond = None if None in noise else abs(r.median_s / old.median_s - 1) > sum(noise)
        out.append(ModelChange(r.model, r.batch, old.median_s, r.median_s, old.error, r.error, beyond))
    return out


def compare(a: CalibrationDocument, b: CalibrationDocument, a_path: str = "A", b_path: str = "B") -> Comparison:
    """Run `b` against run `a` of the same machine and device; DifferentMachinesError otherwise."""
    if a.machine_slug != b.machine_slug:
        raise DifferentMachinesError(f"{a_path} is of machine {a.machine_slug} and {b_path} of {b.machine_slug}: "
                                     "compare two runs of one machine")
    if a.device != b.device:
        raise DifferentMachinesError(f"{a_path} ran on {a.device} and {b_path} on {b.device}: "
                                     "compare two runs of one device")
    peaks = []
    for precision in dict.fromkeys([p.precision for p in a.peaks] + [p.precision for p in b.peaks]):
        pa = next((p.measured_flop_per_s for p in a.peaks if p.precision == precision), None)
        pb = next((p.measured_flop_per_s for p in b.peaks if p.precision == precision), None)
        ia, ib = peak_interval(a, precision), peak_interval(b, precision)
        peaks.append(PeakChange(precision, pa, pb, ia, ib, disjoint(ia, ib)))
    ra, rb = bandwidth_range(a), bandwidth_range(b)
    bandwidth = BandwidthChange(a.bandwidth.measured_bytes_per_s, b.bandwidth.measured_bytes_per_s, ra, rb,
                                disjoint(ra, rb))
    codes_a, codes_b = {f.code for f in a.flags}, {f.code for f in b.flags}
    flags = tuple(FlagPresence(c, c in codes_a, c in codes_b)
                  for c in dict.fromkeys([f.code for f in a.flags] + [f.code for f in b.flags]))
    return Comparison(a, b, a_path, b_path, tuple(peaks), bandwidth, tuple(_parameters(a, b)),
                      tuple(_models(a, b)), flags)


def _change(a: float | None, b: float | None) -> str:
    """B against A as a percentage, or as a factor beyond ten times."""
    if not a or b is None:
        return "-"
    ratio = b / a
    return f"×{ratio:.3g}" if ratio >= 10 or ratio <= 0.1 else f"{100 * (ratio - 1):+.1f}%"


def _mark(beyond: bool | None) -> str:
    return {True: MARK, False: "", None: "?"}[beyond]


def _interval(i: Interval | None, unit: str) -> str:
    return "-" if i is None else f"{si(i[0], unit)} – {si(i[1], unit)}"


def records(c: Comparison) -> list[dict]:
    """Flat records, one per compared quantity (`--json`)."""
    out = [{"section": "peak", "quantity": p.precision, "unit": "FLOP/s", "a": p.a_flop_per_s, "b": p.b_flop_per_s,
            "beyond_noise": p.beyond_noise, "noise": "95% CI of the peak shape's median timing"} for p in c.peaks]
    out.append({"section": "bandwidth", "quantity": "dram", "unit": "B/s", "a": c.bandwidth.a_bytes_per_s,
                "b": c.bandwidth.b_bytes_per_s, "beyond_noise": c.bandwidth.beyond_noise,
                "noise": "range of the DRAM-level sizes"})
    out += [{"section": "parameter", "quantity": f"{p.fit}.{p.parameter}", "unit": "", "a": p.a, "b": p.b,
             "beyond_noise": p.beyond_noise, "noise": f"{PARAMETER_SIGMAS:g} sigma of the two fits"}
            for p in c.parameters]
    out += [{"section": "model", "quantity": f"{m.model}/{m.batch}", "unit": "s", "a": m.a_s, "b": m.b_s,
             "beyond_noise": m.beyond_noise, "noise": "sum of the runs' round-to-round noise"} for m in c.models]
    out += [{"section": "held_out", "quantity": q, "unit": "", "a": getattr(c.a.validation, q),
             "b": getattr(c.b.validation, q), "beyond_noise": None, "noise": ""}
            for q in ("median_abs_error", "p90_abs_error", "noise_rel")]
    out += [{"section": "flag", "quantity": f.code, "unit": "", "a": f.in_a, "b": f.in_b, "beyond_noise": None,
             "noise": ""} for f in c.flags]
    return out


def _run_line(label: str, doc: CalibrationDocument, path: str) -> str:
    return (f"{label}: `{path}`, {doc.created_utc}, `{doc.command}`"
            + (" (quick)" if doc.quick else "") + f", torch {doc.fingerprint.torch_version}")


def blocks(c: Comparison) -> list[Block]:
    """The comparison as report blocks (terminal and HTML)."""
    a, b = c.a, c.b
    bw = c.bandwidth
    return [
        Heading(f"Compare: {a.machine_slug} ({a.device})", 1),
        Bullets((_run_line("A", a, c.a_path), _run_line("B", b, c.b_path))),
        Paragraph(f"`{MARK}`: the change is beyond the noise of the two runs (peaks: their 95% CIs of the "
                  "median timing do not overlap; bandwidth: the ranges of the DRAM-level sizes do not overlap; "
                  f"parameters: |B - A| > {PARAMETER_SIGMAS:g}·sqrt(σA² + σB²); model latency: |B/A - 1| > the sum "
                  "of the runs' round-to-round noise). `?`: no noise figure to judge by."),
        Heading("Held-out models"),
        table(["", "A", "B"],
              [["median |error|", pct(a.validation.median_abs_error), pct(b.validation.median_abs_error)],
               ["p90 |error|", pct(a.validation.p90_abs_error), pct(b.validation.p90_abs_error)],
               ["defaults median", pct(a.validation.default_median_abs_error),
                pct(b.validation.default_median_abs_error)],
               ["round-to-round noise", pct(a.validation.noise_rel), pct(b.validation.noise_rel)],
               ["cases", str(a.validation.n), str(b.validation.n)]]),
        Heading("GEMM peaks"),
        table(["precision", "A", "B", "change", "beyond", "A 95% CI", "B 95% CI"],
              [[p.precision, si(p.a_flop_per_s, "FLOP/s"), si(p.b_flop_per_s, "FLOP/s"),
                _change(p.a_flop_per_s, p.b_flop_per_s), _mark(p.beyond_noise),
                _interval(p.a_ci, "FLOP/s"), _interval(p.b_ci, "FLOP/s")] for p in c.peaks]),
        Heading("Memory bandwidth"),
        table(["", "A", "B", "change", "beyond", "A range", "B range"],
              [["DRAM", si(bw.a_bytes_per_s, "B/s"), si(bw.b_bytes_per_s, "B/s"),
                _change(bw.a_bytes_per_s, bw.b_bytes_per_s), _mark(bw.beyond_noise),
                _interval(bw.a_range, "B/s"), _interval(bw.b_range, "B/s")]]),
        Heading("Fitted parameters (± 1σ)"),
        table(["fit", "parameter", "A", "B", "change", "beyond"],
              [[p.fit, p.parameter, _with_sigma(p.a, p.a_sigma), _with_sigma(p.b, p.b_sigma), _change(p.a, p.b),
                _mark(p.beyond_noise)] for p in c.parameters]),
        Heading("Held-out model latency and prediction error"),
        table(["model", "batch", "A measured", "B measured", "change", "beyond", "A error", "B error"],
              [[m.model, str(m.batch), si(m.a_s, "s"), si(m.b_s, "s"), _change(m.a_s, m.b_s), _mark(m.beyond_noise),
                _signed(m.a_error), _signed(m.b_error)] for m in c.models]),
        Heading("Flags"),
        table(["flag", "A", "B"], [[f.code, "yes" if f.in_a else "", "yes" if f.in_b else ""] for f in c.flags])
        if c.flags else Paragraph("Neither run raised a flag."),
    ]


def _with_sigma(value: float | None, sigma: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" + ("" if sigma is None else f" ± {sigma:.2g}")


def _signed(error: float | None) -> str:
    return "-" if error is None else f"{100 * error:+.1f}%"
