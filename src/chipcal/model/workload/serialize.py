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
from collections.abc import Callable
from functools import cache

from chipcal.model.errors import ChipcalError
from chipcal.model.workload.types import LlmStep, Workload


class WorkloadDataError(ChipcalError, ValueError):
    """A serialized workload does not have the shape of a Workload; says which field."""


def workload_to_dict(workload: Workload) -> dict:
    """The workload's fields as nested dicts/lists of str, int, float, bool and None."""
    return _dumper(Workload)(workload)


def workload_from_dict(data: object) -> Workload:
    """The Workload `data` describes (as written by workload_to_dict); WorkloadDataError if not one."""
    return _build(Workload, data, "workload")


def llm_step_to_dict(step: LlmStep) -> dict:
    """The step's fields, as workload_to_dict gives a workload's."""
    return _dumper(LlmStep)(step)


def llm_step_from_dict(data: object) -> LlmStep:
    """The LlmStep `data` describes (as written by llm_step_to_dict); WorkloadDataError if not one."""
    return _build(LlmStep, data, "llm_step")


@cache
def _dumper(tp: object) -> Callable[[object], object]:
    """The function that writes a value of annotation `tp` as JSON types: what dataclasses.asdict
    gives, tuples as lists, with the rules worked out once per type as _builder's are (asdict
    deep-copies field by field: 20 s for a 70B model's step against about 1)."""
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        spec = tuple((f.name, _dumper(hints[f.name])) for f in dataclasses.fields(tp))
        return lambda value: {name: dump(getattr(value, name)) for name, dump in spec}
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            each = _dumper(args[0])
            return list if each is _same else lambda value: list(map(each, value))
        items = tuple(_dumper(a) for a in args)
        return list if all(i is _same for i in items) else lambda value: list(map(_call, items, value))
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(tp) if o is not type(None)]
        dump = _dumper(inner)
        return dump if dump is _same else lambda value: None if value is None else dump(value)
    if tp in _LEAVES:
        return _same
    raise TypeError(f"no rule for type {tp!r}")  # a new field type in types.py: extend _dumper


def _same(value: object) -> object:
    return value


class _Misshapen(Exception):
    """Raised inside the builders: what is wrong, and the path to it (collected on the way out,
    so that a well-formed file spends nothing on naming where it is)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message, self.path = message, []

    def at(self, step: str) -> _Misshapen:
        self.path.append(step)
        return self


def _build(tp: object, value: object, where: str) -> object:
    try:
        return _builder(tp)(value)
    except _Misshapen as exc:
        raise WorkloadDataError(f"{where}{''.join(reversed(exc.path))}: {exc.message}") from None


@cache
def _builder(tp: object) -> Callable[[object], object]:
    """The function that rebuilds a value of annotation `tp` from its JSON form (the rules are
    worked out once per type: a 70B model's step has about 300,000 values)."""
    if dataclasses.is_dataclass(tp):
        return _dataclass_builder(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence_builder(_builder(args[0]), None)
        return _sequence_builder(None, tuple(_builder(a) for a in args))
    if origin in (typing.Union, types.UnionType):
        (inner,) = [o for o in typing.get_args(tp) if o is not type(None)]
        build = _builder(inner)
        return lambda value: None if value is None else build(value)
    if tp in _LEAVES:
        return _LEAVES[tp]
    raise TypeError(f"no rule for type {tp!r}")  # a new field type in types.py: extend _builder


def _sequence_builder(each: Callable | None, items: tuple[Callable, ...] | None) -> Callable[[object], tuple]:
    """A tuple of any length built item by item with `each`, or of fixed length with `items`."""
    def build(value: object) -> tuple:
        if not isinstance(value, list):
            raise _Misshapen(f"expected a list, got {type(value).__name__}")
        if items is not None and len(items) != len(value):
            raise _Misshapen(f"expected {len(items)} items, got {len(value)}")
        builders = items if items is not None else (each,) * len(value)
        try:
            return tuple(map(_call, builders, value))
        except _Misshapen as exc:
            raise exc.at(f"[{_failing(builders, value)}]") from None
    return build


def _call(build: Callable, value: object) -> object:
    return build(value)


def _failing(builders, value: list) -> int:
    """The position of the first item its builder refuses (an error's path only)."""
    for i, (build, v) in enumerate(zip(builders, value, strict=True)):
        try:
            build(v)
        except _Misshapen:
            return i
    raise AssertionError("no item fails")


def _dataclass_builder(cls: type) -> Callable[[object], object]:
    hints = typing.get_type_hints(cls)
    spec = [(f.name, _builder(hints[f.name]),
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(cls)]        # the workload's types do not refer to themselves
    names = frozenset(name for name, _, _ in spec)

    def build(value: object) -> object:
        if not isinstance(value, dict):
            raise _Misshapen(f"expected an object, got {type(value).__name__}")
        if not names.issuperset(value):
            raise _Misshapen(f"unknown field {sorted(set(value) - names)[0]!r:.40}")
        kwargs = {}
        for name, field_builder, required in spec:
            if name in value:
                try:
                    kwargs[name] = field_builder(value[name])
                except _Misshapen as exc:
                    raise exc.at(f".{name}") from None
            elif required:
                raise _Misshapen(f"missing field {name!r}")
        return cls(**kwargs)
    return build


def _bool(value: object) -> bool:
    if type(value) is not bool:
        raise _Misshapen(f"expected true/false, got {value!r:.40}")
    return value


def _int(value: object) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Misshapen(f"expected an integer, got {value!r:.40}")
    return value


def _float(value: object) -> float:
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Misshapen(f"expected a finite number, got {value!r:.40}")
    return float(value)


def _str(value: object) -> str:
    if type(value) is not str:
        raise _Misshapen(f"expected a string, got {value!r:.40}")
    return value


_LEAVES: dict[type, Callable[[object], object]] = {bool: _bool, int: _int, float: _float, str: _str}
