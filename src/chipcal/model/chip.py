"""Chip description: compute engines, memory, power, microarchitecture.

A `Chip` is what every estimator consumes. Peaks are *derived* from the microarchitecture:

    peak_MAC/s(engine, p) = units × MACs/unit/clock(p) × clock_hz
    peak_FLOP/s(chip, p)  = 2 × max over engines of peak_MAC/s(engine, p)

Engines are alternatives, not additive: a GPU runs an fp16 GEMM on its tensor cores *or*
its CUDA cores, so the chip peak for a precision is the best engine's, never their sum.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

from chipcal.model.memo import recent
from chipcal.model.precision import FLOP_PER_MAC, PRECISIONS

KINDS = ("cpu", "gpu", "tpu", "kpu")
# the device-to-device link of a scale-up system (what a tensor-parallel all-reduce crosses)
INTERCONNECT_KINDS = ("nvlink", "infinity_fabric", "ici", "pcie", "ethernet")
# how a rented device-hour was bought: pay as you go, or a short reservation at a published rate
PRICE_KINDS = ("on-demand", "capacity-block")

# Microarchitecture fields each kind must declare (the mappers use them).
REQUIRED_MICROARCH: dict[str, tuple[str, ...]] = {
    "gpu": ("sm_count", "max_threads_per_sm", "l2_bytes"),
    "cpu": ("cores", "threads_per_core", "simd_bits", "fma_units_per_core", "l2_bytes_per_core", "l3_bytes"),
    "tpu": ("mxu_count", "array_rows", "array_cols", "sram_bytes"),
    "kpu": ("tiles", "pe_rows", "pe_cols", "scratchpad_bytes_per_tile"),
}


@dataclass(frozen=True)
class Engine:
    """One kind of arithmetic unit (CUDA cores, tensor cores, AVX-512 FMA pipes, an MXU...)."""

    name: str
    circuit: str
    units: int
    clock_hz: float
    macs_per_unit_per_clock: Mapping[str, float]
    source: str
    shares_hardware_with: str | None = None   # another engine's name: same silicon, never both at once
    mma_shape: tuple[int, int, int] | None = None  # matrix instruction m x n x k (tensor cores), sourced
    boost_clock_hz: float | None = None   # set by a power mode: the full-power clock the V-f curve tops at

    @property
    def hardware(self) -> str:
        """The physical unit group this engine runs on (its own name unless it shares)."""
        return self.shares_hardware_with or self.name

    def peak_macs_per_s(self, precision: str) -> float | None:
        rate = self.macs_per_unit_per_clock.get(precision)
        if rate is None:
            return None
        return self.units * rate * self.clock_hz


@dataclass(frozen=True)
class Memory:
    type: str
    bandwidth_bytes_per_s: float
    capacity_bytes: float
    source: str


@dataclass(frozen=True)
class Interconnect:
    """How one device talks to its peers in a scale-up system.

    `per_direction_bytes_per_s`: what one device can send to its peers at once, all its links
    together, in one direction. Vendors quote the sum of both directions ("NVLink 900 GB/s" on the
    H100 SXM5 is 18 links x 25 GB/s x 2 directions): the source gives the quoted figure and the
    division. A ring all-reduce of S bytes over n devices moves 2 (n-1)/n S per device each way.
    `domain_devices`: how many devices that bandwidth reaches all-to-all (8 on an HGX board
    through NVSwitch, 72 in an NVL72 rack, 2 over an NVLink bridge); None where it is not stated.
    """

    kind: str                        # one of INTERCONNECT_KINDS
    per_direction_bytes_per_s: float
    domain_devices: int | None
    source: str


@dataclass(frozen=True)
class Price:
    """What renting one device for an hour cost, as a cloud published it on a date.

    `usd_per_device_hour`: the instance's hourly rate over its accelerators (AWS's p5.48xlarge:
    8 H100s). `kind`: one of PRICE_KINDS; a capacity block is a reservation paid up front,
    at a rate the cloud publishes and revises. `offer`: the instance and region; `as_of`: the day
    the source states the rate for. Prices move, so every cost chipcal prints names the offer and
    the date (`chipcal predict`, model/estimate/cost.py).
    """

    usd_per_device_hour: float
    kind: str                        # one of PRICE_KINDS
    offer: str
    as_of: date
    source: str

    @property
    def basis(self) -> str:
        """Which price it is, in one line: kind, offer and date."""
        return f"{self.kind}, {self.offer}, as of {self.as_of.isoformat()}"


@dataclass(frozen=True)
class PowerMode:
    """A vendor power mode: a TDP, the engine clocks it runs at, and (where the mode gates
    units off or caps the memory clock) the engine unit counts and memory bandwidth."""

    name: str
    tdp_w: float
    clock_hz: Mapping[str, float]
    source: str
    units: Mapping[str, int] = field(default_factory=dict)
    memory_bandwidth_bytes_per_s: float | None = None


MEASURED_KINDS = ("sustained", "burst")
MEASURED_DATA = ("random", "zeros")


@dataclass(frozen=True)
class Measured:
    """A measurement of the chip's dense GEMM throughput, with its citation and how it was taken.

    kind: "sustained" (held until clock and power settle under the power limit: what the
    sustained-peak model is judged against) or "burst" (a short window, before the governor acts:
    a ceiling on the kernel's efficiency, not a sustained figure). window: how long or how many
    calls; power_state: the limit it ran under; data: "random" operands or all "zeros". A sustained
    row with `fit` False checks the model but does not set its constants (`not_fit_because` says why).
    """

    precision: str
    flop_per_s: float              # dense GEMM throughput in the window
    title: str
    url: str
    date: str
    kind: str
    window: str
    power_state: str
    notes: str = ""
    data: str = "random"
    board_power_w: float | None = None
    sm_clock_hz: float | None = None
    fit: bool = True
    not_fit_because: str = ""

    @property
    def sustained(self) -> bool:
        return self.kind == "sustained"

    @property
    def source(self) -> str:
        """One line: kind, window, citation."""
        return f"{self.kind} ({self.window}; {self.power_state}): {self.title}, {self.url} ({self.date})"


@dataclass(frozen=True)
class Chip:
    name: str
    display_name: str
    vendor: str
    kind: str
    process_nm: float
    hypothetical: bool
    sources: tuple[str, ...]
    tdp_w: float
    power_source: str
    memory: Memory
    engines: tuple[Engine, ...]
    microarch: Mapping[str, object]
    stated_peak_flop_per_s: Mapping[str, float] = field(default_factory=dict)
    stated_peak_source: str = ""
    power_modes: tuple[PowerMode, ...] = ()
    idle_w: float | None = None
    notes: str = ""
    active_mode: str | None = None
    base_clock_hz: float | None = None
    boost_clock_hz: float | None = None
    clock_source: str = ""
    measured: tuple[Measured, ...] = ()
    # the chip's power governor holds its average power to tdp_w by lowering the engine clocks
    # (every datasheet part); False where tdp_w is an assumed share (a VM's slice of a CPU)
    tdp_limits_clock: bool = True
    interconnect: Interconnect | None = None     # None: a chip without a scale-up link (a CPU, an edge part)
    price: Price | None = None                   # None: no dated, sourced rental price in the registry

    def sustained_for(self, precision: str) -> Measured | None:
        """The sustained measurement on random data at `precision` (None if there is none)."""
        return next((m for m in self.measured if m.precision == precision and m.sustained and m.data == "random"),
                    None)

    def burst_for(self, precision: str) -> Measured | None:
        """The fastest burst (short-window) measurement at `precision` (None if there is none)."""
        bursts = [m for m in self.measured if m.precision == precision and not m.sustained and m.data == "random"]
        return max(bursts, key=lambda m: m.flop_per_s, default=None)

    @functools.cached_property
    def precisions(self) -> tuple[str, ...]:
        """Precisions some engine executes natively, in canonical order (worked out once per record:
        a fit asks it for every subgraph it predicts)."""
        have = {p for e in self.engines for p in e.macs_per_unit_per_clock}
        return tuple(p for p in PRECISIONS if p in have)

    def supports(self, precision: str) -> bool:
        return precision in self.precisions

    def engine_for(self, precision: str) -> Engine | None:
        """The engine with the highest peak for `precision` (None if unsupported)."""
        best, best_rate = None, 0.0
        for engine in self.engines:
            rate = engine.peak_macs_per_s(precision)
            if rate is not None and rate > best_rate:
                best, best_rate = engine, rate
        return best

    def peak_macs_per_s(self, precision: str) -> float | None:
        engine = self.engine_for(precision)
        return None if engine is None else engine.peak_macs_per_s(precision)

    def peak_flop_per_s(self, precision: str) -> float | None:
        """Derived dense peak in FLOP/s (integer precisions: ops/s), 2 per MAC."""
        macs = self.peak_macs_per_s(precision)
        return None if macs is None else FLOP_PER_MAC * macs

    def mode(self, name: str) -> Chip:
        """This chip in power mode `name`: TDP, engine clocks and units, memory bandwidth replaced."""
        for m in self.power_modes:
            if m.name.lower() == name.lower():
                engines = tuple(_lowered(e, m.clock_hz.get(e.name, e.clock_hz), m.units.get(e.name, e.units))
                                for e in self.engines)
                memory = self.memory
                if m.memory_bandwidth_bytes_per_s is not None:
                    memory = dataclasses.replace(memory, bandwidth_bytes_per_s=m.memory_bandwidth_bytes_per_s)
                return dataclasses.replace(self, tdp_w=m.tdp_w, engines=engines, memory=memory,
                                           active_mode=m.name)
        valid = ", ".join(m.name for m in self.power_modes) or "none"
        raise KeyError(f"{self.name} has no power mode {name!r}; valid: {valid}")

    def at_boost(self) -> Chip:
        """This chip as its governor runs it when the power allows: a GPU's engines at its boost
        clock where they are listed below it (the H100's tensor cores are listed at the 1.83 GHz
        their datasheet peak assumes and run at 1.98 GHz until the power limit bites); other chips,
        and a chip in a power mode (which fixes its clocks), unchanged."""
        return _boosted(self)

    def at_clock_fraction(self, fraction: float) -> Chip:
        """This chip with every engine clock at `fraction` of its listed clock (0 < fraction <= 1),
        on the same voltage-frequency curve: what its power governor does under a TDP."""
        if not 0 < fraction <= 1:
            raise ValueError(f"clock fraction must be in (0, 1], got {fraction!r}")
        return _at_fraction(self, float(fraction))


# The derived chips are built once per chip (and fraction) and the same record returned again: the
# mapping and energy memos (model.memo) key a chip by identity, and a fit predicts a GPU's layers
# at its boost clock hundreds of thousands of times.
@recent(maxsize=64)
def _boosted(chip: Chip) -> Chip:
    boost = chip.boost_clock_hz
    if chip.kind != "gpu" or not boost or not chip.tdp_limits_clock or chip.active_mode:
        return chip
    if all(e.clock_hz >= boost for e in chip.engines):
        return chip
    return dataclasses.replace(chip, engines=tuple(_lowered(e, max(e.clock_hz, boost), e.units)
                                                   for e in chip.engines))


@recent(maxsize=256)
def _at_fraction(chip: Chip, fraction: float) -> Chip:
    return dataclasses.replace(chip, engines=tuple(_lowered(e, e.clock_hz * fraction, e.units)
                                                   for e in chip.engines))


def _lowered(engine: Engine, clock_hz: float, units: int) -> Engine:
    """`engine` at `clock_hz` with `units`: a lower clock moves down the voltage-frequency curve,
    whose top (the boost clock) stays where it was."""
    return dataclasses.replace(engine, clock_hz=clock_hz, units=units,
                               boost_clock_hz=engine.boost_clock_hz or engine.clock_hz)
