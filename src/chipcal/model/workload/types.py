"""Result types of workload characterization: tensors, operations, fused subgraphs, the workload.

All counts are exact integers for the dtype the model was traced in. `macs` are
multiply-accumulates; `flop` = 2 × macs for multiply-accumulate work plus the documented
per-element counts for non-MAC work (docs/workload.md). Bytes are tensor footprints: the
memory a tensor spans (a broadcast view of a bias counts the bias, not the broadcast).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

OP_KINDS: tuple[str, ...] = ("conv", "linear", "matmul", "attention", "norm", "pool", "elementwise",
                             "activation", "softmax", "reshape", "other")

# Classes the calibration fits one efficiency/overhead value for:
#   conv      dense/grouped convolution with a kernel larger than 1x1
#   conv1x1   pointwise convolution
#   depthwise groups == in_channels (channel multiplier allowed)
#   matmul    linear, matmul, bmm, addmm
#   attention scaled-dot-product / multi-head attention core (QK^T, softmax, AV)
#   norm      batch/layer/group norm
#   elementwise add/mul/activations/softmax outside attention
#   pool      windowed max/avg pooling (adaptive pooling to an output larger than 1x1)
#   reduce    global pooling (adaptive to 1x1) and reductions (mean, sum, amax, vector norm):
#             one output per channel, a different kernel from windowed pooling
#   data      reshape/copy/cat/permute/flatten (0 FLOP, bytes only if it materializes)
OP_CLASSES: tuple[str, ...] = ("conv", "conv1x1", "depthwise", "matmul", "attention", "norm",
                               "elementwise", "pool", "reduce", "data")

# Families the reference counters (fvcore, FlopCounterMode) name their counts by.
FAMILIES: tuple[str, ...] = ("conv", "matmul", "attention", "norm", "pool", "elementwise", "data")


def _intensity(flop: int, nbytes: int) -> float:
    return flop / nbytes if nbytes else 0.0


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str              # torch dtype name without "torch.", e.g. "float32"
    nbytes: int             # footprint: bytes of the distinct elements the tensor addresses


@dataclass(frozen=True)
class GemmShape:
    """The matrix product an op performs (convolution as implicit GEMM)."""

    m: int                  # output rows per GEMM (batch*H_out*W_out, or batch*tokens)
    n: int                  # output columns (out_channels/groups, out_features)
    k: int                  # reduction length (in_channels/groups*kh*kw, in_features)
    count: int = 1          # independent GEMMs (groups, heads*batch for attention)
    # the second operand stored k-major, W[k, n] row-major (GPT-2's Conv1D: x @ W), not n-major as
    # nn.Linear's W[n, k] (x @ W.t()): a one-row product then adds scaled rows of W instead of
    # taking one dot product per output (estimate/cpu_passes.gemv_stream_s)
    k_major: bool = False

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k * self.count


@dataclass(frozen=True)
class Parallelism:
    batch: int
    channels: int           # output channels / features (GEMM: n)
    spatial: int            # output H*W, tokens, or GEMM rows m
    output_elements: int    # total independent output elements
    depthwise: bool
    grouped: bool
    groups: int
    vector_dim: int         # length of the innermost dimension SIMD lanes run over


@dataclass(frozen=True)
class Term:
    """One counted piece of an op: an ATen call, or a named part of a composite
    (nn.MultiheadAttention is counted as in_proj, attention and out_proj)."""

    target: str             # "aten.addmm", "F.scaled_dot_product_attention", "F.multi_head_attention_forward:in_proj"
    kind: str
    family: str             # which of FAMILIES a reference counter files it under
    macs: int
    flop: int
    classified: bool


@dataclass(frozen=True)
class Op:
    index: int
    name: str               # fx node name ("node.part" when one node ran several kinds of work)
    target: str             # "torch.nn.Conv2d" / "aten.convolution" / "operator.add"
    kind: str               # one of OP_KINDS
    op_class: str           # one of OP_CLASSES
    inputs: tuple[TensorSpec, ...]      # activations read
    weights: tuple[TensorSpec, ...]     # parameters/buffers read (and tensors computed only from them)
    outputs: tuple[TensorSpec, ...]     # tensors later ops (or the caller) read
    macs: int
    flop: int               # 2*macs for MAC work; documented count for non-MAC ops
    bytes_read: int         # inputs + weights (0 when the op only re-views memory)
    bytes_written: int      # each written buffer that is read later, once
    parallelism: Parallelism
    gemm: GemmShape | None
    classified: bool        # False -> its unclassified work counted as zero and flagged
    terms: tuple[Term, ...] = ()
    subnormal_ops: float = 0.0   # element-operations on subnormal fp32 operands (workload/subnormal.py)
    subnormal_split: tuple[float, ...] = ()   # the same by matrix, where known (a thread's share: mapping/cpu.py)

    @property
    def arithmetic_intensity(self) -> float:
        return _intensity(self.flop, self.bytes_read + self.bytes_written)

    @property
    def threads(self) -> int:
        """Independent threads of work a kernel for this op can use: one per output element, and
        for a reduction one per element read. Reduction kernels split the reduced axis across the
        threads of a block and combine partial results in a tree (CUB BlockReduce, PyTorch's
        Reduce.cuh), so a global average pool over 32 x 112 x 112 runs 401,408 threads, not 32; a
        CPU mapping splits those elements by ATen's grain (mapping/cpu.py)."""
        if self.op_class == "reduce":
            return max(self.parallelism.output_elements, sum(math.prod(t.shape) for t in self.inputs))
        return self.parallelism.output_elements


@dataclass(frozen=True)
class Subgraph:
    """A fused kernel a runtime would launch."""

    index: int
    name: str
    pattern: str            # "conv_bn_relu", "linear_gelu", "add_relu", "attention", "single", ...
    op_class: str           # class of its dominant (most-MAC, else first) op; "attention" for attention blocks
    op_indices: tuple[int, ...]
    macs: int
    flop: int
    input_bytes: int        # activation bytes entering from outside the subgraph
    weight_bytes: int
    output_bytes: int       # bytes leaving the subgraph (read later or returned)
    bytes_saved_by_fusion: int   # intermediate traffic fusion removes (write + read)
    parallelism: Parallelism     # of the dominant op
    gemm: GemmShape | None       # of the dominant op
    depends_on: tuple[int, ...]  # subgraph indices whose outputs it reads
    stage: int                   # execution stage (longest dependency chain before it)
    threads: int                 # thread-level parallelism of its dominant op (Op.threads)
    subnormal_ops: float = 0.0   # its ops' element-operations on subnormal fp32 operands
    subnormal_split: tuple[float, ...] = ()   # the same by matrix, where known
    onchip_reread_bytes: int = 0  # bytes it reads again through the on-chip level after a first read counted
                                  # in input_bytes: a beam's share of its request's prompt (estimate/serving.py)

    @property
    def bytes_read(self) -> int:
        return self.input_bytes + self.weight_bytes

    @property
    def bytes_written(self) -> int:
        return self.output_bytes

    @property
    def arithmetic_intensity(self) -> float:
        return _intensity(self.flop, self.bytes_read + self.bytes_written)


# Where a subgraph sits in its workload. No placement or estimate reads these (its producers only
# as "has any": mapping.base.traffic), so subgraphs equal in every other field run alike, and a
# decoder's repeated layers are the same subgraphs at other positions (workload/llm_layers.py).
POSITION_FIELDS = frozenset({"index", "name", "op_indices", "depends_on", "stage"})


def content_key(subgraph: Subgraph) -> tuple:
    """What placing and estimating `subgraph` reads of it: every field but its position."""
    return (*(getattr(subgraph, f) for f in _CONTENT_FIELDS), bool(subgraph.depends_on))


@dataclass(frozen=True)
class Workload:
    model: str
    batch: int
    input_shape: tuple[int, ...]
    dtype: str
    capture: str            # "fx" | "export" | "dispatch": which path produced the graph
    ops: tuple[Op, ...]
    subgraphs: tuple[Subgraph, ...]
    stages: tuple[tuple[int, ...], ...]     # subgraph indices per stage
    critical_path: tuple[int, ...]          # subgraph indices, maximum-FLOP dependency chain
    params: int
    execution: str = "meta"  # "meta": shapes propagated without arithmetic; "real": the model ran
    capture_notes: tuple[str, ...] = ()     # why earlier capture paths were not used
    fused: bool = True                      # False: one subgraph per op (an eager runtime)
    codegen: bool = False                   # True: subgraphs are TorchInductor's kernels (fusion.py)

    @property
    def macs(self) -> int:
        return sum(op.macs for op in self.ops)

    @property
    def flop(self) -> int:
        return sum(op.flop for op in self.ops)

    @property
    def bytes_read(self) -> int:
        """Unfused traffic: every op reads its inputs and weights."""
        return sum(op.bytes_read for op in self.ops)

    @property
    def bytes_written(self) -> int:
        return sum(op.bytes_written for op in self.ops)

    @property
    def arithmetic_intensity(self) -> float:
        return _intensity(self.flop, self.bytes_read + self.bytes_written)

    @property
    def fused_bytes_read(self) -> int:
        """Traffic after fusion: what the subgraphs (kernels) read."""
        return sum(s.bytes_read for s in self.subgraphs)

    @property
    def fused_bytes_written(self) -> int:
        return sum(s.bytes_written for s in self.subgraphs)

    @property
    def bytes_saved_by_fusion(self) -> int:
        return sum(s.bytes_saved_by_fusion for s in self.subgraphs)

    @property
    def critical_path_flop(self) -> int:
        return sum(self.subgraphs[i].flop for i in self.critical_path)

    @property
    def critical_path_ops(self) -> int:
        return sum(len(self.subgraphs[i].op_indices) for i in self.critical_path)

    @property
    def max_parallel_subgraphs(self) -> int:
        return max((len(stage) for stage in self.stages), default=0)

    @property
    def unclassified_ops(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.ops if not op.classified)

    def macs_by_class(self) -> dict[str, int]:
        """MACs per op class (every class present, zeros included)."""
        totals = dict.fromkeys(OP_CLASSES, 0)
        for op in self.ops:
            totals[op.op_class] += op.macs
        return totals

    def flop_by_class(self) -> dict[str, int]:
        totals = dict.fromkeys(OP_CLASSES, 0)
        for op in self.ops:
            totals[op.op_class] += op.flop
        return totals

    def macs_by_family(self) -> dict[str, int]:
        """MACs per reference-counter family, from the ops' terms (crosscheck's view)."""
        totals = dict.fromkeys(FAMILIES, 0)
        for op in self.ops:
            for term in op.terms:
                totals[term.family] += term.macs
        return totals


@dataclass(frozen=True)
class LlmStep:
    """One characterized forward of a decoder LLM (src/chipcal/model/workload/llm.py): a prefill over the
    prompt or one decode step, with the model facts that do not depend on the step."""

    workload: Workload
    phase: str              # "prefill" | "decode"
    tokens: int             # new tokens per sequence in this forward
    cached: int             # tokens in the KV cache before it
    capacity: int           # static cache length (0: a dynamic cache that grows)
    params: int
    matrix_params: int      # parameters of weight matrices GEMMs read (not embedding tables, norms,
                            # biases): what weight-only quantization stores narrow
    matrix_channels: int    # their output channels (one per-channel scale each)
    experts_touched: int    # experts per MoE layer this forward routes tokens to (0: dense)

    @property
    def batch(self) -> int:
        return self.workload.batch


_CONTENT_FIELDS = tuple(f.name for f in fields(Subgraph) if f.name not in POSITION_FIELDS)
