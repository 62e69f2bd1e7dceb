"""Registry chips by the names a user gives: every chip, or each NAME / NAME@MODE in order.

One place decides what a list of hardware names means, for `chipcal hardware show`,
`compare-tdp-registry --hardware` and the chips a prediction runs on (calibrate/prediction_inputs.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.registry import Registry, UnknownChipError


class UnknownPowerMode(ChipcalError, KeyError):
    """NAME@MODE names a mode the chip does not have; the message lists the ones it has."""

    def __str__(self) -> str:       # KeyError would quote the message
        return str(self.args[0])


def resolve_chips(names: Sequence[str] | None, registry: Registry) -> list[Chip]:
    """The registry's chips by name, in the order given; None or ['all']: every chip, by name.
    An unknown name raises UnknownChipError, an unknown power mode UnknownPowerMode."""
    if not names or list(names) == ["all"]:
        return [registry.chips[n] for n in registry.names]
    try:
        return [registry.get(n) for n in names]
    except UnknownChipError:
        raise
    except KeyError as exc:         # Chip.mode's KeyError: its text without the quotes repr adds
        raise UnknownPowerMode(str(exc).strip("'\"")) from None
