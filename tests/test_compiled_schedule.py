"""How a compiled model's kernels add up (issue 55): torch.compile runs Inductor's kernels one after
another on one stream (mapping.params.CONCURRENT_RUNTIMES), where a fused vendor runtime may
overlap independent branches (estimate/schedule.py)."""

from __future__ import annotations

import pytest
from test_mapping import chip
from test_predict import diamond

from chipcal.model.estimate.prediction import predict


def test_a_compiled_graph_runs_its_kernels_one_after_another():
    """torch.compile runs Inductor's kernels in sequence on one stream: the diamond's concurrent
    stage (s1, s2) does not overlap, so the latency is the sum of the kernels' own latencies, each
    its own stage; a fused runtime may overlap them (below)."""
    h100 = chip("h100-sxm5")
    p = predict(diamond(), h100, "fp32", runtime="compiled")
    assert p.latency_s == pytest.approx(sum(e.latency_s for e in p.subgraphs)) == pytest.approx(p.serial_latency_s)
    assert [s.subgraphs for s in p.stages] == [(e.index,) for e in p.subgraphs]
    fused = predict(diamond(), h100, "fp32", runtime="fused")
    assert fused.latency_s < fused.serial_latency_s
