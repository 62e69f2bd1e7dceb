"""The results index (issue 39): results/README.md is generated, short, and regenerates byte for byte;
each machine's HISTORY.md lists its runs, those dropped from the tree read back from git; results/
keeps only the runs that the index shows or the README, the reference docs or the tests cite."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from recorded import report_document

from chipcal.calibrate import store
from chipcal.cli import report as report_cli
from chipcal.report.index import RunSummary, chosen, cited, history_markdown, uncited

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
# What decides which runs stay: the README, the reference pages (docs/*.md, not the dated findings
# under docs/findings/, which cite runs as history that git keeps) and the tests.
CITING = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "tests"]
REGENERATE = "chipcal report results/ --markdown results/README.md"


def test_the_index_is_short_and_regenerates_byte_for_byte(cli, tmp_path):
    index = RESULTS / "README.md"
    assert index.stat().st_size < 8 * 1024
    rc, _, err = cli(report_cli.main, [str(RESULTS), "--markdown", str(tmp_path / "README.md"), "--no-history"])
    assert rc == 0, err
    assert (tmp_path / "README.md").read_bytes() == index.read_bytes(), f"results/README.md is stale: run `{REGENERATE}`"


def test_results_keeps_only_the_runs_that_are_shown_or_cited(cli):
    rc, out, err = cli(report_cli.main, [str(RESULTS), "--uncited", *map(str, CITING)])
    assert rc == 0, err
    assert out == "", ("runs that nothing cites are kept; drop them (git keeps them) with\n  git rm -r -q $(chipcal "
                       "report results/ --uncited README.md docs/*.md tests)\nand regenerate: " + REGENERATE + "\n" + out)


def test_the_runs_the_docs_and_tests_name_by_path_exist():
    texts = [p.read_text() for p in CITING if p.is_file()]
    texts += [p.read_text() for p in (ROOT / "tests").rglob("*") if p.suffix in (".py", ".md")]
    named = {m for t in texts for m in re.findall(r"results/([a-z0-9]+(?:-[a-z0-9]+)+/\d{8}T\d{6}Z)", t)}
    assert named, "no run cited by its path: the check would check nothing"
    assert not [n for n in sorted(named) if not (RESULTS / n / store.CALIBRATION_FILE).is_file()]


def test_every_machine_has_a_history_naming_each_of_its_runs():
    for machine in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        history = (machine / "HISTORY.md").read_text()
        for run in store.find_runs(machine):
            assert f"]({run.name}/report.html)" in history, f"{run} missing from its HISTORY.md: run `{REGENERATE}`"


def _summary(machine: str, created: str, quick: bool, **changes) -> RunSummary:
    fields = dict(machine=machine, run=created.replace("-", "").replace(":", ""), device="cpu", chip="local-cpu",
                  hardware="CPU", torch="2.15", created_utc=created, command="chipcal calibrate", quick=quick,
                  cases=22, median_abs_error=0.1, p90_abs_error=0.2, default_median_abs_error=0.3,
                  default_p90_abs_error=0.4, noise_rel=0.03, rerun_median_abs_change=None, warnings=())
    return RunSummary(**(fields | changes))


def test_the_index_shows_the_latest_main_job_and_quick_run_per_machine():
    runs = [_summary("a", "2026-01-01T00:00:00Z", False), _summary("a", "2026-01-03T00:00:00Z", False),
            _summary("a", "2026-01-02T00:00:00Z", True), _summary("a", "2026-01-04T00:00:00Z", True, in_tree=False,
                                                                   git_ref="abc:results/a/x"),
            _summary("b", "2026-01-01T00:00:00Z", False, device="cuda:0")]
    shown = chosen(runs)
    assert {k: v.created_utc for k, v in shown.items()} == {
        ("a", "cpu", False): "2026-01-03T00:00:00Z", ("a", "cpu", True): "2026-01-02T00:00:00Z",
        ("b", "cuda:0", False): "2026-01-01T00:00:00Z"}         # the dropped run is not shown
    assert [r.created_utc for r in uncited(runs, set())] == ["2026-01-01T00:00:00Z"]
    assert uncited(runs, cited(["see 20260101T000000Z"])) == []
    text = history_markdown("a", runs)
    rows = [line for line in text.splitlines() if line.startswith("| 2026")]
    assert [r.split(" | ")[0] for r in rows] == ["| 2026-01-04 00:00:00", "| 2026-01-03 00:00:00",
                                                 "| 2026-01-02 00:00:00", "| 2026-01-01 00:00:00"]
    assert "`git show abc:results/a/x/report.md`" in rows[0]


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_history_reads_dropped_runs_back_from_git(cli, tmp_path):
    """A run removed with `git rm` still has its row, read from the commit that added it."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})

    results = tmp_path / "results"
    for created, median in (("2026-01-01T00:00:00Z", 0.25), ("2026-01-02T00:00:00Z", 0.125)):
        store.write_run(results, "m", created.replace("-", "").replace(":", ""),
                        {"calibration.json": store.json_writer(report_document("m", created, median))})
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "two runs")
    added = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    git("rm", "-r", "-q", "results/m/20260101T000000Z")
    git("commit", "-q", "-m", "drop the first")
    # one commit that adds a run and drops the one before it: git reads the new document as a
    # rename of the old one (they differ in a few numbers); then that run is dropped too
    git("rm", "-r", "-q", "results/m/20260102T000000Z")
    store.write_run(results, "m", "20260103T000000Z",
                    {"calibration.json": store.json_writer(report_document("m", "2026-01-03T00:00:00Z", 0.0625))})
    git("add", ".")
    git("commit", "-q", "-m", "a third run, the second dropped")
    third = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    store.write_run(results, "m", "20260104T000000Z",
                    {"calibration.json": store.json_writer(report_document("m", "2026-01-04T00:00:00Z", 0.03125))})
    git("rm", "-r", "-q", "results/m/20260103T000000Z")
    git("add", ".")
    git("commit", "-q", "-m", "a fourth run, the third dropped")
    rc, _, err = cli(report_cli.main, [str(results), "--markdown", str(results / "README.md")])
    assert rc == 0, err
    history = (results / "m" / "HISTORY.md").read_text()
    assert f"`git show {added[:12]}:results/m/20260101T000000Z/report.md`" in history
    assert f"`git show {third[:12]}:results/m/20260103T000000Z/report.md`" in history
    assert all(f"| {row} (14) |" in history for row in ("25.0% / 20.0%", "12.5% / 20.0%", "6.2% / 20.0%",
                                                        "3.1% / 20.0%"))
    index = (results / "README.md").read_text()
    assert "3.1% / 20.0%" in index and "6.2%" not in index            # the index shows what is in the tree


def test_run_summary_reads_the_document():
    doc = store.load(sorted(RESULTS.glob("intel-xeon-processor-2c-*/*"))[0])
    s = RunSummary.of(doc, "T")
    assert (s.hardware, s.torch, s.cases) == ("Intel(R) Xeon(R) Processor, 2 cores, AMX", "2.15.0", 14)
    assert s.warnings == tuple(dict.fromkeys(f.code for f in doc.flags if f.severity == "warning"))
    assert dataclasses.replace(s, in_tree=False).directory == f"{doc.machine_slug}/T"
    assert json.loads(json.dumps(dataclasses.asdict(s)))["median_abs_error"] == doc.validation.median_abs_error
