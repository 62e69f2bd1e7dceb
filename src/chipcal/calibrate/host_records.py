"""The host probes' records in the calibration document (calibrate.document): the eager dispatch
cost (`DispatchSection`), the CPU's thread scaling, oneDNN's layout passes and weight reorders,
the first touch of freshly mapped memory and a GEMV's weight stream (calibrate.probes.host), with
how each is charged into the fit's parameters."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from chipcal.calibrate.records import OMIT_NONE, Record, record
from chipcal.model.mapping.base import CONV_CLASSES
from chipcal.model.mapping.params import FamilyParams


@record
class DispatchSection(Record):
    """The host's per-op dispatch cost under the eager runtime (measure.dispatch)."""

    per_op_s: float | None
    iqr_s: float | None
    n: int
    method: str


@record
class ThreadsSection(Record):
    """How many cores' worth the torch threads gave during the run (measure.threads)."""

    threads: int
    speedup: float                 # time with 1 thread / time with `threads`; ideal = threads
    one_thread_s: float
    all_threads_s: float
    method: str


@record
class LayoutSection(Record):
    """Layout passes around each CPU convolution, counted in oneDNN's trace (measure.layout)."""

    passes: float
    detail: str
    # weight reorders per call, weight bytes per second (k x k, 1x1); absent in runs before they were timed
    weight_bytes_per_s: float | None = field(default=None, metadata=OMIT_NONE)
    pointwise_weight_bytes_per_s: float | None = field(default=None, metadata=OMIT_NONE)
    # seconds per oneDNN convolution call outside its primitives; absent in runs before it was timed
    call_overhead_s: float | None = field(default=None, metadata=OMIT_NONE)

    def charged_in(self, params: FamilyParams) -> FamilyParams:
        """`params` charging the layout passes and weight reorders this run measured
        (model.mapping.base.traffic, model.estimate.cpu_passes.weight_layout_s), with the measured
        fixed cost of a oneDNN call as every convolution class's overhead (the layer fit's prior)."""
        overhead = dict(params.overhead_s)
        if self.call_overhead_s:
            overhead.update({c: self.call_overhead_s for c in CONV_CLASSES})
        return dataclasses.replace(params, layout_passes=self.passes, overhead_s=overhead,
                                   weight_layout_bytes_per_s=self.weight_bytes_per_s,
                                   pointwise_weight_layout_bytes_per_s=self.pointwise_weight_bytes_per_s)


@record
class FirstTouchSection(Record):
    """First write into freshly mapped memory (measure.bandwidth.measure_first_touch)."""

    bytes_per_s: float | None
    size_bytes: int
    fresh_median_s: float | None
    reused_median_s: float | None
    fresh_iqr_s: float | None
    n: int
    # the allocator's, pinned by the run (measure.allocator); None: glibc's dynamic threshold
    mmap_threshold_bytes: int | None = field(default=None, metadata=OMIT_NONE)

    def charged_in(self, params: FamilyParams) -> FamilyParams:
        """`params` charging first touch as this run found it: at the measured rate, for blocks at or
        above the mmap threshold the run's allocator had (glibc's 32 MiB ceiling when it was not pinned)."""
        if not self.bytes_per_s:
            return params
        return dataclasses.replace(params, first_touch_bytes_per_s=self.bytes_per_s,
                                   fresh_allocation_bytes=self.mmap_threshold_bytes or params.fresh_allocation_bytes)


@record
class GemvSection(Record):
    """A matrix-vector product streaming its weights from DRAM (measure.gemv.measure_gemv),
    and a GEMM of a few rows reading and packing the same weights (measure_packed_gemm)."""

    bytes_per_s: float      # the pair's rate: both matrices' bytes over median_s
    weight_bytes: int
    shape: str
    median_s: float         # a wide and a tall call (before 2026-11-30: the two timed as one call)
    iqr_s: float
    n: int
    # the two shapes timed alone (measure.gemv.GemvRate.split): the stream rate and the cost per
    # output row they split into, and each shape's median; absent in runs before the split
    stream_bytes_per_s: float | None = field(default=None, metadata=OMIT_NONE)
    row_s: float | None = field(default=None, metadata=OMIT_NONE)
    wide_median_s: float | None = field(default=None, metadata=OMIT_NONE)
    tall_median_s: float | None = field(default=None, metadata=OMIT_NONE)
    # the tall matrix read k-major (x @ W): its rate and median call
    k_major_bytes_per_s: float | None = field(default=None, metadata=OMIT_NONE)
    k_major_median_s: float | None = field(default=None, metadata=OMIT_NONE)
    # the packed GEMM (measure.gemv.PackedRate): its pass's weight bytes per second, its calls
    # at 8 and at 32 rows; absent in runs before it was timed (None rate: the timings left no pass)
    packed_bytes_per_s: float | None = field(default=None, metadata=OMIT_NONE)
    packed_shape: str | None = field(default=None, metadata=OMIT_NONE)
    packed_median_s: float | None = field(default=None, metadata=OMIT_NONE)
    packed_more_median_s: float | None = field(default=None, metadata=OMIT_NONE)
    packed_n: int | None = field(default=None, metadata=OMIT_NONE)

    def charged_in(self, params: FamilyParams) -> FamilyParams:
        """`params` pricing a matrix-vector product's weights at the measured stream rate and cost
        per row, a k-major weight's at its own rate, or both at the pair's one rate in runs before
        the split (cpu_passes.gemv_stream_s), and a few-row GEMM's at the packed rate where it was
        timed (cpu_passes.packed_weight_s)."""
        split = self.stream_bytes_per_s is not None
        return dataclasses.replace(params, gemv_bytes_per_s=self.stream_bytes_per_s if split else self.bytes_per_s,
                                   gemv_row_s=self.row_s if split else None,
                                   gemv_k_major_bytes_per_s=self.k_major_bytes_per_s,
                                   packed_weight_bytes_per_s=self.packed_bytes_per_s)
