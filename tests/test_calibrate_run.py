"""The calibration pipeline end to end on a synthetic machine (measurements faked, known truth).

The fakes generate every "measurement" from chosen true parameters through the same predictor,
with multiplicative noise; the run must recover them, validate, flag, write an atomic report,
and the written calibration must change `predict` for the calibrated chip only.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import psutil
import pytest

from chipcal.calibrate import run as calrun
from chipcal.calibrate import store
from chipcal.calibrate.config import MODEL_MAX_CALL_S, QUICK_MODELS, CalibrationConfig
from chipcal.calibrate.fits import saturating
from chipcal.calibrate.layer_fits import MODEL_SIGMA_FLOOR
from chipcal.measure.device import CPU
from chipcal.measure.timing import Measurement

pytestmark = pytest.mark.usefixtures("characterize_once")

TRUE_GEMM = {"e_max": 0.55, "w_half_flop": 2e7}
TRUE_BW = 18e9
NOISE = 0.02
TRUE_SWITCH_S = 15e-6
TRUE_MEMORY_FACTOR = 1.5     # memory time inside a network over alone
MODELS = ("resnet18", "mobilenet_v2")


def _m(seconds: float, rng) -> Measurement:
    return Measurement.from_samples(seconds * np.exp(rng.normal(0, NOISE, 12)), method="synthetic")


# oneDNN's per-call weight reorders on the fake machine, weight bytes per second (3x3, 1x1): the Zen 5 VM's
TRUE_WEIGHT_REORDER = (25.8e9, 79.2e9)
TRUE_PACKED = 9.6e9          # a few-row GEMM's read and pack of weights off chip, bytes/s
TRUE_GEMV = (30e9, 1e-7)     # a GEMV's weight stream, bytes/s, and its cost per output row, s


def _true_params(chip):
    from chipcal.model.mapping.params import default_params

    base = default_params(chip.kind)
    eff = {c: v * 0.5 for c, v in base.efficiency.items()}       # a machine half as good as the defaults
    over = {c: v * 3 + 20e-6 for c, v in base.overhead_s.items()}
    return dataclasses.replace(base, efficiency=eff, overhead_s=over,
                               half_efficiency_flop=TRUE_GEMM["w_half_flop"],
                               bandwidth_efficiency=1.0, switch_overhead_s=TRUE_SWITCH_S,
                               network_memory_factor=TRUE_MEMORY_FACTOR, layout_passes=1.0,
                               weight_layout_bytes_per_s=TRUE_WEIGHT_REORDER[0],
                               pointwise_weight_layout_bytes_per_s=TRUE_WEIGHT_REORDER[1],
                               packed_weight_bytes_per_s=TRUE_PACKED, source="synthetic truth")


# The fake machine is a recorded CPU, never the host: an AVX2-only EPYC (bf16 emulated) and a
# Zen 5 EPYC (bf16 native), with torch's oneDNN answers given explicitly.
MACHINES = {"avx2": ("amd-epyc-avx2-2vcpu", {"mkldnn_bf16": False, "mkldnn_fp16": False}),
            "avx512-bf16": ("amd-epyc-zen5-2vcpu", {"mkldnn_bf16": True, "mkldnn_fp16": False})}
EMULATED_BF16_FLOP_PER_S = 2e9


@pytest.fixture(params=sorted(MACHINES))
def fake_machine(request, monkeypatch, tmp_path):
    """Patch every measurement the run makes on a recorded CPU; returns (chip, true params)."""
    from recorded import machine_tree, recorded_fingerprint

    from chipcal.measure import bandwidth as bandwidth_mod
    from chipcal.measure import gemv as gemv_mod
    from chipcal.measure import layers, layout, models, peak, power, system
    from chipcal.measure import threads as threads_mod
    from chipcal.model.estimate.prediction import predict

    name, torch_says = MACHINES[request.param]
    proc, sys_ = machine_tree(tmp_path / "tree", name)
    spec, fp = recorded_fingerprint(tmp_path, name, **torch_says)
    real_detect = system.detect_cpu
    monkeypatch.setattr(system, "detect_cpu", lambda *a, **k: real_detect(proc, sys_, arch="x86_64"))
    monkeypatch.setattr(system, "fingerprint", lambda gpu_index=0: fp)
    rng = np.random.default_rng(7)
    # the run replaces the local chip's assumed DRAM bandwidth by the probe's figure
    chip = system.local_chip(memory_bandwidth_bytes_per_s=TRUE_BW, measured_by="bandwidth probe",
                             support=fp.cpu_precisions)
    truth = _true_params(chip)

    def gemm_peak(device, precisions=None, remeasure=False, **_):
        points = []
        emulated = peak.emulated_reasons(device, fp, ("fp32", "bf16"))
        for p in ("fp32", "bf16"):
            if p in emulated:      # one small shape at the emulated rate
                flop = 2 * 256**3
                points.append(peak.GemmPoint(p, 256, 256, 256, flop, _m(flop / EMULATED_BF16_FLOP_PER_S, rng),
                                             EMULATED_BF16_FLOP_PER_S))
                continue
            physics = chip.peak_flop_per_s(p)
            for n in (64, 128, 256, 512, 1024, 2048):
                flop = 2 * n**3
                rate = physics * saturating(flop, TRUE_GEMM["e_max"], TRUE_GEMM["w_half_flop"])
                points.append(peak.GemmPoint(p, n, n, n, flop, _m(flop / rate, rng), rate))
        return peak.GemmPeak(device=device, fingerprint_slug="synthetic", points=tuple(points), emulated=emulated)

    def bandwidth(device, sizes=None, remeasure=False, **_):
        pts = tuple(bandwidth_mod.BandwidthPoint("triad", s, 3 * s, 3 * s, _m(3 * s / TRUE_BW, rng), TRUE_BW)
                    for s in (2**24, 2**26, 2**28))
        return bandwidth_mod.Bandwidth(device=device, fingerprint_slug="synthetic", points=pts,
                              knee_bytes={"triad": None}, sustained_bytes_per_s={"triad": TRUE_BW},
                              memory_bytes_per_s=TRUE_BW)

    def time_round(self, max_time_s, min_samples, progress=None):
        timings = {}
        for case, w, _, _ in self.built:
            # layers are timed alone (no switch cost, data hot); chains run kernels back to back
            alone = case.op_class != layers.CHAIN_CLASS
            p = truth.alone() if alone else truth
            timings[case.label] = _m(predict(w, chip, "fp32", params=p).latency_s, rng).to_dict()
            if progress:
                progress(case.label)
        self.add_round(timings)
        return timings

    def measure_model(name, batch=1, precision="fp32", device=CPU, **_):
        from chipcal.model.workload import characterize_model

        w = characterize_model(name, batch=batch, partition="eager")
        t = predict(w, chip, precision, params=truth).latency_s
        m = _m(t, rng)
        return models.ModelMeasurement(model=name, batch=batch, precision=precision, device=device, flop=w.flop,
                                       latency=m, delivered_flop_per_s=w.flop / m.median_s, power=None,
                                       power_source="unavailable", power_note="synthetic")

    monkeypatch.setattr(peak, "measure_gemm_peak", gemm_peak)
    monkeypatch.setattr(bandwidth_mod, "measure_bandwidth", bandwidth)
    monkeypatch.setattr(layers.LayerSet, "time_round", time_round)
    steady = Measurement.from_samples([0.01] * 5)
    monkeypatch.setattr(bandwidth_mod, "measure_first_touch",       # 64 MiB: 10 ms fresh, 10 ms reused
                        lambda: bandwidth_mod.FirstTouch(64 * 2**20, steady, steady))
    stream, row = TRUE_GEMV                 # 16384 rows of 2048 fp32, 2048 rows of 16384: 6.112 + 4.679 ms
    wide, tall = (Measurement.from_samples([rows * (row + 4 * k / stream)] * 5) for rows, k in ((16384, 2048), (2048, 16384)))
    k_major = Measurement.from_samples([0.0053687] * 5)             # 128 MiB read k-major at 25 GB/s
    monkeypatch.setattr(gemv_mod, "measure_gemv", lambda max_time_s=1.0: gemv_mod.GemvRate(16384, wide, tall, k_major))
    pack_s, per_row_s = 256 * 2**20 / TRUE_PACKED, 2e-4     # 8 and 32 rows: the pass plus their arithmetic
    monkeypatch.setattr(gemv_mod, "measure_packed_gemm",
                        lambda max_time_s=1.0: gemv_mod.PackedRate(
                            "synthetic", 256 * 2**20, Measurement.from_samples([pack_s + 8 * per_row_s] * 5),
                            Measurement.from_samples([pack_s + 32 * per_row_s] * 5)))
    monkeypatch.setattr(models, "measure_model", measure_model)
    monkeypatch.setattr(layout, "conv_layout_passes",       # the truth's reorders, not this host's
                        lambda: layout.LayoutPasses(truth.layout_passes, "synthetic", *TRUE_WEIGHT_REORDER))
    monkeypatch.setattr(power, "open_power_source", lambda device: power.UnavailableSource("synthetic: none"))
    one, two = Measurement.from_samples([0.020] * 5, threads=1), Measurement.from_samples([0.0196] * 5, threads=2)
    monkeypatch.setattr(threads_mod, "probe_thread_scaling",    # 2 threads that do one core's work
                        lambda: threads_mod.ThreadScaling(2, one, two, "synthetic"))
    return chip, truth


@pytest.fixture
def small_suite(monkeypatch):
    """The batch-1 cases a CPU also times at batch 8 (one small and one large per class) instead of
    the whole suite: for tests of the run's plumbing (documents, journal), not of the fit's recovery."""
    from chipcal.measure import layers

    full = layers.default_cases
    monkeypatch.setattr(layers, "default_cases", lambda *a, **k: [
        c for c in full(*a, **k) if c.cpu_batched and c.batch == 1])


class Recorder:
    def __init__(self):
        self.phases, self.steps = [], []

    def phase(self, name, total):
        self.phases.append((name, total))

    def step(self, label):
        self.steps.append(label)


@pytest.mark.slow
def test_pipeline_recovers_truth_and_validates(fake_machine, tmp_path):
    chip, truth = fake_machine
    progress = Recorder()
    doc = calrun.run_calibration(CalibrationConfig(models=MODELS, batches=(1,)), progress=progress).to_dict()
    # every phase of the run is timed once, in the order it ran (the rounds add to their phases)
    assert [p["phase"] for p in doc["phases"]] == [
        "identify", "GEMM sweep", "bandwidth", "power", "host probes: first touch, layout, GEMV, dispatch, threads",
        "characterizing the models", "micro-layers", "chains", "models", "fits and cross-validation", "validation"]
    assert all(p["wall_s"] >= 0 and p["cpu_s"] >= 0 for p in doc["phases"])
    # GEMM curve: the saturating fit recovers e_max and w_half
    g = doc["fits"]["gemm_efficiency_fp32"]["parameters"]
    assert g["e_max"] == pytest.approx(TRUE_GEMM["e_max"], rel=0.05)
    assert g["w_half_flop"] == pytest.approx(TRUE_GEMM["w_half_flop"], rel=0.25)
    # the local chip takes the measured bandwidth, so bandwidth efficiency = measured / model = 1
    fam = doc["parameters"]["family_params"]
    assert doc["chip"]["memory_bandwidth_bytes_per_s"] == TRUE_BW
    assert fam["bandwidth_efficiency"] == pytest.approx(1.0)
    # the layout probe's weight reorders are recorded and charged as measured, and so is the GEMV rate
    assert (doc["layout"]["weight_bytes_per_s"], fam["weight_layout_bytes_per_s"]) == (TRUE_WEIGHT_REORDER[0],) * 2
    assert doc["gemv"]["bytes_per_s"] == pytest.approx(268_435_456 / (0.0061123 + 0.0046787), rel=1e-4)
    assert doc["gemv"]["stream_bytes_per_s"] == fam["gemv_bytes_per_s"] == pytest.approx(TRUE_GEMV[0])
    assert doc["gemv"]["row_s"] == fam["gemv_row_s"] == pytest.approx(TRUE_GEMV[1])
    assert doc["gemv"]["k_major_bytes_per_s"] == fam["gemv_k_major_bytes_per_s"] == pytest.approx(25e9, rel=1e-4)
    assert doc["gemv"]["packed_bytes_per_s"] == fam["packed_weight_bytes_per_s"] == pytest.approx(TRUE_PACKED)
    assert fam["pointwise_weight_layout_bytes_per_s"] == TRUE_WEIGHT_REORDER[1]
    # layers: the calibrated predictor reproduces the (noisy) layer times to a few percent
    layer_err = [abs(r["predicted_s"] / r["median_s"] - 1) for r in doc["observations"]["layers"]]
    # (5.2 % on the AVX-512 machine since the size-curve ramp is charged per busy core: the small
    # single-core layers' landscape changed; the recorded real-machine refits moved < 0.3 points)
    assert np.median(layer_err) < 0.06
    # ...as timed, alone: the memory-bound layers are not charged the in-network memory factor (1.5)
    alone_err = [abs(r["predicted_s"] / r["median_s"] - 1) for r in doc["observations"]["layers"]
                 if r["op_class"] in ("elementwise", "norm")]
    assert max(alone_err) < 0.25
    sw = doc["fits"]["switch_overhead"]
    # the chains are reproduced, but the switch cost and the memory factor trade off against the
    # layer fit's own small misfits: the avx2 machine gives 19.4 us and 1.29 for 15 us and 1.5, the
    # bf16 one leaves the factor at its bound 1 and puts the difference in the switch cost, 23 us:
    # only the chains' kernels spread over both cores carry it (roofline.kernel_fixed_costs), so the
    # same misfit lands on fewer kernels. The factor never overshoots. (test_calibrate_fits recovers
    # both from exact layer parameters.)
    assert max(abs(r) for r in sw["residuals"]) < MODEL_SIGMA_FLOOR      # 5 %: the floor the fit weighs chains by
    assert sw["parameters"]["switch_overhead_s"] == pytest.approx(TRUE_SWITCH_S, rel=0.6)
    assert 1.0 <= sw["parameters"]["network_memory_factor"] < TRUE_MEMORY_FACTOR * 1.15
    # held-out models: generated by the same truth, so calibrated errors are small...
    assert doc["validation"]["median_abs_error"] < 0.10
    # ...and much smaller than with the defaults (a machine 2x slower than the defaults assume)
    assert doc["validation"]["default_median_abs_error"] > 2 * doc["validation"]["median_abs_error"]
    assert doc["validation"]["n"] == len(MODELS)
    assert doc["power"]["available"] is False and "synthetic" in doc["power"]["reason"]
    # the thread check: 20 ms with one thread, 19.6 ms with two, 1.02x of an ideal 2x
    assert doc["threads"]["speedup"] == pytest.approx(0.020 / 0.0196)
    assert "threads_not_scaling" in {f["code"] for f in doc["flags"]}
    assert progress.steps and [name for name, _ in progress.phases][:2] == ["GEMM peak sweep", "memory bandwidth"]
    # bf16: fitted and judged only where the CPU has a bf16 unit; else reported as emulated with its rate
    bf16 = next(p for p in doc["peaks"] if p["precision"] == "bf16")
    if chip.peak_flop_per_s("bf16"):
        assert bf16["support"] == "native" and "gemm_efficiency_bf16" in doc["fits"]
    else:
        assert bf16["support"] == "emulated" and bf16["measured_flop_per_s"] == EMULATED_BF16_FLOP_PER_S
        assert bf16["physics_flop_per_s"] is None and "gemm_efficiency_bf16" not in doc["fits"]
        assert not [f for f in doc["flags"] if "bf16" in f["message"]]
    # every fit says what it fitted, with uncertainties and R²
    for fit in (f for f in doc["fits"].values() if f):
        assert {"parameters", "stderr", "residuals", "r2", "n", "model"} <= set(fit)


def test_written_calibration_round_trips_and_applies_to_its_chip_only(fake_machine, small_suite, tmp_path,
                                                                      monkeypatch):
    """The document, written and read back, and its calibration applied to its chip only. A GPU
    run's users_run phase is stood in (on this CPU it returns None; tests/test_users_run.py covers
    it): it is handed the run's chip and fitted parameters after the validation, and what it
    returns is written as the document's section and reported."""
    from chipcal.calibrate import document as cd
    from chipcal.calibrate import users_run
    from chipcal.calibrate.store import load_calibration
    from chipcal.model.estimate.prediction import predict
    from chipcal.model.registry import load_registry
    from chipcal.model.workload import characterize_model
    from chipcal.report.calibration import run_writers

    chip, _ = fake_machine
    section = cd.UsersRunSection(rows=(cd.UsersRunRow(kind="step", model="gpt2", batch=1, mode="bf16",
                                                      measured_s=0.01, n=5, cv=0.01, predicted_s=0.011, error=0.1,
                                                      context=128, new_tokens=32),), skipped=(), budget_s=90.0)
    handed = {}

    def phase(run, chip_, params):
        handed.update(chip=chip_, params=params, validated=[p.phase for p in run.clock.times()])
        return section

    monkeypatch.setattr(users_run, "users_run", phase)
    resident_before = psutil.Process().memory_info().rss
    doc = calrun.run_calibration(CalibrationConfig(quick=True, models=("resnet18",), batches=(1,)))
    assert doc.users_run == section and handed["chip"].name == chip.name and "validation" in handed["validated"]
    fitted = doc.parameters.family_params
    assert dataclasses.replace(handed["params"], source=fitted.source) == fitted
    # the peak resident memory it records lies between what this process held before it and the
    # kernel's high-water mark read from /proc afterwards (VmHWM, a second interface to it); the
    # kernel syncs each thread's resident-page count every 64 page events, so allow 4 MiB of lag
    if Path("/proc/self/status").exists():
        hwm_kib = int(re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))
        assert resident_before - 4 * 2**20 <= doc.peak_rss_bytes <= 1024 * hwm_kib
    run_dir = store.write_run(tmp_path, doc.machine_slug, "T", run_writers(doc))
    doc = doc.with_plots(("gemm_efficiency.png", "predicted_vs_measured.png", "roofline.png"))
    assert json.loads((run_dir / "calibration.json").read_text()) == doc.to_dict()
    assert store.load(run_dir) == doc          # the typed document survives the disk
    for name in ("report.md", "report.html", "gemm_efficiency.png", "predicted_vs_measured.png", "roofline.png"):
        assert (run_dir / name).stat().st_size > 0
    assert "Validation" in (run_dir / "report.md").read_text() and "What users run" in (run_dir / "report.md").read_text()
    report = (run_dir / "report.md").read_text()
    assert "peak resident memory" in report and f"{doc.peak_rss_bytes / 1e9:.2f} GB" in report

    cal = load_calibration(run_dir)
    assert cal.runtime == "eager"          # layers and models were timed in PyTorch eager mode
    w = characterize_model("resnet18", batch=1, partition="eager")
    default_local = predict(w, chip, "fp32").latency_s
    calibrated_local = predict(w, chip, "fp32", calibration=cal).latency_s
    assert calibrated_local != pytest.approx(default_local, rel=0.05)
    other = load_registry().get("a100-sxm4-80gb")
    assert predict(w, other, "fp32", calibration=cal).latency_s == predict(w, other, "fp32").latency_s


class SensedBoard:
    """A power sensor (RAPL-like: power, no clock) and a power phase that holds each precision it
    is given on a fake clock: idle 30 W; the triad 60 W at 60 GB/s; each GEMM 90 W at 1.5 TFLOP/s,
    so static 30 W, (60 - 30) / 60 GB/s = 0.5 nJ/byte and (90 - 30) / 1.5 TFLOP/s = 40 pJ/FLOP."""

    def __init__(self):
        self.asked = []

    def phase(self, source, device, precisions, limits, on_hold=None):
        from chipcal.measure.sustained import SensorReading, hold

        self.asked.append(tuple(precisions))
        out = []
        for kind, precision, watts, flop, nbytes in (("idle", None, 30.0, 0.0, 0.0), ("stream", None, 60.0, 0.0, 6e8),
                                                     *(("gemm", p, 90.0, 1.5e10, 0.0) for p in precisions)):
            t = [0.0]

            def run(n, t=t):
                t[0] += 0.01 * n

            out.append(hold(run, lambda w=watts: SensorReading(w, None), kind=kind, label=kind, precision=precision,
                            flop_per_call=flop, bytes_per_call=nbytes, limits=limits, clock=lambda t=t: t[0]))
            if on_hold:
                on_hold(out[-1])
        return tuple(out)


@pytest.mark.slow
def test_interrupted_run_resumes_from_its_journal(fake_machine, small_suite, tmp_path, monkeypatch):
    from chipcal.calibrate.journal import Journal
    from chipcal.measure import models, peak, power, power_phase

    board = SensedBoard()
    monkeypatch.setattr(power, "open_power_source", lambda device: power.PowerSource(available=True, reason=""))
    monkeypatch.setattr(power_phase, "power_phase", board.phase)
    config = CalibrationConfig(quick=True, models=("resnet18",), batches=(1, 8))
    journal = Journal.create(tmp_path / "out", config)
    real_model = models.measure_model
    calls = []

    def interrupt_third(*a, **k):
        calls.append(a)
        if len(calls) == 3:           # round 2 of resnet18 batch 1: round 1 (layers, chains, both batches) is in
            raise KeyboardInterrupt
        return real_model(*a, **k)

    monkeypatch.setattr(models, "measure_model", interrupt_third)
    with pytest.raises(KeyboardInterrupt):
        calrun.run_calibration(config, journal=journal)
    kept = {p.stem for p in journal.directory.glob("*.json")}
    assert {"config", "machine", "gemm", "bandwidth", "power", "round-0"} <= kept and "round-1" not in kept

    # resume: nothing measured before the interruption is measured again
    again, fields = Journal.open(journal.directory)
    assert fields["models"] == ["resnet18"]
    monkeypatch.setattr(peak, "measure_gemm_peak", lambda *a, **k: pytest.fail("GEMM sweep measured twice"))
    remeasured = []
    monkeypatch.setattr(models, "measure_model", lambda *a, **k: remeasured.append(a) or real_model(*a, **k))
    doc = calrun.run_calibration(config, journal=again).to_dict()
    assert len(remeasured) == 2          # quick: 2 rounds x 2 batches = 4 timings, 2 of them journaled
    assert doc["validation"]["n"] == 2
    # the power phase ran once, on the sweep's native precisions, and its holds came from the journal
    native = tuple(p["precision"] for p in doc["peaks"] if p["support"] == "native")
    assert board.asked == [native] and [h["kind"] for h in doc["observations"]["holds"]] == [
        "idle", "stream", *["gemm"] * len(native)]
    energies = {e["precision"]: e["j_per_flop_at_boost"] / 1e-12 for e in doc["power"]["precisions"]}
    assert energies == pytest.approx(dict.fromkeys(native, 40.0), rel=1e-6)
    assert doc["power"]["idle_w"] == 30.0 and doc["power"]["j_per_byte"] / 1e-9 == pytest.approx(0.5, rel=1e-6)


def test_a_journal_resumes_on_its_own_machine_and_torch_only(tmp_path):
    """A resumed run pools its rounds with the journal's; on a shared filesystem another machine
    (or this one after a torch upgrade) could pick the journal up."""
    from chipcal.calibrate.journal import Journal, JournalError, NoJournal, same_machine

    journal = Journal.create(tmp_path, CalibrationConfig(quick=True))
    same_machine(journal, "amd-epyc-2c-53ceb17a", "2.15.0")          # started: recorded
    same_machine(Journal.open(journal.directory)[0], "amd-epyc-2c-53ceb17a", "2.15.0")   # resumed here: fine
    for slug, torch_version in (("amd-epyc-2c-c90a32d0", "2.15.0"), ("amd-epyc-2c-53ceb17a", "2.14.1")):
        with pytest.raises(JournalError, match="started on amd-epyc-2c-53ceb17a with torch 2.15.0") as err:
            same_machine(journal, slug, torch_version)
        assert "\n" not in str(err.value) and "start a new run" in str(err.value)
    same_machine(NoJournal(), "any", "any")                          # nothing kept, nothing to check


@pytest.mark.slow
@pytest.mark.parametrize("fake_machine", ["avx2"], indirect=True)     # the policy is the machine's no matter
def test_a_noisy_host_times_more_rounds_and_says_what_its_noise_permits(fake_machine, small_suite, monkeypatch):
    """The held-out models' timings swing 1.6x from one round to the next (a host like the Xeon VM,
    where the same network took up to twice as long a minute later): the quick run adds rounds to
    its 2 within its extra time, states the accuracy the noise permits, and flags it."""
    from chipcal.calibrate import noise
    from chipcal.measure import models
    from chipcal.report.calibration import render_markdown

    real_model = models.measure_model
    calls = []

    def swinging(*a, **k):
        calls.append(a)
        m = real_model(*a, **k)
        slow = 1.6 if len(calls) % 2 else 1.0           # every other round of the one model is slow
        latency = Measurement.from_samples([t * slow for t in m.latency.samples_s], method="synthetic")
        return dataclasses.replace(m, latency=latency)

    monkeypatch.setattr(models, "measure_model", swinging)
    doc = calrun.run_calibration(CalibrationConfig(quick=True, models=("resnet18",), batches=(1,)))
    val = doc.validation
    assert 2 < val.rounds <= noise.MAX_ROUNDS == len(calls)
    assert val.noise_rel > noise.allowed() and val.noise_permits >= val.noise_rel
    # one model: its 90th percentile is its median, and the p90 |error| is its median |error|
    assert val.noise_permits_p90 == pytest.approx(val.noise_permits)
    assert val.p90_explained_by_noise == val.explained_by_noise
    assert "noise_limits_accuracy" in {f.code for f in doc.flags}
    assert "the accuracy the noise permits" in render_markdown(doc)


def test_a_validation_pass_longer_than_half_its_share_is_skipped():
    # --quick: 70 s over 9 models x 2 batches = 3.89 s an entry, half of it 1.94 s; the full job:
    # 200 s over 11 x 2 = 9.09 s, half 4.55 s, so the 4 s bound holds
    assert CalibrationConfig(quick=True, models=QUICK_MODELS).max_call_s == pytest.approx(70 / 18 / 2)
    assert CalibrationConfig().max_call_s == MODEL_MAX_CALL_S == 4.0


@pytest.mark.parametrize("fake_machine", ["avx512-bf16"], indirect=True)
def test_a_fleet_of_one_runs_here_into_the_fleet_s_layout(fake_machine, small_suite, tmp_path, monkeypatch, cli):
    """`chipcal fleet run` without a scheduler: the same per-node task as a Slurm array task runs
    `chipcal calibrate` here, now, into STORE/<node>/<timestamp>/ (tests/test_fleet_slurm.py runs
    it through a real Slurm into the same layout); the task's state says which run it wrote."""
    from chipcal.cli import fleet as fleet_cli

    monkeypatch.setenv("CHIPCAL_NODE", "rack1-node07")
    root = tmp_path / "store"
    rc, out, err = cli(fleet_cli.main, ["run", "--store", str(root), "--", "--smoke"])
    assert rc == 0, err
    assert "1 task(s), local job -" in out
    (run,) = store.find_runs(root)
    assert run.parent == root / "rack1-node07" and re.fullmatch(r"\d{8}T\d{6}Z", run.name)
    assert {p.name for p in run.iterdir()} == {"calibration.json", "report.md", "report.html", "gemm_efficiency.png",
                                              "predicted_vs_measured.png", "roofline.png"}
    doc = store.load(run)
    assert (doc.node.name, doc.node.source, doc.smoke) == ("rack1-node07", "CHIPCAL_NODE", True)
    (sub,) = (root / ".fleet").iterdir()
    task = json.loads((sub / "task-0.json").read_text())
    assert (task["state"], task["run"], task["exit_code"]) == ("done", f"rack1-node07/{run.name}", 0)
    assert not (root / "rack1-node07" / ".incomplete").exists() or not any((root / "rack1-node07" / ".incomplete").iterdir())
