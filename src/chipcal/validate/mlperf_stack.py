"""Software-stack efficiencies of MLPerf Offline rows, fitted with leave-one-accelerator-out
cross-validation.

chipcal's physics (family defaults, fitted on PyTorch measurements) says what a chip could do; a
submission's software stack (TensorRT, Intel's PyTorch, ...) reaches some fraction of that. The
fraction is fitted per (stack, benchmark), shared by every chip the stack runs on, as the median
of log(measured / predicted) over its rows (a robust geometric mean: duplicate submissions of one
system do not pull it). A benchmark the stack has no other row of falls back to the stack's
median over all its benchmarks, and a stack with no other row to 1.

Each accelerator's rows are corrected by factors fitted on the other accelerators' rows only, so
the error reported is a held-out one: how far a chip nobody fitted on lands. A factor per row or
per (chip, benchmark) would fit the truth set to itself; this one cannot see the chip it
corrects. A stack is the first word of the submission's framework ("TensorRT 10.2.0, CUDA 12.4"
-> "tensorrt"), except that a system its submitter names as MLCommons' reference implementation
is the stack "reference": the reference harness, whatever engine it calls (NeuralMagic's v4.1
llama2-70b rows, "vLLM_8xL40S-reference-...": the reference implementation extended to send its
queries to vLLM's API, `closed/NeuralMagic/code/llama2-70b-99/README.md`), is not the serving
harness of another vLLM submission.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from chipcal.validate.mlperf import MlperfRow


def stack_of(row: MlperfRow) -> str:
    """The row's software stack (module docstring)."""
    if "reference" in row.system.lower().replace("_", "-").split("-"):
        return "reference"
    return (row.framework.split() or ["unknown"])[0].strip(",").lower()


def family_of(benchmark: str) -> str:
    """A benchmark without its accuracy target: "bert-99.9" -> "bert"."""
    return benchmark.removesuffix(".9").removesuffix("-99")


@dataclass(frozen=True)
class Observed:
    """One predicted Offline row: its chip, stack, benchmark family, the precision it was
    predicted at, and log(measured / predicted)."""

    chip: str
    stack: str
    family: str
    precision: str
    log_ratio: float


def factor(train: Sequence[Observed], stack: str, family: str, precision: str) -> float:
    """measured / predicted of `stack` on `family` at `precision` from `train` (module docstring)."""
    same_stack = [o for o in train if o.stack == stack]
    same_bench = [o.log_ratio for o in same_stack if (o.family, o.precision) == (family, precision)]
    pool = same_bench or [o.log_ratio for o in same_stack]
    return math.exp(statistics.median(pool)) if pool else 1.0


def held_out_factor(observed: Sequence[Observed], chip: str, stack: str, family: str, precision: str) -> float:
    """The factor of `chip`'s rows of `stack`, `family` and `precision`, fitted on the rows of
    every other accelerator."""
    return factor([o for o in observed if o.chip != chip], stack, family, precision)
