"""The power-limited clock of a whole-model run: the chip's governor holds average power to its TDP.

A GPU's (or accelerator's) power governor lowers the engine clocks when the average board power
would exceed the TDP (NVIDIA: the power cap of nvidia-smi's "SW Power Cap" clock-event reason).
Every engine clock runs at a fraction s of its listed clock on the same voltage-frequency curve
(src/chipcal/model/power.py), so a prediction at s has compute and per-kernel cycles 1/s slower, core and
on-chip energy x V(s f)^2, static power x V(s f) and DRAM time and energy unchanged. Its
average power P(s) = energy(s) / latency(s) falls as s falls, and the run holds

    s* = 1                    when P(1) <= TDP
    s*: P(s*) = TDP            otherwise

so a memory-bound run that exceeds the TDP slows only by its clock-bound share. When even S_MIN
exceeds the TDP (static power alone above it), s* = S_MIN and the caller says so. Power modes
(Jetson nvpmodel) are different: they fix the clock, and a prediction in a mode starts from it.
A user's power limit (`with_power_limit`) takes the TDP's place.

s* is found from the top, as a governor lowers the clock: a secant on log P against log s (P
goes roughly as s^2 where the clock-bound work dominates, so the first step is s = (TDP / P(1))^(1/2)),
kept inside the bracket it has seen and falling back to bisection, until the sign change is
bracketed within S_XTOL. Every step costs a prediction of the whole network; this takes 3 to 5
where a bisection-safeguarded search over [S_MIN, 1] (scipy's brentq) took 8 to 9.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from chipcal.model import power
from chipcal.model.chip import Chip

S_MIN = 0.05        # lowest clock fraction searched (a GPU's idle clock is ~5-20% of boost)
S_XTOL = 1e-4       # the clock fraction to a hundredth of a percent
MAX_STEPS = 40      # a bisection from [S_MIN, 1] reaches S_XTOL in 14


def power_limited_fraction(power_at: Callable[[float], float], tdp_w: float) -> float:
    """The clock fraction s* in [S_MIN, 1] at which `power_at(s)` (average watts of the run with
    every engine clock at s x its listed clock) meets `tdp_w`; 1 if the listed clocks fit;
    S_MIN if even S_MIN exceeds it (module docstring)."""
    high = power_at(1.0)
    if high <= tdp_w:
        return 1.0
    lo = g_lo = None                                  # the highest s seen at or under the limit
    hi, g_hi = 1.0, math.log(high / tdp_w)
    s_prev, g_prev = hi, g_hi
    s = max(S_MIN, math.sqrt(tdp_w / high))
    for _ in range(MAX_STEPS):
        g = math.log(power_at(s) / tdp_w)
        if g > 0:
            if s <= S_MIN:
                return S_MIN
            hi, g_hi = s, g
        else:
            lo, g_lo = s, g
        if lo is not None and hi - lo <= S_XTOL:
            return lo if -g_lo <= g_hi else hi
        s_prev, g_prev, s = s, g, _next(s, g, s_prev, g_prev, lo, hi)
    return s


def _next(s: float, g: float, s_prev: float, g_prev: float, lo: float | None, hi: float) -> float:
    """The secant step in log s through the last two points, inside the bracket (else halfway
    across it, or halfway down while nothing under the limit is known), at least S_XTOL from s."""
    step = s * math.exp(-g * math.log(s / s_prev) / (g - g_prev)) if g != g_prev else s
    floor = lo if lo is not None else S_MIN
    if not floor < step < hi:
        step = (floor + hi) / 2 if lo is not None else max(S_MIN, s / 2)
    if abs(step - s) < S_XTOL:
        step = s + S_XTOL if g < 0 else max(S_MIN, s - S_XTOL)
    return step


def with_power_limit(chip: Chip, watts: float) -> Chip:
    """`chip` under a board power limit of `watts` (nvidia-smi --power-limit): the limit replaces
    the TDP the governor holds, and governs the clock; the static power stays what it is at the
    rated TDP (leakage does not follow a limit set by the user)."""
    if not watts > 0:
        raise ValueError(f"power limit must be > 0 W, got {watts!r}")
    return dataclasses.replace(chip, tdp_w=watts, idle_w=power.static_w(chip), tdp_limits_clock=True)
