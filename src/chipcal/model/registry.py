"""Hardware registry: one TOML file per chip in src/chipcal/model/hardware/, validated on load.

A malformed file never takes the registry down: it is skipped, and its error (naming the
file and the field) is kept in `Registry.errors` for the CLIs to print as a warning.
"""

from __future__ import annotations

import datetime
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from chipcal.model.chip import (
    INTERCONNECT_KINDS,
    KINDS,
    MEASURED_DATA,
    MEASURED_KINDS,
    PRICE_KINDS,
    REQUIRED_MICROARCH,
    Chip,
    Engine,
    Interconnect,
    Measured,
    Memory,
    PowerMode,
    Price,
)
from chipcal.model.errors import ChipcalError, UnknownName
from chipcal.model.precision import PRECISIONS
from chipcal.model.technology import CIRCUITS, MEMORY_TYPES


class RegistryError(ChipcalError, ValueError):
    """A registry file is malformed; says which file and which field."""

    def __init__(self, file: str, field: str, message: str):
        super().__init__(f"{file}: field '{field}': {message}")
        self.file, self.field = file, field


class UnknownChipError(UnknownName):
    kind = "hardware"


# No registry figure comes near this (the largest peaks are ~1e18 FLOP/s); it keeps products of a
# few figures far from float overflow, where inf and then nan would reach the tables.
MAX_NUMBER = 1e24


def _positive(file: str, where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_NUMBER:
        raise RegistryError(file, where, f"must be a positive finite number up to {MAX_NUMBER:g}, got {value!r:.40}")
    return float(value)


def _count(file: str, where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_NUMBER:
        raise RegistryError(file, where, f"must be a positive integer up to {MAX_NUMBER:g}, got {value!r:.40}")
    return value


def _per_engine(file: str, where: str, table: dict, key: str, what: str, check, engine_names) -> dict:
    """table[key] (default empty) as engine name -> value, each name one of the chip's engines
    and each value passing check(file, where, value)."""
    values = table.get(key, {})
    if not isinstance(values, dict):
        raise RegistryError(file, where + key, f"must be a table of engine name -> {what}")
    for eng, value in values.items():
        if eng not in engine_names:
            raise RegistryError(file, f"{where}{key}.{eng}",
                                f"no engine named {eng!r}; engines: {', '.join(sorted(engine_names))}")
        check(file, f"{where}{key}.{eng}", value)
    return values


def _table(file: str, where: str, value: object) -> dict:
    if not isinstance(value, dict):
        raise RegistryError(file, where, f"must be a table, got {type(value).__name__}")
    return value


def _text(file: str, where: str, table: dict, key: str, required: bool = True) -> str:
    value = table.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise RegistryError(file, f"{where}{key}", "must be a non-empty string")
    return value


def _source(file: str, where: str, table: dict) -> str:
    """Every table of numbers names where they come from (or 'derived: …'/'hypothetical: …')."""
    return _text(file, where, table, "source")


def _flag(file: str, where: str, value: object) -> bool:
    """A true/false field: a TOML boolean, not 0/1 or a string."""
    if not isinstance(value, bool):
        raise RegistryError(file, where, "must be true or false")
    return value


def _one_of(file: str, where: str, value: str, valid) -> str:
    """`value`, one of the names in `valid` (chip kinds, memory types, circuits)."""
    if value not in valid:
        raise RegistryError(file, where, f"{value!r} is not one of {', '.join(valid)}")
    return value


def _precision(file: str, where: str, value: object) -> str:
    """`value`, a precision name of chipcal.model.precision.PRECISIONS."""
    if value not in PRECISIONS:
        raise RegistryError(file, where, f"unknown precision; valid: {', '.join(PRECISIONS)}")
    return value


def _section(data: dict, file: str, key: str) -> dict:
    """A required top-level table ([power], [memory], [microarch])."""
    table = data.get(key)
    if not isinstance(table, dict):
        raise RegistryError(file, key, "missing table")
    return table


def _optional_section(data: dict, file: str, key: str) -> dict | None:
    """An optional top-level table ([interconnect], [price]); None where the file has none."""
    table = data.get(key)
    if table is not None and not isinstance(table, dict):
        raise RegistryError(file, key, "must be a table")
    return table


@dataclass(frozen=True)
class _Identity:
    """The fields that say which chip a document is: read first, so a document without them
    fails on them before any figure is checked."""

    name: str
    kind: str
    hypothetical: bool
    sources: tuple[str, ...]


def _identity_from_dict(data: dict, file: str) -> _Identity:
    """name, kind (one of KINDS), hypothetical (default false) and the non-empty `sources` list."""
    name = _text(file, "", data, "name")
    kind = _one_of(file, "kind", _text(file, "", data, "kind"), KINDS)
    hypothetical = _flag(file, "hypothetical", data.get("hypothetical", False))
    sources = data.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s.strip() for s in sources):
        raise RegistryError(file, "sources", "must be a non-empty list of strings")
    return _Identity(name=name, kind=kind, hypothetical=hypothetical, sources=tuple(sources))


@dataclass(frozen=True)
class _PowerBudget:
    """The [power] table's chip-wide figures. Its [[power.modes]] are read after the engines they
    name, its `source` with the remaining fields (chip_from_dict's order)."""

    tdp_w: float
    idle_w: float | None
    limits_clock: bool


def _power_budget_from_dict(power: dict, file: str) -> _PowerBudget:
    """tdp_w (positive), optional idle_w (positive) and limits_clock (default true: the TDP
    lowers the clocks of a run that would exceed it, estimate/throttle.py)."""
    tdp_w = _positive(file, "power.tdp_w", power.get("tdp_w"))
    idle_w = power.get("idle_w")
    if idle_w is not None:
        idle_w = _positive(file, "power.idle_w", idle_w)
    limits_clock = _flag(file, "power.limits_clock", power.get("limits_clock", True))
    return _PowerBudget(tdp_w=tdp_w, idle_w=idle_w, limits_clock=limits_clock)


def memory_from_dict(data: dict, file: str) -> Memory:
    """The [memory] table: type (one of MEMORY_TYPES), bandwidth and capacity (positive), source."""
    mem = _section(data, file, "memory")
    mem_type = _one_of(file, "memory.type", _text(file, "memory.", mem, "type"), MEMORY_TYPES)
    return Memory(
        type=mem_type,
        bandwidth_bytes_per_s=_positive(file, "memory.bandwidth_bytes_per_s", mem.get("bandwidth_bytes_per_s")),
        capacity_bytes=_positive(file, "memory.capacity_bytes", mem.get("capacity_bytes")),
        source=_source(file, "memory.", mem),
    )


def interconnect_from_dict(data: dict, file: str) -> Interconnect | None:
    """The optional [interconnect] table: kind (one of INTERCONNECT_KINDS), the bandwidth one
    device sends per direction (positive), the devices it reaches all-to-all (a positive integer,
    optional), source."""
    link = _optional_section(data, file, "interconnect")
    if link is None:
        return None
    domain = link.get("domain_devices")
    if domain is not None and (isinstance(domain, bool) or not isinstance(domain, int) or domain < 1):
        raise RegistryError(file, "interconnect.domain_devices", f"must be a positive integer, got {domain!r}")
    return Interconnect(
        kind=_one_of(file, "interconnect.kind", _text(file, "interconnect.", link, "kind"), INTERCONNECT_KINDS),
        per_direction_bytes_per_s=_positive(file, "interconnect.per_direction_bytes_per_s",
                                            link.get("per_direction_bytes_per_s")),
        domain_devices=domain,
        source=_source(file, "interconnect.", link),
    )


def price_from_dict(data: dict, file: str) -> Price | None:
    """The optional [price] table: usd_per_device_hour (positive), kind (one of PRICE_KINDS),
    offer, as_of (a TOML date: the day the source states the rate for), source."""
    table = _optional_section(data, file, "price")
    if table is None:
        return None
    as_of = table.get("as_of")
    if not isinstance(as_of, datetime.date) or isinstance(as_of, datetime.datetime):
        raise RegistryError(file, "price.as_of", f"must be a TOML date (2024-12-31), got {as_of!r}")
    return Price(
        usd_per_device_hour=_positive(file, "price.usd_per_device_hour", table.get("usd_per_device_hour")),
        kind=_one_of(file, "price.kind", _text(file, "price.", table, "kind"), PRICE_KINDS),
        offer=_text(file, "price.", table, "offer"),
        as_of=as_of,
        source=_source(file, "price.", table),
    )


def _mac_rates(engine: dict, file: str, where: str) -> dict:
    """An engine's non-empty `macs_per_unit_per_clock` table: precision -> positive MAC rate."""
    rates = engine.get("macs_per_unit_per_clock")
    if not isinstance(rates, dict) or not rates:
        raise RegistryError(file, where + "macs_per_unit_per_clock", "must be a non-empty table")
    for p, r in rates.items():
        _precision(file, f"{where}macs_per_unit_per_clock.{p}", p)
        _positive(file, f"{where}macs_per_unit_per_clock.{p}", r)
    return rates


def engine_from_dict(e: object, file: str, i: int) -> Engine:
    """One [[engines]] table: circuit (one of CIRCUITS), MAC rates, unit count, optional
    shares_hardware_with (checked against the other engines by engines_from_dict), name, clock,
    source and optional mma_shape."""
    where = f"engines[{i}]."
    _table(file, f"engines[{i}]", e)
    circuit = _one_of(file, where + "circuit", _text(file, where, e, "circuit"), CIRCUITS)
    rates = _mac_rates(e, file, where)
    units = _count(file, where + "units", e.get("units"))
    shares = e.get("shares_hardware_with")
    if shares is not None and not isinstance(shares, str):
        raise RegistryError(file, where + "shares_hardware_with", "must be an engine name")
    return Engine(
        name=_text(file, where, e, "name"),
        circuit=circuit,
        units=units,
        clock_hz=_positive(file, where + "clock_hz", e.get("clock_hz")),
        macs_per_unit_per_clock={p: float(r) for p, r in rates.items()},
        source=_source(file, where, e),
        shares_hardware_with=shares,
        mma_shape=mma_shape_from_dict(e, file, where),
    )


def engines_from_dict(data: dict, file: str) -> tuple[Engine, ...]:
    """The non-empty [[engines]] array; an engine sharing hardware must name another engine."""
    raw_engines = data.get("engines")
    if not isinstance(raw_engines, list) or not raw_engines:
        raise RegistryError(file, "engines", "must be a non-empty array of tables")
    engines = tuple(engine_from_dict(e, file, i) for i, e in enumerate(raw_engines))
    engine_names = {e.name for e in engines}
    for i, e in enumerate(engines):
        if e.shares_hardware_with is not None and e.shares_hardware_with not in engine_names - {e.name}:
            raise RegistryError(file, f"engines[{i}].shares_hardware_with",
                                f"no other engine named {e.shares_hardware_with!r}")
    return engines


def microarch_from_dict(data: dict, file: str, kind: str) -> dict:
    """The [microarch] table: the keys REQUIRED_MICROARCH[kind] names (positive numbers but
    matrix_engine), every other number positive and finite too, and its source."""
    micro = _section(data, file, "microarch")
    for key in REQUIRED_MICROARCH[kind]:
        if key not in micro:
            raise RegistryError(file, f"microarch.{key}", f"required for kind {kind!r}")
        if key != "matrix_engine":
            _positive(file, f"microarch.{key}", micro[key])
    for key, value in micro.items():      # optional figures (mesh_rows, dla_count…) too: no nan/inf
        if isinstance(value, float | int) and not isinstance(value, bool):
            _positive(file, f"microarch.{key}", value)
    _source(file, "microarch.", micro)
    return micro


def stated_peaks_from_dict(data: dict, file: str) -> tuple[dict[str, float], str]:
    """The optional [stated_peak_flop_per_s] table: (precision -> datasheet peak FLOP/s, its
    source); ({}, "") when absent or empty."""
    stated = data.get("stated_peak_flop_per_s", {})
    if not isinstance(stated, dict):
        raise RegistryError(file, "stated_peak_flop_per_s", "must be a table")
    if not stated:
        return {}, ""
    source = _source(file, "stated_peak_flop_per_s.", stated)
    peaks = {}
    for p, v in stated.items():
        if p == "source":
            continue
        _precision(file, f"stated_peak_flop_per_s.{p}", p)
        peaks[p] = _positive(file, f"stated_peak_flop_per_s.{p}", v)
    return peaks, source


def power_mode_from_dict(m: object, file: str, i: int, engine_names) -> PowerMode:
    """One [[power.modes]] table: per-engine clocks and unit counts (each naming one of the
    chip's engines), name, TDP, source and an optional memory bandwidth."""
    where = f"power.modes[{i}]."
    _table(file, f"power.modes[{i}]", m)
    clocks = _per_engine(file, where, m, "clock_hz", "Hz", _positive, engine_names)
    units = _per_engine(file, where, m, "units", "unit count", _count, engine_names)
    bandwidth = m.get("memory_bandwidth_bytes_per_s")
    return PowerMode(
        name=_text(file, where, m, "name"),
        tdp_w=_positive(file, where + "tdp_w", m.get("tdp_w")),
        clock_hz={k: float(v) for k, v in clocks.items()},
        source=_source(file, where, m),
        units=dict(units),
        memory_bandwidth_bytes_per_s=(None if bandwidth is None else
                                      _positive(file, where + "memory_bandwidth_bytes_per_s", bandwidth)),
    )


def power_modes_from_dict(power: dict, file: str, engine_names) -> tuple[PowerMode, ...]:
    """The optional [[power.modes]] array (a Jetson's nvpmodel settings)."""
    raw_modes = power.get("modes", [])
    if not isinstance(raw_modes, list):
        raise RegistryError(file, "power.modes", "must be an array of tables ([[power.modes]])")
    return tuple(power_mode_from_dict(m, file, i, engine_names) for i, m in enumerate(raw_modes))


def chip_from_dict(data: dict, file: str = "<dict>") -> Chip:
    """Validate one registry document and build its Chip.

    The sections are read in a fixed order (identity, power budget, memory, engines, microarch,
    stated peaks, power modes, then the remaining fields as Chip takes them), so a document with
    several faults always reports the same one.
    """
    if not isinstance(data, dict):
        raise RegistryError(file, "<root>", "must be a table")
    identity = _identity_from_dict(data, file)
    power = _section(data, file, "power")
    budget = _power_budget_from_dict(power, file)
    memory = memory_from_dict(data, file)
    engines = engines_from_dict(data, file)
    micro = microarch_from_dict(data, file, identity.kind)
    peaks, stated_source = stated_peaks_from_dict(data, file)
    modes = power_modes_from_dict(power, file, {e.name for e in engines})
    return Chip(
        name=identity.name.lower(),
        display_name=_text(file, "", data, "display_name"),
        vendor=_text(file, "", data, "vendor"),
        kind=identity.kind,
        process_nm=_positive(file, "process_nm", data.get("process_nm")),
        hypothetical=identity.hypothetical,
        sources=identity.sources,
        tdp_w=budget.tdp_w,
        power_source=_source(file, "power.", power),
        tdp_limits_clock=budget.limits_clock,
        memory=memory,
        engines=engines,
        microarch=dict(micro),
        stated_peak_flop_per_s=peaks,
        stated_peak_source=stated_source,
        power_modes=modes,
        idle_w=budget.idle_w,
        notes=_text(file, "", data, "notes", required=False),
        **clocks_from_dict(data, file),
        measured=measured_from_dict(data, file),
        interconnect=interconnect_from_dict(data, file),
        price=price_from_dict(data, file),
    )


def mma_shape_from_dict(engine: dict, file: str, where: str) -> tuple[int, int, int] | None:
    """Optional engine `mma_shape = [m, n, k]` (the matrix instruction GEMM kernels issue) with
    its `mma_source`; absent: the circuit's default reuse (technology.REUSE_TABLE)."""
    shape = engine.get("mma_shape")
    if shape is None:
        return None
    if (not isinstance(shape, list) or len(shape) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in shape)):
        raise RegistryError(file, where + "mma_shape", f"must be [m, n, k] positive integers, got {shape!r}")
    _text(file, where, engine, "mma_source")
    return tuple(shape)


def clocks_from_dict(data: dict, file: str) -> dict:
    """Optional [clocks] table: base_hz, boost_hz (positive, base <= boost) and their source."""
    table = data.get("clocks")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise RegistryError(file, "clocks", "must be a table")
    out = {"clock_source": _source(file, "clocks.", table)}
    for key, field in (("base_hz", "base_clock_hz"), ("boost_hz", "boost_clock_hz")):
        if key in table:
            out[field] = _positive(file, f"clocks.{key}", table[key])
    if out.get("base_clock_hz", 0) > out.get("boost_clock_hz", float("inf")):
        raise RegistryError(file, "clocks.base_hz", "must not exceed boost_hz")
    return out


def measured_from_dict(data: dict, file: str) -> tuple[Measured, ...]:
    """Optional [[measured]] array: dense-GEMM measurements with citations (precision, flop_per_s,
    title, url, date, kind = sustained | burst, window, power_state; optional data = random | zeros,
    board_power_w, sm_clock_hz, notes, fit = false with not_fit_because)."""
    rows = data.get("measured", [])
    if not isinstance(rows, list):
        raise RegistryError(file, "measured", "must be an array of tables")
    out = []
    for i, m in enumerate(rows):
        where = f"measured[{i}]."
        if not isinstance(m, dict):
            raise RegistryError(file, f"measured[{i}]", "must be a table")
        precision = _precision(file, where + "precision", _text(file, where, m, "precision"))
        kind = _text(file, where, m, "kind")
        if kind not in MEASURED_KINDS:
            raise RegistryError(file, where + "kind", f"must be one of {', '.join(MEASURED_KINDS)}")
        operands = m.get("data", "random")
        if operands not in MEASURED_DATA:
            raise RegistryError(file, where + "data", f"must be one of {', '.join(MEASURED_DATA)}")
        optional = {k: _positive(file, where + k, m[k]) for k in ("board_power_w", "sm_clock_hz") if k in m}
        fit = _flag(file, where + "fit", m.get("fit", True))
        if not fit:
            optional["not_fit_because"] = _text(file, where, m, "not_fit_because")
        out.append(Measured(precision=precision, flop_per_s=_positive(file, where + "flop_per_s", m.get("flop_per_s")),
                            title=_text(file, where, m, "title"), url=_text(file, where, m, "url"),
                            date=_text(file, where, m, "date"), kind=kind, window=_text(file, where, m, "window"),
                            power_state=_text(file, where, m, "power_state"),
                            notes=_text(file, where, m, "notes", required=False), data=operands, fit=fit,
                            **optional))
    return tuple(out)


def load_chip(path: Path) -> Chip:
    """The chip in one registry file; RegistryError for a file that cannot be read or is malformed
    (a dangling symlink, bytes that are not UTF-8, bad TOML, a bad field)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(path.name, "<toml>", str(exc)) from None
    except UnicodeDecodeError as exc:
        raise RegistryError(path.name, "<file>", f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise RegistryError(path.name, "<file>", f"cannot read: {exc.strerror or exc}") from None
    return chip_from_dict(data, path.name)


@dataclass(frozen=True)
class Registry:
    chips: dict[str, Chip]
    errors: tuple[RegistryError, ...]

    @property
    def names(self) -> list[str]:
        return sorted(self.chips)

    def get(self, name: str) -> Chip:
        """Chip by registry name, or `name@mode` for a power mode (e.g. jetson-agx-orin-64gb@30W)."""
        base, _, mode = name.strip().lower().partition("@")
        if base not in self.chips:
            raise UnknownChipError(name, self.names)
        chip = self.chips[base]
        return chip.mode(mode) if mode else chip


def load_registry(directory: Path | None = None) -> Registry:
    """Load every *.toml in `directory` (default: the packaged src/chipcal/model/hardware/)."""
    if directory is None:
        directory = Path(str(resources.files("chipcal.model.hardware")))
    chips: dict[str, Chip] = {}
    errors: list[RegistryError] = []
    for path in sorted(Path(directory).glob("*.toml")):
        try:
            chip = load_chip(path)
        except RegistryError as exc:
            errors.append(exc)
            continue
        if chip.name in chips:
            errors.append(RegistryError(path.name, "name", f"duplicate chip name {chip.name!r}"))
            continue
        chips[chip.name] = chip
    return Registry(chips=chips, errors=tuple(errors))
