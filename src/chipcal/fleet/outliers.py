"""Nodes that fall behind their peers, and nodes that moved since their last run.

Peers are the latest runs of the other nodes of one class: the same machine slug (identical
hardware, measure.system), device and run mode (full, --quick or --smoke, whose budgets differ).

**Outlier.** For each figure of a node (report.figures), against the same figure of its peers,
the node itself left out so that it cannot mask itself:

    m = median(peers),  s = 1.4826 · median(|peers - m|) / |m|      (the peers' spread, relative)
    d = x / m - 1                                                      (how far the node lies off)
    flagged when |d| > K(n) · sqrt(max(s, MIN_SPREAD_REL)² + e²)

where e is the node's own relative noise on that figure (half its interval over its value) and n
the number of peers. 1.4826 · MAD estimates a standard deviation that a few outliers cannot move.
K(n) is the half-width of the prediction interval of one more draw from n (Student's t with n - 1
degrees of freedom, times sqrt(1 + 1/n); NIST/SEMATECH e-Handbook of Statistical Methods, 7.1.4),
at the tail of Iglewicz and Hoaglin's modified z-score cut, 3.5 (*How to Detect and Handle
Outliers*, ASQC 1993): K is 11.5 for 5 peers, 5.6 for 10, 3.6 for 100, and tends to 3.5. A spread
read off five peers is itself uncertain; with K = 3.5 for any n, the second live check of
docs/findings/2026-11-29-fleet-outliers-live.md flagged an honest node whose resnet18 latency lay
16 % above five peers that happened to agree within 1 %. MIN_SPREAD_REL (1 %): peers that agree
more closely than that still differ by about that much between reruns of one machine (the
recorded reruns moved by 1-4 %, calibrate.rerun), so a node is never flagged for less. At least
MIN_PEERS other nodes are needed to judge.

**Drift.** A node's latest run against its previous run of the same class, figure by figure,
judged as `chipcal report --compare` judges a change (report.compare.disjoint): beyond noise when
the two runs' intervals do not overlap.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipcal.report.compare import disjoint
from chipcal.report.figures import Figure
from chipcal.report.index import RunSummary

Z_CUT = 3.5                    # the modified z-score's cut, which K(n) tends to
MAD_TO_SIGMA = 1.4826
MIN_SPREAD_REL = 0.01
MIN_PEERS = 3
NOT_COMPARED = ("held-out error",)


def k_factor(peers: int) -> float:
    """K(n): the prediction interval's half-width in peer spreads for n peers (module docstring)."""
    from scipy.stats import norm, t

    return float(t.ppf(norm.cdf(Z_CUT), peers - 1) * math.sqrt(1 + 1 / peers))


def mode(run: RunSummary) -> str:
    return "smoke" if run.smoke else "quick" if run.quick else "full"


def class_key(run: RunSummary) -> tuple[str, str, str]:
    """The peers of a run share this: machine slug, device and run mode."""
    return run.machine, run.device, mode(run)


@dataclass(frozen=True)
class Spread:
    """One figure over the latest runs of one class's nodes."""

    machine: str
    device: str
    mode: str
    figure: str
    unit: str
    nodes: int
    median: float
    spread_rel: float | None       # 1.4826 · MAD / |median|; None with fewer than 2 nodes
    low: float
    high: float


@dataclass(frozen=True)
class Outlier:
    """A figure of a node off its peers by more than their spread and its own noise allow."""

    node: str
    run: str
    figure: str
    unit: str
    value: float
    peer_median: float
    peers: int
    deviation: float               # value / peer_median - 1
    spread_rel: float              # the peers' (floored at MIN_SPREAD_REL)
    noise_rel: float               # the node's own on this figure (0 where not known)
    k: float                       # K(peers)
    allowed: float                 # k · sqrt(spread² + noise²)
    worse: bool | None             # in the direction that is worse (None: neither is)

    @property
    def flagged(self) -> bool:
        """Off on the worse side, or on a figure with no better side."""
        return self.worse is not False

    @property
    def why(self) -> str:
        side = "above" if self.deviation > 0 else "below"
        return (f"{self.figure} is {abs(self.deviation):.1%} {side} the median of its {self.peers} peers; "
                f"their spread ±{self.spread_rel:.1%} and its own noise ±{self.noise_rel:.1%} allow "
                f"{self.allowed:.1%} ({self.k:.3g} × √(spread² + noise²) for {self.peers} peers)")


@dataclass(frozen=True)
class Drift:
    """A figure of a node's latest run against its previous run."""

    node: str
    figure: str
    unit: str
    before: float
    after: float
    beyond_noise: bool | None      # compare.disjoint of their intervals

    @property
    def change(self) -> float:
        return self.after / self.before - 1


def latest_per_node(runs: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    """{node: its runs, newest first}; a run that names no node is its own folder's."""
    by_node: dict[str, list[RunSummary]] = {}
    for r in runs:
        by_node.setdefault(r.node or r.folder or r.machine, []).append(r)
    return {n: sorted(rs, key=lambda r: r.created_utc, reverse=True) for n, rs in sorted(by_node.items())}


def _figure_of(run: RunSummary, name: str) -> Figure | None:
    return next((f for f in run.figures if f.name == name), None)


def robust_spread(values: Sequence[float]) -> tuple[float, float | None]:
    """(median, 1.4826 · MAD / |median|) of `values`; the spread None with fewer than two."""
    m = statistics.median(values)
    if len(values) < 2 or not m:
        return m, None
    return m, MAD_TO_SIGMA * statistics.median(abs(v - m) for v in values) / abs(m)


def _against(node: str, run: RunSummary, figure: Figure, m: float, spread: float | None, peers: int
             ) -> Outlier | None:
    """The outlier record of `figure` against its `peers`' median `m` and relative spread, or None
    where it lies within what they allow (module docstring: the rule)."""
    if not m:
        return None
    spread = max(spread or 0.0, MIN_SPREAD_REL)
    noise = figure.noise_rel or 0.0
    k = k_factor(peers)
    allowed = k * math.hypot(spread, noise)
    deviation = figure.value / m - 1
    if abs(deviation) <= allowed:
        return None
    worse = None if figure.higher_is_better is None else (deviation < 0) == figure.higher_is_better
    return Outlier(node, run.directory, figure.name, figure.unit, figure.value, m, peers, deviation, spread,
                   noise, k, allowed, worse)


def _median_without(sorted_values: np.ndarray, position: np.ndarray) -> np.ndarray:
    """For each i, the median of `sorted_values` with the element at position[i] taken out."""
    n = len(sorted_values) - 1               # what is left

    def kth(k: int) -> np.ndarray:           # the k-th smallest of what is left, for each i
        return np.where(k < position, sorted_values[k], sorted_values[np.minimum(k + 1, n)])

    return kth(n // 2) if n % 2 else (kth(n // 2 - 1) + kth(n // 2)) / 2


def leave_one_out(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(median, 1.4826 · MAD / |median|) of the values without value i, for each i: what
    `robust_spread` gives on the others (tests/test_fleet_outliers.py checks it against
    statistics.median), in O(n log n) rather than O(n²), so that a class of
    10,000 nodes is judged in seconds. The median without one value takes at most three values
    (the one removed lies below, at or above the middle), so the deviations are sorted once for each."""
    order = np.argsort(values, kind="stable")
    position = np.empty(len(values), dtype=int)
    position[order] = np.arange(len(values))
    medians = _median_without(values[order], position)
    mad = np.empty(len(values))
    for m in np.unique(medians):
        rows = medians == m
        deviation = np.abs(values - m)
        dev_order = np.argsort(deviation, kind="stable")
        dev_position = np.empty(len(values), dtype=int)
        dev_position[dev_order] = np.arange(len(values))
        mad[rows] = _median_without(deviation[dev_order], dev_position)[rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        return medians, MAD_TO_SIGMA * mad / np.abs(medians)


def outliers(latest: dict[str, RunSummary]) -> list[Outlier]:
    """Every figure of every node's latest run that lies off its class's other nodes, on either
    side (Outlier.flagged: on the worse side)."""
    groups: dict[tuple[tuple[str, str, str], str], list[tuple[str, RunSummary, Figure]]] = {}
    for node, run in latest.items():
        for figure in run.figures:
            if figure.name not in NOT_COMPARED:
                groups.setdefault((class_key(run), figure.name), []).append((node, run, figure))
    out = []
    for members in groups.values():
        if len(members) - 1 < MIN_PEERS:         # too few peers to judge any of them
            continue
        medians, spreads_rel = leave_one_out(np.array([f.value for _, _, f in members]))
        for (node, run, figure), m, spread in zip(members, medians, spreads_rel, strict=True):
            if (found := _against(node, run, figure, float(m), float(spread), len(members) - 1)) is not None:
                out.append(found)
    return sorted(out, key=lambda o: (o.node, o.figure))


def spreads(latest: dict[str, RunSummary]) -> list[Spread]:
    """Each class's median and spread per figure over its nodes' latest runs."""
    groups: dict[tuple[tuple[str, str, str], str], list[Figure]] = {}
    for run in latest.values():
        for f in run.figures:
            groups.setdefault((class_key(run), f.name), []).append(f)
    out = []
    for ((machine, device, run_mode), name), figures in groups.items():
        values = [f.value for f in figures]
        m, spread = robust_spread(values)
        out.append(Spread(machine, device, run_mode, name, figures[0].unit, len(values), m, spread, min(values),
                          max(values)))
    return out


def drift(node: str, runs: Sequence[RunSummary]) -> list[Drift]:
    """The node's latest run against its previous one of the same class (runs: newest first)."""
    latest = runs[0]
    previous = next((r for r in runs[1:] if class_key(r) == class_key(latest)), None)
    if previous is None:
        return []
    out = []
    for f in latest.figures:
        before = _figure_of(previous, f.name)
        if before is None or not before.value:
            continue
        beyond = disjoint(None if before.low is None else (before.low, before.high),
                          None if f.low is None else (f.low, f.high))
        out.append(Drift(node, f.name, f.unit, before.value, f.value, beyond))
    return out
