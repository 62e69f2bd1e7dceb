"""`chipcal workload`: --json fields, tables, and user mistakes (exit 2, one line, no traceback)."""

from __future__ import annotations

import json

import pytest

from chipcal.cli import main as umbrella
from chipcal.cli import workload

TOTALS_FIELDS = ("model", "batch", "macs", "flop", "params", "bytes_read", "bytes_written",
                 "arithmetic_intensity", "subgraphs", "stages", "critical_path_flop", "unclassified_ops")


def _one_line_error(rc, err):
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err


def test_json_totals(cli):
    rc, out, _ = cli(workload.main, ["--model", "resnet18,squeezenet1_1", "--batch", "2", "--json"])
    assert rc == 0
    rows = json.loads(out)
    assert [r["model"] for r in rows] == ["resnet18", "squeezenet1_1"]
    for row in rows:
        for field in TOTALS_FIELDS:
            assert field in row, field
        assert all(not isinstance(v, list | dict) for v in row.values())   # flat records
        assert row["batch"] == 2 and row["flop"] >= 2 * row["macs"] and row["unclassified_ops"] == 0
    # resnet18 at batch 1 is 1,814,073,344 MACs (torchvision: 1.814 GFLOPS, i.e. GMACs)
    assert rows[0]["macs"] == 2 * 1_814_073_344
    assert rows[0]["params"] == 11_689_512


def test_json_by_op_and_by_subgraph(cli):
    rc, out, _ = cli(workload.main, ["--model", "resnet18", "--json", "--by-op"])
    ops = json.loads(out)
    assert rc == 0 and ops[0]["name"] == "conv1" and ops[0]["kind"] == "conv"
    # conv1: 112*112*64*3*49 = 118,013,952 MACs
    assert ops[0]["macs"] == 118_013_952 and ops[0]["gemm_k"] == 3 * 49
    assert sum(r["macs"] for r in ops) == 1_814_073_344
    rc, out, _ = cli(workload.main, ["--model", "resnet18", "--json", "--by-subgraph"])
    subgraphs = json.loads(out)
    assert rc == 0 and subgraphs[0]["pattern"] == "conv_bn_relu" and subgraphs[0]["stage"] == 0
    assert sum(r["macs"] for r in subgraphs) == 1_814_073_344


def test_tables(cli):
    rc, out, _ = cli(workload.main, ["--model", "resnet18", "--by-subgraph"])
    assert rc == 0 and "GMACs" in out and "conv_bn_add_relu" in out and "1.814" in out
    rc, out, _ = cli(workload.main, ["--model", "mobilenet_v2", "--by-op", "--input-size", "160"])
    assert rc == 0 and "depthwise" in out and "3x160x160" in out


def test_umbrella_dispatches(cli):
    rc, out, _ = cli(umbrella.main, ["workload", "--model", "alexnet", "--json"])
    assert rc == 0 and json.loads(out)[0]["model"] == "alexnet"


@pytest.mark.parametrize("argv", [
    [], ["--model", ""], ["--model", "resnet5"], ["--model", "resnet18,nope"], ["--model", "resnet18", "--batch", "0"],
    ["--model", "resnet18", "--batch", "two"], ["--model", "resnet18", "--input-size", "0"],
    ["--model", "resnet18", "--input-size", "1,2,3,4"], ["--model", "resnet18", "--input-size", "a,b"],
    ["--model", "resnet18", "--by-op", "--by-subgraph"], ["--model", "vit_b_16", "--input-size", "256"],
    ["--model", "inception_v3", "--input-size", "32"],
])
def test_bad_input(cli, argv):
    _one_line_error(*cli(workload.main, argv)[::2])


def test_unknown_model_suggests_close_matches(cli):
    rc, _, err = cli(workload.main, ["--model", "resnet5"])
    assert rc == 2 and "did you mean resnet50" in err and "vit_b_16" in err


def test_input_size_error_names_the_reason(cli):
    rc, _, err = cli(workload.main, ["--model", "vit_b_16", "--input-size", "256"])
    assert rc == 2 and "Expected 224 but got 256" in err
