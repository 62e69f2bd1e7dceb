"""A matrix-vector product's weight stream on a CPU, and a few-row GEMM's read and pack of the
same weights: the probes an LLM's decode at batch 1 and at batch 2 and up is priced with
(estimate/cpu_passes.py; a calibration's host probes, calibrate/probes.py)."""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.measure.timing import Measurement, time_callable

GEMV_HIDDEN = 2048          # a 1B-class decoder's hidden size


@dataclass(frozen=True)
class GemvRate:
    """Matrix-vector products streaming their weights from DRAM (measure_gemv): one fp32 row by
    a wide matrix (n x GEMV_HIDDEN: n outputs of GEMV_HIDDEN-long rows) and by a tall one
    (GEMV_HIDDEN x n), each n-major as nn.Linear keeps them, and by the tall one read k-major
    (x @ W, GPT-2's Conv1D: n outputs from GEMV_HIDDEN scaled rows); each timed alone."""

    n: int
    wide: Measurement
    tall: Measurement
    k_major: Measurement

    @property
    def shape(self) -> str:
        h = GEMV_HIDDEN
        return (f"1x{h} by {self.n}x{h} and 1x{self.n} by {h}x{self.n} (F.linear), 1x{h} by {h}x{self.n} "
                "(torch.mm), fp32, each timed alone")

    @property
    def k_major_bytes_per_s(self) -> float:
        """The k-major product's rate: its matrix's bytes over its median call."""
        return self.weight_bytes / 2 / self.k_major.median_s

    @property
    def weight_bytes(self) -> int:
        """Both matrices' bytes."""
        return 2 * self.n * GEMV_HIDDEN * 4

    @property
    def median_s(self) -> float:
        """A wide and a tall call: the sum of their medians."""
        return self.wide.median_s + self.tall.median_s

    @property
    def bytes_per_s(self) -> float:
        """The pair's rate: both matrices' bytes over a wide and a tall call."""
        return self.weight_bytes / self.median_s

    def split(self) -> tuple[float, float]:
        """(stream bytes per second r, seconds per output row a) with t = rows × (a + row bytes / r)
        for both shapes: per-row times p_w = t_w / n over 4·GEMV_HIDDEN bytes, p_t = t_t / GEMV_HIDDEN
        over 4·n bytes, so 1/r = (p_t − p_w) / (4n − 4·GEMV_HIDDEN) and a = p_w − 4·GEMV_HIDDEN / r.
        Where noise leaves no positive row cost or stream term, (the pair's rate, 0): one rate
        for every shape, as before the split."""
        h = GEMV_HIDDEN
        per_wide, per_tall = self.wide.median_s / self.n, self.tall.median_s / h
        slope = (per_tall - per_wide) / (4 * (self.n - h))
        row_s = per_wide - 4 * h * slope if slope > 0 else 0.0
        return (1 / slope, row_s) if row_s > 0 else (self.bytes_per_s, 0.0)


def measure_gemv(weight_bytes: int = 256 * 2**20, max_time_s: float = 1.0) -> GemvRate:
    """Time one fp32 row through a wide and a tall weight matrix, half of `weight_bytes` each
    (n x 2048 and 2048 x n, n = bytes / 16 KiB: an MLP's up and down projections), as an LLM's
    decode at batch 1 runs its linear layers, and through the tall one read k-major (x @ W, as
    GPT-2's Conv1D runs), each alone for a third of `max_time_s`. 256 MiB is far above any CPU
    cache here, so each call streams its weights from DRAM (cpu_passes.gemv_stream_s). The two
    n-major shapes read the same bytes in rows of 2048 and of n elements; their difference splits
    the time into a stream rate and a cost per output row (GemvRate.split; 2-vCPU Zen 5 VM: 5.88
    and 4.36 ms, 32 GB/s and 0.11 us a row; the Zen 4 VM's one 256 MiB wide matrix alone 15-18
    GB/s from minute to minute). The weights are ones: the values do not change the time, and
    filling them draws no random numbers."""
    import torch

    n = weight_bytes // (2 * 4 * GEMV_HIDDEN)
    x, y = torch.ones(1, GEMV_HIDDEN), torch.ones(1, n)
    wide, tall = torch.ones(n, GEMV_HIDDEN), torch.ones(GEMV_HIDDEN, n)
    timing = {"max_time_s": max_time_s / 3, "min_samples": 5}
    with torch.inference_mode():
        wide_s = time_callable(lambda: torch.nn.functional.linear(x, wide), **timing)
        tall_s = time_callable(lambda: torch.nn.functional.linear(y, tall), **timing)
        k_major_s = time_callable(lambda: torch.mm(x, tall), **timing)
    return GemvRate(n, wide_s, tall_s, k_major_s)


PACKED_ROWS = (8, 32)       # decodes at batch 8 and 32: a BLAS packs the weights at any batch from 2 up


@dataclass(frozen=True)
class PackedRate:
    """A few-row GEMM reading and packing weights from DRAM (measure_packed_gemm): the same
    weights at two row counts, whose difference is the arithmetic's."""

    shape: str
    weight_bytes: int
    few: Measurement            # PACKED_ROWS[0] rows
    more: Measurement           # PACKED_ROWS[1] rows

    @property
    def pack_s(self) -> float:
        """The call less its arithmetic: T(r1) − r1 × (T(r2) − T(r1)) / (r2 − r1)."""
        r1, r2 = PACKED_ROWS
        return self.few.median_s - r1 * (self.more.median_s - self.few.median_s) / (r2 - r1)

    @property
    def bytes_per_s(self) -> float | None:
        """Weight bytes per second of the read and pack; None when the two timings leave no time
        for it (noise larger than the pass)."""
        return self.weight_bytes / self.pack_s if self.pack_s > 0 else None


def measure_packed_gemm(weight_bytes: int = 256 * 2**20, max_time_s: float = 1.0) -> PackedRate:
    """Time one call = `F.linear` of 8 and of 32 fp32 rows by measure_gemv's wide and tall
    matrices. With more than one row the BLAS reads the weights from DRAM and packs them into
    panels, then runs its micro-kernel, one after the other; the arithmetic grows with the rows
    and the pass does not, so two row counts separate them (2-vCPU Zen 4 VM, F.linear by a
    64 MiB 2048 x 8192 matrix: 8.4 ms at 8 rows, 13.6 at 32, 18.8 at 64: ~7 ms of pass, 9-10 GB/s,
    plus ~0.2 ms a row; one row, a GEMV, 3.6 ms; cpu_passes.packed_weight_s)."""
    import torch

    linear = torch.nn.functional.linear
    n = weight_bytes // (2 * 4 * GEMV_HIDDEN)
    wide, tall = torch.ones(n, GEMV_HIDDEN), torch.ones(GEMV_HIDDEN, n)

    def pair(rows: int) -> Measurement:
        x, y = torch.ones(rows, GEMV_HIDDEN), torch.ones(rows, n)
        with torch.inference_mode():
            return time_callable(lambda: (linear(x, wide), linear(y, tall)), max_time_s=max_time_s / 2, min_samples=5)

    few, more = (pair(rows) for rows in PACKED_ROWS)
    r, h = PACKED_ROWS[0], GEMV_HIDDEN
    shape = f"{r}x{h} by {n}x{h} and {r}x{n} by {h}x{n}, fp32 (F.linear)"
    return PackedRate(shape, 2 * n * GEMV_HIDDEN * 4, few, more)
