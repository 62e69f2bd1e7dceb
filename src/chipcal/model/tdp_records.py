"""Physics TDP results as the flat records of `estimate_tdp --json` (one TdpEstimate each) and
`compare_tdp_registry --json` (one chip each, assessed at one precision)."""

from __future__ import annotations

from collections.abc import Iterable

from chipcal.model import power, technology
from chipcal.model.chip import Chip
from chipcal.model.estimate.prediction import chip_label
from chipcal.model.tdp import ChipTdpComparison, TdpEstimate, compare_chip


def estimate_record(e: TdpEstimate) -> dict:
    """An estimate with every power component and the per-MAC energy of each part of the datapath."""
    return {
        "process_nm": e.process_nm, "circuit": e.circuit, "precision": e.precision, "alus": e.alus,
        "frequency_hz": e.frequency_hz, "pj_per_mac": e.pj_per_mac, "compute_w": e.compute_w,
        "delivery_w": e.delivery_w, "memory_w": e.memory_w, "static_w": e.static_w, "tdp_w": e.tdp_w,
        "tdp_low_w": e.tdp_low_w, "tdp_high_w": e.tdp_high_w,
        **{f"{k}_pj_per_mac": getattr(e.mac, f"{k}_j") / technology.PJ
           for k in ("arithmetic", "issue", "register_file", "l1", "l2", "network", "clock_control")},
        "peak_ops_per_s": e.peak_ops_per_s, "ops_per_w": e.ops_per_w,
        "extrapolated_node": e.extrapolated_node,
    }


def comparison_record(c: ChipTdpComparison) -> dict:
    """A chip's assessment: spec peak, power at the spec clock with its band and parts, the
    sustainable clock and peak, the verdict, and the sustained and burst measurements apart."""
    chip = c.chip
    parts = c.components_at_spec_w
    return {
        "hardware": chip_label(chip), "process_nm": chip.process_nm, "precision": c.precision,
        "spec_tdp_w": chip.tdp_w, "peak_engine": c.peak_engine,
        "engines": "; ".join(f"{e.engine}({e.precision})={e.dynamic_w:.1f}W" for e in c.engines),
        "spec_peak_flop_per_s": c.spec_peak_flop_per_s, "spec_clock_hz": c.gemm.spec_clock_hz,
        "boost_clock_hz": c.gemm.boost_clock_hz,
        "power_at_spec_w": c.power_at_spec_w, "power_at_spec_low_w": c.power_at_spec_low_w,
        "power_at_spec_high_w": c.power_at_spec_high_w,
        **{k[:-2] + "_at_spec_w": v for k, v in parts.items()},
        "pj_per_mac": c.peak_engine_tdp.pj_per_mac, "pj_per_flop_at_spec": c.gemm.pj_per_flop_at_spec,
        "compute_w": c.compute_w, "memory_w": c.memory_w, "static_w": c.static_w,
        "estimated_tdp_w": c.estimated_tdp_w, "combined_tdp_w": c.combined_tdp_w, "ratio": c.ratio,
        "max_sustainable_pj_per_mac": c.max_sustainable_pj_per_mac, "margin": c.margin,
        "sustained_clock_hz": c.sustained_clock_hz,
        "sustainable_peak_flop_per_s": c.sustainable_peak_flop_per_s,
        "sustainable_fraction": c.sustainable_fraction,
        "sustainable_fraction_low": c.low.sustainable_fraction,
        "sustainable_fraction_high": c.high.sustainable_fraction,
        "clock_fraction": c.clock_fraction, "gemm_efficiency": c.gemm.efficiency,
        "verdict": c.verdict, "verdict_basis": c.verdict_basis, "model_verdict": c.model_verdict,
        "measured_peak_flop_per_s": c.measured_peak_flop_per_s, "measured_fraction": c.measured_fraction,
        "measured_kind": None if c.measured is None else c.measured.kind,
        "measured_clock_hz": None if c.measured is None else c.measured.sm_clock_hz,
        "measured_power_w": None if c.measured is None else c.measured.board_power_w,
        "measured_source": c.measured_source,
        "burst_peak_flop_per_s": None if c.burst is None else c.burst.flop_per_s,
        "burst_fraction": c.burst_fraction, "burst_source": None if c.burst is None else c.burst.source,
        "hypothetical": chip.hypothetical,
    }


COMPONENTS = ("arithmetic", "issue", "register_file", "l1", "l2", "network", "clock_control", "dram", "static")
NUMERIC_FIELDS = ("spec_peak_flop_per_s", "spec_clock_hz", "boost_clock_hz", "power_at_spec_w",
                  "power_at_spec_low_w", "power_at_spec_high_w", "pj_per_mac", "pj_per_flop_at_spec",
                  "compute_w", "memory_w", "static_w", "estimated_tdp_w", "combined_tdp_w", "ratio",
                  "max_sustainable_pj_per_mac", "margin", "sustained_clock_hz", "sustainable_peak_flop_per_s",
                  "sustainable_fraction", "sustainable_fraction_low", "sustainable_fraction_high",
                  "clock_fraction", "gemm_efficiency", "verdict_basis", "model_verdict",
                  "measured_peak_flop_per_s", "measured_fraction", "measured_kind", "measured_clock_hz",
                  "measured_power_w", "measured_source", "burst_peak_flop_per_s", "burst_fraction", "burst_source",
                  "engines", "peak_engine",
                  *(f"{c}_at_spec_w" for c in COMPONENTS))


def unsupported_record(chip: Chip, precision: str) -> dict:
    """A chip asked about a precision it does not run: its identity, every figure None, and the
    precisions it runs in the verdict."""
    row = {"hardware": chip_label(chip), "process_nm": chip.process_nm, "precision": precision, "spec_tdp_w": chip.tdp_w}
    row.update(dict.fromkeys(NUMERIC_FIELDS))
    row.update({"verdict": f"unsupported: runs {', '.join(chip.precisions)}", "hypothetical": chip.hypothetical})
    return row


def comparison_records(chips: Iterable[Chip], precision: str | None = None,
                       constants: power.Constants = power.NOMINAL) -> list[dict]:
    """Every chip assessed at `precision` (None: each chip's headline precision) with
    `constants`; a chip that does not run `precision` gets unsupported_record."""
    return [unsupported_record(chip, precision) if precision and not chip.supports(precision)
            else comparison_record(compare_chip(chip, precision, constants)) for chip in chips]
