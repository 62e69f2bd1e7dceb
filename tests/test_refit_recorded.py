"""Re-fit recorded calibration runs of other machines and predict their recorded whole-model
timings: the fit must hold on a CPU the code was not developed on (issue: calibration that holds
on a second machine)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from recorded import MACHINES, machine_tree, reference_document

from chipcal.calibrate import document as cd
from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument
from chipcal.calibrate.refit import recorded_bandwidth, refit
from chipcal.cli import calibrate as calibrate_cli
from chipcal.measure import system
from chipcal.measure.bandwidth import local_overrides


def recorded_chip(tmp_path, name: str, doc: CalibrationDocument):
    """The recorded CPU as a calibration models it: its cores, SIMD and clock from the recorded
    cpuinfo, its DRAM bandwidth and last-level cache from the run's recorded bandwidth probe as
    today's code reads it (calibrate.run does the same with a fresh probe)."""
    proc, sys_ = machine_tree(tmp_path, name)
    spec = system.detect_cpu(proc, sys_, arch="x86_64")
    return system.local_chip(**local_overrides(recorded_bandwidth(doc), spec), cpu=spec)


# (machine, document, held-out runs, calibrated median |error| of the run's own day, median and p90
# bounds, how many times better than the defaults the median must be)
RECORDED = [
    # AVX2-only EPYC, quiet host, --quick: 6 models x batch 1, 8; that day 18.6 % (defaults 36.2 %)
    ("amd-epyc-avx2-2vcpu", "calibration-quick.json", 12, 0.186, 0.16, 0.35, 2.0),
    # Xeon with AMX, the checked-in reference run: 7 models x batch 1, 8; that day 11.8 % (defaults 34.2 %).
    # Since the GEMM-informed prior 17.4 % / 22.0 % (was 15.2 % / 24.1 %; mean |error| 14.6 %, was 15.1 %).
    # Since the DRAM figure is read beyond the cache (25.6 GB/s, not the 39.9 that the 51 GB/s of
    # its 32-48 MiB sizes lifted): 18.3 % / 24.0 %, and the defaults on that figure 24.2 % (gain 1.3)
    ("intel-xeon-spr-2vcpu", "calibration-full.json", 14, 0.118, 0.19, 0.35, 1.25),
    # Zen 4 EPYC (AVX-512, bf16, VNNI), full run of 2026-11-24 with the cross-validation self-check:
    # 19.4 % / 39.6 % (defaults 31.4 % / 46.0 %); refit 17.3 % / 39.1 %; mobile networks at batch 8
    # are 35-52 % too fast
    ("amd-epyc-zen4-2vcpu", "calibration-full.json", 14, 0.194, 0.25, 0.45, 1.4),
    # Zen 5 EPYC (AVX-512, bf16, VNNI; torch 2.14.1), `chipcal calibrate --remeasure` of 2026-11-23
    # (results/amd-epyc-2c-c90a32d0): 7 models x batch 1, 8; that day 19.7 % / 32.6 % (defaults
    # 24.3 % / 41.4 %); refit 18.4 % / 29.5 % (defaults 24.5 %), every model too fast (-6 to -31 %):
    # 3 chains and batch-1 micro-layers only, and its fp32 GEMM at 65 % of the derived peak
    # Since a parameter found unconstrained in the fit's second pass is held at its prior too (the
    # elementwise efficiency went back from 0.069 to 0.5): 22.0 % / 32.6 % (defaults 24.5 %)
    ("amd-epyc-zen5-2vcpu", "calibration-full.json", 14, 0.197, 0.23, 0.34, 1.1),
    # the same VM type, torch 2.15, `chipcal calibrate --quick` of 2026-11-25 (results/amd-epyc-2c-c90a32d0):
    # 9 models x batch 1, 8. Run 2 of three: that day 16.5 % / 50.9 % (defaults 33.4 % / 47.2 %), with
    # the elementwise efficiency at 0.06 while the report said its prior 0.5 was kept and conv1x1
    # reverted to its defaults; refit 9.4 % / 29.7 %: ResNet-family 1x1 convolutions at batch 8 are
    # 19-43 % too slow (conv1x1 efficiency 0.68 against 0.86 in run 3). Since the graph input stays
    # on chip with the weights (mapping.base.traffic; 53 recorded runs: mean median 10.3 % -> 9.4 %,
    # 30 -> 36 within the target): 13.1 % / 27.9 % (was 9.6 % / 29.9 %). Its 1x1 micro-layers on
    # large maps are predicted faster, and this run (glibc's default allocator) fits the elementwise
    # efficiency at 0.048 to slow them down, which makes EfficientNet-B0 at batch 8 28 % too slow
    ("amd-epyc-zen5-2vcpu", "calibration-quick-2.json", 18, 0.165, 0.14, 0.32, 2.5),
    # run 3, in a slow minute (1 thread as fast as 2 on a 1024^3 fp32 matmul just before): that day
    # 6.9 % / 16.2 % (defaults 31.3 % / 42.1 %), the issue's target; bound 10.5 % as for the Zen 4 runs.
    # Since the memory factor is held at its ceiling 4 when it runs into it (not put back to 1):
    # 7.1 % / 13.0 %
    ("amd-epyc-zen5-2vcpu", "calibration-quick-3.json", 18, 0.069, 0.105, 0.25, 3.0),
    # the same VM, `chipcal calibrate --quick` with the allocator pinned and the batch-8 micro-layers:
    # 8.5 % / 22.3 % (defaults 25.1 % / 50.1 %), the issue's target (median <= 10 %, p90 <= 25 %).
    # Since the self-check weighs held-out layers by their time (calibrate.selfcheck.ClassVerdict):
    # 12.4 % / 23.7 %, conv1x1 and matmul back at their priors (was 8.3 % / 22.6 %); the same rule
    # took the Zen 5 main job of 2026-11-25 from 15.5 % / 44.9 % to 10.0 % / 16.2 % and 41 recorded
    # runs from a mean median 11.5 % to 11.2 % (docs/calibration-fits.md, step 4a)
    ("amd-epyc-zen4-2vcpu", "calibration-quick-pinned.json", 12, 0.085, 0.13, 0.25, 1.9),
    # the same VM, --quick with the fourth chain (mobile blocks at batch 8) that separates the
    # in-network memory factor from the switch cost (results/.../20261124T231213Z): 9 models x
    # batch 1, 8; that day 9.93 % / 16.2 % (defaults 26.1 % / 38.7 %), factor 3.79, with a DRAM
    # figure of 98 GB/s read in the cache; since the factor scales the on-chip stream only and the
    # DRAM figure is read beyond the cache (31.1 GB/s), 8.6 % / 13.9 %, factor 1.0. The median's bound is 10.5 %: at
    # 10 % the least-squares tolerance on another machine's BLAS could decide the test
    ("amd-epyc-zen4-2vcpu", "calibration-quick-chains.json", 18, 0.099, 0.105, 0.25, 2.5),
    # the Zen 5 VM, the main job of 2026-11-25 18:24 (results/.../20261125T182344Z), the first whose
    # layout probe timed oneDNN's fixed cost per convolution call (38 us, the convolution classes'
    # overhead prior) beside its per-call weight reorders (27.4 GB/s 3x3, 78.8 GB/s 1x1): 11 models x
    # batch 1, 8; that day 7.1 % / 12.3 % (defaults 27.3 % / 42.4 %), the issue's target. (The main job
    # of 15:52, calibration-main-reorder.json, is refitted with and without its weight rates below.)
    ("amd-epyc-zen5-2vcpu", "calibration-main-call.json", 22, 0.071, 0.10, 0.25, 3.0),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "document", "runs", "that_day", "median_bound", "p90_bound", "gain"), RECORDED)
def test_refit_of_a_recorded_run_predicts_its_models(tmp_path, name, document, runs, that_day, median_bound,
                                                     p90_bound, gain):
    """Today's fit on each machine's recorded raw timings predicts that machine's recorded
    whole-model timings (never used in the fit) better than the defaults, by `gain`.

    The issue's target is a median |error| <= 10 % and p90 <= 25 %. The Zen 4 quick runs with the
    allocator pinned and batch-8 micro-layers meet it (today 8.3 % / 22.6 %; with the fourth chain
    and the memory factor fitted from it 6.6 % / 14.9 %) and are held to it; so are the Zen 5 quick
    run 3 of 2026-11-25 on its median (7.1 % / 13.0 %; run 2, 13.1 % / 27.9 %, to 14 %). The
    older documents were timed under glibc's default allocator with batch-1 micro-layers only;
    today's fit reaches 12.6 % / 31.7 % on the AVX2 EPYC, 16.4 % / 22.7 % on the Xeon,
    14.1 % / 36.9 % on the Zen 4 EPYC and 22.0 % / 32.6 % on the Zen 5 EPYC there, so their bounds
    guard against regressions. The last check allows 7 points over the run's own day (the Xeon's
    11.8 % was with older code). Every parameter the fits report as held at its prior holds that
    value (a parameter found unconstrained only in the second pass once kept its fitted value)."""
    doc = CalibrationDocument.from_dict(json.loads((MACHINES / name / document).read_text()))
    result = refit(doc, recorded_chip(tmp_path, name, doc))
    assert len(result.models) == runs
    assert result.median_abs_error < median_bound and result.p90_abs_error < p90_bound
    assert result.median_abs_error < result.default_median_abs_error / gain
    assert result.median_abs_error < that_day + 0.07
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


def _h100_refit(name: str):
    from chipcal.model.registry import load_registry

    doc = CalibrationDocument.from_dict(json.loads((H100 / name).read_text()))
    return doc, refit(doc, load_registry().get("h100-sxm5"))


@pytest.fixture(scope="module")
def h100_refit():
    """The recorded H100 SXM5 full run and the library's refit of it (shared: a refit takes minutes)."""
    return _h100_refit("calibration-full.json")


@pytest.fixture(scope="module")
def h100_quick_refit():
    return _h100_refit("calibration-quick.json")


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "name"), [("h100_refit", "calibration-full.json"),
                                             ("h100_quick_refit", "calibration-quick.json")])
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
