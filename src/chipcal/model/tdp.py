"""Can a chip sustain its datasheet peak inside its TDP? All-in power and the power-limited clock.

For a registry chip at a precision (src/chipcal/model/power.py has the formulas):

    P_spec      = all-in power of a dense GEMM at the engine's spec clock: datapath, issue,
                  operand delivery (RF, L1, L2), on-chip network, clock/control, DRAM at the
                  GEMM's traffic, static power
    band        = the same with every uncertain constant at its optimistic / pessimistic end
    f_sustained = the clock at which P = TDP (DVFS: V falls with f), capped at the spec clock
    sustainable peak = 2 x MACs/clock x f_sustained

The model runs with the constants fitted on sustained measurements (power.NOMINAL) and states
the band those fits leave on the circuits they ran on (power.band); a large GEMM does work in a fraction
eta of the MAC slots (technology.GEMM_EFFICIENCY), so sustainable peak = 2 x MACs/clock x
f_sustained x eta and sustainable fraction = that / the datasheet peak.

Verdict: where the registry holds a sustained measurement of the chip at the precision (random
data), the evidence decides: the chip could not hold its spec clock inside the limit when its
settled clock is more than MEASURED_CLOCK_TOLERANCE below it at the limit (or, without a clock,
when its sustained fraction is below what the kernel efficiency alone explains), else it holds
it. Otherwise the model decides: `sustainable` when even the pessimistic end fits the TDP at the
spec clock; `exceeds` when even the optimistic end does not; `uncertain` in between. Bursts
(short-window measurements) are shown apart: they bound the kernel, not the sustained clock.

`estimate_tdp` gives the same decomposition for a hypothetical MAC array at a fixed clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.model import power, technology
from chipcal.model.chip import Chip, Engine, Measured
from chipcal.model.precision import FLOP_PER_MAC, check_precision
from chipcal.model.technology import (
    PJ,
    check_circuit,
    dram_energy_per_byte_j,
    is_extrapolated,
)

VERDICT_OK = "sustainable"
VERDICT_UNSUSTAINABLE = "exceeds TDP even at the optimistic end of the band"
VERDICT_UNCERTAIN = "uncertain"
VERDICT_MEASURED_EXCEEDS = "exceeds TDP (measured sustained)"
VERDICT_MEASURED_OK = "sustainable (measured sustained)"
EXCEEDS = (VERDICT_UNSUSTAINABLE, VERDICT_MEASURED_EXCEEDS)
# a settled clock this far below the spec clock at the power limit is the limit's doing, not noise
# (the H100's SGEMM clock oscillates 1950-1980 MHz with the power-cap event)
MEASURED_CLOCK_TOLERANCE = 0.03
AT_LIMIT = 0.95             # board power at >= 95 % of the TDP: the governor is holding the limit


@dataclass(frozen=True)
class TdpEstimate:
    """Power of `alus` MAC units at `frequency_hz` running a dense GEMM, by component (watts).

    Static power is `static_fraction` of the total; DRAM at the given bandwidth. tdp_low_w and
    tdp_high_w repeat the estimate with every uncertain constant at its optimistic/pessimistic end.
    """

    process_nm: float
    circuit: str
    precision: str
    alus: int
    frequency_hz: float
    mac: power.MacBreakdown
    memory_w: float
    static_w: float
    tdp_low_w: float
    tdp_high_w: float
    extrapolated_node: bool

    @property
    def macs_per_s(self) -> float:
        return self.alus * self.frequency_hz

    @property
    def pj_per_mac(self) -> float:
        """All-in core dynamic energy per MAC (DRAM and static excluded), pJ."""
        return self.mac.dynamic_j / PJ

    @property
    def compute_w(self) -> float:
        """Datapath + instruction issue."""
        return self.macs_per_s * (self.mac.arithmetic_j + self.mac.issue_j)

    @property
    def delivery_w(self) -> float:
        """Operand delivery (RF, L1, L2) + on-chip network + clock/control."""
        m = self.mac
        return self.macs_per_s * (m.register_file_j + m.l1_j + m.l2_j + m.network_j + m.clock_control_j)

    @property
    def tdp_w(self) -> float:
        return self.compute_w + self.delivery_w + self.memory_w + self.static_w

    @property
    def peak_ops_per_s(self) -> float:
        """2 ops per MAC per clock per ALU (FLOP/s for float precisions)."""
        return FLOP_PER_MAC * self.macs_per_s

    @property
    def ops_per_w(self) -> float:
        return self.peak_ops_per_s / self.tdp_w


def _array_power(alus, frequency_hz, process_nm, circuit, precision, memory_w, static_fraction,
                 k: power.Constants) -> tuple[power.MacBreakdown, float, float]:
    """(MAC breakdown, static W, total W) of the array under constants `k`."""
    # DRAM is charged at the given bandwidth, not through the GEMM's blocking: onchip = inf.
    mac = power.mac_breakdown(process_nm, circuit, precision, "hbm2", float("inf"), k)
    dynamic = alus * frequency_hz * mac.dynamic_j + memory_w
    static = dynamic * static_fraction / (1 - static_fraction)
    return mac, static, dynamic + static


def estimate_tdp(alus: int, frequency_hz: float, process_nm: float, circuit: str, precision: str,
                 memory_bandwidth_bytes_per_s: float = 0.0, memory_type: str | None = None,
                 static_fraction: float | None = None) -> TdpEstimate:
    """All-in power of a MAC array flat out (module docstring). `static_fraction` of the total
    is static power; default: the model's nominal static fraction (technology.STATIC_FRACTION_BAND)."""
    if alus <= 0 or frequency_hz <= 0:
        raise ValueError("alus and frequency must be positive")
    if static_fraction is not None and not 0 <= static_fraction < 1:
        raise ValueError("static_fraction must be in [0, 1)")
    precision = check_precision(precision)
    circuit = check_circuit(circuit).name
    memory_w = 0.0
    if memory_bandwidth_bytes_per_s:
        if memory_type is None:
            raise ValueError("memory_type is required with a memory bandwidth")
        memory_w = dram_energy_per_byte_j(memory_type) * memory_bandwidth_bytes_per_s
    args = (alus, frequency_hz, process_nm, circuit, precision, memory_w)
    ends = {}
    optimistic, pessimistic = power.band(circuit)
    for name, k in (("nominal", power.NOMINAL), ("low", optimistic), ("high", pessimistic)):
        fraction = k.static_fraction if static_fraction is None else static_fraction
        ends[name] = _array_power(*args, fraction, k)
    mac, static, _ = ends["nominal"]
    return TdpEstimate(process_nm=float(process_nm), circuit=circuit, precision=precision, alus=alus,
                       frequency_hz=frequency_hz, mac=mac, memory_w=memory_w, static_w=static,
                       tdp_low_w=ends["low"][2], tdp_high_w=ends["high"][2],
                       extrapolated_node=is_extrapolated(process_nm))


def sweep(parameter: str, values, **base) -> list[TdpEstimate]:
    """estimate_tdp over `values` of one keyword (e.g. 'precision', 'circuit', 'process_nm')."""
    return [estimate_tdp(**{**base, parameter: v}) for v in values]


def static_power_w(chip: Chip) -> float:
    """Static power under load at the nominal constants: sourced idle_w, else a fraction of TDP."""
    return power.static_w(chip, power.NOMINAL)


def assessed_precision(engine: Engine, precision: str) -> str:
    """The precision an engine is assessed at: `precision` if it runs it, else its widest
    float it runs at full listed rate in canonical order (fp32 for CUDA cores)."""
    if precision in engine.macs_per_unit_per_clock:
        return precision
    for p in ("fp32", "fp64", "bf16", "fp16", "int8", "fp8", "tf32", "fp4", "int4"):
        if p in engine.macs_per_unit_per_clock:
            return p
    raise ValueError(f"engine {engine.name} has no precisions")


def headline_precision(chip: Chip) -> str:
    """The precision a chip's headline peak is usually quoted in: bf16/fp16, else int8, else fp32."""
    for p in ("bf16", "fp16", "int8", "fp32", "fp64"):
        if chip.supports(p):
            return p
    return chip.precisions[0]


@dataclass(frozen=True)
class EngineTdp:
    """One engine flat out at its spec clock: all-in core dynamic power (DRAM, static excluded)."""

    engine: str
    hardware: str
    circuit: str
    precision: str
    pj_per_mac: float
    dynamic_w: float


@dataclass(frozen=True)
class ChipTdpComparison:
    """A registry chip at a precision: power at the spec peak with its band, sustained clock."""

    chip: Chip
    precision: str
    gemm: power.GemmPower           # nominal constants
    low: power.GemmPower            # optimistic end of every band
    high: power.GemmPower           # pessimistic end
    engines: tuple[EngineTdp, ...]
    measured: Measured | None       # sustained, random data
    burst: Measured | None = None   # the fastest short-window measurement

    @property
    def peak_engine(self) -> str:
        return self.gemm.engine

    @property
    def peak_engine_tdp(self) -> EngineTdp:
        return next(e for e in self.engines if e.engine == self.peak_engine)

    @property
    def peak_macs_per_s(self) -> float:
        return self.gemm.macs_per_clock * self.gemm.spec_clock_hz

    @property
    def spec_peak_flop_per_s(self) -> float:
        return self.gemm.spec_peak_flop_per_s

    @property
    def power_at_spec_w(self) -> float:
        return self.gemm.power_at_spec_w

    @property
    def power_at_spec_low_w(self) -> float:
        return self.low.power_at_spec_w

    @property
    def power_at_spec_high_w(self) -> float:
        return self.high.power_at_spec_w

    @property
    def components_at_spec_w(self) -> dict[str, float]:
        return self.gemm.components_w(self.gemm.spec_clock_hz)

    @property
    def compute_w(self) -> float:
        """Core dynamic power at the spec clock (everything but DRAM and static)."""
        c = self.components_at_spec_w
        return sum(v for k, v in c.items() if k not in ("dram_w", "static_w"))

    @property
    def memory_w(self) -> float:
        """DRAM power at the traffic the GEMM needs, at the spec clock."""
        return self.components_at_spec_w["dram_w"]

    @property
    def static_w(self) -> float:
        return self.components_at_spec_w["static_w"]

    @property
    def estimated_tdp_w(self) -> float:
        return self.power_at_spec_w

    @property
    def combined_tdp_w(self) -> float:
        """Every distinct hardware unit group flat out at once (e.g. CUDA and tensor cores) +
        DRAM + static; engines sharing silicon (an FP64 tensor path) count once, at their max."""
        by_hardware: dict[str, float] = {}
        for e in self.engines:
            by_hardware[e.hardware] = max(by_hardware.get(e.hardware, 0.0), e.dynamic_w)
        return sum(by_hardware.values()) + self.memory_w + self.static_w

    @property
    def ratio(self) -> float:
        return self.power_at_spec_w / self.chip.tdp_w

    @property
    def max_sustainable_pj_per_mac(self) -> float:
        """pJ/MAC at which compute alone would use the whole spec TDP: TDP / peak MAC/s."""
        return self.chip.tdp_w / self.peak_macs_per_s / PJ

    @property
    def margin(self) -> float:
        """max sustainable pJ/MAC / the model's all-in pJ/MAC (< 1: the peak cannot be sustained)."""
        return self.max_sustainable_pj_per_mac / self.peak_engine_tdp.pj_per_mac

    @property
    def sustained_clock_hz(self) -> float:
        return self.gemm.sustained_clock_hz

    @property
    def sustainable_peak_flop_per_s(self) -> float:
        return self.gemm.sustainable_peak_flop_per_s

    @property
    def sustainable_fraction(self) -> float:
        return self.gemm.sustainable_fraction

    @property
    def clock_fraction(self) -> float:
        return self.gemm.clock_fraction

    @property
    def model_verdict(self) -> str:
        if self.power_at_spec_high_w <= self.chip.tdp_w:
            return VERDICT_OK
        if self.power_at_spec_low_w > self.chip.tdp_w:
            return VERDICT_UNSUSTAINABLE
        return VERDICT_UNCERTAIN

    @property
    def measured_verdict(self) -> str | None:
        """What the sustained measurement says (module docstring), None without one."""
        m = self.measured
        if m is None:
            return None
        spec_clock = self.gemm.spec_clock_hz
        if m.sm_clock_hz is not None:
            at_limit = m.board_power_w is None or m.board_power_w >= AT_LIMIT * self.chip.tdp_w
            held = m.sm_clock_hz >= (1 - MEASURED_CLOCK_TOLERANCE) * spec_clock
            return VERDICT_MEASURED_OK if held or not at_limit else VERDICT_MEASURED_EXCEEDS
        ceiling = technology.gemm_efficiency(self.peak_engine_circuit).low
        return (VERDICT_MEASURED_EXCEEDS if m.flop_per_s < (1 - MEASURED_CLOCK_TOLERANCE) * ceiling
                * self.spec_peak_flop_per_s else VERDICT_MEASURED_OK)

    @property
    def peak_engine_circuit(self) -> str:
        return self.peak_engine_tdp.circuit

    @property
    def verdict(self) -> str:
        return self.measured_verdict or self.model_verdict

    @property
    def verdict_basis(self) -> str:
        return "measured" if self.measured is not None else "model"

    @property
    def measured_peak_flop_per_s(self) -> float | None:
        return None if self.measured is None else self.measured.flop_per_s

    @property
    def measured_fraction(self) -> float | None:
        return None if self.measured is None else self.measured.flop_per_s / self.spec_peak_flop_per_s

    @property
    def measured_source(self) -> str | None:
        return None if self.measured is None else self.measured.source

    @property
    def burst_fraction(self) -> float | None:
        return None if self.burst is None else self.burst.flop_per_s / self.spec_peak_flop_per_s


def compare_chip(chip: Chip, precision: str | None = None,
                 constants: power.Constants = power.NOMINAL) -> ChipTdpComparison:
    """Assess `chip` at `precision` (default: its headline precision). Raises ValueError if
    the chip has no engine for an explicitly requested precision. `constants` replaces the
    nominal constants (e.g. fitted on published measurements); the band stays the band."""
    precision = headline_precision(chip) if precision is None else check_precision(precision)
    peak = chip.engine_for(precision)
    if peak is None:
        raise ValueError(f"{chip.name} does not support {precision}; it runs {', '.join(chip.precisions)}")
    optimistic, pessimistic = power.band(peak.circuit)
    engines = []
    for engine in chip.engines:
        p = assessed_precision(engine, precision)
        g = power.gemm_power(chip, p, constants, engine)
        c = g.components_w(g.spec_clock_hz)
        engines.append(EngineTdp(engine.name, engine.hardware, engine.circuit, p, g.mac.dynamic_j / PJ,
                                 sum(v for k, v in c.items() if k not in ("dram_w", "static_w"))))
    return ChipTdpComparison(
        chip=chip, precision=precision, gemm=power.gemm_power(chip, precision, constants, peak),
        low=power.gemm_power(chip, precision, optimistic, peak),
        high=power.gemm_power(chip, precision, pessimistic, peak),
        engines=tuple(engines), measured=chip.sustained_for(precision), burst=chip.burst_for(precision),
    )
