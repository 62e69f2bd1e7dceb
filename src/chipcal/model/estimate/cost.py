"""What a predicted run costs at a rented price: dollars per 1,000 inferences, or per million
tokens of an LLM.

    dollars per second      = price per device-hour x devices / 3600
    per 1,000 inferences    = 1,000 x dollars per second / inferences per second
    per million tokens      = 10^6 x dollars per second / tokens per second

The price is per device-hour: a cloud instance's hourly rate divided by its accelerators. It is
the user's where given (`chipcal predict --usd-per-hour`), else the chip's dated, sourced price in
the registry (`[price]`, chip.Price), else there is none and no cost is printed. A model's
prediction is of one device; an LLM's is of its layout's devices (`--devices`,
estimate/parallel.py), every one of them charged. An LLM whose share does not fit a device gets no
cost, nor does an unsupported row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chipcal.model.chip import Chip, Price

SECONDS_PER_HOUR = 3600.0
INFERENCES_PER_QUOTE = 1_000
TOKENS_PER_QUOTE = 1_000_000


def usd_per_units(usd_per_device_hour: float, units_per_s: float, units: float, devices: int = 1) -> float:
    """Dollars for `units` of work at `units_per_s` on `devices` devices at the given price; NaN
    for a rate that is not a positive finite number."""
    if not (units_per_s > 0 and math.isfinite(units_per_s)):
        return math.nan
    return units * usd_per_device_hour * devices / SECONDS_PER_HOUR / units_per_s


@dataclass(frozen=True)
class Quote:
    """The price a cost is worked out at: a rate per device-hour, and the registry's dated price
    it came from (None: the user gave it)."""

    usd_per_device_hour: float
    price: Price | None

    @property
    def basis(self) -> str:
        """Where the rate comes from, for the record: 'given', or the registry price's basis."""
        return "given" if self.price is None else self.price.basis


def quote(chip: Chip, usd_per_device_hour: float | None) -> Quote | None:
    """The user's price where given, else the chip's registry price, else None (no cost)."""
    if usd_per_device_hour is not None:
        return Quote(usd_per_device_hour, None)
    return None if chip.price is None else Quote(chip.price.usd_per_device_hour, chip.price)
