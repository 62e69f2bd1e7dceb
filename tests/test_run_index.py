"""The incremental SQLite index of a results directory (report/run_index.py): it gives what reading
every document gives, reads only new or changed documents, forgets removed runs, keeps unreadable
ones with their reason, starts over for another version of the code, and works where the
directory is read-only or the index file is damaged. The benchmark (10,000 runs) runs with
`python -m pytest tests/test_run_index.py --benchmark-only -n 0`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from recorded import report_document

from chipcal.calibrate import store
from chipcal.report import run_index
from chipcal.report.index import RunSummary, index_markdown
from chipcal.report.run_index import INDEX_FILE, indexed_runs


def _write_run(root: Path, slug: str, created: str, median: float = 0.1, slim: bool = False) -> Path:
    """A run directory root/slug/<created> holding a report_document (observations emptied if `slim`)."""
    doc = report_document(slug, created=created, median=median)
    if slim:
        doc["observations"] = {k: ([] if isinstance(v, list) else v) for k, v in doc["observations"].items()}
    run = root / slug / created.replace("-", "").replace(":", "")
    run.mkdir(parents=True)
    (run / store.CALIBRATION_FILE).write_text(json.dumps(doc))
    return run


def _read_directly(root: Path) -> list[RunSummary]:
    """Every document read and summarized, no index: what the index must give."""
    return [RunSummary.of(store.load(d), d.name) for d in store.find_runs(root)]


@pytest.fixture
def three_runs(tmp_path):
    root = tmp_path / "results"
    for i, slug in enumerate(("zen-a", "zen-b", "xeon")):
        _write_run(root, slug, f"2026-01-0{i + 1}T00:00:00Z", median=0.1 + i / 100)
    return root


def test_the_index_gives_what_reading_every_document_gives(three_runs):
    runs, skipped, update = indexed_runs(three_runs)
    assert (update.read, update.kept, update.removed) == (3, 0, 0) and skipped == []
    assert runs == _read_directly(three_runs)
    assert (three_runs / INDEX_FILE).is_file()
    again, _, update = indexed_runs(three_runs)
    assert again == runs and (update.read, update.kept) == (0, 3)


def test_only_a_changed_document_is_read_again_and_a_removed_run_is_forgotten(three_runs):
    indexed_runs(three_runs)
    doc_path = next(three_runs.glob("zen-a/*")) / store.CALIBRATION_FILE
    doc = json.loads(doc_path.read_text())
    doc["validation"]["median_abs_error"] = 0.42
    doc_path.write_text(json.dumps(doc))
    runs, _, update = indexed_runs(three_runs)
    assert (update.read, update.kept, update.removed) == (1, 2, 0)
    assert [r.median_abs_error for r in runs if r.machine == "zen-a"] == [0.42]
    for f in next(three_runs.glob("xeon/*")).iterdir():
        f.unlink()
    runs, _, update = indexed_runs(three_runs)
    assert update.removed == 1 and {r.machine for r in runs} == {"zen-a", "zen-b"}


def test_an_unreadable_document_is_kept_with_its_reason_until_it_changes(three_runs):
    bad = next(three_runs.glob("zen-b/*")) / store.CALIBRATION_FILE
    good = bad.read_text()
    bad.write_text("{not json")
    runs, skipped, _ = indexed_runs(three_runs)
    assert len(runs) == 2 and len(skipped) == 1 and str(bad.parent) in skipped[0]
    _, skipped, update = indexed_runs(three_runs)
    assert len(skipped) == 1 and update.read == 0        # not read again while unchanged
    bad.write_text(good)
    runs, skipped, update = indexed_runs(three_runs)
    assert len(runs) == 3 and skipped == [] and update.read == 1


def test_another_version_of_the_code_starts_over(three_runs, monkeypatch):
    indexed_runs(three_runs)
    monkeypatch.setattr(run_index, "code_key", lambda: "another version")
    runs, _, update = indexed_runs(three_runs)
    assert (update.read, update.kept) == (3, 0) and runs == _read_directly(three_runs)


def test_a_directory_it_cannot_write_is_indexed_in_memory(three_runs, monkeypatch):
    """As a user reading someone else's results: no index file is written (os.access says no;
    root, who runs the tests, writes through a read-only mode)."""
    monkeypatch.setattr(run_index.os, "access", lambda *args: False)
    runs, _, update = indexed_runs(three_runs)
    assert runs == _read_directly(three_runs) and update.read == 3 and not (three_runs / INDEX_FILE).exists()


def test_a_damaged_index_file_does_not_stop_the_report(three_runs):
    (three_runs / INDEX_FILE).write_bytes(b"not a database" * 100)
    runs, _, update = indexed_runs(three_runs)
    assert runs == _read_directly(three_runs) and update.read == 3


def test_runs_come_back_in_the_directory_walk_order(tmp_path):
    """Path order, not string order: 'a-b/...' sorts after 'a/...' as paths, before it as text."""
    root = tmp_path / "results"
    for slug in ("a-b", "a"):
        _write_run(root, slug, "2026-01-01T00:00:00Z")
    runs, _, _ = indexed_runs(root)
    assert [r.machine for r in runs] == ["a", "a-b"] == [r.machine for r in _read_directly(root)]


def _index_then(benchmark, root: Path, name: str, report):
    """The index of `root` built, then brought up to date with nothing changed, then `report(runs)`:
    each timed once (the benchmark's one round) and printed; returns (runs, the update, the report)."""
    times = {}

    def stages():
        for stage in ("index, first build", "index update, nothing changed"):
            start = time.perf_counter()
            runs, _, update = indexed_runs(root)
            times[stage] = time.perf_counter() - start
        start = time.perf_counter()
        out = report(runs)
        times[name] = time.perf_counter() - start
        return runs, update, out

    result = benchmark.pedantic(stages, rounds=1, iterations=1)
    print({k: f"{v:.1f} s" for k, v in times.items()})
    return result


def test_ten_thousand_runs_indexed_and_reported(tmp_path, benchmark):
    """The index built over 10,000 runs (slim documents, 100 machines), then brought up to date with
    nothing changed, then the results index written from it: each in seconds, printed."""
    root = tmp_path / "results"
    template = _write_run(tmp_path / "template", "SLUG", "2026-01-01T00:00:00Z", slim=True)
    text = (template / store.CALIBRATION_FILE).read_text()
    for i in range(10_000):
        run = root / f"machine-{i % 100:03d}" / f"2026{i // 100:08d}Z"
        run.mkdir(parents=True)
        (run / store.CALIBRATION_FILE).write_text(text.replace("SLUG", f"machine-{i % 100:03d}"))
    runs, update, _ = _index_then(benchmark, root, "results index from it", index_markdown)
    assert len(runs) == 10_000 and update.kept == 10_000


def test_a_fleet_of_ten_thousand_runs_indexed_and_reported(tmp_path, benchmark):
    """A fleet store of 10,000 runs (2,500 nodes of one class, 4 runs each, slim documents whose
    GEMM peak differs by node), indexed, then the fleet report built from the index (outliers
    and drift included): each in seconds, printed."""
    from chipcal.fleet.report import blocks, build
    from chipcal.report.render import text as render_text

    root = tmp_path / "store"
    template = _write_run(tmp_path / "template", "SLUG", "2026-01-01T00:00:00Z", slim=True)
    doc = json.loads((template / store.CALIBRATION_FILE).read_text())
    doc["node"] = {"name": "NODE", "source": "CHIPCAL_NODE", "hostname": "NODE", "gpu_uuids": []}
    text = json.dumps(doc).replace("SLUG", "fleet-class").replace("200000000000.0", "PEAK")
    for i in range(10_000):
        node, run = f"node-{i % 2500:04d}", i // 2500
        peak = 2e11 * (0.5 if i % 2500 == 7 else 1 + 0.01 * ((i * 7919) % 13 - 6) / 6)
        path = root / node / f"2026010{run}T000000Z"
        path.mkdir(parents=True)
        (path / store.CALIBRATION_FILE).write_text(
            text.replace("NODE", node).replace("PEAK", repr(peak)).replace("2026-01-01T00:00:00Z",
                                                                           f"2026-01-0{run + 1}T00:00:00Z"))
    def fleet_report(runs):
        report = build(runs, str(root))
        render_text(blocks(report))
        return report

    runs, _, report = _index_then(benchmark, root, "fleet report from it, as text", fleet_report)
    assert len(runs) == 10_000 and len(report.nodes) == 2500
    assert {(o.node, o.figure) for o in report.outliers} == {("node-0007", "gemm_fp32")}
