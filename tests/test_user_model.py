"""The user's own model (`--model file.py:factory`): this file defines one and runs it through
`chipcal workload`, `chipcal predict` and `measure_model_efficiency`; every mistake is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

HERE = Path(__file__)
SPEC = f"{HERE}:factory"


class TwoLayers(torch.nn.Module):
    """x (B, 32) -> Linear 32->64 -> ReLU -> Linear 64->8, plus a learned offset added to the output."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x, scale):
        return self.fc2(torch.relu(self.fc1(x))) * scale


def factory(batch: int = 1):
    """The contract: (module, inputs), inputs a tensor or a tuple of the forward's arguments."""
    torch.manual_seed(0)
    return TwoLayers(), (torch.randn(batch, 32), torch.ones(1))


def no_batch():
    return TwoLayers(), (torch.randn(3, 32), torch.ones(1))


def not_a_module():
    return "resnet", torch.randn(1, 3)


def bad_inputs():
    return TwoLayers(), "a string"


def wrong_shape():
    return TwoLayers(), (torch.randn(2, 5), torch.ones(1))


NOT_CALLABLE = 3


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))


def workload_main(argv):
    from chipcal.cli import workload

    return workload.main(argv, prog="chipcal workload")


def predict_main(argv):
    from chipcal.cli import predict

    return predict.main(argv, prog="chipcal predict")


def test_workload_counts_the_user_model_by_hand(cli):
    rc, out, err = cli(workload_main, ["--model", SPEC, "--batch", "4", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["model"] == SPEC and row["batch"] == 4
    assert row["macs"] == 4 * (32 * 64 + 64 * 8)                 # two GEMMs, biases not counted
    assert row["params"] == 32 * 64 + 64 + 64 * 8 + 8


def test_a_factory_without_batch_gives_its_inputs_batch(cli):
    rc, out, _ = cli(workload_main, ["--model", f"{HERE}:no_batch", "--json"])
    assert rc == 0 and json.loads(out)[0]["batch"] == 3


def test_predict_runs_the_user_model(cli):
    rc, out, err = cli(predict_main, ["--model", SPEC, "--hardware", "h100-sxm5,l4", "--batch", "1,16",
                                      "--precision", "fp16", "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert {(r["chip"], r["batch"]) for r in rows} == {(c, b) for c in ("h100-sxm5", "l4") for b in (1, 16)}
    assert all(r["status"] == "ok" and r["latency_s"] > 0 for r in rows)
    assert {r["flop"] for r in rows if r["batch"] == 16} == {2 * 16 * (32 * 64 + 64 * 8) + 16 * 64 + 16 * 8}


# A timing test. n >= 2 does not rest on the host's speed: measure.timing.block_calls caps a block so
# that the minimum sample count (10) fills half the 1 s budget: a call of this ~19 us model would have
# to take about a quarter of a second, 10,000x longer, before fewer than two blocks fit. (Before the cap, torch's
# blocked_autorange took 10^4 calls a block to bring its ~2 us timer overhead under 1e-4 of it, and
# a 0.2 s budget held one sample: n = 1.)
@pytest.mark.timing
def test_measure_model_efficiency_times_the_user_model(cli):
    from chipcal.cli import measure_model_efficiency as mme

    rc, out, err = cli(lambda a: mme.main(a), ["--model", SPEC, "--batch", "2", "--max-time", "1", "--no-power",
                                               "--peak", "spec", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["model"] == SPEC and row["latency_s"] > 0 and row["n"] >= 2
    assert row["flop"] == 2 * 2 * (32 * 64 + 64 * 8) + 2 * 64 + 2 * 8     # GEMMs, ReLU, the scale


@pytest.mark.parametrize("spec, says", [
    ("/nonexistent/model.py:factory", "no such file"),
    (f"{HERE}:missing", "has no 'missing'"),
    (f"{HERE}:NOT_CALLABLE", "not a function"),
    (f"{HERE}:not_a_module", "where a torch.nn.Module belongs"),
    (f"{HERE}:bad_inputs", "inputs must be a tensor"),
    (f"{HERE}:wrong_shape", "does not run on its inputs"),
    ("no_such_package.models:factory", "no module named 'no_such_package'"),
])
@pytest.mark.parametrize("tool", ["workload", "predict"])
def test_mistakes_exit_2_with_one_line(cli, spec, says, tool):
    main, extra = (workload_main, []) if tool == "workload" else (predict_main, ["--hardware", "h100-sxm5"])
    rc, _, err = cli(main, ["--model", spec, *extra])
    assert rc == 2 and says in err and "Traceback" not in err
    assert len([line for line in err.strip().splitlines() if not line.startswith("characterizing")]) == 1


def test_a_file_that_raises_on_import_is_one_line(cli, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no GPU here')\n")
    rc, _, err = cli(workload_main, ["--model", f"{broken}:factory"])
    assert rc == 2 and "running it raised RuntimeError: no GPU here" in err
