"""What a prediction runs on when this machine or a calibration has a say: the chips named by
`chipcal predict --hardware` (with 'local', this machine's CPU as measured), and the per-op host
cost of `--host-overhead-s local` (this machine's dispatch probe).

In the calibrate room because it reads calibration runs (calibrate/store.py) and this machine's
probes and their caches (chipcal.measure); the predictions themselves are the model's.
"""

from __future__ import annotations

from collections.abc import Sequence

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.local import LOCAL_CHIP_NAME, CpuSpec
from chipcal.model.mapping.params import CalibrationError, CalibrationParams
from chipcal.model.registry import Registry
from chipcal.model.selection import resolve_chips

LOCAL = "local"         # a hardware name, and a --host-overhead-s value: this machine
ALL = "all"


class HardwareNamesError(ChipcalError, ValueError):
    """The hardware names contradict each other ('all' beside other names)."""


class OtherMachineError(CalibrationError):
    """A local-cpu calibration measured on another machine was to be applied to this one."""


def _check_same_machine(cal: CalibrationParams, spec: CpuSpec) -> None:
    """A local-cpu calibration describes the machine it was measured on: every machine's CPU is
    'local-cpu', so another machine's run would otherwise be applied here without a word."""
    from chipcal.measure.system import host_differences

    differ = host_differences(cal.host, spec) if cal.host is not None else []
    if differ:
        raise OtherMachineError(f"--calibration {cal.path.parent}: measured on another machine ({'; '.join(differ)}); a "
                                f"{LOCAL_CHIP_NAME} calibration applies to the machine it was measured on: run "
                                "`chipcal calibrate` here")


def local_chip(calibration: CalibrationParams | None = None, calibration_dir: str | None = None) -> Chip:
    """This machine's CPU with its measured DRAM bandwidth and cache knee where known: from
    `calibration` (read from `calibration_dir`) when it is a local-cpu run of this machine, so its
    parameters meet the chip they were fitted on; else from the bandwidth probe's cache; else the
    documented assumptions. Another machine's local-cpu calibration raises OtherMachineError."""
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.system import local_chip as cpu_chip

    spec = detect_cpu()     # once: the machine check, the cache lookup and the chip need it
    if calibration is not None and calibration.chip == LOCAL_CHIP_NAME:
        _check_same_machine(calibration, spec)
        return cpu_chip(calibration.memory_bandwidth_bytes_per_s, calibration.l3_bytes,
                        f"calibration {calibration_dir}", cpu=spec)
    from chipcal.measure.bandwidth import cached_cpu_bandwidth, local_overrides

    measured = cached_cpu_bandwidth(spec)
    return cpu_chip(**local_overrides(measured, spec), cpu=spec) if measured is not None else cpu_chip(cpu=spec)


def prediction_chips(names: Sequence[str], registry: Registry, calibration: CalibrationParams | None = None,
                     calibration_dir: str | None = None) -> list[Chip]:
    """The chips `names` asks for: 'all' (alone) every registry chip; 'local' this machine's CPU
    (local_chip), first; the rest registry names (NAME or NAME@MODE), in order."""
    rest = [n for n in names if n != LOCAL]
    if ALL in rest:
        if len(names) > 1:
            raise HardwareNamesError(f"'{ALL}' cannot be combined with other hardware names")
        return resolve_chips(None, registry)
    chips = [local_chip(calibration, calibration_dir)] if LOCAL in names else []
    return chips + resolve_chips(rest, registry) if rest else chips


def unused_calibration_warning(calibration: CalibrationParams | None, chips: Sequence[Chip]) -> str | None:
    """A warning when a calibration is given but fits none of the chips predicted."""
    if calibration is None or any(calibration.applies_to(c.name, c.active_mode) for c in chips):
        return None
    return (f"warning: calibration is for {calibration.chip}, which is not among the chips "
            "predicted; every chip keeps its family defaults")


def host_overhead(value: float | str | None, use_cache: bool = True) -> tuple[float | None, str]:
    """(per-op host seconds, where they came from) for --host-overhead-s `value`: seconds as
    given, None for the default, or LOCAL for this machine's dispatch probe (cached unless
    `use_cache` is False)."""
    if value != LOCAL:
        return value, "given (--host-overhead-s)"
    from chipcal.measure.dispatch import local_dispatch

    cost = local_dispatch(use_cache=use_cache)
    return cost.per_op_s, f"this machine's dispatch probe: {cost.method} (median of {cost.per_op.n})"
