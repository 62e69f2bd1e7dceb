"""A matrix-vector product's weight stream (an LLM's decode at batch 1 on a CPU): the roofline term
by hand, the probe's arithmetic, the parameter's round trip and its place in a prediction."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from chipcal.measure.bandwidth import GemvRate
from chipcal.measure.timing import Measurement
from chipcal.model.estimate.prediction import predict
from chipcal.model.estimate.roofline import gemv_stream_s
from chipcal.model.mapping.params import FamilyParams, default_params
from chipcal.model.workload.characterization import characterize

OUT = 65536
WEIGHT_BYTES = OUT * 2048 * 4          # an fp32 65536 x 2048 matrix: 536,870,912 B, above any chip's LLC


def linear(rows: int):
    """nn.Linear(2048 -> 65536) without bias on `rows` rows, one kernel (eager), on the meta device."""
    layer = torch.nn.Linear(2048, OUT, bias=False, device="meta")
    return characterize(layer, torch.empty(rows, 2048, device="meta"), model_name=f"linear{rows}", fuse=False)


def gemm_subgraph(workload):
    (subgraph,) = [s for s in workload.subgraphs if s.gemm is not None]
    return subgraph


def test_gemv_term_by_hand():
    """536,870,912 B at 20 GB/s: 26.8 ms; only for one row, weights off chip, with a measured rate."""
    params = dataclasses.replace(default_params("cpu"), gemv_bytes_per_s=20e9)
    one, eight = gemm_subgraph(linear(1)), gemm_subgraph(linear(8))
    assert one.gemm.m == 1 and one.weight_bytes == WEIGHT_BYTES
    assert gemv_stream_s(one, WEIGHT_BYTES, False, params) == pytest.approx(WEIGHT_BYTES / 20e9)
    assert gemv_stream_s(eight, WEIGHT_BYTES, False, params) == 0.0         # a GEMM: its own efficiency
    assert gemv_stream_s(one, WEIGHT_BYTES, True, params) == 0.0            # weights held on chip
    assert gemv_stream_s(one, WEIGHT_BYTES, False, default_params("cpu")) == 0.0   # not measured


def test_probe_rate_is_the_weights_over_the_median_call():
    # two 128 MiB matrices read in 14 ms: 268,435,456 B / 0.014 s = 19.17 GB/s
    rate = GemvRate("two", 256 * 2**20, Measurement.from_samples([0.014] * 5))
    assert rate.bytes_per_s == pytest.approx(268_435_456 / 0.014)


def test_gemv_rate_round_trips_with_the_parameters():
    params = dataclasses.replace(default_params("cpu"), gemv_bytes_per_s=1.9e10)
    assert FamilyParams.from_dict(params.to_dict()).gemv_bytes_per_s == 1.9e10
    assert "gemv_bytes_per_s" not in default_params("cpu").to_dict()       # absent: None


def test_a_decode_gemv_is_predicted_at_the_measured_rate():
    """On a Xeon 8480+ whose 307 GB/s DRAM would stream the 537 MB in well under the GEMV rate's
    53.7 ms (10 GB/s), the one-row product takes at least that; at 8 rows it is a GEMM, and the
    rate does not apply."""
    from chipcal.model.registry import load_registry

    xeon_chip = load_registry().get("xeon-platinum-8480-plus")
    params = dataclasses.replace(default_params("cpu"), gemv_bytes_per_s=10e9)
    slow = predict(linear(1), xeon_chip, "fp32", params=params, runtime="eager", host_overhead_s=0.0)
    fast = predict(linear(1), xeon_chip, "fp32", params=default_params("cpu"), runtime="eager", host_overhead_s=0.0)
    assert fast.latency_s < WEIGHT_BYTES / 10e9 <= slow.latency_s < 1.1 * WEIGHT_BYTES / 10e9
    gemm = predict(linear(8), xeon_chip, "fp32", params=params, runtime="eager", host_overhead_s=0.0)
    plain = predict(linear(8), xeon_chip, "fp32", params=default_params("cpu"), runtime="eager", host_overhead_s=0.0)
    assert gemm.latency_s == pytest.approx(plain.latency_s)
