"""A whole-model prediction for one (model, chip, batch, precision): the `Prediction` record.

    latency            fused: concurrency-aware stage schedule (schedule.py); compiled: its kernels
                       one after another (mapping.params.CONCURRENT_RUNTIMES);
                       eager: one stream in program order, fed by the host queue (host.py)
    throughput_per_s   batch / latency
    energy_j           Σ subgraph compute + memory energy + P_static × latency (one batch)
    compute_utilization  Σ utilization_i × busy_i / latency   (time-averaged fraction of units with work)
    compute_efficiency   attained FLOP/s ÷ chip peak at the precision   (not the same thing)
    bandwidth_utilization  DRAM bytes / latency ÷ spec bandwidth
    arithmetic_intensity   FLOP ÷ DRAM bytes on this chip (operational intensity, Williams et al. 2009)
    wasted_energy_j      P_static × latency × (1 − compute_utilization)   (static power of idle units)
    units_allocated      busy-time-weighted mean of the units each subgraph keeps busy
    bottleneck           "power" when the TDP lowers the clocks (throttle.py; clock_fraction < 1),
                         "host" when the device idles waiting for the host longer than it works
                         (eager), else the label (compute/memory/overhead) carrying the most
                         subgraph latency

Numerics (estimate/numerics.py): each subgraph computes in the precision the framework gives it
(fp32 on a TF32 GPU follows `fp32_mode`; `autocast=True` is torch.autocast: per-op policy, fp32
weights cast at every call, activation casts at each dtype boundary). Under an eager runtime the
host issues each cast like any op; a cast's device time is its bytes / (bandwidth ×
bandwidth_efficiency) + the per-kernel overhead, and its bytes are charged DRAM and on-chip
energy. A captured graph (fused, compiled) fuses the casts into its kernels: no cast kernels.

Layout (eager runtimes on a GPU): eager frameworks keep activations NCHW unless `memory_format` is
channels_last, and cuDNN's tensor-core convolutions run far below their NHWC rate on them. The
corpus's frameworks of 2020-21 (PyTorch 1.x, Paddle; cuDNN 8.0-8.1) transposed the input and the
output of every such convolution (conv, conv1x1 in TF32/bf16/fp16/fp8/int8; not depthwise, not
CUDA-core fp32): one layout pass each (mapping.base.traffic's layout_passes; NVIDIA, "Convolutional
Layers User's Guide", Tensor Core layouts: NCHW inputs are transposed to NHWC). Today's PyTorch
(cuDNN 9 on the H100) ran TF32 1x1 convolutions at batch 32 in less time than those transposes
alone: its parameters (mapping.params.PYTORCH_GPU_NCHW) carry NCHW's cost in the tensor-core
efficiency instead, and no pass is charged. torch.compile's Inductor converts convolutions to
channels-last itself (PYTORCH_GPU), and fused runtimes (TensorRT) pick NHWC: no passes.

Steady-state inference: when all weights plus the largest subgraph's activations fit in on-chip
memory, weights are not re-read from DRAM (`weights_on_chip`). A precision no engine of the chip
runs gives status "unsupported" with the reason and NaN numbers, never a silent figure. Pure and
deterministic: same inputs, same record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace

from chipcal.model.chip import Chip
from chipcal.model.estimate.host import DEFAULT_FRAMEWORK, HostCost, HostQueue, host_cost, run_queue
from chipcal.model.estimate.memory import MemoryProfile
from chipcal.model.estimate.numerics import switches
from chipcal.model.estimate.placement import (
    Placed,
    placed_workload,
    weight_cast,
)
from chipcal.model.estimate.roofline import (
    ChipContext,
    SubgraphEstimate,
    estimate_placed,
    kernel_fixed_costs,
    placed_energy,
    placed_kernel_time,
)
from chipcal.model.estimate.schedule import StageEstimate, schedule
from chipcal.model.estimate.throttle import power_limited_fraction
from chipcal.model.mapping.base import UnsupportedPrecision
from chipcal.model.mapping.params import (
    CONCURRENT_RUNTIMES,
    CalibrationParams,
    FamilyParams,
    params_for,
)
from chipcal.model.memo import moved

NAN = float("nan")
STATUS_OK = "ok"
STATUS_UNSUPPORTED = "unsupported"


def chip_label(chip: Chip) -> str:
    """Registry name, with @MODE when the chip is in a power mode."""
    return f"{chip.name}@{chip.active_mode}" if chip.active_mode else chip.name



@dataclass(frozen=True)
class Prediction:
    model: str
    chip: str
    kind: str
    batch: int
    precision: str
    status: str
    reason: str = ""
    runtime: str = "fused"
    fused: bool = True              # the workload predicted: fused subgraphs (True) or one per op (eager)
    latency_s: float = NAN
    serial_latency_s: float = NAN
    critical_path_latency_s: float = NAN
    throughput_per_s: float = NAN
    energy_j: float = NAN
    energy_per_sample_j: float = NAN
    avg_power_w: float = NAN
    tdp_w: float = NAN
    peak_memory_bytes: float = NAN
    weight_bytes: float = NAN
    peak_activation_bytes: float = NAN
    memory_capacity_bytes: float = NAN
    flop: float = NAN
    dram_bytes: float = NAN
    attained_flop_per_s: float = NAN
    peak_flop_per_s: float = NAN
    bandwidth_bytes_per_s: float = NAN
    compute_utilization: float = NAN
    compute_efficiency: float = NAN
    bandwidth_utilization: float = NAN
    arithmetic_intensity: float = NAN
    units_allocated: int = 0
    units_total: int = 0
    unit_name: str = ""
    bottleneck: str = ""
    compute_energy_j: float = NAN
    clock_energy_j: float = NAN     # the part of compute_energy_j that is busy units' clock/control
    memory_energy_j: float = NAN
    static_energy_j: float = NAN
    wasted_energy_j: float = NAN
    weights_on_chip: bool = False
    host_per_op_s: float = 0.0      # eager: host issue cost per op (0: captured graph)
    host_s: float = 0.0             # Σ host issue time
    host_wait_s: float = 0.0        # device idle waiting for the host
    host_source: str = ""
    autocast: bool = False          # torch.autocast: per-op precision, casts (estimate/numerics.py)
    fp32_mode: str = "pytorch"      # what fp32 means on a TF32 GPU (estimate/numerics.py FP32_MODES)
    memory_format: str = "nchw"     # activations' layout in a PyTorch runtime (MEMORY_FORMATS)
    framework: str = DEFAULT_FRAMEWORK   # the eager runtime's framework generation (host cost)
    numerics: str = ""              # the framework switches the prediction assumes, in words
    clock_fraction: float = 1.0     # engine clocks ÷ the clocks it runs at when the power allows (a GPU's
                                    # boost, Chip.at_boost): < 1 when the TDP limits them (throttle.py)
    listed_clock_latency_s: float = NAN   # latency at those clocks, whatever the power
    listed_clock_power_w: float = NAN     # average power at those clocks
    params_source: str = ""
    hypothetical: bool = False      # the chip is a design study, not a product (registry `hypothetical`)
    subgraphs: tuple[SubgraphEstimate, ...] = field(default=(), repr=False)
    stages: tuple[StageEstimate, ...] = field(default=(), repr=False)
    memory: MemoryProfile | None = field(default=None, repr=False)

    @property
    def supported(self) -> bool:
        return self.status == STATUS_OK

    @property
    def fits_in_memory(self) -> bool:
        return self.supported and self.peak_memory_bytes <= self.memory_capacity_bytes

    @property
    def exceeds_tdp(self) -> bool:
        """At its listed clocks the run would draw more than the TDP (throttled, or a chip whose
        TDP does not limit its clock)."""
        return self.supported and max(self.avg_power_w, self.listed_clock_power_w) > self.tdp_w

    @property
    def power_limited(self) -> bool:
        return self.clock_fraction < 1.0

    def record(self) -> dict:
        """Flat record (no per-subgraph detail) for tables, JSON and CSV."""
        skip = {"subgraphs", "stages", "memory"}
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        out["fits_in_memory"] = self.fits_in_memory if self.supported else None
        out["exceeds_tdp"] = self.exceeds_tdp if self.supported else None
        return out


def unsupported(workload, chip: Chip, precision: str, reason: str, runtime: str = "fused") -> Prediction:
    return Prediction(model=workload.model, chip=chip_label(chip), kind=chip.kind, batch=workload.batch,
                      hypothetical=chip.hypothetical, precision=precision, status=STATUS_UNSUPPORTED, reason=reason, runtime=runtime,
                      fused=workload.fused,
                      tdp_w=chip.tdp_w,
                      memory_capacity_bytes=chip.memory.capacity_bytes)


def cast_kernel_s(nbytes: float, chip: Chip, engine_clock_hz: float, params: FamilyParams) -> tuple[float, float]:
    """(device time, extra host issue time) of a cast kernel moving `nbytes` (read + write): a
    memory-bound elementwise kernel with an elementwise kernel's fixed costs (roofline.kernel_fixed_costs)."""
    device, host = kernel_fixed_costs(chip, params, "elementwise", engine_clock_hz)
    return nbytes / (chip.memory.bandwidth_bytes_per_s * params.bandwidth_efficiency) + device, host


MEMORY_FORMATS = ("nchw", "channels_last")


def _bottleneck(estimates: Sequence[SubgraphEstimate]) -> str:
    share: dict[str, float] = {}
    for e in estimates:
        if e.bottleneck != "none":
            share[e.bottleneck] = share.get(e.bottleneck, 0.0) + e.latency_s
    return max(share, key=share.get) if share else "none"


def predict(workload, chip: Chip, precision: str, params: FamilyParams | None = None,
            calibration: CalibrationParams | None = None, runtime: str = "fused",
            host_overhead_s: float | None = None, autocast: bool = False, fp32_mode: str = "pytorch",
            memory_format: str = "nchw", framework: str = DEFAULT_FRAMEWORK,
            host_source: str = "given (--host-overhead-s)", repeated: bool = False,
            trailing_ops: Sequence[tuple[float, float]] = ()) -> Prediction:
    """Predict `workload` (a characterized Workload) on `chip` at `precision` under `runtime`.

    `params` overrides everything; otherwise the calibration applies if it was fitted on this chip,
    else the family defaults (mapping.params.params_for). `host_overhead_s` overrides the per-op
    host cost of an eager runtime (estimate/host.py; `host_source` says where it came from), else
    the default of the `framework` generation. The workload should be partitioned for the
    runtime (mapping.params.runtime_partition). `autocast`, `fp32_mode` and `memory_format`: the
    module docstring (Numerics, Layout). `repeated`: the time per call of back-to-back calls (a
    timer's average, host.run_queue) instead of one call's latency. A run whose average power at the
    listed clocks exceeds the TDP is predicted at the power-limited clock (throttle.py; bottleneck "power").
    `trailing_ops`: (device time, extra host issue time) of ops an eager host issues after the
    workload's own, before it waits for the device (generate's per-token loop, estimate/llm.py);
    their energy is not counted.
    """
    if params is None:
        params = params_for(chip.name, chip.kind, calibration, chip.active_mode, runtime, framework, memory_format)
    if memory_format not in MEMORY_FORMATS:
        raise ValueError(f"unknown memory format {memory_format!r}; valid: {', '.join(MEMORY_FORMATS)}")
    setup = _Setup(runtime, host_overhead_s, autocast, fp32_mode, memory_format, framework, host_source, repeated,
                   tuple(trailing_ops))

    def at(c: Chip) -> Prediction:
        return _predict_at_clock(workload, c, precision, params, setup)

    running = chip.at_boost()           # a GPU boosts past its listed clocks while the power allows
    spec_peak = chip.peak_flop_per_s(precision) or 0.0

    def against_spec(p: Prediction) -> Prediction:
        """Efficiencies and the peak against the datasheet (listed) peak, whatever the clock."""
        if not p.supported or not spec_peak or p.peak_flop_per_s == spec_peak:
            return p
        scale = p.peak_flop_per_s / spec_peak
        return replace(p, peak_flop_per_s=spec_peak, compute_efficiency=p.compute_efficiency * scale,
                       subgraphs=tuple(moved(e, compute_efficiency=e.compute_efficiency * scale)
                                       for e in p.subgraphs))

    listed = at(running)
    if not (listed.supported and chip.tdp_limits_clock and listed.avg_power_w > chip.tdp_w):
        return against_spec(listed)
    fraction = power_limited_fraction(
        lambda s: listed.avg_power_w if s == 1.0 else at(running.at_clock_fraction(s)).avg_power_w, chip.tdp_w)
    limited = at(running.at_clock_fraction(fraction))
    # efficiencies stay against the running chip's peak (every engine's peak scales by the fraction)
    return against_spec(replace(limited, clock_fraction=fraction, bottleneck="power",
                                listed_clock_latency_s=listed.latency_s, listed_clock_power_w=listed.avg_power_w,
                                peak_flop_per_s=listed.peak_flop_per_s,
                                compute_efficiency=limited.compute_efficiency * fraction,
                                subgraphs=tuple(moved(e, compute_efficiency=e.compute_efficiency * fraction)
                                                for e in limited.subgraphs)))


@dataclass(frozen=True)
class _Setup:
    """How the run is launched: predict's keyword arguments, passed down as one."""

    runtime: str
    host_overhead_s: float | None
    autocast: bool
    fp32_mode: str
    memory_format: str
    framework: str
    host_source: str
    repeated: bool
    trailing_ops: tuple[tuple[float, float], ...] = ()


def _moved(estimate: SubgraphEstimate, m) -> SubgraphEstimate:
    """The estimate of a subgraph placed as `m` is, at its own position (placement.Placed.same_as)."""
    sg = m.subgraph
    return moved(estimate, index=sg.index, name=sg.name, stage=sg.stage)


@dataclass(frozen=True)
class _EagerRun:
    """An eager runtime's pass through the host queue, and the bytes its cast kernels moved."""

    queue: HostQueue
    cast_bytes: float


def _eager_run(placed: Placed, chip: Chip, kernels: Sequence, params: FamilyParams, setup: _Setup,
               host: HostCost) -> _EagerRun:
    """One stream in program order behind the host (host.run_queue): each subgraph's cast kernels
    (numerics' activation casts, autocast's weight cast; cast_kernel_s) before its own kernel,
    then the trailing ops. `kernels`: each placed subgraph's time terms (a SubgraphEstimate, or
    roofline.placed_kernel_time's: latency_s and host_issue_s)."""
    device: list[float] = []
    issue: list[float] = []
    cast_bytes = 0.0
    order = sorted(zip(placed.subgraphs, placed.numerics, kernels, strict=True), key=lambda t: t[0].subgraph.index)
    for m, n, e in order:
        sg, clock = m.subgraph, m.engine.clock_hz
        wcast = weight_cast(sg, n, placed.trace_bpe) if setup.autocast else None
        for c in (*n.casts, *((wcast,) if wcast else ())):
            d, h = cast_kernel_s(c.bytes, chip, clock, params)
            device.append(d)
            issue.append(h)
            cast_bytes += c.bytes
        device.append(e.latency_s)
        issue.append(e.host_issue_s)
    device += [d for d, _ in setup.trailing_ops]
    issue += [h for _, h in setup.trailing_ops]
    return _EagerRun(run_queue(device, host, issue, setup.repeated, params.host_call_s), cast_bytes)


def predicted_latency_s(workload, chip: Chip, precision: str, params: FamilyParams, runtime: str = "fused",
                        fp32_mode: str = "pytorch", repeated: bool = False) -> float:
    """predict(workload, chip, precision, params=params, runtime=runtime, fp32_mode=fp32_mode,
    repeated=repeated).latency_s, without building the record under an eager runtime, where the
    kernels' times and the host queue decide it: on a chip whose TDP does not lower its clocks (a
    CPU) from the kernels' times alone; on one whose TDP may (a GPU) with the run's energy to see
    that its power stays within the TDP, else predict's. A calibration fit asks for this number
    alone, about 100,000 times a run. A captured graph's (stage schedule) is predict's; NaN where
    the precision is unsupported, as predict's record says."""
    def recorded() -> float:
        return predict(workload, chip, precision, params=params, runtime=runtime, fp32_mode=fp32_mode,
                       repeated=repeated).latency_s

    running = chip.at_boost()
    host = host_cost(running, runtime, params)
    if host is None:
        return recorded()
    if not running.supports(precision):
        return NAN
    setup = _Setup(runtime, None, False, fp32_mode, "nchw", DEFAULT_FRAMEWORK, "", repeated)
    try:
        placed = placed_workload(workload, running, precision, fp32_mode, False, params.layout_passes, runtime, "nchw",
                         DEFAULT_FRAMEWORK)
    except UnsupportedPrecision:
        return NAN
    kernels = placed.each(lambda m: placed_kernel_time(m, running, params), lambda first, m: first)
    eager = _eager_run(placed, running, kernels, params, setup, host)
    latency = eager.queue.latency_s
    if not chip.tdp_limits_clock:
        return latency
    energies = [placed_energy(m, t) for m, t in zip(placed.subgraphs, kernels, strict=True)]
    energy = _run_energy_j(sum(e.compute_j for e in energies), sum(e.dram_j + e.onchip_j for e in energies),
                           eager.cast_bytes, latency, placed.ctx)
    power_limited = latency > 0 and energy / latency > chip.tdp_w     # predict finds the clock the TDP allows
    return recorded() if power_limited else latency


@dataclass(frozen=True)
class _Totals:
    """The subgraph estimates summed over one run of `latency` seconds (module docstring)."""

    flop: float
    dram_bytes: float
    utilization: float          # Σ utilization_i × busy_i / latency, at most 1
    units_allocated: int        # busy-time-weighted mean
    compute_j: float
    clock_j: float
    memory_j: float             # the subgraphs' + the cast kernels' DRAM and on-chip energy
    static_j: float             # P_static × latency
    energy_j: float
    attained_flop_per_s: float


def _cast_and_static_j(cast_bytes: float, latency: float, ctx: ChipContext) -> tuple[float, float]:
    """(the cast kernels' DRAM and on-chip energy, P_static × latency) of a run."""
    return cast_bytes * (ctx.dram_j_per_byte + ctx.onchip_j_per_byte), ctx.static_w * latency


def _run_energy_j(compute_j: float, memory_j: float, cast_bytes: float, latency: float, ctx: ChipContext) -> float:
    """A run's energy: its subgraphs' compute and memory energy, its casts' and its static power's."""
    cast_j, static_j = _cast_and_static_j(cast_bytes, latency, ctx)
    return compute_j + (memory_j + cast_j) + static_j


def _totals(estimates: Sequence[SubgraphEstimate], latency: float, cast_bytes: float, ctx: ChipContext) -> _Totals:
    """Sum the estimates into the run's FLOP, bytes, utilization and energy."""
    flop = float(sum(e.flop for e in estimates))
    busy = sum(e.busy_s for e in estimates)
    unit_time = sum(e.utilization * e.busy_s for e in estimates)
    compute_j = sum(e.compute_energy_j for e in estimates)
    cast_j, static_j = _cast_and_static_j(cast_bytes, latency, ctx)
    memory_j = sum(e.memory_energy_j for e in estimates) + cast_j
    return _Totals(
        flop=flop,
        dram_bytes=sum(e.dram_bytes for e in estimates),
        utilization=min(1.0, unit_time / latency) if latency > 0 else 0.0,
        units_allocated=round(sum(e.units_allocated * e.busy_s for e in estimates) / busy) if busy > 0 else 0,
        compute_j=compute_j,
        clock_j=sum(e.clock_energy_j for e in estimates),
        memory_j=memory_j,
        static_j=static_j,
        energy_j=compute_j + memory_j + static_j,
        attained_flop_per_s=flop / latency if latency > 0 else 0.0,
    )


def _predict_at_clock(workload, chip: Chip, precision: str, params: FamilyParams, setup: _Setup) -> Prediction:
    """`predict` with `chip`'s engines at their listed clocks, whatever the power."""
    runtime = setup.runtime
    if not chip.supports(precision):
        return unsupported(workload, chip, precision,
                           f"{chip_label(chip)} has no engine for {precision}; it runs {', '.join(chip.precisions)}",
                           runtime)
    try:
        placed = placed_workload(workload, chip, precision, setup.fp32_mode, setup.autocast, params.layout_passes, runtime,
                         setup.memory_format, setup.framework)
    except UnsupportedPrecision as exc:
        return unsupported(workload, chip, precision, str(exc), runtime)
    ctx, resident, mem = placed.ctx, placed.resident, placed.memory
    estimates = tuple(placed.each(lambda m: estimate_placed(m, chip, params), _moved))
    sched = schedule(estimates, workload.stages, workload.critical_path, runtime in CONCURRENT_RUNTIMES)
    host = host_cost(chip, runtime, params, setup.host_overhead_s, setup.framework, setup.host_source)
    # eager: one stream in program order behind the host; casts are kernels of their own
    eager = _eager_run(placed, chip, estimates, params, setup, host) if host is not None else None
    queue = eager.queue if eager is not None else None
    latency = queue.latency_s if queue is not None else sched.latency_s
    totals = _totals(estimates, latency, eager.cast_bytes if eager is not None else 0.0, ctx)
    return Prediction(
        model=workload.model, chip=chip_label(chip), kind=chip.kind, batch=workload.batch,
        hypothetical=chip.hypothetical, precision=precision, status=STATUS_OK, runtime=runtime, fused=workload.fused, latency_s=latency,
        serial_latency_s=sched.serial_latency_s, critical_path_latency_s=sched.critical_path_latency_s,
        throughput_per_s=workload.batch / latency if latency > 0 else math.inf,
        energy_j=totals.energy_j, energy_per_sample_j=totals.energy_j / workload.batch,
        avg_power_w=totals.energy_j / latency if latency > 0 else NAN, tdp_w=chip.tdp_w,
        peak_memory_bytes=mem.peak_bytes, weight_bytes=mem.weight_bytes,
        peak_activation_bytes=mem.peak_activation_bytes, memory_capacity_bytes=chip.memory.capacity_bytes,
        flop=totals.flop, dram_bytes=totals.dram_bytes, attained_flop_per_s=totals.attained_flop_per_s,
        peak_flop_per_s=ctx.peak_flop_per_s, bandwidth_bytes_per_s=ctx.bandwidth_bytes_per_s,
        compute_utilization=totals.utilization,
        compute_efficiency=totals.attained_flop_per_s / ctx.peak_flop_per_s if ctx.peak_flop_per_s else NAN,
        bandwidth_utilization=totals.dram_bytes / latency / ctx.bandwidth_bytes_per_s if latency > 0 else 0.0,
        arithmetic_intensity=totals.flop / totals.dram_bytes if totals.dram_bytes > 0 else math.inf,
        units_allocated=totals.units_allocated, units_total=estimates[0].units_total if estimates else 0,
        unit_name=estimates[0].unit_name if estimates else "",
        bottleneck="host" if queue is not None and queue.host_bound else _bottleneck(estimates),
        compute_energy_j=totals.compute_j, clock_energy_j=totals.clock_j, memory_energy_j=totals.memory_j,
        static_energy_j=totals.static_j, wasted_energy_j=ctx.static_w * latency * (1.0 - totals.utilization),
        weights_on_chip=resident, host_per_op_s=host.per_op_s if host else 0.0,
        host_s=queue.host_s if queue else 0.0, host_wait_s=queue.host_wait_s if queue else 0.0,
        host_source=host.source if host else "", autocast=setup.autocast, fp32_mode=setup.fp32_mode,
        memory_format=setup.memory_format, framework=setup.framework,
        numerics=switches(chip, precision, setup.fp32_mode, setup.autocast), params_source=params.source,
        listed_clock_latency_s=latency, listed_clock_power_w=totals.energy_j / latency if latency > 0 else NAN,
        subgraphs=estimates, stages=sched.stages, memory=mem,
    )
