"""What a prediction works out before it reads a fitted FamilyParams: the element size the
workload was traced in, the numerics plan, whether the weights stay on chip, each subgraph's
layout passes and its placement on an engine (roofline.place_subgraph), and which per-class
parameters the prediction will read. None of it moves while a calibration fit changes
efficiencies, fixed costs or the size curve, so a workload is placed once (`placed_workload`,
model.memo) and predicted thousands of times (prediction.predicted_latency_s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.estimate.host import DEFAULT_FRAMEWORK
from chipcal.model.estimate.memory import MemoryProfile, memory_profile
from chipcal.model.estimate.numerics import TF32_CONV_CLASSES, Cast, OpNumerics, plan
from chipcal.model.estimate.roofline import (
    ChipContext,
    MappedSubgraph,
    chip_context,
    place_subgraph,
)
from chipcal.model.mapping import onchip_capacity
from chipcal.model.mapping.base import CONV_CLASSES, is_mac_work
from chipcal.model.mapping.params import HOST_RUNTIMES
from chipcal.model.memo import moved, recent
from chipcal.model.precision import BYTES_PER_ELEMENT
from chipcal.model.workload.types import content_key

# torch dtype names (as the workload records them) -> bytes per element
TRACE_DTYPE_BYTES = {"float64": 8.0, "float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "int8": 1.0, "uint8": 1.0}


def trace_bytes_per_element(workload) -> float:
    try:
        return TRACE_DTYPE_BYTES[workload.dtype]
    except KeyError:
        raise ValueError(f"workload traced in {workload.dtype!r}; known: {', '.join(TRACE_DTYPE_BYTES)}") from None


def weights_stay_on_chip(workload, chip: Chip, bytes_scale: float) -> bool:
    """Steady-state inference: the weights stay in on-chip memory between runs when all of them
    plus the largest subgraph's activations (input + output) fit in it."""
    weights = sum(s.weight_bytes for s in workload.subgraphs) * bytes_scale
    working = max((s.input_bytes + s.output_bytes for s in workload.subgraphs), default=0) * bytes_scale
    return weights + working <= onchip_capacity(chip)


def weight_cast(subgraph, numerics: OpNumerics, trace_bpe: float) -> Cast | None:
    """The fp32 -> low-precision weight cast autocast runs before a MAC subgraph at every call
    (PyTorch autocast docs: the weight-cast cache lives only inside one autocast region); None
    for a subgraph without weights or MAC work, or that computes at fp32 or wider."""
    if subgraph.weight_bytes <= 0 or not is_mac_work(subgraph) \
            or BYTES_PER_ELEMENT[numerics.precision] >= BYTES_PER_ELEMENT["fp32"]:
        return None
    return Cast(subgraph.weight_bytes / trace_bpe, BYTES_PER_ELEMENT["fp32"], BYTES_PER_ELEMENT[numerics.precision])


def layout_passes(subgraph, chip: Chip, numerics: OpNumerics, family_passes: float, runtime: str,
                  memory_format: str, framework: str) -> float:
    """Layout passes around `subgraph` (prediction's module docstring, Layout): a GPU's NCHW tensor-core
    convolution under an eager framework of the corpus's generation transposes its input and
    output (1); today's PyTorch none (its efficiency carries NCHW); a CPU's under an eager
    runtime are its FamilyParams' (`family_passes`: oneDNN's reorders of NCHW tensors); a CPU's
    under a graph runtime none (TorchInductor keeps a convolution network channels-last on a CPU
    with oneDNN, torch/_inductor/graph.py `decide_layout_opt`, which oneDNN convolves in place;
    a vendor compiler picks its own layout); else 0."""
    if chip.kind != "gpu":
        return family_passes if runtime in HOST_RUNTIMES else 0.0
    if (runtime not in HOST_RUNTIMES or memory_format != "nchw" or framework == DEFAULT_FRAMEWORK
            or subgraph.op_class not in TF32_CONV_CLASSES):
        return 0.0
    engine = chip.engine_for(numerics.precision)
    return 1.0 if engine is not None and engine.circuit == "tensor_core" else 0.0


def producer_layout_bytes(workload, subgraph, passes: Sequence[float]) -> float:
    """Traced bytes the layout passes of `subgraph`'s convolution producers read last: each
    reorders its channel-blocked output into the tensor `subgraph` reads (mapping.base.traffic).
    `passes`: each subgraph's layout passes, by index."""
    return sum(passes[p] * workload.subgraphs[p].output_bytes for p in subgraph.depends_on
               if workload.subgraphs[p].op_class in CONV_CLASSES and passes[p])


def class_parameters_read(workload, chip: Chip, precision: str, fp32_mode: str = "pytorch",
                          autocast: bool = False) -> frozenset[str]:
    """The per-class FamilyParams a prediction of `workload` reads, as a fit names them
    ("efficiency.<class>", "overhead_s.<class>", "half_efficiency_flop"): a subgraph with
    arithmetic reads its class's efficiency (roofline._compute_terms) and, when it is MAC work,
    the size curve; every subgraph its class's fixed cost (roofline.kernel_fixed_costs); a cast
    kernel the elementwise class's fixed cost (prediction.cast_kernel_s). A fit reuses a layer's prediction
    while none of these moves (calibrate.layer_fits), so this follows prediction._predict_at_clock's reads;
    the parameters every prediction reads (bandwidth, host costs) are not per class."""
    trace_bpe = trace_bytes_per_element(workload)
    read: set[str] = set()
    for sg, n in zip(workload.subgraphs, plan(workload, chip, precision, trace_bpe, fp32_mode, autocast),
                     strict=True):
        read.add(f"overhead_s.{sg.op_class}")
        if sg.flop > 0:
            read.add(f"efficiency.{sg.op_class}")
        if sg.flop > 0 and is_mac_work(sg):
            read.add("half_efficiency_flop")
        if n.casts or (autocast and weight_cast(sg, n, trace_bpe)):
            read.add("overhead_s.elementwise")
    return frozenset(read)


@recent(maxsize=256)
def kinds(workload) -> tuple[int, ...]:
    """Each subgraph's kind: the position of the first subgraph with its content_key."""
    first: dict[tuple, int] = {}
    return tuple(first.setdefault(content_key(sg), i) for i, sg in enumerate(workload.subgraphs))


@dataclass(frozen=True)
class Placed:
    """What a prediction works out before it reads a fitted FamilyParams (roofline.MappedSubgraph):
    the numerics plan, the chip context, whether the weights stay on chip, each subgraph placed on
    its engine, the memory profile. `same_as[i]`: the position of the first subgraph placed exactly
    as subgraph i (i itself for the first of its kind); a decoder's layers repeat, and a 70B
    model's 80 layers are estimated once per clock, not 80 times."""

    numerics: tuple[OpNumerics, ...]
    trace_bpe: float
    ctx: ChipContext
    resident: bool
    subgraphs: tuple[MappedSubgraph, ...]
    memory: MemoryProfile
    same_as: tuple[int, ...]

    def each(self, first: Callable[[MappedSubgraph], object], copy: Callable[[object, MappedSubgraph], object]) -> list:
        """`first(m)` for the first subgraph of each kind, `copy(result of its first, m)` for the rest."""
        out: list = []
        for i, (m, rep) in enumerate(zip(self.subgraphs, self.same_as, strict=True)):
            out.append(first(m) if rep == i else copy(out[rep], m))
        return out


@recent(maxsize=256)        # each entry holds its workload and its placed subgraphs (model.memo): as few as memory_profile
def placed_workload(workload, chip: Chip, precision: str, fp32_mode: str, autocast: bool, family_passes: float,
            runtime: str, memory_format: str, framework: str) -> Placed:
    """The subgraphs of `workload` placed at the precision the numerics plan gives each, with
    their own layout passes and their convolution producers' bytes (prediction's module docstring, Layout).
    Raises UnsupportedPrecision when no engine runs a subgraph's precision. A calibration fit
    predicts the same workload thousands of times with only the fitted parameters changing: it
    is placed once (model.memo). A subgraph equal to an earlier one but for its position
    (content_key), with the same numerics, passes and producer bytes, takes its placement."""
    trace_bpe = trace_bytes_per_element(workload)
    scale = BYTES_PER_ELEMENT[precision] / trace_bpe
    numerics = plan(workload, chip, precision, trace_bpe, fp32_mode, autocast)
    resident = weights_stay_on_chip(workload, chip, scale)
    passes = [0.0] * len(workload.subgraphs)
    for sg, n in zip(workload.subgraphs, numerics, strict=True):
        passes[sg.index] = layout_passes(sg, chip, n, family_passes, runtime, memory_format, framework)
    contexts = {p: chip_context(chip, p) for p in {n.precision for n in numerics}}
    placed: list[MappedSubgraph] = []
    same_as: list[int] = []
    first: dict[tuple, int] = {}
    for sg, n, kind in zip(workload.subgraphs, numerics, kinds(workload), strict=True):
        producer = producer_layout_bytes(workload, sg, passes)
        rep = first.setdefault((kind, n, producer, passes[sg.index]), len(placed))
        placed.append(moved(placed[rep], subgraph=sg) if rep < len(placed) else
                      place_subgraph(sg, chip, n.precision, trace_bpe, resident, contexts[n.precision], producer,
                                     n.scales, passes[sg.index]))
        same_as.append(rep)
    return Placed(numerics, trace_bpe, chip_context(chip, precision), resident, tuple(placed),
                  memory_profile(workload, scale), tuple(same_as))
