"""chipcal's error tree: every error the library raises for a bad input or an unusable resource.

The library raises these and never prints; the CLI (`cli/common.run`) turns any `ChipcalError`
into one line on stderr and exit status 2. Subclasses keep the builtin base that callers
already catch (ValueError, KeyError, RuntimeError) so `except ValueError` still works.
"""

from __future__ import annotations


class ChipcalError(Exception):
    """Root of every chipcal error; its message is one line saying what is wrong and what is valid."""


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
