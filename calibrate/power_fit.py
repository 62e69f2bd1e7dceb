"""The calibration's power section: the energy fit against the all-in physics energy and, on a
GPU with SM clock samples, the sustain fit (calibrate.sustain) and its spec_beyond_tdp flag."""

from __future__ import annotations

import dataclasses

from chipcal.calibrate import flags as gap
from chipcal.calibrate.document import FitRecord, PowerSection, SustainSection
from chipcal.calibrate.fits import fit_power
from chipcal.calibrate.sustain import SustainFitError, fit_sustain, observations_from_power_rows


def power_section(source, rows: list[dict], chip, fp,
                  precision: str) -> tuple[PowerSection, FitRecord | None, list[gap.Flag]]:
    """Power where a sensor exists: P = idle + e_flop·FLOP/s + e_byte·byte/s against the all-in
    physics energy, and on a GPU (SM clock sampled) the sustain fit and its spec_beyond_tdp flag.
    `rows` are measure.power_curve's. Returns (power section, the energy fit or None, flags)."""
    from chipcal.model import power, technology

    section = PowerSection(source=source.name, available=source.available, reason=source.reason)
    if not source.available or not rows:
        return section, None, []
    fit = fit_power([r["avg_power_w"] for r in rows], [r["flop_per_s"] for r in rows], [r["bytes_per_s"] for r in rows])
    section = dataclasses.replace(
        section, idle_w=fit.parameters["idle_w"], j_per_flop=fit.parameters["j_per_flop"],
        j_per_byte=fit.parameters["j_per_byte"],
        # the all-in energy of a dense GEMM at the spec clock (model.power), DRAM traffic included
        physics_j_per_flop=power.gemm_power(chip, precision).pj_per_flop_at_spec * 1e-12,
        physics_j_per_byte=technology.dram_energy_per_byte_j(chip.memory.type))
    spec = chip.stated_peak_flop_per_s.get(precision)
    flags = [f for f in (gap.energy_exceeds_tdp(fit.parameters["j_per_flop"], spec, chip.tdp_w, fit.parameters["idle_w"]),
                         gap.sag("power during sustained GEMM",
                                 [r["avg_power_w"] for r in rows if r["kind"] == "sustained"], "W")) if f]
    observations = observations_from_power_rows(rows, precision)
    engine = chip.engine_for(precision)
    boost = fp.gpu_max_sm_clock_hz or (engine.clock_hz if engine else None)
    if len(observations) >= 2 and boost:
        try:
            sustain = fit_sustain(observations, boost, spec, engine.clock_hz if engine else None,
                                  fp.gpu_power_limit_w or chip.tdp_w)
        except SustainFitError as exc:
            section = dataclasses.replace(section, sustain_note=str(exc))
        else:
            section = dataclasses.replace(section, sustain=SustainSection(
                j_per_flop_at_boost=sustain.j_per_flop_at_boost, static_w=sustain.static_w,
                sustained_clock_hz=sustain.sustained_clock_hz, boost_clock_hz=sustain.boost_clock_hz,
                clock_fraction=sustain.clock_fraction, sustained_flop_per_s=sustain.sustained_flop_per_s,
                power_at_spec_w=sustain.power_at_spec_w, rms_residual_w=sustain.rms_residual_w))
            flags += [f for f in (sustain.spec_beyond_tdp(),) if f]
    return section, FitRecord.of(fit), flags
