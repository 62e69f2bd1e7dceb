"""The dispatch micro-probe: a bounded, typed per-op host cost on this CPU."""

from __future__ import annotations

import math

import pytest

from chipcal.measure.dispatch import OPS_PER_REPEAT, probe_dispatch


@pytest.mark.timing
def test_probe_returns_a_per_op_distribution():
    d = probe_dispatch(repeats=4, max_time_s=0.3, min_samples=3)
    assert d.ops_per_call == 4 * OPS_PER_REPEAT == 12
    m = d.per_op
    assert m.n >= 1 and all(s > 0 and math.isfinite(s) for s in m.samples_s)
    assert m.ci_low_s <= d.per_op_s <= m.ci_high_s
    # a module call + dispatcher + a tiny kernel: microseconds, never a millisecond or a nanosecond
    assert 1e-8 < d.per_op_s < 1e-3
    assert "1x1x1x1" in d.method


def test_probe_rejects_an_empty_chain():
    with pytest.raises(ValueError, match="repeats"):
        probe_dispatch(repeats=0)
