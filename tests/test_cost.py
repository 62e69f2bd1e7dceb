"""Dollars per 1,000 inferences and per million tokens (model.estimate.cost), worked by hand."""

from __future__ import annotations

import math

import pytest

from chipcal.model.estimate.cost import INFERENCES_PER_QUOTE, TOKENS_PER_QUOTE, usd_per_units


def test_a_price_per_device_hour_turns_a_rate_into_a_cost():
    # $3.60 an hour is $0.001 a second: 1,000 tokens/s cost $1.00 per million tokens
    assert usd_per_units(3.6, 1000.0, TOKENS_PER_QUOTE) == pytest.approx(1.0)
    # $2.50 an hour at 500 images/s: 2 s per 1,000 images at $2.50 / 3600 s = $0.0013889
    assert usd_per_units(2.5, 500.0, INFERENCES_PER_QUOTE) == pytest.approx(2 * 2.5 / 3600)
    # eight devices at the same rate cost eight times one
    assert usd_per_units(2.5, 500.0, 1000, devices=8) == pytest.approx(8 * 2 * 2.5 / 3600)


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
def test_no_rate_no_cost(rate):
    assert math.isnan(usd_per_units(3.6, rate, TOKENS_PER_QUOTE))
