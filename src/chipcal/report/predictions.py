"""`chipcal predict`'s summary for the terminal: per model the table of the columns that matter for
choosing a chip, the legend, the notes on single predictions, then the recommendations.

Rows come back as records of text cells (the CLI aligns them), lines already folded to
render.TEXT_WIDTH. Here rather than in model/estimate because this is wording and layout for a
reader (the hypothetical mark, units, folding), while the numbers and the choice of the best chip
are the model's (estimate/prediction.py, estimate/ranking.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from chipcal.model.estimate.prediction import Prediction
from chipcal.model.estimate.ranking import Ranking
from chipcal.report.labels import HYPOTHETICAL_NOTE, marked
from chipcal.report.render import wrap

MB = 1e6


def _summary_row(p: Prediction) -> dict:
    """The columns that matter for choosing a chip; the rest (TFLOP/s, AI, units, runtime…) are in
    --json and --csv."""
    row = {"chip": marked(p.chip, p.hypothetical), "batch": p.batch, "prec": p.precision}
    if not p.supported:
        return row | {"latency_ms": "unsupported"}
    return row | {
        "latency_ms": f"{p.latency_s * 1e3:.4g}", "per_s": f"{p.throughput_per_s:,.0f}",
        "energy_mJ": f"{p.energy_j * 1e3:.4g}", "power_W": f"{p.avg_power_w:.3g}",
        "mem_MB": f"{p.peak_memory_bytes / MB:.4g}" + ("" if p.fits_in_memory else "!"),
        "util": f"{p.compute_utilization:.0%}", "eff": f"{p.compute_efficiency:.1%}",
        "bw": f"{p.bandwidth_utilization:.0%}", "bound": p.bottleneck}


def summary_tables(preds: Sequence[Prediction]) -> dict[str, list[dict]]:
    """{model: its rows}, in the order the predictions name the models; a row that lacks a column
    (an unsupported precision) shows it empty."""
    tables = {}
    for model in dict.fromkeys(p.model for p in preds):
        rows = [_summary_row(p) for p in preds if p.model == model]
        columns = dict.fromkeys(c for row in rows for c in row)
        tables[model] = [{c: row.get(c, "") for c in columns} for row in rows]
    return tables


def summary_legend(preds: Sequence[Prediction]) -> str:
    """What the summary's columns mean, and the runtimes the predictions ran under."""
    runtimes = sorted({p.runtime for p in preds if p.supported})
    legend = ("util = time-averaged fraction of units with work; eff = attained / peak FLOP/s; "
              "bw = DRAM bandwidth used; ! = exceeds device memory"
              + (f"; runtime {runtimes[0]}" if len(runtimes) == 1 else f"; runtimes {', '.join(runtimes)}")
              + "; TFLOP/s, arithmetic intensity and units in --json / --csv")
    if any(p.hypothetical for p in preds):
        legend += f"; {HYPOTHETICAL_NOTE}"
    return wrap(legend)


def _power_note(p: Prediction, limit: str) -> str | None:
    if p.power_limited:
        return (f"power-limited: {p.chip} at batch {p.batch} {p.precision} would average "
                f"{p.listed_clock_power_w:.3g} W at its listed clocks > its {p.tdp_w:g} W {limit}: "
                f"predicted at {p.clock_fraction:.0%} of them, {p.latency_s * 1e3:.4g} ms "
                f"({p.listed_clock_latency_s * 1e3:.4g} ms at the listed clocks)"
                + (f"; it still draws {p.avg_power_w:.3g} W there (static and DRAM power alone "
                   f"exceed the {limit})" if p.avg_power_w > p.tdp_w * 1.001 else ""))
    if p.exceeds_tdp:
        return (f"note: {p.chip} at batch {p.batch} {p.precision} averages {p.avg_power_w:.3g} W > "
                f"its {p.tdp_w:g} W TDP (an assumed share: its clock is the measured one)")
    return None


def summary_notes(preds: Sequence[Prediction], limit: str = "TDP") -> list[str]:
    """One folded line per unsupported, host-bound, power-limited or over-TDP prediction, each
    once; `limit` names what caps the power (TDP, or power limit under --power-limit-w)."""
    notes = []
    for p in preds:
        if not p.supported:
            notes.append(f"unsupported: {p.chip} {p.precision}: {p.reason}")
            continue
        if p.bottleneck == "host":
            notes.append(f"host-bound: {p.chip} at batch {p.batch} {p.precision} ({p.runtime}) idles "
                         f"{p.host_wait_s * 1e3:.3g} of {p.latency_s * 1e3:.3g} ms waiting for the host to issue "
                         f"its ops ({p.host_per_op_s * 1e6:.3g} us per op); a compiled or fused runtime removes it")
        power = _power_note(p, limit)
        if power:
            notes.append(power)
    return [wrap(line, indent="  ") for line in dict.fromkeys(notes)]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _named(p: Prediction) -> str:
    return marked(p.chip, p.hypothetical)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _best_lines(r: Ranking) -> list[str]:
    """Best latency (smallest batch), energy per sample and throughput, each against the runner-up."""
    best, second = r.latency.best, r.latency.runner_up
    e, e2 = r.energy.best, r.energy.runner_up
    t, t2 = r.throughput.best, r.throughput.runner_up
    return [
        f"best latency (batch {r.batch}): {_named(best)} {best.latency_s * 1e3:.4g} ms"
        + (f", {_ratio(second.latency_s, best.latency_s)} faster than {_named(second)}" if second else ""),
        f"best energy: {_named(e)} at batch {e.batch}, {e.energy_per_sample_j * 1e3:.4g} mJ per sample"
        + (f", {_ratio(e2.energy_per_sample_j, e.energy_per_sample_j)} less than "
           f"{_named(e2)} (batch {e2.batch})" if e2 else ""),
        f"best throughput: {_named(t)} at batch {t.batch}, {t.throughput_per_s:,.0f}/s"
        + (f", {_ratio(t.throughput_per_s, t2.throughput_per_s)} {_named(t2)} "
           f"(batch {t2.batch})" if t2 else ""),
    ]


def _design_lines(r: Ranking) -> list[str]:
    """The designs apart from the products, each with the rank it would take among them."""
    lines = [f"design studies, not products (the rank each would take among the {r.products} products: "
             f"latency at batch {r.design_batch}, energy, throughput):"]
    for d in r.designs:
        lines.append(f"  {d.chip}: {d.latency_s * 1e3:.4g} ms, {d.energy_per_sample_j * 1e3:.4g} mJ per sample, "
                     f"{d.throughput_per_s:,.0f}/s ({', '.join(map(_ordinal, d.ranks))})")
    return lines


def recommendation_lines(rankings: Sequence[Ranking]) -> list[str]:
    """Per (model, precision): the leaders against their runners-up, then the designs set apart
    (estimate/ranking.py), folded."""
    lines = []
    for r in rankings:
        lines.append(f"{r.model} @ {r.precision}:"
                     + (f" (only design studies here: {HYPOTHETICAL_NOTE})" if r.designs_only else ""))
        lines += [wrap(f"  {line}", indent="    ") for line in _best_lines(r)]
        if r.designs:
            lines += [wrap(f"  {line}", indent="      ") for line in _design_lines(r)]
    return lines
