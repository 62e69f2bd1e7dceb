"""The calibration run: measure this machine, fit the model, validate on held-out models, flag.

It reads as its phases, each a named function with a typed result (calibrate.probes,
calibrate.rounds, calibrate.outcome), in this order (fit data and validation data never mix):
1. identify: the fingerprint and the chip model (registry match, else the locally built chip);
2. sweep: the GEMM peak per precision -> saturating efficiency fit per precision;
3. bandwidth: the probe -> bandwidth_efficiency = measured / model bandwidth (and the fit's prior);
4. power (where a source exists): idle, triad and each native GEMM precision held until clock and
   power settle (measure.sustained) -> static power, pJ/byte and pJ/FLOP per precision (calibrate.sustain);
5. host probes: first touch, layout reorders, GEMV rate, dispatch cost, thread scaling;
6. layers and models: timing rounds, interleaved: micro-layers, layer chains, whole torchvision models;
7. fit: the micro-layers and chains -> per-op-class efficiency and overhead, switch cost;
8. validate: the models predicted (calibrated and default) vs measured; gap flags;
   on a GPU then what users run (calibrate.users_run): torch.compile of validation models and an
   LLM's decode step and generate end to end, each predicted beside it, within a wall budget;
9. write: the typed CalibrationDocument (calibrate.document; docs/calibration.md has its fields).
Every step's observations go to the journal as they are measured (calibrate.journal), so that a
resumed run continues at the first step its journal does not hold; the wall and CPU seconds of
each phase go to the document (calibrate.phases).
"""

from __future__ import annotations

import datetime as _dt

from chipcal.calibrate import document as cd
from chipcal.calibrate import outcome, probes, rounds, users_run
from chipcal.calibrate.config import CalibrationConfig
from chipcal.calibrate.context import Progress, RunContext, SilentProgress
from chipcal.calibrate.journal import NoJournal
from chipcal.calibrate.phases import PhaseClock


def run_calibration(config: CalibrationConfig, progress: Progress | None = None,
                    journal=None) -> cd.CalibrationDocument:
    """Measure, fit, validate and flag; returns the calibration document."""
    run = RunContext(config, progress or SilentProgress(), journal or NoJournal(), PhaseClock())
    machine = probes.identify(run)
    sweep = probes.sweep(run, machine)
    memory = probes.bandwidth(run, machine)
    power = probes.power(run, machine, memory.chip, sweep)
    host = probes.host(run, machine, probes.prior(run, sweep, memory))
    timed = rounds.time_rounds(run, memory.chip)
    fitted = outcome.fit(run, memory.chip, host, timed)
    validated = outcome.validate(run, memory.chip, sweep, timed, fitted)
    users = users_run.users_run(run, memory.chip, fitted.micro.params)
    if flag := outcome.bandwidth_flag(memory):
        run.flags.append(flag)
    done = outcome.Phases(machine, sweep, memory, power, host, timed, fitted, validated, users)
    return outcome.write(run, done, now_utc())


def now_utc() -> str:
    """The time a run or refit is stamped with (created_utc; its directory's name)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
