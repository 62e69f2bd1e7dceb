"""What a predicted run costs at a rented price: dollars per 1,000 inferences, or per million
tokens of an LLM.

    dollars per second      = price per device-hour x devices / 3600
    per 1,000 inferences    = 1,000 x dollars per second / inferences per second
    per million tokens      = 10^6 x dollars per second / tokens per second

The price is the user's (`chipcal predict --usd-per-hour`), per device-hour: a cloud instance's
on-demand price divided by its accelerators. A model's prediction is of one device; an LLM's is of
its layout's devices (`--devices`, estimate/parallel.py), every one of them charged. An LLM whose
share does not fit a device gets no cost, nor does an unsupported row.
"""

from __future__ import annotations

import math

SECONDS_PER_HOUR = 3600.0
INFERENCES_PER_QUOTE = 1_000
TOKENS_PER_QUOTE = 1_000_000


def usd_per_units(usd_per_device_hour: float, units_per_s: float, units: float, devices: int = 1) -> float:
    """Dollars for `units` of work at `units_per_s` on `devices` devices at the given price; NaN
    for a rate that is not a positive finite number."""
    if not (units_per_s > 0 and math.isfinite(units_per_s)):
        return math.nan
    return units * usd_per_device_hour * devices / SECONDS_PER_HOUR / units_per_s

