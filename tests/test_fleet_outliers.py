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


def _verdict(value: float, noise: float | None, peers: list[float], better: bool | None = True
             ) -> judge.Outlier | None:
    """Node x's figure `value` among nodes whose figures are `peers`: its outlier record, or None."""
    def run(node: str, v: float, n: float | None):
        r = _run(node, gemm=(v, n))
        return dataclasses.replace(r, figures=(dataclasses.replace(r.figures[0], higher_is_better=better),))

    latest = {f"p{i}": run(f"p{i}", v, None) for i, v in enumerate(peers)} | {"x": run("x", value, noise)}
    return next((o for o in judge.outliers(latest) if o.node == "x"), None)


# 1,000 peers 98..102 (200 each): median 100, |dev| 2,1,0,1,2 in equal shares -> MAD 1 -> spread
# 1.4826 %; with so many peers K is the modified z-score's 3.5 to within 0.3 % (K(1000) = 3.51)
MANY = [98.0, 99.0, 100.0, 101.0, 102.0] * 200


def test_k_tends_to_the_modified_z_score_and_widens_for_few_peers():
    assert judge.k_factor(1000) == pytest.approx(3.5, rel=0.005)
    assert judge.k_factor(5) > 3 * judge.k_factor(1000) and judge.k_factor(4) > judge.k_factor(5)


def test_k_is_a_prediction_interval_by_simulation():
    """One more draw from the peers' normal population lies beyond K(n) sample standard deviations
    of the peers' mean as often as a normal draw lies beyond 3.5 of its own, two-sided: 4.65e-4."""
    import numpy as np

    rng = np.random.default_rng(54)
    n, trials = 5, 2_000_000
    draws = rng.standard_normal((trials, n + 1))
    peers, new = draws[:, :n], draws[:, n]
    beyond = np.abs(new - peers.mean(axis=1)) > judge.k_factor(n) * peers.std(axis=1, ddof=1)
    assert beyond.mean() == pytest.approx(4.65e-4, rel=0.15)       # 930 expected, sd ~30


def test_a_node_at_half_its_peers_is_flagged_and_says_why():
    found = _verdict(50.0, None, MANY)
    assert found is not None
    assert found.peer_median == 100.0
    assert found.spread_rel == pytest.approx(0.014826)
    assert found.allowed == pytest.approx(found.k * 0.014826) and found.k == pytest.approx(3.5, rel=0.005)
    assert found.deviation == pytest.approx(-0.5)
    assert found.worse is True
    assert "50.0% below the median of its 1000 peers" in found.why


def test_within_the_allowance_is_not_flagged():
    assert _verdict(95.0, None, MANY) is None             # -5 % < 3.51 x 1.4826 % = 5.2 %
    assert _verdict(94.6, None, MANY) is not None         # -5.4 %


def test_five_peers_allow_more_than_many():
    peers = [98.0, 99.0, 100.0, 101.0, 102.0]              # the same spread, 5 peers: K(5) = 11.5
    assert _verdict(85.0, None, peers) is None and _verdict(75.0, None, peers) is not None


def test_identical_peers_are_given_the_one_percent_floor():
    peers = [100.0] * 1000                                 # MAD 0 -> spread floored at 1 %: allowance 3.51 %
    assert _verdict(96.6, None, peers) is None
    assert _verdict(96.4, None, peers) is not None


def test_the_node_s_own_noise_widens_its_allowance():
    # noise 10 %: allowance 3.51 x sqrt(0.014826^2 + 0.1^2) = 35.5 %, so -30 % is not flagged; -40 % is
    assert _verdict(70.0, 0.1, MANY) is None
    assert _verdict(60.0, 0.1, MANY) is not None


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
    peers = [100.0] * 10
    found = _verdict(150.0, None, peers)
    assert found is not None and found.worse is False and not found.flagged and "above" in found.why
    assert _verdict(150.0, None, peers, better=None).flagged           # no better side: either way is flagged


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
