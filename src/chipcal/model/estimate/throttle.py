"""The power-limited clock of a whole-model run: the chip's governor holds average power to its TDP.

A GPU's (or accelerator's) power governor lowers the engine clocks when the average board power
would exceed the TDP (NVIDIA: the power cap of nvidia-smi's "SW Power Cap" clock-event reason).
Every engine clock runs at a fraction s of its listed clock on the same voltage-frequency curve
(src/chipcal/model/power.py), so a prediction at s has compute and per-kernel cycles 1/s slower, core and
on-chip energy x V(s f)^2, static power x V(s f) and DRAM time and energy unchanged. Its
average power P(s) = energy(s) / latency(s) falls as s falls, and the run holds

    s* = 1                    when P(1) <= TDP
    s*: P(s*) = TDP            otherwise (scipy.optimize.brentq on [S_MIN, 1])

so a memory-bound run that exceeds the TDP slows only by its clock-bound share. When even S_MIN
exceeds the TDP (static power alone above it), s* = S_MIN and the caller says so. Power modes
(Jetson nvpmodel) are different: they fix the clock, and a prediction in a mode starts from it.
A user's power limit (`with_power_limit`) takes the TDP's place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from chipcal.model import power
from chipcal.model.chip import Chip

S_MIN = 0.05        # lowest clock fraction searched (a GPU's idle clock is ~5-20% of boost)
S_XTOL = 1e-4       # the clock fraction to a hundredth of a percent


def power_limited_fraction(power_at: Callable[[float], float], tdp_w: float) -> float:
    """The clock fraction s* in [S_MIN, 1] at which `power_at(s)` (average watts of the run with
    every engine clock at s x its listed clock) meets `tdp_w`; 1 if the listed clocks fit."""
    if power_at(1.0) <= tdp_w:
        return 1.0
    # imported here: most runs fit their TDP, and scipy takes 0.3 s to import
    from scipy.optimize import brentq

    if power_at(S_MIN) >= tdp_w:
        return S_MIN
    return float(brentq(lambda s: power_at(s) - tdp_w, S_MIN, 1.0, xtol=S_XTOL))


def with_power_limit(chip: Chip, watts: float) -> Chip:
    """`chip` under a board power limit of `watts` (nvidia-smi --power-limit): the limit replaces
    the TDP the governor holds, and governs the clock; the static power stays what it is at the
    rated TDP (leakage does not follow a limit set by the user)."""
    if not watts > 0:
        raise ValueError(f"power limit must be > 0 W, got {watts!r}")
    return dataclasses.replace(chip, tdp_w=watts, idle_w=power.static_w(chip), tdp_limits_clock=True)
