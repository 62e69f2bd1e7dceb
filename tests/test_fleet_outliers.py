"""The fleet's outlier and drift rules (fleet.outliers) on figures whose verdicts are worked out by
hand here: median, MAD and the allowance computed on paper from the values below."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from chipcal.fleet import outliers as judge
from chipcal.report.figures import Figure
from chipcal.report.index import RunSummary


def _run(node: str, created: str = "2026-11-29T10:00:00Z", machine: str = "m-1", quick: bool = True,
         **figures: tuple[float, float | None]) -> RunSummary:
    """A run of `node` whose figures are name=(value, relative half-width of its interval)."""
    figs = tuple(Figure(name, v, None if n is None else v * (1 - n), None if n is None else v * (1 + n), "FLOP/s", True)
                 for name, (v, n) in figures.items())
    return RunSummary(machine=machine, run=created.replace("-", "").replace(":", ""), device="cpu", chip="c",
                      hardware="h", torch="2", created_utc=created, command="chipcal calibrate", quick=quick, cases=1,
                      median_abs_error=None, p90_abs_error=None, default_median_abs_error=None,
                      default_p90_abs_error=None, noise_rel=None, rerun_median_abs_change=None, warnings=(),
                      folder=node, node=node, figures=figs)


def _verdict(value: float, noise: float | None, peers: list[float]) -> judge.Outlier | None:
    run = _run("x", gemm=(value, noise))
    return judge.judge("x", run, run.figures[0], peers)


def test_a_node_at_half_its_peers_is_flagged_and_says_why():
    # peers 98..102: median 100, |dev| 2,1,0,1,2 -> MAD 1 -> spread 1.4826 %; allowance 3.5 x 1.4826 % = 5.19 %
    peers = [98.0, 99.0, 100.0, 101.0, 102.0]
    slow = _run("n6", gemm=(50.0, None))
    found = judge.judge("n6", slow, slow.figures[0], peers)
    assert found is not None
    assert found.peer_median == 100.0
    assert found.spread_rel == pytest.approx(0.014826)
    assert found.allowed == pytest.approx(3.5 * 0.014826)
    assert found.deviation == pytest.approx(-0.5)
    assert found.worse is True
    assert "50.0% below the median of its 5 peers" in found.why


def test_within_the_allowance_is_not_flagged():
    peers = [98.0, 99.0, 100.0, 101.0, 102.0]
    near = _run("n6", gemm=(95.0, None))          # -5 % < 5.19 %
    assert judge.judge("n6", near, near.figures[0], peers) is None


def test_identical_peers_are_given_the_one_percent_floor():
    peers = [100.0] * 4                            # MAD 0 -> spread floored at 1 %: allowance 3.5 %
    assert _verdict(96.6, None, peers) is None
    assert _verdict(96.4, None, peers) is not None


def test_the_node_s_own_noise_widens_its_allowance():
    # noise 10 %: allowance 3.5 x sqrt(0.014826^2 + 0.1^2) = 35.4 %, so -30 % is not flagged; -40 % is
    peers = [98.0, 99.0, 100.0, 101.0, 102.0]
    assert _verdict(70.0, 0.1, peers) is None
    assert _verdict(60.0, 0.1, peers) is not None


def test_fewer_than_three_peers_are_not_judged():
    assert _verdict(1.0, None, [100.0, 100.0]) is None


def test_a_slow_node_does_not_mask_itself_nor_make_its_peers_outliers():
    values = {"n1": 100.0, "n2": 101.0, "n3": 99.0, "n4": 100.5, "n5": 99.5, "n6": 50.0}
    latest = {n: _run(n, gemm=(v, 0.005)) for n, v in values.items()}
    found = judge.outliers(latest)
    assert [(o.node, o.figure) for o in found] == [("n6", "gemm")]


def test_peers_are_of_one_machine_and_one_mode():
    latest = {f"n{i}": _run(f"n{i}", gemm=(100.0, None)) for i in range(4)}
    latest["other"] = _run("other", machine="m-2", gemm=(10.0, None))
    latest["full"] = _run("full", quick=False, gemm=(10.0, None))
    assert judge.outliers(latest) == []


def test_faster_is_listed_but_not_flagged():
    peers = [100.0, 100.0, 100.0, 100.0]
    found = _verdict(150.0, None, peers)
    assert found is not None and found.worse is False and not found.flagged and "above" in found.why
    power = _run("x", power=(150.0, None))
    power = dataclasses.replace(power, figures=(dataclasses.replace(power.figures[0], higher_is_better=None),))
    assert judge.judge("x", power, power.figures[0], peers).flagged       # no better side: either way is flagged


def test_the_held_out_error_is_not_compared():
    latest = {f"n{i}": _run(f"n{i}", **{"held-out error": (0.01, None)}) for i in range(4)}
    latest["n9"] = _run("n9", **{"held-out error": (0.5, None)})
    assert judge.outliers(latest) == []


def test_drift_is_judged_by_overlapping_intervals_as_compare_does():
    before = _run("n1", "2026-11-28T10:00:00Z", gemm=(100.0, 0.01), bandwidth=(50.0, 0.05))
    after = _run("n1", "2026-11-29T10:00:00Z", gemm=(90.0, 0.01), bandwidth=(48.0, 0.05))
    # gemm: [99, 101] vs [89.1, 90.9] disjoint; bandwidth: [47.5, 52.5] vs [45.6, 50.4] overlap
    moved = {d.figure: d for d in judge.drift("n1", [after, before])}
    assert moved["gemm"].beyond_noise is True and moved["gemm"].change == pytest.approx(-0.1)
    assert moved["bandwidth"].beyond_noise is False


def test_drift_needs_a_previous_run_of_the_same_class():
    quick = _run("n1", "2026-11-28T10:00:00Z", gemm=(100.0, 0.01))
    full = dataclasses.replace(_run("n1", "2026-11-29T10:00:00Z", gemm=(50.0, 0.01)), quick=False)
    assert judge.drift("n1", [full, quick]) == []


def test_runs_without_a_node_are_named_by_their_folder():
    r = dataclasses.replace(_run("x"), node=None, folder="rack-7")
    assert list(judge.latest_per_node([r])) == ["rack-7"]


@pytest.mark.parametrize("n", [4, 5, 6, 7, 50, 51])
def test_leave_one_out_is_the_median_and_mad_of_the_others(n):
    """The O(n log n) form against statistics.median of each list with one value removed."""
    import numpy as np

    rng = np.random.default_rng(n)
    values = np.round(rng.lognormal(0, 0.3, n), 2)          # rounded: ties happen
    medians, spreads = judge.leave_one_out(values)
    for i in range(n):
        others = [float(v) for j, v in enumerate(values) if j != i]
        m = statistics.median(others)
        mad = statistics.median(abs(v - m) for v in others)
        assert medians[i] == pytest.approx(m) and spreads[i] == pytest.approx(1.4826 * mad / m)
