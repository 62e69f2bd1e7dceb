"""The results index (results/README.md) and each machine's run history (results/<machine>/HISTORY.md).

Both are generated from the runs' documents, never written by hand: the index has one short row per
machine and device for its latest main job (`chipcal calibrate` without --quick) and one for its
latest --quick run; the history lists every run of the machine, newest first, including runs
dropped from the tree, which git keeps (report.index_runs reads them back from the commit that added them).

Which runs stay in the tree: those the index shows, and those a reference page, a test or the
README cites by their directory name (`cited`); `uncited` names the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chipcal.calibrate.document import CalibrationDocument
from chipcal.report import render
from chipcal.report.calibration import pct
from chipcal.report.figures import Figure, run_figures
from chipcal.report.render import Block, Heading, Paragraph, table

COMMAND = "chipcal report results/ --markdown results/README.md"
HISTORY_FILE = "HISTORY.md"


@dataclass(frozen=True)
class RunSummary:
    """What the index and the history show of one run."""

    machine: str
    run: str                        # the run's directory name (its UTC timestamp)
    device: str
    chip: str
    hardware: str                   # CPU or GPU in a few words
    torch: str
    created_utc: str
    command: str
    quick: bool
    cases: int
    median_abs_error: float | None
    p90_abs_error: float | None
    default_median_abs_error: float | None
    default_p90_abs_error: float | None
    noise_rel: float | None
    rerun_median_abs_change: float | None
    warnings: tuple[str, ...]       # flag codes of severity warning, once each
    in_tree: bool = True
    git_ref: str | None = None      # a run no longer in the tree: "COMMIT:path/of/the/run" that holds it
    folder: str | None = None       # the directory the run is in, where not its machine's (a fleet's node)
    node: str | None = None         # the node that ran it (measure.node); None: not recorded, nor a folder
    smoke: bool = False
    figures: tuple[Figure, ...] = ()   # report.figures

    @property
    def directory(self) -> str:
        return f"{self.folder or self.machine}/{self.run}"

    @classmethod
    def of(cls, doc: CalibrationDocument, run: str, git_ref: str | None = None, folder: str | None = None
           ) -> RunSummary:
        """The summary of the run `doc` in directory `folder`/`run`; a document that does not
        record its node is named by its folder where that is not its machine's."""
        val = doc.validation
        folder = None if folder == doc.machine_slug else folder
        return cls(machine=doc.machine_slug, run=run, device=str(doc.device), chip=doc.chip.name,
                   hardware=hardware_text(doc), torch=doc.fingerprint.torch_version.split("+")[0],
                   created_utc=doc.created_utc, command=doc.command, quick=doc.quick, cases=val.n,
                   median_abs_error=val.median_abs_error, p90_abs_error=val.p90_abs_error,
                   default_median_abs_error=val.default_median_abs_error,
                   default_p90_abs_error=val.default_p90_abs_error, noise_rel=val.noise_rel,
                   rerun_median_abs_change=doc.rerun.median_abs_change if doc.rerun else None,
                   warnings=tuple(dict.fromkeys(f.code for f in doc.flags if f.severity == "warning")),
                   in_tree=git_ref is None, git_ref=git_ref, folder=folder,
                   node=doc.node.name if doc.node else folder, smoke=bool(doc.smoke), figures=run_figures(doc))

    @classmethod
    def from_fields(cls, data: dict) -> RunSummary:
        """A summary from its JSON (dataclasses.asdict of one: the results index's store)."""
        return cls(**{**data, "warnings": tuple(data["warnings"]),
                      "figures": tuple(Figure(**f) for f in data.get("figures", ()))})


def hardware_text(doc: CalibrationDocument) -> str:
    """'AMD EPYC, 2 cores, AVX-512' or 'NVIDIA H100 80GB HBM3': what the run measured."""
    fp = doc.fingerprint
    if doc.device.is_cuda and fp.gpu_name:
        return fp.gpu_name
    features = set(fp.cpu_features)
    isa = ("AMX" if any(f.startswith("amx") for f in features) else "AVX-512" if "avx512f" in features
           else "AVX2" if "avx2" in features else fp.arch)
    return f"{fp.cpu_model}, {fp.physical_cores} cores, {isa}"


def chosen(runs: Iterable[RunSummary]) -> dict[tuple[str, str, bool], RunSummary]:
    """{(machine, device, quick): latest run in the tree}: the runs the index shows."""
    latest: dict[tuple[str, str, bool], RunSummary] = {}
    for r in runs:
        key = (r.machine, r.device, r.quick)
        if r.in_tree and (key not in latest or r.created_utc > latest[key].created_utc):
            latest[key] = r
    return dict(sorted(latest.items()))


def _errors(r: RunSummary) -> str:
    return f"{pct(r.median_abs_error)} / {pct(r.p90_abs_error)}"


def _defaults(r: RunSummary) -> str:
    return f"{pct(r.default_median_abs_error)} / {pct(r.default_p90_abs_error)}"


def _index_table(rows: Sequence[RunSummary]) -> Block:
    return table(
        ["machine", "hardware", "chip", "device", "date", "command", "held-out error", "defaults", "warnings",
         "report"],
        [[f"[{r.machine}]({r.machine}/{HISTORY_FILE})", r.hardware + f"; torch {r.torch}", r.chip, r.device,
          r.created_utc[:10], f"`{r.command}`", f"**{_errors(r)}** ({r.cases})", _defaults(r),
          ", ".join(r.warnings) or "-",
          f"[md]({r.directory}/report.md) · [html]({r.directory}/report.html)"] for r in rows])


def index_markdown(runs: Iterable[RunSummary]) -> str:
    """results/README.md: the latest main job and --quick run of each machine, links relative to results/."""
    shown = chosen(runs)
    blocks: list[Block] = [
        Heading("Calibration results", 1),
        Paragraph(f"Generated by `{COMMAND}` from the runs' calibration.json: do not edit (a test regenerates it "
                  "and compares). Each run directory `<machine>/<UTC timestamp>/` holds calibration.json (every "
                  "observation with its distribution, the fits with uncertainties, the parameters, validation, "
                  "flags), report.md with its PNG plots, and report.html (the same, one file). How to read them "
                  "and compare two runs: docs/reports.md."),
        Paragraph("Held-out error: median / p90 of |predicted / measured - 1| of the latency of whole models the "
                  "fit never saw (in brackets: model × batch cases); defaults: the same with the uncalibrated "
                  "parameters. Warnings: the run's flags of severity warning (its report says why). Every run of "
                  f"a machine, kept or dropped from the tree: its {HISTORY_FILE}."),
    ]
    for quick, title in ((False, "Latest main job per machine (`chipcal calibrate`)"),
                         (True, "Latest `--quick` run per machine (`chipcal calibrate --quick`)")):
        rows = [r for (_, _, q), r in shown.items() if q == quick]
        if rows:
            blocks += [Heading(title), _index_table(rows)]
    return render.markdown(blocks)


def history_markdown(machine: str, runs: Iterable[RunSummary]) -> str:
    """results/<machine>/HISTORY.md: every run of the machine, newest first; links relative to it."""
    rows = sorted((r for r in runs if r.machine == machine), key=lambda r: r.created_utc, reverse=True)
    hardware = dict.fromkeys(f"{r.hardware} ({r.device})" for r in rows)

    def where(r: RunSummary) -> str:
        if r.in_tree:
            return f"[md]({r.run}/report.md) · [html]({r.run}/report.html)"
        return f"dropped; `git show {r.git_ref}/report.md`"

    return render.markdown([
        Heading(f"{machine}: every calibration run", 1),
        Paragraph(f"Generated by `{COMMAND}`: do not edit. Hardware: {'; '.join(hardware)}. Runs dropped "
                  "from the tree are kept by git: the last column says how to read them back."),
        table(["run (UTC)", "command", "torch", "held-out error", "defaults", "noise", "since the run before",
               "warnings", "report"],
              [[r.created_utc.replace("T", " ").removesuffix("Z"), f"`{r.command}`", r.torch,
                f"{_errors(r)} ({r.cases})", _defaults(r), pct(r.noise_rel), pct(r.rerun_median_abs_change),
                ", ".join(r.warnings) or "-", where(r)] for r in rows]),
    ])


_RUN_NAME = re.compile(r"\b\d{8}T\d{6}Z(?:-\d+)?\b")


def cited(texts: Iterable[str]) -> set[str]:
    """Run directory names (UTC timestamps such as 20261125T155202Z) that the texts mention."""
    return {name for t in texts for name in _RUN_NAME.findall(t)}


def uncited(runs: Iterable[RunSummary], citations: set[str]) -> list[RunSummary]:
    """Runs in the tree that the index does not show and no text cites: the ones to drop."""
    runs = [r for r in runs if r.in_tree]
    shown = {r.directory for r in chosen(runs).values()}
    return sorted((r for r in runs if r.directory not in shown and r.run not in citations),
                  key=lambda r: r.directory)
