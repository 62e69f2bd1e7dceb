"""A GPU calibration's compiled and generate rows (issue 55, calibrate.users_run): the plan, the wall
budget with a fake clock, each row's prediction beside a faked measurement on a CUDA device, the
journal, the document and the report. No GPU: the measurements are stand-ins, the predictions real."""

from __future__ import annotations

import pytest

from chipcal.calibrate import document as cd
from chipcal.calibrate import users_run as ur
from chipcal.calibrate.config import QUICK_MODELS, CalibrationConfig
from chipcal.calibrate.context import RunContext, SilentProgress
from chipcal.calibrate.journal import NoJournal
from chipcal.calibrate.phases import PhaseClock
from chipcal.measure.device import Device
from chipcal.measure.timing import Measurement
from chipcal.model.mapping.params import default_params
from chipcal.model.registry import load_registry

CUDA = Device("cuda", 0)


def test_the_decoder_first_then_bf16_weights_at_both_ends_of_the_batches():
    planned = ur.plan(QUICK_MODELS)
    assert [(p.kind, p.context) for p in planned[:4]] == [("step", 128), ("generate", 128), ("step", 2048),
                                                          ("generate", 2048)]
    compiled = planned[4:]
    # 3 models x 3 batches x (bf16 weights, autocast)
    assert len(compiled) == 18 and {p.kind for p in compiled} == {"compiled"}
    assert compiled[0].label == "compiled resnet50 b64 bf16"
    # the ~5 rows a lent H200's 90 s held: every model at batch 64 and then at batch 1, bf16 weights
    assert [(p.model, p.batch, p.mode) for p in compiled[:6]] == [
        (m, b, "bf16") for b in (64, 1) for m in ("resnet50", "vit_b_16", "mobilenet_v2")]
    assert {p.mode for p in compiled[9:]} == {"autocast"}
    assert ur.plan(("resnet18",))[4:] == []            # no compiled model among the run's


def test_rows_run_while_they_fit_the_budget():
    """Decoder rows take 5 s each and compiled rows 30 s, with a budget of 90 s: the 4 decoder rows
    (20 s), two compiled rows (80 s); the third would end at 80 + 30 > 90, so it and the rest are
    skipped, and so is every row after it, each priced at the longest of its kind so far."""
    now = [0.0]
    cost = {"step": 5.0, "generate": 5.0, "compiled": 30.0}

    def measure(entry):
        now[0] += cost[entry.kind]
        return entry

    planned = ur.plan(QUICK_MODELS)
    rows, skipped = ur.run_rows(planned, 90.0, measure, clock=lambda: now[0])
    assert len(rows) == 6 and rows[4:] == planned[4:6]
    assert skipped == [p.label for p in planned[6:]] and now[0] == 80.0


def test_a_failing_row_is_skipped_with_its_reason_and_the_rest_run():
    from chipcal.model.workload.llm_config import TransformersMissing

    def measure(entry):
        if entry.kind != "compiled":
            raise TransformersMissing(entry.model)
        if entry.batch == 64 and entry.model == "vit_b_16":
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return entry

    planned = ur.plan(QUICK_MODELS)
    rows, skipped = ur.run_rows(planned, 90.0, measure, clock=lambda: 0.0)
    assert len(rows) == 18 - 2 and len(skipped) == 4 + 2
    assert skipped[0].startswith("step llama-3.2-1b b1 bf16 @128+32 (") and "transformers" in skipped[0]
    assert skipped[4] == "compiled vit_b_16 b64 bf16 (CUDA out of memory. Tried to allocate 2.00 GiB)"


def fake_latency(seconds: float) -> Measurement:
    return Measurement.from_samples([seconds] * 5)


@pytest.fixture
def h100():
    return load_registry().get("h100-sxm5")


def test_a_compiled_row_is_the_compiled_prediction_beside_the_measurement(monkeypatch, h100):
    """The row's prediction is the `compiled` runtime's of Inductor's partition at bf16, with the
    autocast casts for an autocast row; the measurement is asked for as torch.compile on CUDA."""
    from chipcal.measure import models
    from chipcal.measure.workloads import WorkloadSource
    from chipcal.model.estimate.prediction import predict

    asked = []
    monkeypatch.setattr(models, "measure_model", fake_measure_model(asked))
    run = RunContext(CalibrationConfig(device=CUDA, quick=True), SilentProgress(), NoJournal(), PhaseClock())
    params = default_params("gpu")
    row = ur.measure_row(run, h100, params, ur.Planned("compiled", "resnet18", 8, "autocast"))
    (only,) = asked                       # below the largest batch: no eager pass
    assert only["runtime"] == "compiled" and only["autocast"] and only["precision"] == "fp32"
    assert only["device"] == CUDA and only["profile"]
    expected = predict(WorkloadSource().get("resnet18", 8, "codegen"), h100, "bf16", params=params,
                       runtime="compiled", autocast=True).latency_s
    assert row.predicted_s == pytest.approx(expected) and row.measured_s == pytest.approx(2e-3)
    assert row.error == pytest.approx(expected / 2e-3 - 1) and row.compile_s == 31.0


def fake_measure_model(asked: list):
    """measure_model as a GPU would answer it: compiled 2 ms a pass, eager 1.5 ms, each profiled with
    ten kernels of 0.1 to 1.0 µs (GEMMs named by runtime)."""
    from chipcal.measure import models
    from chipcal.measure.kernel_profile import KernelProfile, KernelTime

    def measure_model(name, batch, precision, device, **kw):
        asked.append(dict(name=name, batch=batch, precision=precision, device=device, **kw))
        runtime = kw["runtime"]
        kernels = KernelProfile("cuda", 5, tuple(KernelTime(f"{runtime}_kernel_{i}", 1.0, (10 - i) * 1e-7)
                                                 for i in range(10)))
        return models.ModelMeasurement(
            model=name, batch=batch, precision=precision, device=str(device), flop=1,
            latency=fake_latency(2e-3 if runtime == "compiled" else 1.5e-3), delivered_flop_per_s=1.0, power=None,
            power_source="unavailable", power_note="", runtime=runtime, kernels=kernels,
            compile_s=31.0 if runtime == "compiled" else None)
    return measure_model


def test_a_compiled_row_at_the_largest_batch_runs_eager_beside_it_and_keeps_the_largest_kernels(monkeypatch, h100):
    """Batch 64: the same pass eager too, both profiled; 8 kernels of each kept, largest first; their
    totals over all ten: 10 + 9 + … + 1 = 55 × 0.1 µs = 5.5 µs each."""
    from chipcal.measure import models

    asked = []
    monkeypatch.setattr(models, "measure_model", fake_measure_model(asked))
    run = RunContext(CalibrationConfig(device=CUDA, quick=True), SilentProgress(), NoJournal(), PhaseClock())
    row = ur.measure_row(run, h100, default_params("gpu"), ur.Planned("compiled", "vit_b_16", 64, "bf16"))
    assert [(a["runtime"], a["profile"], a["precision"]) for a in asked] == [("compiled", True, "bf16"),
                                                                              ("eager", True, "bf16")]
    assert (row.measured_s, row.eager_measured_s) == (pytest.approx(2e-3), pytest.approx(1.5e-3))
    assert row.kernels_s == pytest.approx(5.5e-6) and row.eager_kernels_s == pytest.approx(5.5e-6)
    assert [k.name for k in row.kernels if k.runtime == "eager"] == [f"eager_kernel_{i}" for i in range(8)]
    assert len(row.kernels) == 16 and cd.UsersRunRow.from_dict(row.to_dict()) == row


def test_decoder_rows_predict_the_step_and_generate_rates(monkeypatch, h100):
    """A step row is priced at the forward alone (step_tokens_per_s), a generate row at generate's
    rate: the same request, two predictions. Both are profiled; each keeps its 8 largest kernels,
    and all ten's time, 10 + 9 + … + 1 = 55 × 0.1 µs = 5.5 µs, against its 10 ms a token."""
    pytest.importorskip("transformers")
    from chipcal.measure import llm
    from chipcal.measure.kernel_profile import KernelProfile, KernelTime
    from chipcal.measure.workloads import WorkloadSource
    from chipcal.model.estimate.llm import predict_llm
    from chipcal.model.workload.llm_config import load_llm_config, step_key

    kernels = KernelProfile("cuda", 5, tuple(KernelTime(f"kernel_{i}", 1.0, (10 - i) * 1e-7) for i in range(10)))
    step_m = llm.ModelMeasurement(model="gpt2", batch=1, precision="bf16", device="cuda:0", flop=1,
                                  latency=fake_latency(0.010), delivered_flop_per_s=1.0, power=None,
                                  power_source="unavailable", power_note="", kernels=kernels)
    asked = []

    def answer(result):
        def measure(*args, **kw):
            asked.append(kw["profile"])
            return result
        return measure

    monkeypatch.setattr(llm, "measure_llm", answer(step_m))
    monkeypatch.setattr(llm, "measure_generate", answer(llm.GenerateMeasurement(
        step_m, fake_latency(0.05), fake_latency(0.4))))
    run = RunContext(CalibrationConfig(device=CUDA, quick=True), SilentProgress(), NoJournal(), PhaseClock())
    params = default_params("gpu")
    step = ur.measure_row(run, h100, params, ur.Planned("step", "gpt2", 1, "bf16", 128))
    generate = ur.measure_row(run, h100, params, ur.Planned("generate", "gpt2", 1, "bf16", 128))
    config, source = load_llm_config("gpt2"), WorkloadSource()
    steps = [source.llm_step(step_key(config, "eager", ph, 1, 128, ur.NEW_TOKENS, "bf16")) for ph in ("prefill", "decode")]
    p = predict_llm(config, *steps, h100, "bf16", "eager", 128, ur.NEW_TOKENS, params=params)
    assert step.predicted_s == pytest.approx(1 / p.step_tokens_per_s)
    assert generate.predicted_s == pytest.approx(1 / p.tokens_per_s) and generate.predicted_s > step.predicted_s
    assert step.context == 128 and step.new_tokens == ur.NEW_TOKENS and step.compile_s is None
    assert asked == [True, True]
    for row in (step, generate):
        assert row.kernels_s == pytest.approx(5.5e-6) and len(row.kernels) == 8
        assert {k.runtime for k in row.kernels} == {row.kind} and row.eager_measured_s is None


class Journal:
    def __init__(self):
        self.steps = {}

    def get(self, step):
        return self.steps.get(step)

    def put(self, step, data):
        self.steps[step] = data


def test_the_phase_runs_on_cuda_only_and_a_resumed_run_reads_it_back(monkeypatch, h100):
    measured = []

    def measure_row(run, chip, params, entry):
        measured.append(entry.label)
        return cd.UsersRunRow(kind=entry.kind, model=entry.model, batch=entry.batch, mode=entry.mode,
                              measured_s=1e-3, n=5, cv=0.01, predicted_s=1.1e-3, error=0.1)

    monkeypatch.setattr(ur, "measure_row", measure_row)
    cpu = RunContext(CalibrationConfig(quick=True), SilentProgress(), NoJournal(), PhaseClock())
    assert ur.users_run(cpu, h100, default_params("gpu")) is None and measured == []
    journal = Journal()
    gpu = RunContext(CalibrationConfig(device=CUDA, quick=True), SilentProgress(), journal, PhaseClock())
    first = ur.users_run(gpu, h100, default_params("gpu"))
    assert first.budget_s == 90.0 and len(first.rows) == 22 and not first.skipped     # the stand-in takes no time
    again = ur.users_run(RunContext(gpu.config, SilentProgress(), journal, PhaseClock()), h100, default_params("gpu"))
    assert again == first and len(measured) == 22                                       # read back, not measured


def test_the_section_round_trips_and_is_reported():
    from recorded import reference_document

    from chipcal.report.calibration import render_markdown

    kernels = (cd.UsersRunKernel(runtime="compiled", name="triton_poi_fused_add_clone_3", calls=12.0, self_s=4.1e-4),
               cd.UsersRunKernel(runtime="eager", name="pytorch_flash::flash_fwd_kernel", calls=12.0, self_s=9.0e-4))
    section = cd.UsersRunSection(rows=(cd.UsersRunRow(kind="compiled", model="resnet50", batch=64, mode="bf16",
                                                      measured_s=0.0092, n=12, cv=0.02, predicted_s=0.0066,
                                                      error=0.0066 / 0.0092 - 1, compile_s=41.0, kernels_s=0.0088,
                                                      eager_measured_s=0.0077, eager_kernels_s=0.0074,
                                                      kernels=kernels),
                                       cd.UsersRunRow(kind="generate", model="llama-3.2-1b", batch=1, mode="bf16",
                                                      measured_s=0.0114, n=3, cv=0.01, predicted_s=0.0129,
                                                      error=0.0129 / 0.0114 - 1, context=128, new_tokens=32,
                                                      kernels_s=0.0011, kernels=(cd.UsersRunKernel(
                                                          runtime="generate", name="gemv2T_kernel", calls=112.0,
                                                          self_s=6.0e-4),))),
                                 skipped=("compiled vit_b_16 b1 autocast",), budget_s=90.0)
    assert cd.UsersRunSection.from_dict(section.to_dict()) == section
    doc = cd.CalibrationDocument.from_dict({**reference_document(), "users_run": section.to_dict()})
    text = render_markdown(doc)
    assert "What users run" in text and "-28.3%" in text and "compiled vit_b_16 b1 autocast" in text
    assert "triton_poi_fused_add_clone_3" in text and "pytorch_flash::flash_fwd_kernel" in text
    assert "compiled 8.8 ms of 9.2 ms, eager 7.4 ms of 7.7 ms" in text
    assert "generate llama-3.2-1b b1 bf16 @128+32: generate 1.1 ms of 11.4 ms" in text and "gemv2T_kernel" in text
    assert "11.4 ms (87.7 tok/s)" in text and "12.9 ms (77.5 tok/s)" in text        # 1 / 11.4 ms, 1 / 12.9 ms
