"""Dollars per 1,000 inferences and per million tokens (model.estimate.cost), worked by hand, and
the registry's dated prices against the table they come from."""

from __future__ import annotations

import datetime
import math

import pytest

from chipcal.model.estimate.cost import INFERENCES_PER_QUOTE, TOKENS_PER_QUOTE, quote, usd_per_units
from chipcal.model.registry import RegistryError, load_registry, price_from_dict


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


# AWS's capacity-block table (aws.amazon.com/ec2/capacityblocks/pricing, rates in effect up to
# 2024-12-31): each instance's hourly rate, shared by its 8 accelerators
AWS_INSTANCE_USD_PER_HOUR = {"h100-sxm5": 39.33, "h200-sxm": 43.26, "a100-sxm4-40gb": 14.75}


@pytest.mark.parametrize("name", sorted(AWS_INSTANCE_USD_PER_HOUR))
def test_the_registry_prices_are_the_instance_rates_over_eight_devices(name):
    price = load_registry().get(name).price
    # AWS rounds the accelerator's share to a tenth of a cent ($43.26 / 8 = $5.4075 -> $5.408)
    assert price.usd_per_device_hour == pytest.approx(AWS_INSTANCE_USD_PER_HOUR[name] / 8, abs=5.01e-4)
    assert price.kind == "capacity-block" and price.as_of == datetime.date(2024, 12, 31)
    assert "aws.amazon.com/ec2/capacityblocks/pricing" in price.source


def test_the_mi300x_price_is_the_hyperscalers_list_rate_as_quoted():
    """The note quotes Azure and Oracle at $6 per MI300X-hour (ND96isr MI300X v5: 8 GPUs), dated
    2026-05-18; the output names it as quoted, not read at the cloud."""
    price = load_registry().get("mi300x").price
    assert price.usd_per_device_hour == 6.0 and price.kind == "on-demand"
    assert price.as_of == datetime.date(2026, 5, 18) and "cliffcenter.com" in price.source
    assert "quoted by a third party" in price.basis and "as of 2026-05-18" in price.basis


def test_the_price_given_wins_else_the_registry_s_else_none():
    registry = load_registry()
    h100, l40s = registry.get("h100-sxm5"), registry.get("l40s")
    assert quote(h100, 2.0).usd_per_device_hour == 2.0 and quote(h100, 2.0).basis == "given"
    assert quote(h100, None).price is h100.price and "as of 2024-12-31" in quote(h100, None).basis
    assert l40s.price is None and quote(l40s, None) is None


@pytest.mark.parametrize("table, field", [
    ({"usd_per_device_hour": 1.0, "kind": "on-demand", "offer": "x", "as_of": "2024-12-31", "source": "s"}, "as_of"),
    ({"usd_per_device_hour": 1.0, "kind": "spot", "offer": "x", "as_of": datetime.date(2024, 1, 1), "source": "s"},
     "kind"),
    ({"usd_per_device_hour": 0, "kind": "on-demand", "offer": "x", "as_of": datetime.date(2024, 1, 1), "source": "s"},
     "usd_per_device_hour"),
    ({"usd_per_device_hour": 1.0, "kind": "on-demand", "offer": "x", "as_of": datetime.date(2024, 1, 1)}, "source"),
])
def test_a_price_without_a_date_a_kind_a_rate_or_a_source_is_refused(table, field):
    with pytest.raises(RegistryError, match=f"price.{field}"):
        price_from_dict({"price": table}, "chip.toml")
