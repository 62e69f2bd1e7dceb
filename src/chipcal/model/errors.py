"""chipcal's error tree: every error the library raises for a bad input or an unusable resource.

The library raises these and never prints; the CLI (`chipcal.cli.common.run`) turns any `ChipcalError`
into one line on stderr and exit status 2. Subclasses keep the builtin base that callers
already catch (ValueError, KeyError, RuntimeError) so `except ValueError` still works.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


class ChipcalError(Exception):
    """Root of every chipcal error; its message is one line saying what is wrong and what is valid."""


def closest_names(name: str, valid: Sequence[str]) -> list[str]:
    """Up to three valid names close to `name`, closest first."""
    return difflib.get_close_matches(name.lower(), list(valid), n=3, cutoff=0.4)


def unknown_name_message(kind: str, name: str, valid: Sequence[str]) -> str:
    """'unknown <kind> X (did you mean Y?); valid: …': the closest valid names as the hint."""
    close = closest_names(name, valid)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; valid: {', '.join(valid)}"


class UnknownName(ChipcalError, KeyError):
    """A name (of a chip, a model) that is not one of the valid ones; `kind` says what it names."""

    kind = "name"

    def __init__(self, name: str, valid: list[str]):
        super().__init__(unknown_name_message(self.kind, name, valid))
        self.name, self.valid, self.close = name, valid, closest_names(name, valid)

    def __str__(self) -> str:       # KeyError would quote the message
        return str(self.args[0])


class InvalidChoice(ChipcalError, ValueError):
    """A value that must be one of a fixed table's keys (a circuit type, a memory type) is not."""

    def __init__(self, kind: str, name: str, valid: Sequence[str]):
        super().__init__(unknown_name_message(kind, name, valid))


def lookup(table: Mapping[str, T], name: str, kind: str) -> T:
    """table[name] (case and surrounding blanks ignored), else InvalidChoice naming the valid keys."""
    key = name.strip().lower()
    if key not in table:
        raise InvalidChoice(kind, name, list(table))
    return table[key]


class UnsupportedPrecision(ChipcalError, ValueError):
    """A chip, engine or device cannot run this precision; the message says what it does run."""


class DeviceError(ChipcalError, ValueError):
    """A device string is malformed or names a device that is not here."""


class MeasurementUnavailable(ChipcalError, RuntimeError):
    """A probe cannot measure here (no sensor, no driver, no permission); the message says why."""


class OutOfMemory(ChipcalError, RuntimeError):
    """The device ran out of memory for this problem size; the message says what to reduce."""


class ResultsWriteError(ChipcalError, OSError):
    """Results could not be written where asked; the message says where the data went instead."""
