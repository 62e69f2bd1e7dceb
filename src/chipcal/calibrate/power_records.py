"""The power phase's records in the calibration document (calibrate.document): the kernels held
until clock and power settled (`HoldRow`; `PowerRow`, the power curve of SCHEMA_1 runs), and the
energy fit on them per precision (`PrecisionEnergy`, `PowerSection`; calibrate.sustain,
calibrate.power_fit)."""

from __future__ import annotations

from dataclasses import field

from chipcal.calibrate.records import OMIT_NONE, Record, record


@record
class PowerRow(Record):
    """One window of the power curve of SCHEMA_1 runs (idle, GEMM sizes, triad, eight sustained
    windows of the largest GEMM, all at the run's precision): average power at a known throughput.
    Runs since write `HoldRow`s instead."""

    kind: str                  # idle, gemm, bandwidth, sustained
    label: str
    avg_power_w: float | None
    peak_power_w: float | None
    flop_per_s: float
    bytes_per_s: float
    duration_s: float
    n_samples: int | None
    warnings: tuple[str, ...]
    sm_clock_hz: tuple[float, ...] | None = field(default=None, metadata=OMIT_NONE)


@record
class HoldRow(Record):
    """One kernel held until clock and power settled (measure.sustained.Hold): its sustained
    point (the second half of the hold), its burst, and the samples taken after each batch."""

    kind: str                  # idle, stream, gemm
    label: str
    precision: str | None
    flop_per_call: float
    bytes_per_call: float
    settled: bool
    duration_s: float
    calls: int
    sustained_flop_per_s: float | None
    sustained_bytes_per_s: float | None
    burst_flop_per_s: float | None
    power_w: float | None            # energy counter's average over the settled part, else median_power_w
    median_power_w: float | None
    energy_power_w: float | None
    sm_clock_hz: float | None        # median over the settled part
    clock_events: tuple[str, ...]    # every reason seen (measure.throttle names)
    sample_t_s: tuple[float, ...]
    sample_calls: tuple[int, ...]
    sample_power_w: tuple[float | None, ...]
    sample_sm_clock_hz: tuple[float | None, ...]
    sample_clock_events: tuple[int | None, ...]

    @classmethod
    def of(cls, h) -> HoldRow:
        """From a measure.sustained.Hold of this run."""
        s = h.samples
        return cls(kind=h.kind, label=h.label, precision=h.precision, flop_per_call=h.flop_per_call,
                   bytes_per_call=h.bytes_per_call, settled=h.settled, duration_s=h.duration_s, calls=h.calls,
                   sustained_flop_per_s=h.sustained_flop_per_s, sustained_bytes_per_s=h.sustained_bytes_per_s,
                   burst_flop_per_s=h.burst_flop_per_s, power_w=h.power_w, median_power_w=h.median_power_w,
                   energy_power_w=h.energy_power_w, sm_clock_hz=h.sm_clock_hz, clock_events=h.clock_events,
                   sample_t_s=tuple(x.t_s for x in s), sample_calls=tuple(x.calls for x in s),
                   sample_power_w=tuple(x.power_w for x in s), sample_sm_clock_hz=tuple(x.sm_clock_hz for x in s),
                   sample_clock_events=tuple(x.clock_events for x in s))


@record
class PrecisionEnergy(Record):
    """One precision on its engine at the point the chip sustains (calibrate.sustain): what it
    ran at, the energy per FLOP fitted there, the physics model's figure, and the spec's need."""

    precision: str
    engine: str | None
    source: str                       # "hold", or "sustained windows" of a SCHEMA_1 power curve
    settled: bool | None              # None: a SCHEMA_1 run, which did not check
    sustained_flop_per_s: float
    burst_flop_per_s: float | None
    sustained_power_w: float
    sustained_clock_hz: float | None  # None: no clock sensor (CPU)
    boost_clock_hz: float | None
    clock_events: tuple[str, ...]
    spec_flop_per_s: float | None
    spec_clock_hz: float | None
    tdp_w: float | None               # the power limit the run had (NVML), else the chip's TDP
    bytes_per_flop: float             # DRAM bytes the held kernel moved per FLOP
    j_per_flop_at_boost: float        # e_p: all-in core energy per FLOP at the boost voltage
    j_per_flop_sustained: float       # e_p V(f_sustained)^2: per FLOP at the sustained point
    j_per_flop_at_spec_clock: float | None     # e_p V(f_spec)^2 + DRAM bytes/FLOP x j_per_byte
    physics_j_per_flop_at_spec: float | None   # model.power.gemm_power(chip, p).pj_per_flop_at_spec
    power_at_spec_w: float | None     # static V(f_spec) + spec FLOP/s x j_per_flop_at_spec_clock

    @property
    def fraction_of_spec(self) -> float | None:
        """Sustained throughput / the datasheet's dense peak."""
        return self.sustained_flop_per_s / self.spec_flop_per_s if self.spec_flop_per_s else None

    @property
    def clock_fraction(self) -> float | None:
        """Sustained SM clock / boost clock."""
        if self.sustained_clock_hz is None or not self.boost_clock_hz:
            return None
        return self.sustained_clock_hz / self.boost_clock_hz


@record
class PowerSection(Record):
    """Where power was read and, when it was, the energy fit (calibrate.sustain): static power
    (the idle hold's), energy per DRAM byte (the triad's) and per FLOP for each precision held."""

    source: str
    available: bool
    reason: str | None = None
    idle_w: float | None = field(default=None, metadata=OMIT_NONE)        # static power, at boost voltage
    j_per_byte: float | None = field(default=None, metadata=OMIT_NONE)
    physics_j_per_byte: float | None = field(default=None, metadata=OMIT_NONE)
    precisions: tuple[PrecisionEnergy, ...] = ()
    note: str | None = field(default=None, metadata=OMIT_NONE)            # why there is no energy fit
