"""Reuse of the recent results of pure functions of frozen records (chips, workloads, subgraphs).

A calibration fit predicts the same micro-layers and chains thousands of times with only the
FamilyParams changing (calibrate.layer_fits, calibrate.crossval); the mapping of a subgraph, a
chip's energy context and a workload's memory profile do not depend on them. `recent` keeps the
last results of such a function, keyed by the identity of its record arguments (hashing a frozen
dataclass field by field costs about what the call does) and the type and value of its plain ones,
a tuple of plain values included (a fresh tuple of the same values each call, such as
OpNumerics.scales, would never match by identity). Each entry holds its arguments, so an id cannot
be reused while the entry is kept.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable

PLAIN = (str, int, float, bool, type(None))
_PLAIN_TYPES = frozenset(PLAIN)


def _plain(arg) -> bool:
    return type(arg) in _PLAIN_TYPES or isinstance(arg, PLAIN)     # the second: numpy.float64 and kin


def _key(arg) -> object:
    """An argument's part of the key: type and value of a plain value or of a tuple of them, else
    the record's identity. (Exact types are looked up first: a fit keys millions of calls.)"""
    if _plain(arg):
        return type(arg), arg
    if type(arg) is tuple and all(map(_plain, arg)):
        return tuple, tuple((type(a), a) for a in arg)
    return id(arg)


class Recent:
    """The results of the `maxsize` most recently used keys (least recently used dropped first: a
    fit cycles through the same calls, and a cycle longer than first-in-first-out's capacity would
    never hit). Each entry also holds the records whose identities its key names (`held`), so an id
    cannot be reused while the entry is kept."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()     # least recently used first

    def get(self, key: tuple, default=None):
        entry = self._entries.get(key)
        if entry is None:
            return default
        self._entries.move_to_end(key)
        return entry[0]

    def keep(self, key: tuple, result, *held):
        """Keep `result` under `key`, with the records `held`; returns `result`."""
        if len(self._entries) >= self.maxsize:
            self._entries.popitem(last=False)
        self._entries[key] = (result, held)
        return result

    def clear(self) -> None:
        self._entries.clear()


_MISSING = object()


def recent(maxsize: int) -> Callable:
    """Decorator: reuse the results of the `maxsize` most recently used distinct positional calls
    (Recent). Calls with keyword arguments are not reused. The function must be pure and its
    non-plain arguments frozen."""

    def wrap(fn: Callable) -> Callable:
        kept = Recent(maxsize)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if kwargs:
                return fn(*args, **kwargs)
            key = tuple(map(_key, args))
            result = kept.get(key, _MISSING)
            if result is _MISSING:
                result = kept.keep(key, fn(*args), *args)
            return result

        call.cache_clear = kept.clear
        return call

    return wrap


def moved(record, **changes):
    """`record` (a frozen dataclass without __post_init__) with `changes`: what dataclasses.replace
    gives, without re-running __init__ over every field (~15 us for a 45-field record, and a 70B
    decoder's repeated layers reuse ~3,000 subgraph records a prediction)."""
    copy = object.__new__(type(record))
    copy.__dict__.update(record.__dict__, **changes)
    return copy
