"""The calibration's power section: the energy fit of calibrate.sustain on the power phase's holds
(or a SCHEMA_1 run's power curve), each precision against the physics model's energy, and the
flags built from each precision's own energy: spec_beyond_tdp and measured_energy_exceeds_tdp."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chipcal.calibrate import flags as gap
from chipcal.calibrate.document import FitRecord
from chipcal.calibrate.power_records import HoldRow, PowerRow, PowerSection
from chipcal.calibrate.sustain import (
    EnergyFitError,
    fit_energy,
    points_from_holds,
    points_from_power_rows,
    precision_energy,
)


def power_section(source: str, available: bool, reason: str | None, holds: Sequence[HoldRow],
                  rows: Sequence[PowerRow], chip, fp, precision: str
                  ) -> tuple[PowerSection, FitRecord | None, list[gap.Flag]]:
    """Power where a sensor was read: static power, energy per DRAM byte and per FLOP of each
    precision held (calibrate.sustain), and per precision the spec-versus-limit flags. `source`,
    `available`, `reason` describe the sensor; `holds` are the power phase's, `rows` a SCHEMA_1
    run's power curve (read when there are no holds) at `precision`, the run's. Returns (power
    section, the energy fit or None, flags)."""
    from chipcal.model import technology

    section = PowerSection(source=source, available=available, reason=reason)
    points = points_from_holds(holds) if holds else points_from_power_rows(rows, precision)
    if not available or not points:
        return section, None, []
    boost = fp.gpu_max_sm_clock_hz or chip.boost_clock_hz
    tdp = fp.gpu_power_limit_w or chip.tdp_w
    try:
        fit = fit_energy(points, boost)
    except EnergyFitError as exc:
        return dataclasses.replace(section, note=str(exc)), None, []
    energies = tuple(precision_energy(fit, points, p, chip, tdp) for p in fit.j_per_flop_at_boost)
    section = dataclasses.replace(section, idle_w=fit.static_w, j_per_byte=fit.j_per_byte,
                                  physics_j_per_byte=technology.dram_energy_per_byte_j(chip.memory.type),
                                  precisions=energies)
    flags = [f for e in energies
             for f in (gap.spec_beyond_tdp(e, fit.static_w), gap.energy_exceeds_tdp(e, fit.static_w)) if f]
    return section, FitRecord.of(fit.fit), flags
