"""The fleet report (`chipcal fleet report STORE`): a row per node with its key figures, each
class's median and spread per figure, the nodes off their peers and why, and each node's drift
since its previous run (fleet.outliers), read from the store's index (report.run_index).

Rendered as report blocks (terminal, HTML with plots: report.render), and as flat records for
`--json` and `--csv`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from chipcal.fleet import outliers as judge
from chipcal.fleet.store import check_store
from chipcal.report.calibration import si
from chipcal.report.index import RunSummary
from chipcal.report.render import Block, Bullets, Figures, Heading, Paragraph, table

# the figures a node's row shows, by name prefix, in this order (the rest are in the records)
ROW_FIGURES = ("gemm_", "bandwidth", "dispatch", "sustained clock", "power", "held-out error")


@dataclass(frozen=True)
class NodeRow:
    """A node: its latest run, how many it has, its outliers and its drift since the run before."""

    node: str
    latest: RunSummary
    runs: int
    peers: int                               # the other nodes of its class
    outliers: tuple[judge.Outlier, ...]      # flagged: off its peers on the worse side
    above: tuple[judge.Outlier, ...]         # off its peers on the better side: listed, not flagged
    drift: tuple[judge.Drift, ...]


@dataclass(frozen=True)
class FleetReport:
    store: str
    nodes: tuple[NodeRow, ...]
    spreads: tuple[judge.Spread, ...]
    unread: tuple[str, ...]          # run directories whose document does not read, and why

    @property
    def outliers(self) -> tuple[judge.Outlier, ...]:
        return tuple(o for row in self.nodes for o in row.outliers)


def build(runs: list[RunSummary], store: str = "", unread: tuple[str, ...] = ()) -> FleetReport:
    """The report of these runs (every run of every node)."""
    by_node = judge.latest_per_node(runs)
    latest = {node: rs[0] for node, rs in by_node.items()}
    found: dict[str, list[judge.Outlier]] = {}
    for o in judge.outliers(latest):
        found.setdefault(o.node, []).append(o)
    classes = Counter(judge.class_key(r) for r in latest.values())
    rows = tuple(NodeRow(node, rs[0], len(rs), classes[judge.class_key(rs[0])] - 1,
                         tuple(o for o in found.get(node, ()) if o.flagged),
                         tuple(o for o in found.get(node, ()) if not o.flagged),
                         tuple(judge.drift(node, rs))) for node, rs in by_node.items())
    return FleetReport(store, rows, tuple(judge.spreads(latest)), unread)


def fleet_report(store: Path) -> FleetReport:
    """The report of every run in the store, through its index (only new or changed runs are read)."""
    from chipcal.report.run_index import indexed_runs

    store = check_store(store)
    runs, unread, _ = indexed_runs(store)
    return build(runs, str(store), tuple(unread))


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:.1%}" if unit == "" else si(v, unit)


def _row_figures(run: RunSummary) -> list:
    return [f for prefix in ROW_FIGURES for f in run.figures if f.name.startswith(prefix)]


def _beyond(row: NodeRow) -> list[judge.Drift]:
    return [d for d in row.drift if d.beyond_noise]


def _verdict(row: NodeRow) -> str:
    if row.outliers:
        return "**outlier**: " + ", ".join(o.figure for o in row.outliers)
    if row.peers < judge.MIN_PEERS:
        return f"not judged: {row.peers} peers (needs {judge.MIN_PEERS})"
    return "within its peers"


def node_table(report: FleetReport) -> Block:
    names = list(dict.fromkeys(f.name for row in report.nodes for f in _row_figures(row.latest)))
    head = ["node", "chip", "mode", "run", "runs", *names, "verdict", "drift beyond noise", "warnings"]
    rows = []
    for row in report.nodes:
        r = row.latest
        values = {f.name: _value(f.value, f.unit) for f in r.figures}
        rows.append([row.node, r.chip, judge.mode(r), r.created_utc, str(row.runs), *(values.get(n, "-") for n in names),
                     _verdict(row), ", ".join(f"{d.figure} {d.change:+.1%}" for d in _beyond(row)) or "-",
                     ", ".join(r.warnings) or "-"])
    return table(head, rows)


def spread_table(report: FleetReport) -> Block:
    return table(["machine", "device", "mode", "figure", "nodes", "median", "spread (1.4826·MAD)", "min", "max"],
                 [[s.machine, s.device, s.mode, s.figure, str(s.nodes), _value(s.median, s.unit),
                   "-" if s.spread_rel is None else f"±{s.spread_rel:.1%}", _value(s.low, s.unit),
                   _value(s.high, s.unit)] for s in report.spreads])


def blocks(report: FleetReport, with_plots: bool = False) -> list[Block]:
    """The report as blocks; `with_plots`: the figure-distribution plots (HTML)."""
    out: list[Block] = [
        Heading(f"Fleet: {report.store}", 1),
        Paragraph(f"{len(report.nodes)} nodes, {sum(r.runs for r in report.nodes)} runs. Peers: the latest runs of "
                  "the other nodes of one class (machine, device, mode). A figure is an outlier when it lies off "
                  "their median by more than K(n) × √(spread² + noise²), K(n) the prediction interval of n peers "
                  f"at the modified z-score's {judge.Z_CUT:g} (11.5 for 5 peers, 3.6 for 100): spread = 1.4826 · MAD of the peers "
                  f"(at least {judge.MIN_SPREAD_REL:.0%}), noise = the node's own on that figure; at least "
                  f"{judge.MIN_PEERS} peers (docs/fleet.md)."),
        Heading("Nodes"), node_table(report),
        Heading("Outliers"),
        Bullets(tuple(f"**{o.node}** ({o.run}): {o.why}" for o in report.outliers)) if report.outliers
        else Paragraph("No node lies off its peers on the worse side."),
        *_above_blocks(report),
        Heading("Drift since each node's previous run"),
        _drift_block(report),
        Heading("Median and spread per figure"), spread_table(report),
    ]
    if with_plots:
        from chipcal.fleet.plots import plot_names

        out += [Heading("Distributions"), Figures(tuple((n, f"{n.removesuffix('.png')}: one dot per node; "
                                                          "outliers marked") for n in plot_names(report)))]
    if report.unread:
        out += [Heading("Runs that do not read"), Bullets(report.unread)]
    return out


def _above_blocks(report: FleetReport) -> list[Block]:
    above = [o for row in report.nodes for o in row.above]
    if not above:
        return []
    return [Paragraph("Off their peers on the better side (listed, not flagged: a fleet looks for its stragglers, "
                      "and a faster reading can be a neighbour's load gone quiet):"),
            Bullets(tuple(f"{o.node} ({o.run}): {o.why}" for o in above))]


def _drift_block(report: FleetReport) -> Block:
    moved = [(row.node, d) for row in report.nodes for d in _beyond(row)]
    compared = sum(1 for row in report.nodes if row.drift)
    if not moved:
        return Paragraph(f"{compared} nodes have a previous run of their class; no figure moved beyond the two runs' "
                         "noise (the rule of `chipcal report --compare`).")
    return table(["node", "figure", "before", "after", "change"],
                 [[node, d.figure, _value(d.before, d.unit), _value(d.after, d.unit), f"{d.change:+.1%}"]
                  for node, d in moved])


def records(report: FleetReport) -> list[dict]:
    """Flat records, one per (node, figure) of each node's latest run (`--json`, `--csv`)."""
    out = []
    for row in report.nodes:
        r = row.latest
        flagged = {o.figure: o for o in row.outliers + row.above}
        drifted = {d.figure: d for d in row.drift}
        for f in r.figures:
            o, d = flagged.get(f.name), drifted.get(f.name)
            out.append({"node": row.node, "machine": r.machine, "device": r.device, "chip": r.chip,
                        "mode": judge.mode(r), "run": r.directory, "created_utc": r.created_utc, "runs": row.runs,
                        "figure": f.name, "unit": f.unit, "value": f.value, "low": f.low, "high": f.high,
                        "peers": row.peers, "outlier": o is not None and o.flagged,
                        "peer_median": o.peer_median if o else None, "deviation": o.deviation if o else None,
                        "allowed": o.allowed if o else None, "why": o.why if o else None,
                        "previous": d.before if d else None, "drift_beyond_noise": d.beyond_noise if d else None})
    return out


def render_html(report: FleetReport) -> str:
    from chipcal.fleet.plots import png_bytes
    from chipcal.report.render import html_page

    return html_page(f"Fleet: {report.store}", blocks(report, with_plots=True), png_bytes(report))
