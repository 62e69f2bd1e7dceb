"""Per-subgraph roofline: latency, bottleneck, attained FLOP/s, energy — a pure function.

    compute_time = FLOP / (peak_engine × utilization × lane_fill × efficiency[op_class] × size)
    size         = W / (W + h·u) for MAC work (pipeline ramp of GEMM-like kernels), 1 for non-MAC work,
                   W = FLOP / lane_fill: the work the busy lanes execute, padding included;
                   u = utilization: the ramp is each busy unit's own (prologue, pipeline fill,
                   epilogue) and the units ramp in parallel, so it costs h / (peak × efficiency)
                   seconds whether one SM or all of them run the kernel;
                   for a tiled GPU GEMM at least serial_k_bytes × k_loop_cycles_per_byte / clock
                   (one CTA's K bytes, from the mapper: each CTA streams its reduction operand K
                   tile by K tile, and with one CTA per SM every tile waits for its load, so a
                   batch-1 convolution with a deep K is latency-bound, not throughput-bound; with
                   many waves other CTAs hide the latency, so it is charged once per kernel);
                   plus assist_cycles / clock (a CPU core's microcode assists on subnormal
                   operands, mapping/cpu.py: serial with the kernel's work)
    memory_time  = max(DRAM bytes / (spec bandwidth × bandwidth_efficiency),
                       network_memory_factor × on-chip bytes / (spec bandwidth × onchip_bandwidth_ratio))
                   (network_memory_factor and switch_overhead_s: a kernel inside a network, not
                   repeated alone; both 1 and 0 until chains of layers calibrate them. The factor
                   scales the on-chip stream only: what a cache serves a repeated kernel hot, it
                   serves a kernel inside a network colder; a DRAM stream is the same either way)
    latency      = max(compute_time, memory_time) + first_touch_time + weight_layout_time + overhead
                   (SERIAL_STREAMS, a CPU's matmul class: max(compute_time + stream_time, memory_time),
                   stream_time = the memory term of its bytes less its weights': a BLAS GEMM packs its
                   activation operand and writes its output apart from the micro-kernel's FMA loop,
                   not under it; the recorded GEMM sweeps of the Xeon VM took 5-6 ms over the 4096³
                   rate for a 67 MB A or output at 8.6 GFLOP, docs/findings/2026-11-27-cpu-gemm-serial-streams.md)
    weight_layout_time = weight bytes / weight_layout_bytes_per_s (k x k kernels) or
                   / pointwise_weight_layout_bytes_per_s (1x1), for a convolution: PyTorch eager on a
                   CPU hands oneDNN OIHW weights and oneDNN reorders them into its blocked layout
                   before every call, a primitive of its own (ONEDNN_VERBOSE on the Zen 5 VM,
                   512->512 3x3 at 7x7, batch 1: weight reorder 0.34 ms, convolution 0.49 ms; the
                   same FLOP at 64 channels and 56x56: 0.007 ms and 0.47 ms); serial, the same at
                   any batch; 0 where the parameters have no rate (a calibration times it,
                   measure.layout). A GEMM with weights and more than one row (a linear layer) pays
                   its weights / the pointwise rate too: the BLAS packs its weight operand into
                   panels on every call, the same
                   K x N reorder oneDNN runs for a 1x1 convolution's weights (2-vCPU Xeon, one
                   thread: swin_t's 52 linears took 84 ms at batch 1 and 572 ms at batch 8, a
                   fixed 14 ms per pass for their 110 MB of weights)
    overhead     = overhead_s[op_class] + switch_overhead_s + overhead_cycles / engine clock
                   (a GPU: overhead_s[op_class] + switch_overhead_s are the host's cost of issuing
                   the op inside a network, charged by the eager host queue (host_issue_s,
                   estimate/host.py), not the device's: the device pays overhead_cycles / clock;
                   kernel_fixed_costs)
    first_touch_time = output bytes / first_touch_bytes_per_s, for an output of at least
                   fresh_allocation_bytes: the allocator maps such a buffer fresh for every call
                   (glibc's dynamic mmap threshold tops out at 32 MiB, mallopt(3); a calibration
                   pins it at 1 GiB, measure.allocator), and the kernel's first write to each
                   page faults. Serial with the kernel's own work; 0 where the
                   parameters have no first-touch rate (measured by calibration, measure.bandwidth)
    memory_time of a matrix-vector product (a GEMM with one row, weights not on chip) is at least
                   weight bytes / gemv_bytes_per_s + output elements × gemv_row_s where the
                   parameters have that rate: a CPU BLAS GEMV streams its weights far below a
                   streaming kernel's rate (2-vCPU Zen 4 VM, two threads: F.linear of 1 x 2048 by
                   8192 x 2048 fp32, 67 MB, 18-23 GB/s; gpt2's 768 -> 50257 head 12.5 GB/s; the
                   triad 48 GB/s), and slower the shorter its rows, each output ending in a
                   reduction across the vector lanes (2-vCPU Zen 5 VM, 128 MiB fp32: 183 ns a row
                   at 768 inputs, 359 at 2048, 2128 at 16384: ~32 GB/s plus ~0.1 us a row); an
                   LLM's decode at batch 1 is such products; both measured by calibration
                   (measure.gemv.measure_gemv)
    weight pass of a GEMM with more than one row, weights not on chip, where the parameters have a
                   packed_weight_bytes_per_s: weight bytes / that rate, in place of the pointwise
                   pack, and the memory term then holds the other operands only: the BLAS reads
                   such weights from DRAM into its packed panels at that rate, serial with the
                   arithmetic (2-vCPU Zen 4 VM, two threads, F.linear by 2048 x 8192 fp32, 64 MiB:
                   one row 3.6 ms; 2, 8 and 16 rows 7.2, 8.4 and 10.1 ms; 32, 64 and 128 rows 13.6,
                   18.8 and 32.6 ms, i.e. ~8 ms plus the arithmetic; gpt2's decode step 37 ms at
                   batch 1 and 77 ms at batch 8); measured by calibration
                   (measure.gemv.measure_packed_gemm)
    bottleneck   = overhead if overhead ≥ max(compute, memory), else the larger of the two
    (a convolution's bytes include the runtime's layout reorders, layout_passes: mapping.base.traffic)

(h = half_efficiency_flop; utilization, lane fill, engine and DRAM bytes come from the mapper;
efficiency, overhead, h, bandwidth_efficiency and onchip_bandwidth_ratio from `FamilyParams`.)
Every byte a kernel touches passes the last on-chip level once, so data resident in a cache still
costs on-chip bandwidth time (a CPU's L3 is only ~2x its DRAM share). With W counted as executed
work, compute_time = (FLOP/lane_fill + h·u) / (peak × u × efficiency) = W / (peak·u·eff) + h / (peak·eff):
the ramp costs h FLOP at the whole chip's rate whatever the padding and however few units are busy
(charged at the busy units' rate, a 110 kFLOP squeeze-excite convolution on one of an H100's 132
SMs paid a whole-chip ramp on one SM: 2.8 ms, and the calibrated H100 was 7x too slow on
efficientnet_b0). The size curve is applied to MAC work only: for an
elementwise kernel on a slow vector path h / rate would dwarf its real cost — that fixed cost is
overhead_s's job. A subgraph
that moves no bytes and does no arithmetic (a view) launches no kernel and costs nothing.

    energy = MACs × E_op(node, engine circuit, precision, MMA shape)                (compute:
           + non-MAC FLOP × E_op(node, vector circuit, precision) / FLOP_PER_MAC      per op)
           + P_clk(engine, precision) × utilization × (latency − overhead)          (compute: clock)
           + DRAM bytes × E_DRAM(memory type) + on-chip bytes × E_onchip(node, level) (memory)
           + P_static × latency                                                    (static)
    (all-in energies of src/chipcal/model/power.py at the boost voltage, × V(engine clock)² for the
    engine's voltage: E_op = datapath, issue, register file, L1 (power.op_energy_per_mac_j); the
    clock/control share c_clk of it is charged per busy unit-second, P_clk = power.clock_power_w
    (c_clk × E_op at the engine's full MAC rate): a unit's clock tree toggles every cycle it is busy, computing or waiting on
    memory, so a DRAM-bound kernel on every SM pays it too (a STREAM triad on the H100: 523 W
    predicted, 509 W measured by NVML; charged per op it was 253 W); E_onchip =
    last-level SRAM + on-chip network + clock/control; P_static = idle_w or the nominal static
    fraction of TDP, × V(clock of the engine that runs the precision): leakage scales with the
    supply voltage, as in power.GemmPower)
    wasted = P_static × (overhead + (latency − overhead) × (1 − utilization))      (idle units)

`estimate_subgraph` is what calibration fits against: change `params`, call it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chipcal.model import power, tdp, technology
from chipcal.model.chip import Chip
from chipcal.model.estimate.cpu_passes import (
    first_touch_s,
    gemv_stream_s,
    packed_weight_s,
    weight_layout_s,
)
from chipcal.model.mapping import map_subgraph
from chipcal.model.mapping.base import is_mac_work, vector_engine
from chipcal.model.mapping.params import FamilyParams
from chipcal.model.memo import recent
from chipcal.model.precision import BYTES_PER_ELEMENT, FLOP_PER_MAC

# The family whose per-class overhead_s is the host's issue cost of an op (eager), not the device's:
# a GPU's host thread runs ahead of its kernels, a CPU's runs them (module docstring)
HOST_ISSUED_CLASS_COSTS = "gpu"

# Op classes whose kernels stream their activations serially with their arithmetic, by family
# (module docstring: stream_time): PyTorch's CPU matmul (MKL/OpenBLAS packs A and writes C apart
# from the FMA loop); oneDNN's convolutions overlap them (layout_passes charge their reorders)
SERIAL_STREAMS = {"cpu": ("matmul",)}

# On-chip level whose access energy on-chip traffic is charged at: the last-level SRAM a subgraph's
# operands pass through (a CPU's multi-MB L3; a GPU's L2; a TPU's/KPU's MB-class SRAM).
ONCHIP_LEVEL = {"cpu": "l3", "gpu": "l2", "tpu": "l2", "kpu": "l2"}


@dataclass(frozen=True)
class ChipContext:
    """Per (chip, precision) constants every subgraph estimate needs, computed once."""

    chip: Chip
    precision: str
    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    static_w: float
    dram_j_per_byte: float
    onchip_j_per_byte: float
    vector_j_per_flop: float | None


@recent(maxsize=256)
def chip_context(chip: Chip, precision: str) -> ChipContext:
    """Per-(chip, precision) constants of the estimate: peak, bandwidth, static power and the
    energy per byte and per vector FLOP (recent ones reused, model.memo)."""
    vec = vector_engine(chip, precision)
    vec_j = (power.op_energy_per_mac_j(chip.process_nm, vec[0].circuit, vec[1], vec[0].mma_shape)
             * power.engine_voltage(chip, vec[0]) ** 2 / FLOP_PER_MAC if vec is not None else None)
    return ChipContext(
        chip=chip, precision=precision,
        peak_flop_per_s=chip.peak_flop_per_s(precision) or 0.0,
        bandwidth_bytes_per_s=chip.memory.bandwidth_bytes_per_s,
        static_w=tdp.static_power_w(chip) * _static_voltage(chip, precision),
        dram_j_per_byte=technology.dram_energy_per_byte_j(chip.memory.type),
        onchip_j_per_byte=power.onchip_energy_per_byte_j(chip.process_nm, ONCHIP_LEVEL[chip.kind]),
        vector_j_per_flop=vec_j,
    )


def _static_voltage(chip: Chip, precision: str) -> float:
    """Static power scales with the supply voltage (leakage current ~ constant, src/chipcal/model/power.py):
    the voltage of the engine that runs `precision`, relative to boost (1 at the boost clock)."""
    engine = chip.engine_for(precision)
    return power.engine_voltage(chip, engine) if engine is not None else 1.0


@dataclass(frozen=True)
class SubgraphEstimate:
    """One fused subgraph on one chip: timing, roofline position, energy, and why."""

    index: int
    name: str
    pattern: str
    op_class: str
    stage: int
    macs: int
    flop: int
    engine: str
    compute_precision: str
    unit_name: str
    units_allocated: int
    units_total: int
    waves: int
    utilization: float          # time-averaged fraction of units with work
    lane_fill: float            # fraction of a busy unit's lanes holding real data
    occupancy: float | None     # GPU only
    class_efficiency: float     # efficiency[op_class] (× W/(W+h) for MAC work)
    compute_time_s: float
    memory_time_s: float
    overhead_s: float
    host_issue_s: float         # GPU: the host's extra cost to issue this op in an eager runtime (overhead_s[c])
    latency_s: float
    bottleneck: str             # compute | memory | overhead | none (no kernel)
    dram_bytes: float
    onchip_bytes: float
    activations_on_chip: bool
    attained_flop_per_s: float
    compute_efficiency: float   # attained ÷ chip peak at the run precision
    bandwidth_utilization: float  # DRAM bytes / latency ÷ spec bandwidth
    arithmetic_intensity: float   # FLOP per DRAM byte (inf when no DRAM traffic)
    compute_energy_j: float
    clock_energy_j: float       # the part of compute_energy_j that is busy units' clock/control
    dram_energy_j: float
    onchip_energy_j: float
    static_energy_j: float
    wasted_energy_j: float
    mapping: str
    # what `explanation` is written from: (serial K bytes, throughput time, K-loop cycles per byte,
    # weight reorder time); the text is built when asked for, not in every prediction of a fit
    explain_terms: tuple[float, float, float, float] = field(default=(0.0, 0.0, 0.0, 0.0), repr=False)

    @property
    def explanation(self) -> str:
        """One line: why this kernel takes its time (bound, terms, mapping, attained rate)."""
        if self.bottleneck == "none":
            return f"{self.name}: no data movement and no arithmetic (a view): no kernel"
        serial_k_bytes, throughput, k_cycles_per_byte, reorder = self.explain_terms
        compute, memory, overhead = self.compute_time_s, self.memory_time_s, self.overhead_s
        moved = memory + reorder     # the weight reorder is a memory pass of its own, serial
        why = {
            "compute": f"compute-bound: {_us(compute)} compute vs {_us(moved)} memory",
            "memory": f"memory-bound: {_us(moved)} memory vs {_us(compute)} compute",
            "overhead": f"overhead-bound: {_us(overhead)} fixed cost vs {_us(max(compute, memory) + reorder)} work",
        }[self.bottleneck]
        k_loop = (f"; compute set by the K loop ({serial_k_bytes:.0f} B x {k_cycles_per_byte:g} cycles/B; "
                  f"{_us(throughput)} at throughput)" if compute > throughput else "")
        return (f"{self.name} ({self.op_class}): {self.mapping}; utilization {self.utilization:.0%}, "
                f"lane fill {self.lane_fill:.0%}, class efficiency {self.class_efficiency:.0%}; {why}"
                f" (+{_us(overhead)} overhead){f'; memory includes a {_us(reorder)} weight reorder' if reorder else ''};"
                f" attains {self.attained_flop_per_s / 1e12:.3g} TFLOP/s{k_loop}")

    @property
    def busy_s(self) -> float:
        """Time the kernel executes (latency without the fixed overhead)."""
        return self.latency_s - self.overhead_s

    @property
    def memory_energy_j(self) -> float:
        return self.dram_energy_j + self.onchip_energy_j

    @property
    def energy_j(self) -> float:
        return self.compute_energy_j + self.memory_energy_j + self.static_energy_j


def _us(t: float) -> str:
    return f"{t * 1e6:.2f} us"


def memory_time_s(dram_bytes: float, onchip_bytes: float, bandwidth_bytes_per_s: float,
                  params: FamilyParams) -> float:
    """The memory term of the module docstring: the slower of the DRAM and the on-chip streams,
    the on-chip one × network_memory_factor (a kernel inside a network finds the data the cache
    serves colder than when repeated alone; a DRAM stream is a DRAM stream either way)."""
    return max(dram_bytes / (bandwidth_bytes_per_s * params.bandwidth_efficiency),
               params.network_memory_factor * onchip_bytes / (bandwidth_bytes_per_s * params.onchip_bandwidth_ratio))


def kernel_fixed_costs(chip: Chip, params: FamilyParams, op_class: str, engine_clock_hz: float,
                       cores: int = 2) -> tuple[float, float]:
    """(device, host issue) seconds every kernel of `op_class` pays besides its work (module
    docstring, `overhead`). A GPU's class cost and its in-network extra (switch_overhead_s) are
    the eager host's: the chains that fit the extra on the H100 were host-bound, their kernels
    waiting on the host, so it is charged where they paid it; the device keeps overhead_cycles.
    Elsewhere all of it is the kernel's own time. On a CPU the in-network extra is the thread
    pool's (its threads re-woken, their caches cold): a kernel the mapper keeps on one core
    (`cores` 1: fewer elements than ATen's grain, mapping/cpu.py) runs inline on the calling
    thread and pays none of it (2-vCPU Zen 4 VM, a 4-layer 512-wide Llama's decode at batch 8: its
    99 elementwise kernels of 4,096 elements took ~3 us each inside the step, against a fitted
    extra of 55 us per kernel)."""
    cycles = params.overhead_cycles / engine_clock_hz
    pooled = chip.kind != "cpu" or cores > 1
    fixed = params.overhead_s[op_class] + (params.switch_overhead_s if pooled else 0.0)
    if chip.kind == HOST_ISSUED_CLASS_COSTS:
        return cycles, fixed
    return fixed + cycles, 0.0


@dataclass(frozen=True)
class _KernelTime:
    """One subgraph's time terms (module docstring): what its estimate reports, and the busy time
    its clock and static energy are charged on."""

    launches: bool              # it moves bytes or does arithmetic: a kernel (a view does neither)
    class_efficiency: float     # efficiency[op_class] (× W/(W+h·u) for MAC work)
    throughput_s: float         # FLOP at the engine's efficiency-scaled rate
    compute_s: float            # max(throughput, K loop) + microcode assists
    memory_s: float             # memory_time_s + first_touch_time
    reorder_s: float            # weight_layout_time
    overhead_s: float           # the device's fixed cost of the kernel (kernel_fixed_costs)
    host_issue_s: float         # the eager host's extra cost to issue it (a GPU's)
    work_s: float               # compute and memory (overlapped, or serial streams) + reorder
    latency_s: float            # work + overhead
    bottleneck: str             # compute | memory | overhead | none


def _compute_terms(subgraph, alloc, engine, params: FamilyParams, flop: float) -> tuple[float, float, float]:
    """(class efficiency, throughput time, compute time) of the module docstring's compute_time:
    efficiency[op_class] × the size curve W/(W+h·u), W = FLOP / lane_fill, for MAC work; the
    compute time is the slower of throughput and the K loop's floor (serial_k_bytes ×
    k_loop_cycles_per_byte / clock), plus a CPU core's assists (assist_cycles / clock)."""
    eff = params.class_efficiency(subgraph.op_class, alloc.circuit)
    if is_mac_work(subgraph) and alloc.lane_fill > 0:
        eff *= params.size_factor(flop / alloc.lane_fill / max(alloc.utilization, 1e-12))  # W / u
    available = alloc.available_flop_per_s * eff
    throughput = flop / available if flop > 0 else 0.0
    k_loop = alloc.serial_k_bytes * params.k_loop_cycles_per_byte / engine.clock_hz
    return eff, throughput, max(throughput, k_loop) + alloc.assist_cycles / engine.clock_hz


def _serial_streams_s(subgraph, chip: Chip, alloc, params: FamilyParams, ctx: ChipContext, weights: float,
                      weights_on_chip: bool) -> float | None:
    """stream_time of the module docstring for an op class whose family streams its activations
    apart from the arithmetic (SERIAL_STREAMS): the memory term of its bytes less its weights';
    None for the others, whose streams overlap the arithmetic."""
    if subgraph.op_class not in SERIAL_STREAMS.get(chip.kind, ()):
        return None
    return memory_time_s(alloc.dram_bytes - (0.0 if weights_on_chip else min(weights, alloc.dram_bytes)),
                         max(0.0, alloc.onchip_bytes - weights), ctx.bandwidth_bytes_per_s, params)


def _bound(launches: bool, compute: float, memory: float, reorder: float, overhead: float, work: float) -> str:
    """The bottleneck: none (no kernel); overhead when the fixed cost is at least the work; else
    compute or memory, whichever takes longer (the weight reorder counts as memory)."""
    if not launches:
        return "none"
    if overhead >= work:
        return "overhead"
    return "compute" if compute >= memory + reorder else "memory"


def _kernel_time(subgraph, chip: Chip, alloc, engine, params: FamilyParams, ctx: ChipContext, flop: float,
                 weights: float, s_out: float, weights_on_chip: bool) -> _KernelTime:
    """Every time term of one subgraph (module docstring: latency); a subgraph that launches no
    kernel pays no fixed cost, first touch or weight reorder."""
    eff, throughput, compute = _compute_terms(subgraph, alloc, engine, params, flop)
    packed = packed_weight_s(subgraph, weights, weights_on_chip, params)
    streamed = 0.0 if packed is None else min(weights, alloc.dram_bytes)     # the pack reads those
    memory = memory_time_s(alloc.dram_bytes - streamed, max(0.0, alloc.onchip_bytes - streamed),
                           ctx.bandwidth_bytes_per_s, params)
    kernel = flop > 0 or alloc.onchip_bytes > 0
    overhead, host_issue = (kernel_fixed_costs(chip, params, subgraph.op_class, engine.clock_hz, alloc.units_allocated)
                            if kernel else (0.0, 0.0))
    memory = max(memory, gemv_stream_s(subgraph, weights, weights_on_chip, params))
    memory += first_touch_s(subgraph.output_bytes * s_out, params) if kernel else 0.0
    reorder = (weight_layout_s(subgraph, weights, params) if packed is None else packed) if kernel else 0.0
    streams = _serial_streams_s(subgraph, chip, alloc, params, ctx, weights, weights_on_chip)
    work = (max(compute, memory) if streams is None else max(compute + streams, memory)) + reorder
    return _KernelTime(launches=kernel, class_efficiency=eff, throughput_s=throughput, compute_s=compute,
                       memory_s=memory, reorder_s=reorder, overhead_s=overhead, host_issue_s=host_issue,
                       work_s=work, latency_s=work + overhead,
                       bottleneck=_bound(kernel, compute, memory, reorder, overhead, work))


@dataclass(frozen=True)
class _Energy:
    """One subgraph's energy terms (module docstring: energy), in joules."""

    compute_j: float            # MACs × E_op + other FLOP × E_vector + clock_j
    clock_j: float              # P_clk × utilization × work: busy units' clock/control
    dram_j: float
    onchip_j: float             # on-chip bytes (+ a weight reorder's read and write) × E_onchip
    static_j: float             # P_static × latency
    wasted_j: float             # P_static × (overhead + work × (1 − utilization))


def placed_energy(placed: MappedSubgraph, times: _KernelTime) -> _Energy:
    """The energy of one subgraph (module docstring): dynamic energies at the engine's voltage
    (MappedSubgraph.v2); static power over its latency."""
    subgraph, alloc, ctx = placed.subgraph, placed.alloc, placed.ctx
    macs = float(subgraph.macs)
    mac_j, v2 = placed.mac_j, placed.v2
    other_flop = max(0.0, placed.flop - FLOP_PER_MAC * macs)
    vec_j = ctx.vector_j_per_flop if ctx.vector_j_per_flop is not None else mac_j / FLOP_PER_MAC
    clock_j = placed.clock_w * alloc.utilization * times.work_s if times.launches else 0.0
    reorder_bytes = 2.0 * placed.weights if times.reorder_s else 0.0     # read OIHW, write blocked
    return _Energy(
        compute_j=macs * mac_j + other_flop * vec_j + clock_j,
        clock_j=clock_j,
        dram_j=alloc.dram_bytes * ctx.dram_j_per_byte,
        onchip_j=(alloc.onchip_bytes + reorder_bytes) * ctx.onchip_j_per_byte * v2,
        static_j=ctx.static_w * times.latency_s,
        wasted_j=ctx.static_w * (times.overhead_s + times.work_s * (1.0 - alloc.utilization)),
    )


@dataclass(frozen=True)
class MappedSubgraph:
    """A subgraph placed on `chip` (map_subgraph) with the byte counts its estimate reads: what no
    fitted FamilyParams moves (a fit changes efficiency, fixed costs and the size curve), so a fit
    that predicts the same subgraph thousands of times places it once (placement.placed_workload)."""

    subgraph: object
    alloc: object               # mapping.base.Allocation
    engine: object              # the chip's Engine that runs it
    ctx: ChipContext
    flop: float
    weights: float              # weight bytes at the precision's element size
    s_out: float                # output bytes scale
    weights_on_chip: bool
    v2: float                   # (engine voltage)², which dynamic energies scale with (power.engine_voltage)
    mac_j: float                # energy per MAC at that voltage (power.op_energy_per_mac_j × v2)
    clock_w: float              # busy units' clock/control power (power.clock_power_w)


def place_subgraph(subgraph, chip: Chip, precision: str, trace_bytes_per_element: float = 4.0,
                   weights_on_chip: bool = False, context: ChipContext | None = None,
                   producer_layout_bytes: float = 0.0, scales: tuple[float, float, float] | None = None,
                   layout_passes: float = 0.0) -> MappedSubgraph:
    """`subgraph` mapped on `chip` at `precision` (estimate_subgraph's arguments, the layout
    passes given). Raises mapping.UnsupportedPrecision if no engine of `chip` runs `precision`."""
    ctx = context if context is not None else chip_context(chip, precision)
    scale = BYTES_PER_ELEMENT[precision] / trace_bytes_per_element
    _, s_w, s_out = scales if scales is not None else (scale,) * 3
    alloc = map_subgraph(subgraph, chip, precision, scale, weights_on_chip, layout_passes, producer_layout_bytes,
                         scales)
    engine = next(e for e in chip.engines if e.name == alloc.engine)
    v2 = power.engine_voltage(chip, engine) ** 2      # dynamic energy at the engine's clock
    return MappedSubgraph(subgraph=subgraph, alloc=alloc, engine=engine, ctx=ctx, flop=float(subgraph.flop),
                          weights=subgraph.weight_bytes * s_w, s_out=s_out, weights_on_chip=weights_on_chip, v2=v2,
                          mac_j=power.op_energy_per_mac_j(chip.process_nm, alloc.circuit, alloc.compute_precision,
                                                          engine.mma_shape) * v2,
                          clock_w=power.clock_power_w(chip, engine, alloc.compute_precision))


def estimate_subgraph(subgraph, chip: Chip, precision: str, params: FamilyParams,
                      trace_bytes_per_element: float = 4.0, weights_on_chip: bool = False,
                      context: ChipContext | None = None, producer_layout_bytes: float = 0.0,
                      scales: tuple[float, float, float] | None = None,
                      layout_passes: float | None = None) -> SubgraphEstimate:
    """Roofline estimate of one fused subgraph (module docstring has the formulas).

    `trace_bytes_per_element` is the element size the workload was traced in (fp32: 4); byte
    counts are rescaled by BYTES_PER_ELEMENT[precision] / trace_bytes_per_element, or by `scales`
    (input, weight, output) where they differ (estimate.numerics).
    `weights_on_chip`: the model's weights stay on chip between inferences (no DRAM weight reads).
    `producer_layout_bytes`: mapping.base.traffic (placement.producer_layout_bytes works it out);
    `layout_passes` replaces params.layout_passes for this subgraph (placement.layout_passes).
    Raises mapping.UnsupportedPrecision if no engine of `chip` runs `precision`.
    """
    passes = params.layout_passes if layout_passes is None else layout_passes
    return estimate_placed(place_subgraph(subgraph, chip, precision, trace_bytes_per_element, weights_on_chip,
                                          context, producer_layout_bytes, scales, passes), chip, params)


def placed_kernel_time(placed: MappedSubgraph, chip: Chip, params: FamilyParams) -> _KernelTime:
    """Every time term of a placed subgraph under `params`: estimate_placed's, without its energy
    and its record (prediction.predicted_latency_s needs the times alone)."""
    return _kernel_time(placed.subgraph, chip, placed.alloc, placed.engine, params, placed.ctx, placed.flop,
                        placed.weights, placed.s_out, placed.weights_on_chip)


def estimate_placed(placed: MappedSubgraph, chip: Chip, params: FamilyParams) -> SubgraphEstimate:
    """The roofline estimate of a placed subgraph under `params` (estimate_subgraph)."""
    subgraph, alloc, ctx = placed.subgraph, placed.alloc, placed.ctx
    flop = placed.flop
    times = placed_kernel_time(placed, chip, params)
    energy = placed_energy(placed, times)
    latency = times.latency_s
    attained = flop / latency if latency > 0 else 0.0
    return SubgraphEstimate(
        index=subgraph.index, name=subgraph.name, pattern=subgraph.pattern, op_class=subgraph.op_class,
        stage=subgraph.stage, macs=subgraph.macs, flop=subgraph.flop, engine=alloc.engine,
        compute_precision=alloc.compute_precision, unit_name=alloc.unit_name,
        units_allocated=alloc.units_allocated, units_total=alloc.units_total, waves=alloc.waves,
        utilization=alloc.utilization, lane_fill=alloc.lane_fill, occupancy=alloc.occupancy,
        class_efficiency=times.class_efficiency, compute_time_s=times.compute_s, memory_time_s=times.memory_s,
        overhead_s=times.overhead_s, host_issue_s=times.host_issue_s,
        latency_s=latency, bottleneck=times.bottleneck, dram_bytes=alloc.dram_bytes,
        onchip_bytes=alloc.onchip_bytes, activations_on_chip=alloc.activations_on_chip,
        attained_flop_per_s=attained,
        compute_efficiency=attained / ctx.peak_flop_per_s if ctx.peak_flop_per_s else 0.0,
        bandwidth_utilization=(alloc.dram_bytes / latency / ctx.bandwidth_bytes_per_s) if latency > 0 else 0.0,
        arithmetic_intensity=flop / alloc.dram_bytes if alloc.dram_bytes > 0 else float("inf"),
        compute_energy_j=energy.compute_j, clock_energy_j=energy.clock_j, dram_energy_j=energy.dram_j,
        onchip_energy_j=energy.onchip_j, static_energy_j=energy.static_j, wasted_energy_j=energy.wasted_j,
        mapping=alloc.detail,
        explain_terms=(alloc.serial_k_bytes, times.throughput_s, params.k_loop_cycles_per_byte, times.reorder_s),
    )
