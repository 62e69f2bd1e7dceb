"""Which node a run measured (measure.node), where --by-node writes it, and what --smoke shortens."""

from __future__ import annotations

import socket

from recorded import report_document

from chipcal.calibrate.config import CalibrationConfig
from chipcal.calibrate.document import CalibrationDocument
from chipcal.measure import bandwidth
from chipcal.measure.node import Node, this_node
from chipcal.report.index import RunSummary


def test_the_node_name_is_the_scheduler_s_before_the_host_s(monkeypatch):
    monkeypatch.delenv("CHIPCAL_NODE", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    assert (this_node().name, this_node().source) == (socket.gethostname().split(".")[0], "hostname")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-a17")
    assert (this_node().name, this_node().source) == ("gpu-a17", "SLURMD_NODENAME")
    monkeypatch.setenv("CHIPCAL_NODE", "k8s-node/3")       # Kubernetes: the pod's spec.nodeName
    node = this_node()
    assert (node.name, node.source, node.folder) == ("k8s-node/3", "CHIPCAL_NODE", "k8s-node_3")
    assert node.hostname == socket.gethostname()


def test_by_node_writes_under_the_node_and_journals_beside_it(monkeypatch, tmp_path):
    monkeypatch.setenv("CHIPCAL_NODE", "n7")
    assert CalibrationConfig(by_node=True).folder("slug") == "n7"
    assert CalibrationConfig().folder("slug") == "slug"
    assert CalibrationConfig(by_node=True).journal_root(tmp_path) == tmp_path / "n7"
    assert CalibrationConfig().journal_root(tmp_path) == tmp_path


def test_smoke_shortens_every_budget_and_skips_the_cache():
    smoke, quick = CalibrationConfig(smoke=True), CalibrationConfig(quick=True)
    assert smoke.probe_budget(2.0) == {"max_time_s": 0.25, "use_cache": False, "remeasure": True}
    assert quick.probe_budget(2.0) == {"remeasure": False}
    assert smoke.layer_time_s < quick.layer_time_s and smoke.validation_time_s < quick.validation_time_s
    assert smoke.extra_rounds_time_s == 0 and smoke.rounds == 2
    # CPU: 16, 64, 256 KiB, then 1 MiB x 2^(j/2) for j = 0..12 in 4 KiB pages, then 256 and 320 MiB:
    # indices 0, 6, 12 and the last two -> 16 KiB, j = 3, 9, 256 MiB, 320 MiB, where
    # 2^20 * 2^1.5 / 4096 = 724.08 -> 724 pages and 2^20 * 2^4.5 / 4096 = 5792.6 -> 5793
    sizes = bandwidth.DEFAULT_BANDWIDTH_SIZES["cpu"]
    assert smoke.bandwidth_sizes(sizes) == (16 * 1024, 724 * 4096, 5793 * 4096, 256 * 2**20, 320 * 2**20)
    assert quick.bandwidth_sizes(sizes) == sizes


def test_the_node_round_trips_and_an_older_document_is_named_by_its_folder():
    data = report_document("m-1")
    old = CalibrationDocument.from_dict(data)
    assert old.node is None and old.smoke is None
    assert RunSummary.of(old, "20260101T000000Z", folder="rack-7").node == "rack-7"
    assert RunSummary.of(old, "20260101T000000Z", folder="m-1").node is None        # results/<machine>/: no node
    node = Node("gpu-1", "SLURMD_NODENAME", "gpu-1.cluster", ("GPU-aaaa",))
    new = CalibrationDocument.from_dict({**data, "node": node.to_dict(), "smoke": True})
    assert new.node == node and new.smoke is True
    assert CalibrationDocument.from_dict(new.to_dict()) == new
    summary = RunSummary.of(new, "20260101T000000Z", folder="gpu-1")
    assert (summary.node, summary.smoke, summary.directory) == ("gpu-1", True, "gpu-1/20260101T000000Z")
