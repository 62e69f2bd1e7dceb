"""Where a calibration's time goes: the wall and CPU seconds of each of its phases.

A run names its phases in order (identify, GEMM sweep, bandwidth, power, host probes, the models'
characterization, micro-layers, chains, models, fits, validation); the timing rounds interleave
micro-layers, chains and models, so a phase named again adds to what it had. CPU seconds are the
process's (every thread: `time.process_time`), so a phase that measures (wall well above CPU / the
threads, or waiting) reads apart from one that computes (the fits: CPU ≈ wall, one thread), and
the CPU-bound share says what a slower core would add (issue 50).
"""

from __future__ import annotations

import time

from chipcal.calibrate.records import Record, record


@record
class PhaseTime(Record):
    """One phase of a run: seconds of wall clock and of process CPU (all threads)."""

    phase: str
    wall_s: float
    cpu_s: float


class PhaseClock:
    """Times the phases a run names with `start`; `times()` gives them in the order first named."""

    def __init__(self, wall=time.monotonic, cpu=time.process_time) -> None:
        self._wall, self._cpu = wall, cpu
        self._totals: dict[str, tuple[float, float]] = {}
        self._running: tuple[str, float, float] | None = None

    def start(self, phase: str) -> None:
        """End the running phase, if any, and start `phase`."""
        self.stop()
        self._running = (phase, self._wall(), self._cpu())

    def stop(self) -> None:
        """End the running phase (nothing when none runs)."""
        if self._running is None:
            return
        phase, wall, cpu = self._running
        before = self._totals.get(phase, (0.0, 0.0))
        self._totals[phase] = (before[0] + self._wall() - wall, before[1] + self._cpu() - cpu)
        self._running = None

    def times(self) -> tuple[PhaseTime, ...]:
        self.stop()
        return tuple(PhaseTime(phase=p, wall_s=w, cpu_s=c) for p, (w, c) in self._totals.items())
