"""Per-family parameters the geometry cannot supply, with documented defaults; calibration input.

The mappers derive *utilization* (which units have work) and *lane fill* (how much of a busy
unit's datapath holds real data) from the chip's geometry. What geometry cannot say lives here,
one named set per architecture family, so that `chipcal calibrate` can replace it:

    efficiency[op_class]   achievable fraction of the engine peak on busy, filled units at large size
    tensor_efficiency[op_class]  the same for work on a GPU's tensor cores where it differs from the
                           CUDA cores' (PyTorch's kernels on Hopper); None: `efficiency` for both
    overhead_s[op_class]   fixed per-kernel cost (launch / dispatch / framework), added to the roofline
    overhead_cycles        fixed per-kernel cost in clock cycles of the engine the kernel runs on, added
                           to overhead_s: the device-side part of a kernel (CTA launch, prologue,
                           pipeline fill and drain) runs at the chip's clock; 0 where not used
    k_loop_cycles_per_byte latency of a GEMM kernel's reduction loop: a CTA streams its K operand
                           bytes one K tile after another, and when few CTAs share an SM (small batch)
                           each tile waits for its load, so a tiled GEMM takes at least
                           one CTA's K bytes x this / clock (roofline.py); 0: not charged (GPU: held
                           near its published-latency prior by the validation fit, docs/validation.md)
    half_efficiency_flop   size curve for MAC work: eff(W) = efficiency[op_class] × W / (W + h),
                           W = the subgraph's FLOP ÷ lane fill (work executed, padding included)
    bandwidth_efficiency   achievable fraction of the spec DRAM bandwidth
    switch_overhead_s      extra cost of every kernel inside a network over the same kernel timed alone
                           (cold instruction caches and dispatch paths, threads re-waking); 0 by
                           default, calibrated from timed chains of different layers
    network_memory_factor  on-chip memory time of a kernel inside a network ÷ the same kernel's
                           timed alone: repeated alone, a kernel finds its input, weights and
                           recycled output buffer hot in the cache; in a network the other kernels
                           have moved them out. DRAM streams are not scaled. 1 by default;
                           calibrated with switch_overhead_s from the chains
    host_overhead_s        per-op host issue cost under an eager runtime (estimate/host.py); None:
                           the host-class default; a calibration sets it from the dispatch probe
    host_call_s            host time per call of the whole network under an eager runtime (Python
                           entry, the top-level module's __call__, a timer's events), before its first
                           op; 0 by default; a GPU calibration fits it beside the class costs (a
                           micro-layer alone pays it once per op or two, a network once per ~200 ops)
    onchip_bandwidth_ratio bandwidth of the last on-chip level (CPU L3, GPU L2, TPU/KPU SRAM) as a
                           multiple of the spec DRAM bandwidth: cache-resident traffic is not free
    first_touch_bytes_per_s  rate of the first write into a freshly mapped buffer (page faults) for
                           outputs of at least fresh_allocation_bytes (CPU eager, glibc: 32 MiB, or the
                           threshold a calibration pinned, measure.allocator); None: not
                           charged; a CPU calibration measures it (measure.bandwidth.measure_first_touch)
    layout_passes          passes over a convolution's input and output that the runtime adds to change
                           their layout, each reading and writing the tensor: PyTorch eager on a CPU
                           keeps NCHW and oneDNN reorders a conv's input to a channel-blocked layout
                           and its output back (1 pass each: layout_passes 1); 0: not charged; a CPU
                           calibration counts them in oneDNN's trace (measure.layout)
    gemv_bytes_per_s       rate (weight bytes per second) at which a matrix-vector product (a GEMM with
                           one row: an LLM's decode at batch 1) streams weights that are not on chip;
                           None: the DRAM rate (bandwidth × bandwidth_efficiency). On a CPU a BLAS
                           GEMV reads far below a streaming kernel's rate (here ~19 against 48 GB/s);
                           a CPU calibration measures it (measure.gemv.measure_gemv)
    gemv_row_s             fixed time per output element of such a product (seconds; None: none), beside
                           the stream: a BLAS GEMV finishes each output with a reduction across its
                           vector lanes and a store, so short rows stream slower (2-vCPU Zen 5 VM, F.linear
                           by 128 MiB fp32 matrices: 17 GB/s at 768-long rows, 31 GB/s at 16,384); the
                           calibration splits its two GEMV shapes into this and the stream rate
    gemv_k_major_bytes_per_s
                           rate at which a one-row product by a k-major weight (W[k, n], GPT-2's Conv1D)
                           streams it: scaled rows of W added into the output, no reduction per
                           output, so no row cost (Zen 5 VM: 21-25 GB/s at 768- to 16,384-long rows);
                           None: priced as the n-major product is
    packed_weight_bytes_per_s
                           rate (weight bytes per second) at which a GEMM with a few rows (2 or more:
                           an LLM's decode at batch > 1) reads and packs weights that are not on chip,
                           the DRAM read and the BLAS's panel packing together, serial with its
                           arithmetic; None: the DRAM stream and the pointwise pack rate price them.
                           A CPU BLAS packs straight from DRAM far below either (2-vCPU Zen 4 VM:
                           8-11 GB/s at 2 to 16 rows against a GEMV's 19 and a triad's 48); a CPU
                           calibration measures it (measure.gemv.measure_packed_gemm)
    weight_layout_bytes_per_s, pointwise_weight_layout_bytes_per_s
                           rate (weight bytes per second) at which the runtime reorders a k x k (k > 1)
                           or a 1x1 convolution's weights into the kernel's layout before every call,
                           a serial pass of its own (PyTorch eager keeps OIHW weights and oneDNN
                           reorders them per call); None: not charged; a CPU calibration times the
                           reorders in oneDNN's trace (measure.layout)

A calibration (`CalibrationParams`, read from a calibration directory by calibrate.store) is
applied to the chip it was fitted on only (every other chip keeps its family defaults). A
calibration of the local CPU also carries the DRAM bandwidth it was fitted against: its
bandwidth_efficiency means nothing without it.
Why each default has its value: docs/prediction-parameters.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType

from chipcal.model.chip import KINDS
from chipcal.model.errors import ChipcalError
from chipcal.model.workload.types import OP_CLASSES

FAMILIES = KINDS
# How a runtime launches a workload: "fused" = one kernel per fused subgraph from a vendor compiler
# (TensorRT, XLA, dataflow compilers); "compiled" = torch.compile with CUDA graphs (fused kernels,
# the graph replayed without per-op host work); "eager" = one kernel per op, each issued by the
# host (PyTorch eager mode; estimate/host.py).
RUNTIMES = ("fused", "compiled", "eager")
HOST_RUNTIMES = ("eager",)     # runtimes that pay a per-op host issue cost
PYTORCH_RUNTIMES = ("eager", "compiled")     # PyTorch's own kernels (cuDNN, cuBLAS, Inductor)
# runtimes that may run independent subgraphs at once (estimate/schedule.py: a vendor runtime's
# streams, a dataflow chip). PyTorch's run one kernel at a time: eager in program order, compiled
# as Inductor's generated wrapper calls its kernels, in sequence on one stream (a CUDA graph
# captures that order; on a CPU each kernel is one OpenMP region over every thread)
CONCURRENT_RUNTIMES = ("fused",)
# framework generation of a PyTorch runtime: today's (the default) or the validation corpus's
# PyTorch 1.x hosts of 2020-21 (their host cost, estimate/host.py)
FRAMEWORKS = ("pytorch2", "pytorch1")
DEFAULT_FRAMEWORK = "pytorch2"


def runtime_partition(runtime: str) -> str:
    """The partition (workload.fusion.PARTITIONS) of the kernels `runtime` launches: eager one per
    op, fused a vendor compiler's fused subgraphs, compiled TorchInductor's (library GEMMs,
    convolutions and attention with nothing fused into them, the other ops generated and fused:
    torch/_inductor/kernel/conv.py lowers a convolution to the extern aten.convolution unless
    max-autotune is on; eval batch norm decomposes to pointwise ops, torch/_decomp)."""
    return {"eager": "eager", "fused": "fused", "compiled": "codegen"}[runtime]
class CalibrationError(ChipcalError, ValueError):
    """A calibration directory or its parameters are unusable; the message says which and why."""


def _number(name: str, value: object, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not allow_zero):
        need = ">= 0" if allow_zero else "> 0"
        raise CalibrationError(f"{name} must be a finite number {need}, got {value!r}")
    return float(value)


def _class_table(name: str, table: Mapping[str, float], allow_zero: bool) -> Mapping[str, float]:
    if not isinstance(table, Mapping):
        raise CalibrationError(f"{name} must be a table of op class -> number")
    missing = [c for c in OP_CLASSES if c not in table]
    extra = [c for c in table if c not in OP_CLASSES]
    if missing or extra:
        raise CalibrationError(f"{name} must have exactly the op classes {', '.join(OP_CLASSES)}"
                               + (f"; missing {', '.join(missing)}" if missing else "")
                               + (f"; unknown {', '.join(map(str, extra))}" if extra else ""))
    return MappingProxyType({c: _number(f"{name}.{c}", table[c], allow_zero) for c in OP_CLASSES})


def _family_params(values: dict) -> FamilyParams:
    """FamilyParams rebuilt from its pickled fields (FamilyParams.__reduce__)."""
    return FamilyParams(**values)


# glibc malloc serves a request above its mmap threshold with a fresh mapping and unmaps it on
# free; the dynamic threshold rises with freed chunks up to DEFAULT_MMAP_THRESHOLD_MAX =
# 4 MiB x sizeof(long) = 32 MiB on 64-bit (mallopt(3), M_MMAP_THRESHOLD)
FRESH_ALLOCATION_BYTES = 32 * 2**20


@dataclass(frozen=True)
class FamilyParams:
    """The non-geometric parameters of one architecture family (see module docstring)."""

    family: str
    efficiency: Mapping[str, float]
    overhead_s: Mapping[str, float]
    half_efficiency_flop: float
    bandwidth_efficiency: float
    onchip_bandwidth_ratio: float
    source: str
    switch_overhead_s: float = 0.0
    host_overhead_s: float | None = None
    overhead_cycles: float = 0.0
    # first write into a freshly mapped buffer (page faults), bytes/s; None: not charged
    first_touch_bytes_per_s: float | None = None
    gemv_bytes_per_s: float | None = None
    gemv_row_s: float | None = None
    gemv_k_major_bytes_per_s: float | None = None
    packed_weight_bytes_per_s: float | None = None
    fresh_allocation_bytes: float = FRESH_ALLOCATION_BYTES
    layout_passes: float = 0.0
    network_memory_factor: float = 1.0
    k_loop_cycles_per_byte: float = 0.0
    weight_layout_bytes_per_s: float | None = None
    pointwise_weight_layout_bytes_per_s: float | None = None
    tensor_efficiency: Mapping[str, float] | None = None
    host_call_s: float = 0.0

    def __post_init__(self) -> None:
        # Fractions may exceed 1 after calibration: a locally built chip's peak and bandwidth are
        # assumptions that a measurement can beat (docs/calibration-fits.md).
        if self.family not in FAMILIES:
            raise CalibrationError(f"family {self.family!r} is not one of {', '.join(FAMILIES)}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise CalibrationError("source must say where the parameters come from")
        object.__setattr__(self, "efficiency", _class_table("efficiency", self.efficiency, allow_zero=False))
        if self.tensor_efficiency is not None:
            object.__setattr__(self, "tensor_efficiency",
                               _class_table("tensor_efficiency", self.tensor_efficiency, allow_zero=False))
        object.__setattr__(self, "overhead_s", _class_table("overhead_s", self.overhead_s, allow_zero=True))
        object.__setattr__(self, "half_efficiency_flop",
                           _number("half_efficiency_flop", self.half_efficiency_flop, allow_zero=True))
        object.__setattr__(self, "bandwidth_efficiency",
                           _number("bandwidth_efficiency", self.bandwidth_efficiency, allow_zero=False))
        object.__setattr__(self, "onchip_bandwidth_ratio",
                           _number("onchip_bandwidth_ratio", self.onchip_bandwidth_ratio, allow_zero=False))
        object.__setattr__(self, "switch_overhead_s",
                           _number("switch_overhead_s", self.switch_overhead_s, allow_zero=True))
        object.__setattr__(self, "overhead_cycles", _number("overhead_cycles", self.overhead_cycles, allow_zero=True))
        object.__setattr__(self, "host_call_s", _number("host_call_s", self.host_call_s, allow_zero=True))
        if self.host_overhead_s is not None:
            object.__setattr__(self, "host_overhead_s",
                               _number("host_overhead_s", self.host_overhead_s, allow_zero=True))
        if self.first_touch_bytes_per_s is not None:
            object.__setattr__(self, "first_touch_bytes_per_s",
                               _number("first_touch_bytes_per_s", self.first_touch_bytes_per_s, allow_zero=False))
        object.__setattr__(self, "fresh_allocation_bytes",
                           _number("fresh_allocation_bytes", self.fresh_allocation_bytes, allow_zero=False))
        object.__setattr__(self, "layout_passes", _number("layout_passes", self.layout_passes, allow_zero=True))
        object.__setattr__(self, "network_memory_factor",
                           _number("network_memory_factor", self.network_memory_factor, allow_zero=False))
        object.__setattr__(self, "k_loop_cycles_per_byte",
                           _number("k_loop_cycles_per_byte", self.k_loop_cycles_per_byte, allow_zero=True))
        for name in ("weight_layout_bytes_per_s", "pointwise_weight_layout_bytes_per_s", "gemv_bytes_per_s",
                     "gemv_k_major_bytes_per_s", "packed_weight_bytes_per_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _number(name, getattr(self, name), allow_zero=False))
        if self.gemv_row_s is not None:
            object.__setattr__(self, "gemv_row_s", _number("gemv_row_s", self.gemv_row_s, allow_zero=True))

    def __reduce__(self):
        """Pickled as its fields with the class tables as plain dicts (a mappingproxy does not
        pickle); __post_init__ makes them read-only again. A refit shared between processes
        (the test suite's workers) carries its parameters this way."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return _family_params, ({k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in values.items()},)

    def class_efficiency(self, op_class: str, circuit: str) -> float:
        """efficiency[op_class], or tensor_efficiency[op_class] for work on tensor cores where set."""
        if circuit == "tensor_core" and self.tensor_efficiency is not None:
            return self.tensor_efficiency[op_class]
        return self.efficiency[op_class]

    def alone(self) -> FamilyParams:
        """These parameters for a kernel timed alone, call after call (a micro-layer): no switch
        cost and memory factor 1, the in-network terms that the chains calibrate."""
        return replace(self, switch_overhead_s=0.0, network_memory_factor=1.0)

    def size_factor(self, flop: float) -> float:
        """W / (W + half_efficiency_flop): 1 for large kernels, 1/2 at W = half_efficiency_flop."""
        if self.half_efficiency_flop == 0:
            return 1.0
        return flop / (flop + self.half_efficiency_flop)

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "efficiency": dict(self.efficiency),
            "overhead_s": dict(self.overhead_s),
            "half_efficiency_flop": self.half_efficiency_flop,
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "onchip_bandwidth_ratio": self.onchip_bandwidth_ratio,
            "switch_overhead_s": self.switch_overhead_s,
            "host_overhead_s": self.host_overhead_s,
            "overhead_cycles": self.overhead_cycles,
            "first_touch_bytes_per_s": self.first_touch_bytes_per_s,
            "fresh_allocation_bytes": self.fresh_allocation_bytes,
            "source": self.source,
            **({"layout_passes": self.layout_passes} if self.layout_passes else {}),   # absent: 0
            **({"network_memory_factor": self.network_memory_factor}                   # absent: 1
               if self.network_memory_factor != 1.0 else {}),
            **({"k_loop_cycles_per_byte": self.k_loop_cycles_per_byte}                 # absent: 0
               if self.k_loop_cycles_per_byte else {}),
            **{name: getattr(self, name) for name in ("weight_layout_bytes_per_s",      # absent: None
                                                      "pointwise_weight_layout_bytes_per_s", "gemv_bytes_per_s",
                                                      "gemv_row_s", "gemv_k_major_bytes_per_s",
                                                      "packed_weight_bytes_per_s")
               if getattr(self, name) is not None},
            **({"tensor_efficiency": dict(self.tensor_efficiency)}                     # absent: None
               if self.tensor_efficiency is not None else {}),
            **({"host_call_s": self.host_call_s} if self.host_call_s else {}),           # absent: 0
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> FamilyParams:
        if not isinstance(d, Mapping):
            raise CalibrationError("family_params must be a table")
        keys = ("family", "efficiency", "overhead_s", "half_efficiency_flop", "bandwidth_efficiency",
                "onchip_bandwidth_ratio", "source")
        missing = [k for k in keys if k not in d]
        if missing:
            raise CalibrationError(f"family_params is missing {', '.join(missing)}")
        optional = {k: d[k] for k in ("switch_overhead_s", "host_overhead_s", "overhead_cycles",
                                      "first_touch_bytes_per_s", "fresh_allocation_bytes", "layout_passes",
                                      "network_memory_factor", "k_loop_cycles_per_byte",
                                      "weight_layout_bytes_per_s", "pointwise_weight_layout_bytes_per_s",
                                      "gemv_bytes_per_s", "gemv_row_s", "gemv_k_major_bytes_per_s",
                                      "packed_weight_bytes_per_s",
                                      "tensor_efficiency",
                                      "host_call_s")
                    if k in d}
        return cls(**{k: d[k] for k in keys}, **optional)


def _per_class(mac: dict[str, float], other: dict[str, float]) -> dict[str, float]:
    table = {**mac, **other}
    return {c: table[c] for c in OP_CLASSES}


# Defaults: one named set per family. Justifications (with sources) in docs/prediction-parameters.md.
_DEFAULTS: dict[str, FamilyParams] = {
    "gpu": FamilyParams(
        family="gpu",
        efficiency=_per_class(
            {"conv": 0.70, "conv1x1": 0.75, "depthwise": 0.40, "matmul": 0.80, "attention": 0.60},
            {"norm": 0.40, "elementwise": 0.50, "pool": 0.40, "reduce": 0.40, "data": 1.0}),
        overhead_s=_per_class(
            {"conv": 0.0, "conv1x1": 0.0, "depthwise": 0.0, "matmul": 0.0, "attention": 0.0},
            {"norm": 0.0, "elementwise": 0.0, "pool": 0.0, "reduce": 0.0, "data": 0.0}),
        half_efficiency_flop=1e7,
        bandwidth_efficiency=0.85,
        onchip_bandwidth_ratio=3.0,
        overhead_cycles=10.5e3,
        k_loop_cycles_per_byte=3.1,
        source=("default: L2 at ~3x HBM bandwidth (order of published GPU microbenchmarks, assumed); "
                "cuBLAS/cuDNN large-GEMM and conv fractions of dense peak, FlashAttention-2 "
                "fraction, 10.5k +- 1.7k GPU clock cycles per kernel and a GEMM K loop of 3.1 +- 0.5 "
                "cycles per byte (one ~200-cycle L2 round trip per 64-byte K tile, held near that "
                "prior) fitted on the validation corpus's fit split (docs/validation.md), HBM/GDDR "
                "copy kernels at ~85% of spec (docs/prediction-parameters.md)"),
    ),
    "cpu": FamilyParams(
        family="cpu",
        efficiency=_per_class(
            {"conv": 0.65, "conv1x1": 0.70, "depthwise": 0.25, "matmul": 0.80, "attention": 0.50},
            {"norm": 0.30, "elementwise": 0.50, "pool": 0.30, "reduce": 0.30, "data": 1.0}),
        overhead_s=_per_class(
            {"conv": 1e-5, "conv1x1": 1e-5, "depthwise": 1e-5, "matmul": 5e-6, "attention": 1e-5},
            {"norm": 3e-6, "elementwise": 3e-6, "pool": 3e-6, "reduce": 3e-6, "data": 2e-6}),
        half_efficiency_flop=4e6,
        bandwidth_efficiency=0.70,
        onchip_bandwidth_ratio=2.0,
        source=("default: L3 at ~2x a core's DRAM bandwidth (this project's probe on a 2-core Xeon VM: "
                "~50 vs ~27 GB/s); MKL/oneDNN GEMM and direct-conv fractions of SIMD peak, OpenMP fork/join + "
                "primitive dispatch per op, STREAM triad at ~70% of theoretical DRAM bandwidth "
                "(docs/prediction-parameters.md)"),
    ),
    "tpu": FamilyParams(
        family="tpu",
        efficiency=_per_class(
            {"conv": 0.75, "conv1x1": 0.80, "depthwise": 0.50, "matmul": 0.85, "attention": 0.60},
            {"norm": 0.50, "elementwise": 0.60, "pool": 0.50, "reduce": 0.50, "data": 1.0}),
        overhead_s=_per_class(
            {"conv": 1e-6, "conv1x1": 1e-6, "depthwise": 1e-6, "matmul": 1e-6, "attention": 1e-6},
            {"norm": 1e-6, "elementwise": 1e-6, "pool": 1e-6, "reduce": 1e-6, "data": 1e-6}),
        half_efficiency_flop=1e6,
        bandwidth_efficiency=0.85,
        onchip_bandwidth_ratio=10.0,
        source=("default: MB-class SRAM next to the arrays at ~10x HBM bandwidth (assumed); "
                "XLA-compiled programs (one launch per graph, ~1 us sequencing per op), "
                "MXU fractions of peak beyond the array fill the mapper already charges "
                "(docs/prediction-parameters.md)"),
    ),
    "kpu": FamilyParams(
        family="kpu",
        efficiency=_per_class(
            {"conv": 0.80, "conv1x1": 0.80, "depthwise": 0.60, "matmul": 0.80, "attention": 0.70},
            {"norm": 0.60, "elementwise": 0.60, "pool": 0.60, "reduce": 0.60, "data": 1.0}),
        overhead_s=_per_class(
            {"conv": 1e-6, "conv1x1": 1e-6, "depthwise": 1e-6, "matmul": 1e-6, "attention": 1e-6},
            {"norm": 1e-6, "elementwise": 1e-6, "pool": 1e-6, "reduce": 1e-6, "data": 1e-6}),
        half_efficiency_flop=1e6,
        bandwidth_efficiency=0.85,
        onchip_bandwidth_ratio=10.0,
        source=("default: tile scratchpads at ~10x DRAM bandwidth (assumed); "
                "hypothetical tile/dataflow design study; same order as a compiled systolic "
                "design, ~1 us tile reconfiguration per operator (docs/prediction-parameters.md)"),
    ),
}


# Today's PyTorch on a GPU (eager, torch.compile): its kernels reach a smaller fraction of tensor-core
# peak than the TensorRT-class kernels the GPU defaults were fitted on. Derived from device-bound
# timings recorded with torch 2.11 (docs/prediction-parameters.md): cuBLAS/SDPA matmul and
# attention at 0.65x the default (an H100 SXM5's ViT-B/16 bf16 at batch 64); where eager PyTorch
# hands cuDNN NCHW activations, convolutions at 0.2x (the H100 calibrations' TF32 convolutions at
# batch 32, ResNet-50 bf16 at batch 64); channels-last ones, as Inductor lays a convolution network
# out, at 0.3x (an H200's torch.compile ResNet-50 bf16 at batch 64, 3.49 ms). CUDA cores keep theirs.
PYTORCH_TENSOR_SCALE = {"matmul": 0.65, "attention": 0.65}
NCHW_CONV_TENSOR_SCALE = 0.2
CHANNELS_LAST_CONV_TENSOR_SCALE = 0.3
# The device's fixed cost of one of PyTorch's kernels (cuDNN, cuBLAS, ATen, Inductor's), in cycles: fitted
# on 14 device-bound timings of Hopper GPUs without a host in the way (an H100's eager channels-last
# CUDA-graph replays of ResNet-50, MobileNetV2 and EfficientNet-B0 at batch 1 and 8; an H200's
# torch.compile of ResNet-50, ViT-B/16 and MobileNetV2 at batch 1, 8 and 64, with Inductor's weight
# and q/k/v copies, workload/inductor_layout.py and attention.py) by the median |error| on a grid of
# 100 cycles: flat from 8.2k (7.1 %) to 8.8k (8.1 %, max 29.4 %); 8.8k, the highest in that range,
# keeps the eager replays at batch 8 within 20 %. Left out one at a time: 9.9 % (max 29.4 %).
# TensorRT's kernels keep the corpus's 10.5k.
PYTORCH_OVERHEAD_CYCLES = 8.8e3
_PT_SOURCE = ("default for today's PyTorch on a GPU ({runtime}): the GPU defaults with tensor-core efficiency "
              "x {matmul:g} for matmul and attention, x {conv:g} for {layout} convolutions, {kcycles:g}k cycles per "
              "kernel (docs/prediction-parameters.md), from recorded H100 SXM5 and H200 device-bound timings, torch 2.11")


def _pytorch_gpu(nchw: bool) -> FamilyParams:
    base = _DEFAULTS["gpu"]
    conv = NCHW_CONV_TENSOR_SCALE if nchw else CHANNELS_LAST_CONV_TENSOR_SCALE
    scale = dict(PYTORCH_TENSOR_SCALE, **dict.fromkeys(("conv", "conv1x1"), conv))
    return replace(base, tensor_efficiency={c: v * scale.get(c, 1.0) for c, v in base.efficiency.items()},
                   overhead_cycles=PYTORCH_OVERHEAD_CYCLES,
                   source=_PT_SOURCE.format(runtime="eager, NCHW" if nchw else "channels-last or compiled",
                                            matmul=PYTORCH_TENSOR_SCALE["matmul"], conv=conv,
                                            layout="NCHW" if nchw else "channels-last", kcycles=PYTORCH_OVERHEAD_CYCLES / 1e3))


PYTORCH_GPU = _pytorch_gpu(nchw=False)
PYTORCH_GPU_NCHW = _pytorch_gpu(nchw=True)


def default_params(family: str) -> FamilyParams:
    """The documented default parameter set of `family` (cpu, gpu, tpu, kpu)."""
    if family not in _DEFAULTS:
        raise CalibrationError(f"no parameters for family {family!r}; valid: {', '.join(FAMILIES)}")
    return _DEFAULTS[family]


@dataclass(frozen=True)
class CalibrationParams:
    """Fitted parameters for one chip, read from a calibration directory."""

    chip: str
    params: FamilyParams
    path: Path
    runtime: str = "fused"     # the runtime the parameters were fitted under (RUNTIMES)
    memory_bandwidth_bytes_per_s: float | None = None   # the chip model's DRAM bandwidth in the fit
    l3_bytes: int | None = None                          # its last-level cache, where recorded
    # CPU identity of the machine a local-cpu calibration was measured on (measure.system.host_identity:
    # model name, cores, threads, memory, ISA features), compared as a whole; None: not recorded
    host: Mapping[str, object] | None = None

    def applies_to(self, chip_name: str, mode: str | None = None) -> bool:
        """True for the chip the calibration was fitted on (also as NAME@MODE for its power mode)."""
        names = {chip_name.lower()}
        if mode:
            names.add(f"{chip_name}@{mode}".lower())
        return self.chip.lower() in names


def params_for(chip_name: str, family: str, calibration: CalibrationParams | None = None,
               mode: str | None = None, runtime: str | None = None, framework: str | None = None,
               memory_format: str = "nchw") -> FamilyParams:
    """The calibrated parameters if `calibration` was fitted on this chip, else the family defaults
    (a GPU under today's PyTorch, eager or compiled: PYTORCH_GPU, PYTORCH_GPU_NCHW for eager NCHW)."""
    if calibration is not None and calibration.applies_to(chip_name, mode):
        if calibration.params.family != family:
            raise CalibrationError(f"{calibration.path}: fitted for family {calibration.params.family!r} "
                                   f"but {chip_name} is a {family}")
        return calibration.params
    if family == "gpu" and runtime in PYTORCH_RUNTIMES and framework == DEFAULT_FRAMEWORK:
        return PYTORCH_GPU_NCHW if runtime in HOST_RUNTIMES and memory_format == "nchw" else PYTORCH_GPU
    return default_params(family)
