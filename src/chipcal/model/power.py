"""All-in energy per MAC and the power-limited (DVFS) clock of a dense GEMM.

Energy per MAC at the boost voltage, for one engine at one precision:

    E_data  = E_arith                                                            datapath
            + s x (b_rf x E_rf + b_l1 x E_l1 + b_l2 x E_l2)                      operand delivery
            + b_l2 x 8 x e_wire x d                                              on-chip network
    E_issue = E_arith x issue                                                    instruction issue
    E_clk   = c_clk x (E_data + E_issue)                                         clock tree, control
    b_rf = rf_operands x bytes(p) + rf_accumulator x acc_bytes(p)   (per MAC, from the datapath's reuse)
    b_l1 = l1 x bytes(p),  b_l2 = l2 x bytes(p)

E_arith is technology.mac_energy's datapath part (multiply at the operand precision, add at the
accumulator's); the reuse per circuit, SRAM energies by node and array size, wire energy e_wire
(pJ/bit/mm) over distance d, the delivery scale s and the clock/control fraction c_clk are in
technology.py. DRAM traffic of an L2-blocked GEMM with square b x b tiles of A, B, C in an on-chip
capacity S: b = sqrt(S / (3 bytes(p))), DRAM bytes per MAC = 2 bytes(p) / b.

A GEMM kernel does work in a fraction eta of the engine's MAC slots (technology.GEMM_EFFICIENCY:
tile edges, prologue, stalls); its data switches the datapath and the operands it moves at
activity a = floor + (1 - floor) x x (x = 1 random operands, 0 all zeros; technology.ACTIVITY_FLOOR).
The clock tree toggles in every cycle of every unit, busy or not. Power at clock f (V(f) relative
to the boost voltage: a floor v0 up to knee x f_boost, then linear to 1 at f_boost):

    P(f) = MACs/clock x f x [V(f)^2 x (eta x (a x E_data + E_issue) + E_clk) + eta x DRAM bytes/MAC x E_DRAM]
           + P_static x V(f)

P_static is the chip's sourced idle_w, else static_fraction x TDP (leakage at temperature); it
scales with V (leakage current ~ constant over the DVFS range at fixed temperature). The sustained
clock solves P(f) = TDP at the kernel's eta, capped at the engine's spec clock (the clock its
datasheet peak assumes); the sustained throughput is 2 x MACs/clock x sustained clock x eta, and
the spec peak is sustainable when the kernel holds the spec clock inside the TDP. P is linear in
f below the knee and a cubic above it, so the root is closed-form (numpy.roots).

The constants the model uses by default (NOMINAL) are those fitted on sustained measurements
(src/chipcal/model/fitted_constants.toml, written by `compare_tdp_registry --refit`); SOURCED keeps
every band's sourced nominal value (physics only).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from chipcal.model.chip import Chip, Engine
from chipcal.model.precision import BYTES_PER_ELEMENT, FLOP_PER_MAC
from chipcal.model.technology import (
    ACCUMULATOR_BYTES,
    ACTIVITY_FLOOR,
    CLOCK_CONTROL_FRACTION,
    DELIVERY_SCALE,
    FITTABLE,
    NOC_DISTANCE_MM,
    NOC_PJ_PER_BIT_MM,
    PJ,
    RANDOM_DATA,
    STATIC_FRACTION_BAND,
    V_FLOOR,
    V_KNEE,
    check_memory_type,
    check_reuse,
    gemm_efficiency,
    mac_energy,
    mma_reuse,
    sram_energy_per_byte_j,
)

# SRAM level each reuse level is charged at (array sizes of technology.SRAM_64BIT_PJ).
RF_LEVEL, L1_LEVEL, L2_LEVEL = "register_file", "l1", "l2"
FITTED_FILE = "fitted_constants.toml"


@dataclass(frozen=True)
class Constants:
    """One choice of the uncertain constants (each within its technology.Band)."""

    delivery_scale: float
    clock_control_fraction: float
    static_fraction: float
    v_floor: float
    v_knee: float
    noc_pj_per_bit_mm: float
    noc_distance_mm: float
    dram_end: str          # "nominal" | "low" | "high": which end of the DRAM pJ/bit range
    activity_floor: float = ACTIVITY_FLOOR.nominal

    def replace(self, **kw) -> Constants:
        return dataclasses.replace(self, **kw)


def _at(end: str) -> Constants:
    pick = (lambda b: getattr(b, end)) if end != "nominal" else (lambda b: b.nominal)
    # A later knee keeps V at its floor up to a higher clock (less power): the knee's
    # power-optimistic end is the top of its band.
    knee = {"low": V_KNEE.high, "high": V_KNEE.low, "nominal": V_KNEE.nominal}[end]
    return Constants(pick(DELIVERY_SCALE), pick(CLOCK_CONTROL_FRACTION), pick(STATIC_FRACTION_BAND),
                     pick(V_FLOOR), knee, pick(NOC_PJ_PER_BIT_MM), pick(NOC_DISTANCE_MM), end,
                     pick(ACTIVITY_FLOOR))


@dataclass(frozen=True)
class FittedConstants:
    """The constants fitted on sustained measurements (src/chipcal/calibrate/evidence.py) as shipped: the
    values, the band each keeps after the fit (the spread of the leave-one-out fits), and what
    they were fitted on."""

    values: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    source: str
    circuits: tuple[str, ...]      # engine circuits the sustained rows ran on: where the fitted band holds


def load_fitted(text: str | None = None) -> FittedConstants | None:
    """The shipped fitted constants (src/chipcal/model/fitted_constants.toml), None where there is no file."""
    import tomllib
    from importlib import resources

    if text is None:
        path = resources.files("chipcal.model").joinpath(FITTED_FILE)
        if not path.is_file():
            return None
        text = path.read_text()
    data = tomllib.loads(text)
    return FittedConstants({k: float(data["values"][k]) for k in FITTABLE},
                           {k: float(data["low"][k]) for k in FITTABLE},
                           {k: float(data["high"][k]) for k in FITTABLE}, str(data["source"]),
                           tuple(data["circuits"]))


SOURCED = _at("nominal")        # every constant at its sourced nominal value (physics only)
FITTED = load_fitted()
NOMINAL = SOURCED.replace(**FITTED.values) if FITTED else SOURCED


def band(circuit: str | None = None) -> tuple[Constants, Constants]:
    """(optimistic, pessimistic) constants: every constant at the end of its band that costs least
    / most power. For a circuit the sustained measurements ran on, the fitted constants keep the
    band the fits left them (FittedConstants.low/high); elsewhere they keep their sourced band."""
    low, high = _at("low"), _at("high")
    if FITTED is None or circuit not in FITTED.circuits:
        return low, high
    # a later knee costs less power: the knee's optimistic end is the top of its band
    return (low.replace(**{k: (FITTED.high if k == "v_knee" else FITTED.low)[k] for k in FITTABLE}),
            high.replace(**{k: (FITTED.low if k == "v_knee" else FITTED.high)[k] for k in FITTABLE}))


@dataclass(frozen=True)
class MacBreakdown:
    """All-in dynamic energy of one MAC at the boost voltage, by component (joules)."""

    arithmetic_j: float
    issue_j: float
    register_file_j: float
    l1_j: float
    l2_j: float
    network_j: float
    clock_control_j: float
    dram_bytes_per_mac: float
    dram_j_per_byte: float

    @property
    def data_j(self) -> float:
        """The part that switches with the operands' bits: datapath, operand delivery, network."""
        return self.arithmetic_j + self.register_file_j + self.l1_j + self.l2_j + self.network_j

    @property
    def dynamic_j(self) -> float:
        """Core dynamic energy per MAC (everything but DRAM) with every slot busy on random data,
        at the boost voltage; scales with V^2."""
        return self.data_j + self.issue_j + self.clock_control_j

    def slot_j(self, efficiency: float, activity_factor: float) -> float:
        """Core dynamic energy per MAC slot per clock at the boost voltage: a kernel does work in
        `efficiency` of the slots with its data switching at `activity_factor`, and the clock tree
        toggles in every slot (module docstring)."""
        return efficiency * (activity_factor * self.data_j + self.issue_j) + self.clock_control_j

    @property
    def dram_j(self) -> float:
        return self.dram_bytes_per_mac * self.dram_j_per_byte

    @property
    def total_j(self) -> float:
        return self.dynamic_j + self.dram_j


def dram_bytes_per_mac(onchip_bytes: float, precision: str) -> float:
    """DRAM bytes per MAC of a GEMM blocked into `onchip_bytes`: 2 b / sqrt(S / 3b)."""
    b = BYTES_PER_ELEMENT[precision]
    if onchip_bytes <= 0:
        return 3 * b      # no on-chip reuse at all: every operand from DRAM
    return 2 * b / math.sqrt(onchip_bytes / (3 * b))


def mac_breakdown(process_nm: float, circuit: str, precision: str, memory_type: str,
                  onchip_bytes: float, k: Constants = NOMINAL,
                  mma_shape: tuple[int, int, int] | None = None) -> MacBreakdown:
    """All-in energy per MAC (module docstring) at the boost voltage. `mma_shape` (m, n, k) of
    the engine's matrix instruction replaces the circuit's default register-file reuse."""
    reuse = check_reuse(circuit)
    b = BYTES_PER_ELEMENT[precision]
    arith = mac_energy(process_nm, circuit, precision).compute_j
    if mma_shape:
        # the shape is the 16-bit one; the MMA's K spans a fixed 32 bytes of depth (PTX: m16n8k16
        # f16, m16n8k8 tf32, m16n8k32 int8/fp8; wgmma k16 / k8 / k32)
        m, n, k16 = mma_shape
        operands, accumulators = mma_reuse(m, n, max(1.0, k16 * 2 / b))
    else:
        operands, accumulators = reuse.rf_operands, reuse.rf_accumulator
    rf_bytes = operands * b + accumulators * ACCUMULATOR_BYTES[precision]
    rf = k.delivery_scale * rf_bytes * sram_energy_per_byte_j(process_nm, RF_LEVEL)
    l1 = k.delivery_scale * reuse.l1 * b * sram_energy_per_byte_j(process_nm, L1_LEVEL)
    l2 = k.delivery_scale * reuse.l2 * b * sram_energy_per_byte_j(process_nm, L2_LEVEL)
    net = reuse.l2 * b * 8 * k.noc_pj_per_bit_mm * k.noc_distance_mm * PJ
    issue = arith * reuse.issue
    clock = k.clock_control_fraction * (arith + issue + rf + l1 + l2 + net)
    mem = check_memory_type(memory_type)
    pj_bit = {"nominal": mem.pj_per_bit, "low": mem.low_pj_per_bit, "high": mem.high_pj_per_bit}[k.dram_end]
    return MacBreakdown(arith, issue, rf, l1, l2, net, clock,
                        dram_bytes_per_mac(onchip_bytes, precision), pj_bit * 8 * PJ)


@functools.lru_cache(maxsize=1024)
def op_energy_per_mac_j(process_nm: float, circuit: str, precision: str,
                        mma_shape: tuple[int, int, int] | None = None, k: Constants = NOMINAL) -> float:
    """Core energy per MAC at the boost voltage that each operation spends: E_arith (1 + issue)
    + RF + L1. Without the last-level SRAM and network traffic, which a whole-model prediction
    charges per byte it actually moves (onchip_energy_per_byte_j), and without the clock/control
    share, which it charges per busy unit-second (clock_power_w).
    Memoized: a pure function of a few scalars, and a calibration fit evaluates it ~10⁶ times."""
    m = mac_breakdown(process_nm, circuit, precision, "hbm2", float("inf"), k, mma_shape)
    return m.arithmetic_j + m.issue_j + m.register_file_j + m.l1_j


def clock_power_w(chip: Chip, engine: Engine, precision: str, k: Constants = NOMINAL) -> float:
    """Clock and control power of all of `engine`'s units, busy, at the engine's clock and voltage:
    the c_clk share on the per-op energy at the engine's full MAC rate at `precision`,

        P_clk = c_clk x E_op(precision) x units x MACs/unit/clock x f x V(f)^2

    A clock tree toggles every cycle a unit is busy, whether its datapath does work or waits on
    memory; at the full MAC rate this equals the c_clk share the per-MAC GEMM model charges (so a
    GEMM at peak costs the same either way). 0 if the engine does not run `precision`."""
    rate = engine.macs_per_unit_per_clock.get(precision)
    if rate is None:
        return 0.0
    op = op_energy_per_mac_j(chip.process_nm, engine.circuit, precision, engine.mma_shape, k)
    return k.clock_control_fraction * op * engine.units * rate * engine.clock_hz * engine_voltage(chip, engine, k) ** 2


def onchip_energy_per_byte_j(process_nm: float, level: str, k: Constants = NOMINAL) -> float:
    """Energy per byte through an on-chip SRAM level and across the chip to the compute units:
    (1 + c_clk)(s E_sram(level) + 8 e_wire d)."""
    sram = k.delivery_scale * sram_energy_per_byte_j(process_nm, level)
    wire = 8 * k.noc_pj_per_bit_mm * k.noc_distance_mm * PJ
    return (1 + k.clock_control_fraction) * (sram + wire)


def onchip_bytes(chip: Chip) -> float:
    """On-chip capacity a GEMM blocks into (L2; L3 + L2s; SRAM; scratchpads)."""
    from chipcal.model.mapping import onchip_capacity

    return onchip_capacity(chip)


def boost_clock_hz(chip: Chip, engine: Engine) -> float:
    """The clock V reaches 1.0 at: the chip's sourced boost clock, else the engine's own clock
    (its full-power clock when a power mode has lowered it)."""
    return max(chip.boost_clock_hz or 0.0, engine.boost_clock_hz or 0.0, engine.clock_hz)


def engine_voltage(chip: Chip, engine: Engine, k: Constants = NOMINAL) -> float:
    """Supply voltage (relative to boost) the engine runs at its listed clock: < 1 when the
    spec clock sits below boost (H100 tensor cores) or a power mode has lowered it."""
    return voltage(engine.clock_hz, boost_clock_hz(chip, engine), k)


def static_w(chip: Chip, k: Constants = NOMINAL) -> float:
    """Static power at the boost voltage: sourced idle_w, else static_fraction x TDP."""
    return chip.idle_w if chip.idle_w is not None else k.static_fraction * chip.tdp_w


def voltage(f: float, f_boost: float, k: Constants) -> float:
    """Supply voltage relative to boost: floor v0 up to knee x f_boost, linear to 1 at f_boost."""
    f_knee = k.v_knee * f_boost
    if f <= f_knee:
        return k.v_floor
    return k.v_floor + (1 - k.v_floor) * (f - f_knee) / (f_boost - f_knee)


def activity_factor(activity: float, k: Constants) -> float:
    """Switching of the data relative to random operands: floor + (1 - floor) x activity
    (activity 1 random, 0 all zeros; technology.ACTIVITY_FLOOR)."""
    if not 0 <= activity <= 1:
        raise ValueError(f"data activity must be in [0, 1] (1 random, 0 zeros), got {activity!r}")
    return k.activity_floor + (1 - k.activity_floor) * activity


@dataclass(frozen=True)
class GemmPower:
    """A dense GEMM on one engine: power at the spec clock and the power-limited clock.

    `efficiency` is the kernel's large-GEMM efficiency (technology.GEMM_EFFICIENCY), `activity` the
    data's switching (1 random, 0 zeros)."""

    chip: str
    engine: str
    precision: str
    macs_per_clock: float
    spec_clock_hz: float
    boost_clock_hz: float
    tdp_w: float
    mac: MacBreakdown
    static_w: float
    constants: Constants
    efficiency: float = 1.0
    activity: float = RANDOM_DATA

    def power_w(self, f: float, efficiency: float | None = None) -> float:
        """Board power at engine clock f running the kernel (`efficiency` overrides its own)."""
        eta = self.efficiency if efficiency is None else efficiency
        v = voltage(f, self.boost_clock_hz, self.constants)
        a = activity_factor(self.activity, self.constants)
        rate = self.macs_per_clock * f
        return rate * (self.mac.slot_j(eta, a) * v * v + eta * self.mac.dram_j) + self.static_w * v

    def components_w(self, f: float, efficiency: float | None = None) -> dict[str, float]:
        """Power at clock f split by component (watts), the kernel running (or `efficiency`)."""
        eta = self.efficiency if efficiency is None else efficiency
        v = voltage(f, self.boost_clock_hz, self.constants)
        a = activity_factor(self.activity, self.constants)
        rate = self.macs_per_clock * f * v * v
        work = rate * eta * a
        m = self.mac
        return {"arithmetic_w": work * m.arithmetic_j, "issue_w": rate * eta * m.issue_j,
                "register_file_w": work * m.register_file_j, "l1_w": work * m.l1_j, "l2_w": work * m.l2_j,
                "network_w": work * m.network_j, "clock_control_w": rate * m.clock_control_j,
                "dram_w": self.macs_per_clock * f * eta * m.dram_j, "static_w": self.static_w * v}

    @property
    def power_at_spec_w(self) -> float:
        """Power of the kernel held at the spec clock (the clock the datasheet peak assumes)."""
        return self.power_w(self.spec_clock_hz)

    @property
    def spec_peak_flop_per_s(self) -> float:
        return FLOP_PER_MAC * self.macs_per_clock * self.spec_clock_hz

    @property
    def sustained_clock_hz(self) -> float:
        """Highest clock <= spec clock at which the kernel draws <= TDP (0 if static power alone
        exceeds it)."""
        if self.power_w(self.spec_clock_hz) <= self.tdp_w:
            return self.spec_clock_hz
        k, fb = self.constants, self.boost_clock_hz
        f_knee = min(k.v_knee * fb, self.spec_clock_hz)
        a = self.macs_per_clock * self.mac.slot_j(self.efficiency, activity_factor(self.activity, k))
        d = self.macs_per_clock * self.efficiency * self.mac.dram_j
        if self.power_w(f_knee) >= self.tdp_w:
            # linear region: P = f (a v0^2 + d) + static v0
            f = (self.tdp_w - self.static_w * k.v_floor) / (a * k.v_floor ** 2 + d)
            return max(0.0, f)
        # V = alpha + beta f;  P = a f (alpha + beta f)^2 + d f + static (alpha + beta f)
        beta = (1 - k.v_floor) / (fb - k.v_knee * fb)
        alpha = k.v_floor - beta * k.v_knee * fb
        coeffs = [a * beta ** 2, 2 * a * alpha * beta, a * alpha ** 2 + d + self.static_w * beta,
                  self.static_w * alpha - self.tdp_w]
        roots = [r.real for r in np.roots(coeffs) if abs(r.imag) < 1e-6 * abs(r.real) + 1e-9]
        inside = [r for r in roots if f_knee * (1 - 1e-9) <= r <= self.spec_clock_hz * (1 + 1e-9)]
        return min(inside, key=lambda r: abs(self.power_w(r) - self.tdp_w))

    @property
    def clock_fraction(self) -> float:
        """Sustained clock / spec clock: what the power limit alone takes away."""
        return self.sustained_clock_hz / self.spec_clock_hz

    @property
    def sustainable_peak_flop_per_s(self) -> float:
        """What the kernel sustains: 2 x MACs/clock x sustained clock x efficiency."""
        return FLOP_PER_MAC * self.macs_per_clock * self.sustained_clock_hz * self.efficiency

    @property
    def burst_peak_flop_per_s(self) -> float:
        """What the kernel reaches before the governor acts, on a cold chip at its boost clock:
        2 x MACs/clock x boost clock x efficiency (a ceiling for short-window measurements)."""
        return FLOP_PER_MAC * self.macs_per_clock * self.boost_clock_hz * self.efficiency

    @property
    def sustainable_fraction(self) -> float:
        """Sustained throughput / datasheet peak (clock fraction x kernel efficiency)."""
        return self.sustainable_peak_flop_per_s / self.spec_peak_flop_per_s

    @property
    def pj_per_flop_at_spec(self) -> float:
        """All-in core and DRAM energy per FLOP the kernel does at the spec clock's voltage (pJ):
        idle slots' clock energy is shared over the FLOP done."""
        v = voltage(self.spec_clock_hz, self.boost_clock_hz, self.constants)
        slot = self.mac.slot_j(self.efficiency, activity_factor(self.activity, self.constants))
        return (slot * v * v / self.efficiency + self.mac.dram_j) / FLOP_PER_MAC / PJ


def gemm_power(chip: Chip, precision: str, k: Constants = NOMINAL, engine: Engine | None = None,
               activity: float = RANDOM_DATA, efficiency: float | None = None) -> GemmPower:
    """Dense GEMM power model of `chip` at `precision` on `engine` (default: its peak engine),
    on data of `activity` (1 random), at the kernel `efficiency` (default: the engine circuit's
    sourced large-GEMM efficiency)."""
    engine = engine or chip.engine_for(precision)
    if engine is None:
        raise ValueError(f"{chip.name} does not support {precision}; it runs {', '.join(chip.precisions)}")
    rate = engine.macs_per_unit_per_clock.get(precision)
    if rate is None:
        raise ValueError(f"engine {engine.name} of {chip.name} does not run {precision}")
    mac = mac_breakdown(chip.process_nm, engine.circuit, precision, chip.memory.type, onchip_bytes(chip), k,
                        engine.mma_shape)
    eta = gemm_efficiency(engine.circuit).nominal if efficiency is None else efficiency
    return GemmPower(chip=chip.name, engine=engine.name, precision=precision,
                     macs_per_clock=engine.units * rate, spec_clock_hz=engine.clock_hz,
                     boost_clock_hz=boost_clock_hz(chip, engine), tdp_w=chip.tdp_w, mac=mac,
                     static_w=static_w(chip, k), constants=k, efficiency=eta, activity=activity)
