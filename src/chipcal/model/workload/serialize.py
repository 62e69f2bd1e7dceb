"""Workload <-> plain dicts of JSON types, checked field by field on the way back.

`workload_to_dict` gives the dataclass fields (tuples as lists); `workload_from_dict` rebuilds
the frozen dataclasses from such a dict, following the field annotations in types.py, and
raises `WorkloadDataError` for anything that is not exactly that shape (a missing or extra
field, a wrong type, a bool where an int belongs, a non-finite float). A data format, so that
reading a cache file can never run code the way unpickling does.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache

from chipcal.model.errors import ChipcalError
from chipcal.model.workload.types import LlmStep, Workload


class WorkloadDataError(ChipcalError, ValueError):
    """A serialized workload does not have the shape of a Workload; says which field."""


def workload_to_dict(workload: Workload) -> dict:
    """The workload's fields as nested dicts/lists of str, int, float, bool and None."""
    return dataclasses.asdict(workload)


def workload_from_dict(data: object) -> Workload:
    """The Workload `data` describes (as written by workload_to_dict); WorkloadDataError if not one."""
    return _build(Workload, data, "workload")


def llm_step_to_dict(step: LlmStep) -> dict:
    return dataclasses.asdict(step)


def llm_step_from_dict(data: object) -> LlmStep:
    """The LlmStep `data` describes (as written by llm_step_to_dict); WorkloadDataError if not one."""
    return _build(LlmStep, data, "llm_step")


@cache
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _build(tp: object, value: object, where: str) -> object:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, where)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list):
            raise WorkloadDataError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise WorkloadDataError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_build(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _build(inner, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise WorkloadDataError(f"{where}: expected true/false, got {value!r:.40}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkloadDataError(f"{where}: expected an integer, got {value!r:.40}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise WorkloadDataError(f"{where}: expected a finite number, got {value!r:.40}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise WorkloadDataError(f"{where}: expected a string, got {value!r:.40}")
        return value
    raise TypeError(f"{where}: no rule for type {tp!r}")  # a new field type in types.py: extend _build


def _build_dataclass(cls: type, value: object, where: str) -> object:
    if not isinstance(value, dict):
        raise WorkloadDataError(f"{where}: expected an object, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    extra = sorted(set(value) - set(fields))
    if extra:
        raise WorkloadDataError(f"{where}: unknown field {extra[0]!r:.40}")
    hints = _hints(cls)
    kwargs = {}
    for name, field in fields.items():
        if name in value:
            kwargs[name] = _build(hints[name], value[name], f"{where}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise WorkloadDataError(f"{where}: missing field {name!r}")
    return cls(**kwargs)
