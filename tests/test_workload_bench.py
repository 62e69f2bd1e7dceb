"""Timing of characterize_model (target: under 1 s each for resnet50 and vit_b_16 once torch is
imported). Skipped in normal runs; run with `pytest tests/test_workload_bench.py --benchmark-only -n 0`
(in one process: pytest-benchmark does not time under the suite's pytest-xdist workers)."""

from __future__ import annotations

import pytest

from chipcal.model.workload import characterize_model


@pytest.mark.benchmark
@pytest.mark.parametrize("name", ["resnet50", "vit_b_16"])
def test_characterize_model_speed(benchmark, name):
    characterize_model("resnet18")         # first-call imports (torchvision, fx) are not the target
    workload = benchmark.pedantic(characterize_model, args=(name,), rounds=5, iterations=1, warmup_rounds=1)
    assert workload.macs > 0
