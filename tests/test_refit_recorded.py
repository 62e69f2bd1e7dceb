"""Re-fit recorded calibration runs of other machines and predict their recorded whole-model
timings: the fit must hold on a CPU the code was not developed on (issues: calibration that holds
on a second machine; that transfers to a third, issue 38). Each run is re-fitted once per pytest run
(`refitted`, conftest.once_per_run); its bounds are the target or the figure it first reached, and its figures may not
drift from what its refit reached at the last review by more than two points (recorded_runs).
Under pytest-xdist the tests of one refit form one group (`same_refit`), so that one worker refits it
while the other works on something else."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics

import pytest
from recorded import MACHINES, recorded_chip, reference_document
from recorded_runs import RECORDED, TARGET, WORSE_BY

from chipcal.calibrate import document as cd
from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument
from chipcal.calibrate.refit import refit
from chipcal.cli import calibrate as calibrate_cli

pytestmark = pytest.mark.usefixtures("characterize_once")


def same_refit(run_id: str):
    """The mark that keeps the tests of one refit on one pytest-xdist worker (the suite runs with
    --dist loadgroup), so that the other worker does not wait on the refit it is computing
    (`once_per_run` would share it either way)."""
    return pytest.mark.xdist_group(f"refit-{run_id}")


@pytest.fixture(scope="session")
def refitted(once_per_run, tmp_path_factory):
    """refitted(name, document) -> (document, Refit, chip): each recorded CPU run re-fitted once
    per pytest run (a refit takes 3-10 s), shared by every test that looks at it, on any worker."""
    def get(name: str, document: str):
        def build():
            doc = CalibrationDocument.from_dict(json.loads((MACHINES / name / document).read_text()))
            chip = recorded_chip(tmp_path_factory.mktemp(name), name, doc)
            return doc, refit(doc, chip), chip
        return once_per_run(f"refit {name}/{document}", build)

    return get


def _per_model(result) -> str:
    return ", ".join(f"{m.model} b{m.batch} {m.error:+.0%}" for m in result.models)


def _bound_cases():
    for run in RECORDED:
        for stat in ("median", "p90"):
            marks = ([pytest.mark.xfail(strict=True, reason=f"{run.id}: {stat} regressed: {run.regressed[stat]}")]
                     if stat in run.regressed else []) + [same_refit(run.id)]
            yield pytest.param(run, stat, id=f"{run.id}-{stat}", marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize(("run", "stat"), list(_bound_cases()))
def test_refit_of_a_recorded_run_meets_its_bound(refitted, run, stat):
    """Today's fit on a machine's recorded raw timings predicts its recorded whole-model timings
    (never used in the fit) within the run's bound: the target where the run reached it, else the
    figure the machine first reached (Recorded)."""
    _, result, _ = refitted(run.name, run.document)
    figure = result.median_abs_error if stat == "median" else result.p90_abs_error
    meaning = "the target" if run.bound[stat] == TARGET[stat] else "the figure this run first reached"
    assert figure <= run.bound[stat], (f"{run.id}: refit {stat} |error| {figure:.1%} misses its bound "
                                       f"{run.bound[stat]:.1%} ({meaning}); per model: {_per_model(result)}")


@pytest.mark.slow
@pytest.mark.parametrize("run", [pytest.param(r, id=r.id, marks=same_refit(r.id)) for r in RECORDED])
def test_refit_of_a_recorded_run_is_no_worse_than_it_was(refitted, run):
    """A change that makes a recorded machine worse by more than WORSE_BY than the figures its refit
    reached at the last review fails here, naming the machine and the models; the calibration
    beats the defaults by `gain`; every parameter the fits report as held at its prior holds that
    value (a parameter found unconstrained only in the second pass once kept its fitted value)."""
    _, result, _ = refitted(run.name, run.document)
    assert len(result.models) == run.runs
    for stat, figure in (("median", result.median_abs_error), ("p90", result.p90_abs_error)):
        assert figure <= run.reached[stat] + WORSE_BY, (
            f"{run.id}: refit {stat} |error| {figure:.1%} is worse than the {run.reached[stat]:.1%} it reached "
            f"by more than {WORSE_BY:.0%}; per model: {_per_model(result)}")
    assert result.median_abs_error < result.default_median_abs_error / run.gain, (
        f"{run.id}: calibrated median {result.median_abs_error:.1%} is not {run.gain}x better than the "
        f"defaults' {result.default_median_abs_error:.1%}")
    for fit in (result.fit.layer_fit, result.fit.switch_fit):
        for name, reason in fit.unconstrained.items():
            held = re.search(r"the prior (\S+) is kept", reason)
            if held:     # the report says the prior is kept: the value used is that prior
                assert fit.parameters[name] == pytest.approx(float(held.group(1)), rel=5e-3), (name, reason)
            ceiling = re.search(r"upper bound \((\S+)\), a physical limit: held there", reason)
            if ceiling:
                assert fit.parameters[name] == pytest.approx(float(ceiling.group(1)), rel=5e-3), (name, reason)


H100 = MACHINES / "nvidia-h100-sxm5"
H100_RUN = H100 / "calibration-full.json"
# what each recorded H100 run's own calibration reached on its day (its validation section, held-out
# models): the 11-24 full run charged the host twice and the size ramp per SM, the 11-26 --quick run
# put its TF32 convolutions' efficiency on strict-fp32 models (docs/findings/2026-11-26-h100-eager-pytorch2.md)
H100_RUNS = {"calibration-full.json": (0.685, 14), "calibration-quick.json": (0.263, 18)}


@pytest.fixture(scope="session")
def registry_refitted(once_per_run):
    """registry_refitted(path, chip) -> (document, Refit): the recorded GPU run at `path` re-fitted
    on the registry's `chip` (a GPU run's chip is the registry's, so no recorded CPU is needed),
    once per pytest run (10-20 s)."""
    def get(path, chip: str):
        def build():
            from chipcal.model.registry import load_registry

            doc = CalibrationDocument.from_dict(json.loads(path.read_text()))
            return doc, refit(doc, load_registry().get(chip))
        return once_per_run(f"refit {path} on {chip}", build)

    return get


@pytest.fixture
def h100_refit(registry_refitted):
    """The recorded H100 SXM5 full run and the library's refit of it."""
    return registry_refitted(H100 / "calibration-full.json", "h100-sxm5")


@pytest.fixture
def h100_quick_refit(registry_refitted):
    return registry_refitted(H100 / "calibration-quick.json", "h100-sxm5")


XEON = "intel-xeon-spr-2vcpu-20261126"


@pytest.mark.slow
@same_refit(f"{XEON}/calibration-quick.json")
def test_subnormal_assists_bring_swin_t_on_the_recorded_xeon_toward_its_measurement(refitted):
    """On the Sapphire Rapids VM swin_t's shifted-window mask (-100) makes half of each masked
    window's softmax subnormal, and every SIMD instruction that takes one pays a microcode assist
    (src/chipcal/model/workload/subnormal.py). The same fitted parameters on the same chip without the assist
    term predict swin_t faster: further from its recorded times at both batches. vit_b_16 (no mask)
    does not move."""
    import dataclasses

    from chipcal.calibrate.layer_fits import as_timed
    from chipcal.measure.models import MODEL_FP32_MODE
    from chipcal.model.workload import characterize_model

    doc, result, chip = refitted(XEON, "calibration-quick.json")
    assert chip.microarch["subnormal_assist_cycles"] == 92
    plain = dataclasses.replace(chip, microarch={k: v for k, v in chip.microarch.items()
                                                 if k != "subnormal_assist_cycles"})
    for check in result.models:
        if check.model not in ("swin_t", "vit_b_16"):
            continue
        workload = characterize_model(check.model, batch=check.batch, partition="eager")
        without = as_timed(workload, plain, doc.precision, result.params, MODEL_FP32_MODE).latency_s
        if check.model == "vit_b_16":
            assert without == pytest.approx(check.predicted_s, rel=1e-9)
        else:
            assert abs(check.predicted_s / check.measured_s - 1) < abs(without / check.measured_s - 1)


TRANSFORMERS = ("swin_t", "vit_b_16")
TRANSFORMER_BOUND = 0.20     # issue 38: each within 20 % of its recorded time, at batch 1 and 8


@pytest.mark.slow
@pytest.mark.parametrize("document", [
    pytest.param("calibration-main.json", marks=same_refit(f"{XEON}/calibration-main.json")),
    pytest.param("calibration-quick.json", marks=same_refit(f"{XEON}/calibration-quick.json"))])
def test_transformers_on_the_recorded_xeon_within_issue_38s_bound(refitted, document):
    """Issue 38: re-fitted, the recorded Xeon runs predict swin_t and vit_b_16 within 20 % of their
    recorded times at both batches (the quick run reached it with the CPU matmul's serial
    activation streams: swin_t at batch 1 had been -20.5 %)."""
    _, result, _ = refitted(XEON, document)
    checks = [m for m in result.models if m.model in TRANSFORMERS]
    assert {(m.model, m.batch) for m in checks} == {(t, b) for t in TRANSFORMERS for b in (1, 8)}
    for m in checks:
        assert abs(m.error) <= TRANSFORMER_BOUND, f"{m.model} b{m.batch} {m.error:+.1%}; {_per_model(result)}"


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "name"), [
    pytest.param("h100_refit", "calibration-full.json", marks=same_refit("h100"), id="h100_refit-calibration-full.json"),
    pytest.param("h100_quick_refit", "calibration-quick.json", marks=same_refit("h100-quick"),
                 id="h100_quick_refit-calibration-quick.json")])
def test_refit_of_each_recorded_h100_run_meets_issue_36(fixture, name, request):
    """Both recorded H100 SXM5 calibrations (`chipcal calibrate --device cuda`, torch 2.11; micro-layers
    at batch 1 and 32) re-fitted with today's code: held-out models within issue 36's bounds (median
    <= 15 %, p90 <= 30 %), better than the run itself reached on its day, and not worse than today's
    uncalibrated defaults."""
    doc, result = request.getfixturevalue(fixture)
    on_its_day, n = H100_RUNS[name]
    assert doc.validation.median_abs_error == pytest.approx(on_its_day, abs=5e-4)
    assert len(result.models) == n
    assert result.median_abs_error <= 0.15 and result.p90_abs_error <= 0.30
    assert result.median_abs_error < on_its_day
    assert result.median_abs_error <= result.default_median_abs_error
    assert result.p90_abs_error <= result.default_p90_abs_error


H200_RUN = MACHINES / "nvidia-h200" / "calibration-quick.json"


@pytest.mark.slow
@same_refit("h200")
def test_refit_of_the_live_h200_run_is_no_worse_than_on_its_day(registry_refitted):
    """The one GPU calibration run with today's code on a machine it was not tuned on: `chipcal
    calibrate --device cuda --quick` on a lent H200 (torch 2.11, 2026-11-26). Its host was noisy
    (23.6 % between rounds) and its dispatch probe read 30.2 us per op where its networks issued
    ~24 us: the fit holds the host costs it cannot separate at that probe, and its models came out
    32.7 % / 42.7 % (median / p90), worse than the defaults' 19.2 % at the median
    (docs/findings/2026-11-26-h200-live.md). A change must not make it worse."""
    doc, result = registry_refitted(H200_RUN, "h200-sxm")
    on_its_day = doc.validation
    assert (on_its_day.median_abs_error, on_its_day.p90_abs_error) == pytest.approx((0.327, 0.427), abs=5e-4)
    assert len(result.models) == 18
    assert result.median_abs_error <= on_its_day.median_abs_error + 1e-3
    assert result.p90_abs_error <= on_its_day.p90_abs_error + 1e-3


@pytest.mark.slow
def test_the_recorded_weight_reorders_move_resnet18_at_batch_1_toward_its_measurement(tmp_path):
    """The same recorded timings re-fitted with and without the weight-reorder rates their probe
    measured: ResNet-18 at batch 1 (44 MB of 3x3 weights reordered per call, about 1.7 ms at 25.8 GB/s
    of a 16 ms pass) comes out closer to its measured time with them, and the whole validation too
    (8.0 % against 10.4 % median when written)."""
    name = "amd-epyc-zen5-2vcpu"
    raw = json.loads((MACHINES / name / "calibration-main-reorder.json").read_text())
    assert raw["layout"]["weight_bytes_per_s"] > 0 and raw["layout"]["pointwise_weight_bytes_per_s"] > 0
    timed = CalibrationDocument.from_dict(raw)
    del raw["layout"]["weight_bytes_per_s"], raw["layout"]["pointwise_weight_bytes_per_s"]
    untimed = CalibrationDocument.from_dict(raw)

    def resnet18_b1_error(result):
        (check,) = [m for m in result.models if (m.model, m.batch) == ("resnet18", 1)]
        return abs(check.predicted_s / check.measured_s - 1)

    with_rates = refit(timed, recorded_chip(tmp_path / "a", name, timed))
    without = refit(untimed, recorded_chip(tmp_path / "b", name, untimed))
    assert resnet18_b1_error(with_rates) < resnet18_b1_error(without)
    assert with_rates.median_abs_error < without.median_abs_error


# --- chipcal calibrate --refit ----------------------------------------------------------------------

TIMED = [f.name for f in dataclasses.fields(cd.Timed)]


def _measured(rows) -> list[dict]:
    """What a row measured: its name fields and its timing distribution, without the predictions."""
    predicted = {"predicted_s", "predicted_default_s", "predicted_serial_s", "error", "default_error"}
    return [{k: v for k, v in dataclasses.asdict(r).items() if k not in predicted} for r in rows]


@pytest.mark.slow
@same_refit("h100")
def test_calibrate_refit_writes_a_new_run_beside_the_recorded_one(cli, tmp_path, h100_refit, monkeypatch):
    """`chipcal calibrate --refit DIR` on the recorded H100 run, here without CUDA: a new run directory
    beside DIR that loads, says that it is a refit, of which run and by which code, keeps every
    measurement as recorded, and whose validation figures are the library refit's; DIR is untouched.
    The fit of that document and chip is the fixture's (the same inputs fit the same: ~20 s saved)."""
    from importlib.metadata import version

    from chipcal.calibrate import refit as refit_module

    doc, result = h100_refit
    fitted = []

    def same_fit(d, chip, progress=None):
        assert d == doc and chip.name == "h100-sxm5"
        fitted.append(chip)
        return result

    monkeypatch.setattr(refit_module, "refit", same_fit)
    source = tmp_path / doc.machine_slug / "20261124T100453Z"
    source.mkdir(parents=True)
    (source / store.CALIBRATION_FILE).write_bytes(H100_RUN.read_bytes())
    rc, out, err = cli(calibrate_cli.main, ["--refit", str(source)])
    assert rc == 0, err
    assert len(fitted) == 1
    (new,) = [d for d in source.parent.iterdir() if d != source]
    assert list(source.iterdir()) == [source / store.CALIBRATION_FILE]
    assert (source / store.CALIBRATION_FILE).read_bytes() == H100_RUN.read_bytes()
    assert f"wrote {new}" in out
    assert {"calibration.json", "report.md", "predicted_vs_measured.png", "power.png"} <= {p.name for p in new.iterdir()}
    refitted = store.load(new)
    assert refitted.refit.source_run == str(source) and refitted.refit.source_created_utc == doc.created_utc
    assert refitted.refit.code.startswith(f"chipcal {version('chipcal')}") and "torch" in refitted.refit.code
    assert refitted.command.startswith("chipcal calibrate --refit") and refitted.created_utc > doc.created_utc
    assert f"A refit of `{source}`" in (new / "report.md").read_text()
    assert refitted.parameters.family_params.source.startswith("refit of calibration")
    # the validation is the library refit's
    val = refitted.validation
    assert val.n == len(result.models) == 14
    assert val.median_abs_error == pytest.approx(result.median_abs_error, rel=1e-9, abs=0)
    assert val.p90_abs_error == pytest.approx(result.p90_abs_error, rel=1e-9, abs=0)
    assert val.default_median_abs_error == pytest.approx(result.default_median_abs_error, rel=1e-9, abs=0)
    assert val.crossval_median_abs_error == pytest.approx(result.crossval.median_abs_error, rel=1e-9, abs=0)
    # what the run's noise permits (recorded before calibrate.noise: its round noise, or the median of
    # its models' CI half-widths where wider), and whether the new median is within it
    widths = sorted((r.ci_high_s - r.ci_low_s) / 2 / r.median_s for r in doc.observations.models)
    mid = len(widths) // 2
    ci = widths[mid] if len(widths) % 2 else (widths[mid - 1] + widths[mid]) / 2
    assert val.noise_permits == pytest.approx(max(doc.validation.noise_rel, ci), rel=1e-12)
    assert val.explained_by_noise == (val.median_abs_error <= val.noise_permits)
    assert ("error_within_noise" in {f.code for f in refitted.flags}) == val.explained_by_noise
    ci90 = statistics.quantiles(widths, n=10, method="inclusive")[8]
    assert val.noise_permits_p90 == pytest.approx(max(doc.validation.noise_rel, ci90), rel=1e-12)
    assert val.p90_explained_by_noise == (val.p90_abs_error <= val.noise_permits_p90)
    # the measurements as recorded; the predictions are new
    before, after = doc.observations, refitted.observations
    assert (after.gemm, after.bandwidth, after.power) == (before.gemm, before.bandwidth, before.power)
    for old_rows, new_rows in ((before.layers, after.layers), (before.chains, after.chains),
                               (before.models, after.models)):
        assert _measured(new_rows) == _measured(old_rows)
    assert [m.predicted_s for m in after.models] == pytest.approx([c.predicted_s for c in result.models], rel=1e-9)
    assert refitted.fingerprint == doc.fingerprint and refitted.dispatch == doc.dispatch
    assert [p.measured_flop_per_s for p in refitted.peaks] == [p.measured_flop_per_s for p in doc.peaks]


def _stored(tmp_path, raw: dict, name: str = "20260101T000000Z"):
    run = tmp_path / "m" / name
    run.mkdir(parents=True)
    (run / store.CALIBRATION_FILE).write_text(json.dumps(raw))
    return run


def test_calibrate_refit_under_out_and_the_chip_it_models(cli, tmp_path, monkeypatch):
    """--out puts the refit under OUT/<machine>/ as a measured run, the source's folder untouched;
    a GPU run is modelled with today's registry entry of the chip it matched."""
    from chipcal.calibrate import refit as refit_module

    raw = json.loads(H100_RUN.read_text())
    source = _stored(tmp_path, raw)
    doc = CalibrationDocument.from_dict(raw)
    chip, origin = refit_module.refit_chip(doc)
    assert chip.name == "h100-sxm5" and "registry" in origin

    def quick(doc, chip, origin, **kw):   # the fit itself is the slow test's
        return dataclasses.replace(doc, created_utc="2026-11-26T00:00:00Z", command=kw["command"],
                                   refit=cd.RefitSection(source_run=kw["source_run"], source_created_utc=doc.created_utc,
                                                         source_command=doc.command, code=kw["code"]))

    monkeypatch.setattr(refit_module, "refit_document", quick)
    rc, out, err = cli(calibrate_cli.main, ["--refit", str(source), "--out", str(tmp_path / "out"), "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    written = tmp_path / "out" / doc.machine_slug / "20261126T000000Z"
    assert row["path"] == str(written) and row["refit_of"] == str(source)
    assert store.load(written).refit.source_run == str(source)
    assert sorted(p.name for p in source.parent.iterdir()) == [source.name]


def test_refit_models_this_cpu_only_for_a_run_measured_on_it(tmp_path):
    """A locally built CPU chip is rebuilt from this machine's CPU when the run was measured here
    (with the run's recorded bandwidth probe); the document of another CPU lacks its caches."""
    from chipcal.calibrate.refit import RefitError, recorded_bandwidth, refit_chip
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.system import local_host_identity

    raw = reference_document()
    assert raw["chip"]["name"] == "local-cpu"
    with pytest.raises(RefitError, match="another CPU"):
        refit_chip(CalibrationDocument.from_dict(
            {**raw, "fingerprint": {**raw["fingerprint"], "cpu_model": "Some Other CPU"}}))
    spec = detect_cpu()
    here = local_host_identity(spec)
    raw["fingerprint"].update(cpu_model=here["cpu_model"], physical_cores=here["physical_cores"],
                              logical_cores=here["logical_cores"], memory_bytes=here["memory_gib"] * 2**30,
                              cpu_features=here["cpu_features"])
    doc = CalibrationDocument.from_dict(raw)
    chip, origin = refit_chip(doc)
    assert chip.name == "local-cpu" and "this CPU" in origin
    assert chip.microarch["cores"] == spec.cores
    assert chip.memory.bandwidth_bytes_per_s == recorded_bandwidth(doc).memory_bytes_per_s


@pytest.mark.parametrize("make, says", [
    (lambda d: d / "missing", "not a directory"),
    (lambda d: d, "no calibration.json"),
    (lambda d: _write_text(d, "{not json"), "not a readable calibration document"),
    (lambda d: _write_text(d, json.dumps({**reference_document(), "schema": "chipcal.calibration/0"})), "schema"),
    (lambda d: _write_text(d, json.dumps({**reference_document(), "peaks": 3})), "peaks"),
    (lambda d: _write_text(d, json.dumps({**reference_document(), "fingerprint": {
        **reference_document()["fingerprint"], "cpu_model": "Some Other CPU"}})), "another CPU"),
])
def test_calibrate_refit_refuses_what_it_cannot_refit_in_one_line(cli, tmp_path, make, says):
    rc, out, err = cli(calibrate_cli.main, ["--refit", str(make(tmp_path)), "--out", str(tmp_path / "out")])
    assert rc == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob(store.CALIBRATION_FILE))


def test_calibrate_refit_and_resume_exclude_each_other(cli, tmp_path):
    rc, _, err = cli(calibrate_cli.main, ["--refit", str(tmp_path), "--resume", str(tmp_path)])
    assert rc == 2 and "not allowed with" in err and err.count("\n") == 1


def _write_text(directory, text: str):
    (directory / store.CALIBRATION_FILE).write_text(text)
    return directory
