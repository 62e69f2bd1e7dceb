"""All-in energy per MAC and the power-limited (DVFS) clock of a dense GEMM.

Energy per MAC at the boost voltage, for one engine at one precision:

    E_dyn = (1 + c_clk) x [ E_arith x (1 + issue)                                datapath + issue
                            + s x (b_rf x E_rf + b_l1 x E_l1 + b_l2 x E_l2)      operand delivery
                            + b_l2 x 8 x e_wire x d ]                            on-chip network
    b_rf = rf_operands x bytes(p) + rf_accumulator x acc_bytes(p)   (per MAC, from the datapath's reuse)
    b_l1 = l1 x bytes(p),  b_l2 = l2 x bytes(p)

E_arith is technology.mac_energy's datapath part; the reuse per circuit, SRAM energies by node
and array size, wire energy e_wire (pJ/bit/mm) over distance d, the delivery scale s and the
clock/control fraction c_clk are in technology.py. DRAM traffic of an L2-blocked GEMM with
square b x b tiles of A, B, C in an on-chip capacity S: b = sqrt(S / (3 bytes(p))), DRAM bytes
per MAC = 2 bytes(p) / b.

Power at clock f (V(f) relative to the boost voltage: a floor v0 up to knee x f_boost, then
linear to 1 at f_boost):

    P(f) = MACs/clock x f x [E_dyn x V(f)^2 + DRAM bytes/MAC x E_DRAM] + P_static x V(f)

P_static is the chip's sourced idle_w, else static_fraction x TDP (leakage at temperature);
it scales with V (leakage current ~ constant over the DVFS range at fixed temperature). The
sustained clock solves P(f) = TDP, capped at the engine's spec clock (the clock its datasheet
peak assumes). Sustainable peak = 2 x MACs/clock x sustained clock. P is linear in f below the
knee and a cubic above it, so the root is closed-form (numpy.roots), no iterative solver.
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
    CLOCK_CONTROL_FRACTION,
    DELIVERY_SCALE,
    NOC_DISTANCE_MM,
    NOC_PJ_PER_BIT_MM,
    PJ,
    STATIC_FRACTION_BAND,
    V_FLOOR,
    V_KNEE,
    check_memory_type,
    check_reuse,
    mac_energy,
    mma_reuse,
    sram_energy_per_byte_j,
)

# SRAM level each reuse level is charged at (array sizes of technology.SRAM_64BIT_PJ).
RF_LEVEL, L1_LEVEL, L2_LEVEL = "register_file", "l1", "l2"


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

    def replace(self, **kw) -> Constants:
        return dataclasses.replace(self, **kw)


def _at(end: str) -> Constants:
    pick = (lambda b: getattr(b, end)) if end != "nominal" else (lambda b: b.nominal)
    # A later knee keeps V at its floor up to a higher clock (less power): the knee's
    # power-optimistic end is the top of its band.
    knee = {"low": V_KNEE.high, "high": V_KNEE.low, "nominal": V_KNEE.nominal}[end]
    return Constants(pick(DELIVERY_SCALE), pick(CLOCK_CONTROL_FRACTION), pick(STATIC_FRACTION_BAND),
                     pick(V_FLOOR), knee, pick(NOC_PJ_PER_BIT_MM), pick(NOC_DISTANCE_MM), end)


NOMINAL = _at("nominal")
OPTIMISTIC = _at("low")     # every constant at the end of its band that costs least power
PESSIMISTIC = _at("high")


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
    def dynamic_j(self) -> float:
        """Core dynamic energy per MAC (everything but DRAM), scales with V^2."""
        return (self.arithmetic_j + self.issue_j + self.register_file_j + self.l1_j + self.l2_j
                + self.network_j + self.clock_control_j)

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


@dataclass(frozen=True)
class GemmPower:
    """A dense GEMM on one engine: power at the spec clock and the power-limited clock."""

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

    def power_w(self, f: float) -> float:
        v = voltage(f, self.boost_clock_hz, self.constants)
        rate = self.macs_per_clock * f
        return rate * (self.mac.dynamic_j * v * v + self.mac.dram_j) + self.static_w * v

    def components_w(self, f: float) -> dict[str, float]:
        """Power at clock f split by component (watts)."""
        v = voltage(f, self.boost_clock_hz, self.constants)
        rate = self.macs_per_clock * f * v * v
        m = self.mac
        return {"arithmetic_w": rate * m.arithmetic_j, "issue_w": rate * m.issue_j,
                "register_file_w": rate * m.register_file_j, "l1_w": rate * m.l1_j, "l2_w": rate * m.l2_j,
                "network_w": rate * m.network_j, "clock_control_w": rate * m.clock_control_j,
                "dram_w": self.macs_per_clock * f * m.dram_j, "static_w": self.static_w * v}

    @property
    def power_at_spec_w(self) -> float:
        return self.power_w(self.spec_clock_hz)

    @property
    def spec_peak_flop_per_s(self) -> float:
        return FLOP_PER_MAC * self.macs_per_clock * self.spec_clock_hz

    @property
    def sustained_clock_hz(self) -> float:
        """Highest clock <= spec clock with P(f) <= TDP (0 if static power alone exceeds it)."""
        if self.power_w(self.spec_clock_hz) <= self.tdp_w:
            return self.spec_clock_hz
        k, fb = self.constants, self.boost_clock_hz
        f_knee = min(k.v_knee * fb, self.spec_clock_hz)
        a = self.macs_per_clock * self.mac.dynamic_j
        d = self.macs_per_clock * self.mac.dram_j
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
    def sustainable_peak_flop_per_s(self) -> float:
        return FLOP_PER_MAC * self.macs_per_clock * self.sustained_clock_hz

    @property
    def sustainable_fraction(self) -> float:
        return self.sustained_clock_hz / self.spec_clock_hz

    @property
    def pj_per_flop_at_spec(self) -> float:
        """All-in energy per FLOP at the spec clock's voltage, DRAM included (pJ)."""
        v = voltage(self.spec_clock_hz, self.boost_clock_hz, self.constants)
        return (self.mac.dynamic_j * v * v + self.mac.dram_j) / FLOP_PER_MAC / PJ


def gemm_power(chip: Chip, precision: str, k: Constants = NOMINAL, engine: Engine | None = None) -> GemmPower:
    """Dense GEMM power model of `chip` at `precision` on `engine` (default: its peak engine)."""
    engine = engine or chip.engine_for(precision)
    if engine is None:
        raise ValueError(f"{chip.name} does not support {precision}; it runs {', '.join(chip.precisions)}")
    rate = engine.macs_per_unit_per_clock.get(precision)
    if rate is None:
        raise ValueError(f"engine {engine.name} of {chip.name} does not run {precision}")
    mac = mac_breakdown(chip.process_nm, engine.circuit, precision, chip.memory.type, onchip_bytes(chip), k,
                        engine.mma_shape)
    return GemmPower(chip=chip.name, engine=engine.name, precision=precision,
                     macs_per_clock=engine.units * rate, spec_clock_hz=engine.clock_hz,
                     boost_clock_hz=boost_clock_hz(chip, engine), tdp_w=chip.tdp_w, mac=mac,
                     static_w=static_w(chip, k), constants=k)
