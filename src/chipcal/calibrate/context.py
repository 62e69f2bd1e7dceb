"""What every phase of a calibration run is handed: the run's configuration and device, where it
reports progress, its journal, its phase clock and the flags it has raised so far.

A phase (calibrate.probes, calibrate.rounds, calibrate.outcome) is a function of a RunContext and
the typed results of the phases before it; calibrate.run calls them in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from chipcal.calibrate.config import CalibrationConfig
from chipcal.calibrate.flags import Flag
from chipcal.calibrate.phases import PhaseClock
from chipcal.measure.device import Device

T = TypeVar("T")


def _same(value):
    return value


class Progress(Protocol):
    """Where the run reports progress: phases of known length, one step at a time."""

    def phase(self, name: str, total: int) -> None: ...

    def step(self, label: str) -> None: ...


class SilentProgress:
    def phase(self, name: str, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass


class Journal(Protocol):
    """calibrate.journal's Journal or NoJournal: each finished step's data, by name."""

    def get(self, step: str): ...

    def put(self, step: str, data) -> None: ...


@dataclass
class RunContext:
    """One calibration run in progress (module docstring); `flags` grows in the order raised."""

    config: CalibrationConfig
    progress: Progress
    journal: Journal
    clock: PhaseClock
    flags: list[Flag] = field(default_factory=list)

    @property
    def device(self) -> Device:
        return self.config.device

    def step(self, label: str) -> None:
        self.progress.step(label)

    def journaled(self, step: str, measure: Callable[[], T], to_data: Callable[[T], object] = _same,
                  from_data: Callable[[object], T] = _same) -> T:
        """`step`'s result read back from the journal (a resumed run), else `measure()`'s, journaled
        (as `to_data` of it) as soon as it is measured: a resumed run continues at the first step
        its journal does not hold."""
        if (recorded := self.journal.get(step)) is not None:
            return from_data(recorded)
        value = measure()
        self.journal.put(step, to_data(value))
        return value
