"""Typed JSON records: frozen dataclasses read from and written to JSON by their field types.

The calibration document (calibrate.document) is a tree of such records. `Record.from_dict`
checks every field against its annotation (str, int, bool, float, X | None, tuple[X, ...],
dict[str, X], a nested dataclass, a measure.device.Device: written as its text, parsed here) and
names the field by its path (`peaks.0.measured_flop_per_s`) in a one-line CalibrationError, so a
damaged file is refused, never half read. A field with a
default may be absent: files written before the field existed still load. Field metadata:
`OMIT_NONE` (written only when set) and `LAST` (written after the subclass's own fields, so the
timing columns of a row come after what the row is about).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Self

from chipcal.measure.device import Device
from chipcal.model.errors import DeviceError
from chipcal.model.mapping.params import CalibrationError

OMIT_NONE = {"omit_none": True}
LAST = {"last": True}


def _path(where: str, key: str | int) -> str:
    return f"{where}.{key}" if where else str(key)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _kind(value: object) -> str:
    return {dict: "table", list: "list", str: "string", bool: "bool", type(None): "null"}.get(
        type(value), type(value).__name__)


def parse(tp: Any, value: object, where: str) -> Any:
    """`value` (parsed JSON) checked against the annotation `tp`; CalibrationError names `where`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return parse(inner, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalibrationError(f"field {where} has the wrong type ({_kind(value)}, expected a number)")
        if not math.isfinite(value):
            raise CalibrationError(f"field {where} must be a finite number, got {value!r}")
        return value
    if tp is Device:
        try:
            return Device.parse(parse(str, value, where))
        except DeviceError as exc:
            raise CalibrationError(f"field {where}: {exc}") from None
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise CalibrationError(f"field {where} has the wrong type ({_kind(value)}, expected {tp.__name__})")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise CalibrationError(f"field {where} has the wrong type ({_kind(value)}, expected a list)")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(parse(args[0], v, _path(where, i)) for i, v in enumerate(value))
        if len(value) != len(args):
            raise CalibrationError(f"field {where} must have {len(args)} items, got {len(value)}")
        return tuple(parse(a, v, _path(where, i)) for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise CalibrationError(f"field {where} has the wrong type ({_kind(value)}, expected a table)")
        return {k: parse(args[1], v, _path(where, k)) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_fields(tp, value, where)
    raise TypeError(f"no JSON reading for {tp!r}")      # a programming error, not a damaged file


def from_fields(cls: type, data: object, where: str) -> Any:
    """An instance of the dataclass `cls` from the JSON table `data` (see module docstring).

    A class with its own `from_dict` (e.g. FamilyParams, which validates itself) reads the table;
    its CalibrationError is prefixed with `where`."""
    fields = dataclasses.fields(cls)
    if not isinstance(data, dict):
        first = next((f.name for f in fields if f.init), "")
        raise CalibrationError(f"missing field {_path(where, first)} ({where or 'the document'} is a "
                               f"{_kind(data)}, not a table)")
    if "from_dict" in vars(cls) and not issubclass(cls, Record):
        try:
            return cls.from_dict(data)
        except CalibrationError as exc:
            raise CalibrationError(f"{where}: {exc}") from None
    hints, kwargs = _hints(cls), {}
    for f in fields:
        if not f.init:
            continue
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CalibrationError(f"missing field {_path(where, f.name)}")
            continue
        kwargs[f.name] = parse(hints[f.name], data[f.name], _path(where, f.name))
    return cls(**kwargs)


def plain(value: object) -> object:
    """The JSON form of a field value: records and dataclasses as tables, tuples as lists."""
    if isinstance(value, Device):
        return str(value)
    if isinstance(value, Record) or (dataclasses.is_dataclass(value) and hasattr(value, "to_dict")):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


# the decorator of every record: frozen, and built by keyword (fields added later have defaults)
record = dataclasses.dataclass(frozen=True, kw_only=True)


class Record:
    """Base of a frozen dataclass read from and written to JSON by its field types."""

    def to_dict(self) -> dict:
        fields = dataclasses.fields(self)
        ordered = [f for f in fields if not f.metadata.get("last")] + [f for f in fields if f.metadata.get("last")]
        return {f.name: plain(getattr(self, f.name)) for f in ordered
                if not (f.metadata.get("omit_none") and getattr(self, f.name) is None)}

    @classmethod
    def from_dict(cls, data: object, where: str = "") -> Self:
        return from_fields(cls, data, where)
