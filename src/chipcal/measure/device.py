"""The device a probe runs on: one value, parsed in one place.

`Device.parse` turns "cpu", "cuda" or "cuda:N" (any case, surrounding blanks ignored) into a frozen
`Device(kind, index)`; anything else is a `DeviceError` that lists what is valid. Parsing needs no
torch; `Device.require` (is it here?) imports torch only for a CUDA device. Text is parsed where it
enters (a CLI argument, a calibration document or journal read back); from there on a `Device`
travels, and torch gets its text (`str(device)`: "cpu", "cuda:N").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chipcal.model.errors import DeviceError

VALID = "cpu, cuda, cuda:N"
_PATTERN = re.compile(r"(cpu)|(cuda)(?::(\d+))?")


class DeviceUnavailable(DeviceError, RuntimeError):
    """A well-formed device that this machine does not have (no CUDA, index out of range)."""


@dataclass(frozen=True)
class Device:
    """A probe's device: kind "cpu" or "cuda", and the CUDA index (0 on CPU)."""

    kind: str
    index: int = 0

    @classmethod
    def parse(cls, text: str | Device) -> Device:
        """The Device `text` names; DeviceError (saying what is valid) when it names none."""
        if isinstance(text, Device):
            return text
        match = _PATTERN.fullmatch(str(text).strip().lower())
        if match is None:
            raise DeviceError(f"unknown device {text!r}; valid: {VALID}")
        if match.group(1):
            return cls("cpu")
        return cls("cuda", int(match.group(3) or 0))

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        return f"cuda:{self.index}" if self.is_cuda else "cpu"

    def require(self) -> Device:
        """This device, if this machine has it; DeviceUnavailable saying what is valid here."""
        if not self.is_cuda:
            return self
        import torch

        if not torch.cuda.is_available():
            raise DeviceUnavailable(f"device {self}: no CUDA device is available on this machine "
                                    "(torch.cuda.is_available() is False); valid here: cpu")
        count = torch.cuda.device_count()
        if self.index >= count:
            raise DeviceUnavailable(f"device {self}: only {count} CUDA device(s); "
                                    f"valid here: cpu, cuda:0..cuda:{count - 1}")
        return self


CPU = Device("cpu")
