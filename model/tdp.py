"""Physics TDP estimate: can a chip sustain its datasheet peak inside its TDP?

    P_compute  = E_MAC(node, circuit, precision) x MAC_units x clock      (datapath + delivery)
    P_memory   = E_DRAM(type) per byte x bandwidth                           (at full bandwidth)
    P_static   = leakage/always-on power (sourced idle_w, else a fraction of TDP)
    TDP_est    = P_compute + P_memory + P_static

Sensitivity: the energy per MAC at which compute alone would exhaust the spec TDP is
TDP_spec / peak_MAC/s; margin = that / the model's pJ/MAC (below 1 = peak unsustainable).
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.model.chip import Chip, Engine
from chipcal.model.precision import FLOP_PER_MAC, check_precision
from chipcal.model.technology import (
    PJ,
    STATIC_FRACTION_OF_TDP,
    check_circuit,
    dram_energy_per_byte_j,
    is_extrapolated,
    mac_energy,
)


@dataclass(frozen=True)
class TdpEstimate:
    """TDP of `alus` MAC units at `frequency_hz`, with its breakdown (watts)."""

    process_nm: float
    circuit: str
    precision: str
    alus: int
    frequency_hz: float
    pj_per_mac: float
    compute_w: float
    delivery_w: float
    memory_w: float
    static_w: float
    extrapolated_node: bool

    @property
    def tdp_w(self) -> float:
        return self.compute_w + self.delivery_w + self.memory_w + self.static_w

    @property
    def peak_ops_per_s(self) -> float:
        """2 ops per MAC per clock per ALU (FLOP/s for float precisions)."""
        return FLOP_PER_MAC * self.alus * self.frequency_hz

    @property
    def ops_per_w(self) -> float:
        return self.peak_ops_per_s / self.tdp_w


def estimate_tdp(alus: int, frequency_hz: float, process_nm: float, circuit: str, precision: str,
                 memory_bandwidth_bytes_per_s: float = 0.0, memory_type: str | None = None,
                 static_fraction: float = STATIC_FRACTION_OF_TDP) -> TdpEstimate:
    """TDP of a MAC array; static power is `static_fraction` of the resulting total."""
    if alus <= 0 or frequency_hz <= 0:
        raise ValueError("alus and frequency must be positive")
    if not 0 <= static_fraction < 1:
        raise ValueError("static_fraction must be in [0, 1)")
    precision = check_precision(precision)
    circuit = check_circuit(circuit).name
    e = mac_energy(process_nm, circuit, precision)
    macs_per_s = alus * frequency_hz
    memory_w = 0.0
    if memory_bandwidth_bytes_per_s:
        if memory_type is None:
            raise ValueError("memory_type is required with a memory bandwidth")
        memory_w = dram_energy_per_byte_j(memory_type) * memory_bandwidth_bytes_per_s
    dynamic = macs_per_s * e.total_j + memory_w
    return TdpEstimate(
        process_nm=float(process_nm), circuit=circuit, precision=precision, alus=alus,
        frequency_hz=frequency_hz, pj_per_mac=e.total_j / PJ,
        compute_w=macs_per_s * e.compute_j, delivery_w=macs_per_s * e.delivery_j,
        memory_w=memory_w, static_w=dynamic * static_fraction / (1 - static_fraction),
        extrapolated_node=is_extrapolated(process_nm),
    )


def sweep(parameter: str, values, **base) -> list[TdpEstimate]:
    """estimate_tdp over `values` of one keyword (e.g. 'precision', 'circuit', 'process_nm')."""
    return [estimate_tdp(**{**base, parameter: v}) for v in values]


def static_power_w(chip: Chip) -> float:
    """Idle/leakage power: the chip's sourced idle_w, else STATIC_FRACTION_OF_TDP x TDP."""
    return chip.idle_w if chip.idle_w is not None else STATIC_FRACTION_OF_TDP * chip.tdp_w


def engine_power_w(engine: Engine, process_nm: float, precision: str) -> tuple[float, float]:
    """(compute W, delivery W) of one engine running flat out at `precision`."""
    macs_per_s = engine.peak_macs_per_s(precision)
    if macs_per_s is None:
        raise ValueError(f"engine {engine.name} does not run {precision}")
    e = mac_energy(process_nm, engine.circuit, precision)
    return macs_per_s * e.compute_j, macs_per_s * e.delivery_j


def engine_precision(engine: Engine, precision: str) -> str:
    """The precision an engine is assessed at: `precision` if it runs it, else its widest
    float it runs at full listed rate in canonical order (fp32 for CUDA cores)."""
    if precision in engine.macs_per_unit_per_clock:
        return precision
    for p in ("fp32", "fp64", "bf16", "fp16", "int8", "fp8", "tf32", "int4"):
        if p in engine.macs_per_unit_per_clock:
            return p
    raise ValueError(f"engine {engine.name} has no precisions")


def headline_precision(chip: Chip) -> str:
    """The precision a chip's headline peak is usually quoted in: bf16/fp16, else int8, else fp32."""
    for p in ("bf16", "fp16", "int8", "fp32", "fp64"):
        if chip.supports(p):
            return p
    return chip.precisions[0]


VERDICT_UNSUSTAINABLE = "UNSUSTAINABLE: compute alone exceeds TDP at spec peak"
VERDICT_TIGHT = "tight: peak compute + full memory bandwidth exceed TDP"
VERDICT_OK = "sustainable"


@dataclass(frozen=True)
class EngineTdp:
    engine: str
    hardware: str
    circuit: str
    precision: str
    pj_per_mac: float
    compute_w: float
    delivery_w: float


@dataclass(frozen=True)
class ChipTdpComparison:
    """Physics TDP of a registry chip at its derived peak vs its spec TDP."""

    chip: Chip
    precision: str
    peak_macs_per_s: float
    engines: tuple[EngineTdp, ...]
    peak_engine: str
    memory_w: float
    static_w: float

    @property
    def peak_engine_tdp(self) -> EngineTdp:
        return next(e for e in self.engines if e.engine == self.peak_engine)

    @property
    def compute_w(self) -> float:
        e = self.peak_engine_tdp
        return e.compute_w + e.delivery_w

    @property
    def estimated_tdp_w(self) -> float:
        """Peak engine flat out + DRAM at full bandwidth + static."""
        return self.compute_w + self.memory_w + self.static_w

    @property
    def combined_tdp_w(self) -> float:
        """Every distinct hardware unit group flat out at once (e.g. CUDA and tensor cores) +
        memory + static; engines sharing silicon (an FP64 tensor path) count once, at their max."""
        by_hardware: dict[str, float] = {}
        for e in self.engines:
            by_hardware[e.hardware] = max(by_hardware.get(e.hardware, 0.0), e.compute_w + e.delivery_w)
        return sum(by_hardware.values()) + self.memory_w + self.static_w

    @property
    def ratio(self) -> float:
        return self.estimated_tdp_w / self.chip.tdp_w

    @property
    def max_sustainable_pj_per_mac(self) -> float:
        """pJ/MAC at which compute alone would use the whole spec TDP: TDP / peak MAC/s."""
        return self.chip.tdp_w / self.peak_macs_per_s / PJ

    @property
    def margin(self) -> float:
        """max sustainable pJ/MAC ÷ the model's pJ/MAC (< 1: the spec peak cannot be sustained)."""
        return self.max_sustainable_pj_per_mac / self.peak_engine_tdp.pj_per_mac

    @property
    def verdict(self) -> str:
        if self.compute_w + self.static_w > self.chip.tdp_w:
            return VERDICT_UNSUSTAINABLE
        if self.estimated_tdp_w > self.chip.tdp_w:
            return VERDICT_TIGHT
        return VERDICT_OK


def compare_chip(chip: Chip, precision: str | None = None) -> ChipTdpComparison:
    """Assess `chip` at `precision` (default: its headline precision). Raises ValueError if
    the chip has no engine for an explicitly requested precision."""
    precision = headline_precision(chip) if precision is None else check_precision(precision)
    peak = chip.engine_for(precision)
    if peak is None:
        raise ValueError(f"{chip.name} does not support {precision}; it runs {', '.join(chip.precisions)}")
    engines = []
    for engine in chip.engines:
        p = engine_precision(engine, precision)
        compute, delivery = engine_power_w(engine, chip.process_nm, p)
        engines.append(EngineTdp(engine.name, engine.hardware, engine.circuit, p,
                                 mac_energy(chip.process_nm, engine.circuit, p).total_j / PJ,
                                 compute, delivery))
    return ChipTdpComparison(
        chip=chip, precision=precision, peak_macs_per_s=peak.peak_macs_per_s(precision),
        engines=tuple(engines), peak_engine=peak.name,
        memory_w=dram_energy_per_byte_j(chip.memory.type) * chip.memory.bandwidth_bytes_per_s,
        static_w=static_power_w(chip),
    )
