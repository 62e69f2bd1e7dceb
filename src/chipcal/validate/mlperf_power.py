"""MLPerf power submissions (MaxQ): the accelerators' power limit, and the system's power.

A MaxQ system runs its accelerators under a board power limit its submitter sets, and MLPerf
measures the whole system's wall power. The limits are in the submitter's published configs, not
in the results; POWER_LIMITS_W holds those of v4.1's closed MaxQ systems chipcal predicts, per
(system, benchmark): NVIDIA's `closed/NVIDIA/configs/<benchmark>/Offline/__init__.py`, classes
`H200_SXM_141GBx8_MaxQ` and `..._HighAccuracy_MaxQ`, `power_limit` (resnet50 L113, retinanet L97,
bert L247 and L267, 3d-unet L111 and L117, dlrm-v2 L140 and L152, llama2-70b Offline L202 and
Server L211, mixtral-8x7b Offline L103 and Server L94, stable-diffusion-xl Offline L109 and
Server L105 (a class registered as MaxQ at L102), gptj Offline L162 and Server L79; the
HighAccuracy classes inherit them;
mlcommons/inference_results_v4.1 at 198fc467).

The throughput is predicted at that limit (model.estimate.throttle.with_power_limit: the clock
the V-f model lets the power stay within it). The system's power is its accelerators' predicted
average power plus the rest of the node (CPUs, memory, switches, fans), which no datasheet gives:
it is fitted per system as the median of (measured - accelerators x predicted) over the system's
*other* benchmarks (leave-one-benchmark-out, the accuracy targets of one network counting as one
benchmark), so each row's power is predicted from rows that are not its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from chipcal.validate.mlperf import MlperfRow

_H200_MAXQ = "H200-SXM-141GBx8_TRT_MaxQ"
POWER_LIMITS_W = {(_H200_MAXQ, "resnet50"): 350.0, (_H200_MAXQ, "retinanet"): 350.0,
                  (_H200_MAXQ, "bert-99"): 400.0, (_H200_MAXQ, "bert-99.9"): 450.0,
                  (_H200_MAXQ, "3d-unet-99"): 350.0, (_H200_MAXQ, "3d-unet-99.9"): 350.0,
                  (_H200_MAXQ, "dlrm-v2-99"): 500.0, (_H200_MAXQ, "dlrm-v2-99.9"): 500.0,
                  (_H200_MAXQ, "llama2-70b-99"): 500.0, (_H200_MAXQ, "llama2-70b-99.9"): 500.0,
                  (_H200_MAXQ, "mixtral-8x7b"): 500.0, (_H200_MAXQ, "stable-diffusion-xl"): 450.0,
                  (_H200_MAXQ, "gptj-99"): 350.0, (_H200_MAXQ, "gptj-99.9"): 350.0}


def power_limit_w(row: MlperfRow) -> float | None:
    """The accelerators' power limit of a MaxQ row, where its submitter's config gives it."""
    return POWER_LIMITS_W.get((row.system, row.benchmark))


def node_power_w(system: str, family: str, others: Sequence[tuple[str, str, float]]) -> float | None:
    """The non-accelerator power of `system`, fitted on its rows of other benchmark families:
    `others` holds (system, family, measured system power - accelerators x predicted accelerator
    power) per predicted MaxQ row; None without such a row."""
    pool = [w for s, f, w in others if s == system and f != family]
    return statistics.median(pool) if pool else None
