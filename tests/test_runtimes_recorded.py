"""Issue 55 on two recorded CPUs, the Zen 4 and the Zen 5 VM: torch.compile (Inductor's C++ kernels,
channels-last) and Hugging Face generate end to end, predicted with the main job's calibration of
the same hour, against the timings `measure_model_efficiency` recorded right after it
(tests/machines/README.md; the commands are in docs/findings/2026-11-29-compiled-and-generate-on-cpu.md,
the Zen 5's in docs/findings/2026-11-30-compiled-and-generate-on-zen5.md)."""

from __future__ import annotations

import json
import statistics

import pytest
from recorded import MACHINES, recorded_chip

from chipcal.calibrate.document import CalibrationDocument

BOUND = 0.25        # issue 55: compiled, median |error| at batch 1 and 8; generate, each row
RUNS = {            # folder: the date of its main job and of the timings taken right after it
    "amd-epyc-zen4-2vcpu": "20261129",
    "amd-epyc-zen5-2vcpu": "20261130",
}


def recorded(folder: str, kind: str):
    """A recorded run's document: kind is calibration-main, compiled or llm."""
    return json.loads((MACHINES / folder / f"{kind}-{RUNS[folder]}.json").read_text())


@pytest.fixture(scope="module", params=sorted(RUNS))
def calibrated(request, tmp_path_factory):
    """(folder, chip, fitted parameters) of the main job recorded with the timings."""
    folder = request.param
    doc = CalibrationDocument.from_dict(recorded(folder, "calibration-main"))
    return folder, recorded_chip(tmp_path_factory.mktemp(folder), folder, doc), doc.parameters.family_params


def _errors(folder, chip, params, partition: str) -> dict[str, float]:
    from chipcal.model.estimate.prediction import predict
    from chipcal.model.workload import characterize_model

    errors = {}
    for row in recorded(folder, "compiled"):
        workload = characterize_model(row["model"], row["batch"], partition=partition)
        predicted = predict(workload, chip, "fp32", params=params, runtime="compiled").latency_s
        errors[f"{row['model']} b{row['batch']}"] = predicted / row["latency_s"] - 1
    return errors


def test_compiled_validation_models_within_issue_55s_bound(calibrated):
    """The calibration's 11 validation models at batch 1 and 8, compiled: median |error| within 25 %."""
    folder, chip, params = calibrated
    errors = _errors(folder, chip, params, "codegen")
    assert len(errors) == 22 and {r["runtime"] for r in recorded(folder, "compiled")} == {"compiled"}
    assert statistics.median(abs(e) for e in errors.values()) <= BOUND, errors


@pytest.mark.parametrize("model, context", [("gpt2", 128), ("gpt2", 512), ("llama-3.2-1b", 32)])
def test_generate_end_to_end_and_the_step_within_issue_55s_bound(calibrated, model, context):
    """Both rates of the prediction against both timings of the same request (32 new tokens):
    generate end to end, and the decode step alone."""
    pytest.importorskip("transformers")
    from chipcal.measure.workloads import WorkloadSource
    from chipcal.model.estimate.llm import predict_llm
    from chipcal.model.workload.llm_config import load_llm_config, step_key

    folder, chip, params = calibrated
    rows = {r["runtime"]: r for r in recorded(folder, "llm")
            if r["model"] == model and r["context"] == context}
    new = rows["generate"]["new_tokens"]
    config = load_llm_config(model)
    source = WorkloadSource()
    steps = [source.llm_step(step_key(config, "eager", phase, 1, context, new, "fp32")) for phase in ("prefill", "decode")]
    p = predict_llm(config, *steps, chip, "fp32", "eager", context, new, params=params)
    generate_error = 1 / p.tokens_per_s / rows["generate"]["latency_s"] - 1
    step_error = 1 / p.step_tokens_per_s / rows["eager"]["latency_s"] - 1
    assert abs(generate_error) <= BOUND and abs(step_error) <= BOUND, (generate_error, step_error)
