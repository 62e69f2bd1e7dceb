"""The outlier check live (docs/fleet.md, "Validated"): six `chipcal fleet run -- --smoke` runs of this
machine, one after the other, as six nodes, the fourth pinned to one core of its first two with
`taskset`; the report must flag the pinned node and no other. About 3 minutes on a 2-core VM, so
it is marked `live` and left out of the default run (`pytest -m live -n 0` runs it; the committed
store tests/data/fleet-store is the output of one such run, and tests/test_fleet_store.py checks
it on every run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

NODES = ["node-01", "node-02", "node-03", "node-04", "node-05", "node-06"]
PINNED = "node-04"


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.timing
def test_a_node_pinned_to_half_its_cores_is_flagged_live(tmp_path):
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None:
        pytest.skip("needs two CPUs and taskset to pin one run to half of them")
    store = tmp_path / "store"
    for node in NODES:
        pin = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] if node == PINNED else []
        done = subprocess.run([*pin, sys.executable, "-m", "chipcal.cli.main", "fleet", "run", "--store", str(store),
                               "--", "--smoke"], env={**os.environ, "CHIPCAL_NODE": node}, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run([sys.executable, "-m", "chipcal.cli.main", "fleet", "report", str(store), "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    flagged = {(r["node"], r["figure"]): r for r in json.loads(done.stdout) if r["outlier"]}
    assert {node for node, _ in flagged} == {PINNED}, [(k, v["why"]) for k, v in flagged.items()]
    assert flagged[PINNED, "gemm_fp32"]["deviation"] < -0.3
