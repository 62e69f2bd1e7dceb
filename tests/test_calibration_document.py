"""The typed calibration document (calibrate.document) on the real documents in the tree: every
checked-in calibration.json and every recorded machine's document loads, survives a round trip,
and loses nothing; a damaged one is refused in one line naming the field."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from recorded import MACHINES, REFERENCE_RUN, reference_document, reference_run_dir
from test_fuzz_loaders import cases

from chipcal.calibrate import store
from chipcal.calibrate.document import (
    READABLE_SCHEMAS,
    SCHEMA,
    SCHEMA_1,
    UPGRADE_1_DROPS,
    CalibrationDocument,
    ParametersDocument,
    upgrade,
)
from chipcal.model.mapping.params import CalibrationError

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted(ROOT.glob("results/*/*/calibration.json")) + sorted(MACHINES.glob("*/calibration*.json"))


def _contained(raw: object, written: object, where: str = "") -> list[str]:
    """Where `written` lacks or changes something `raw` holds (it may add defaulted fields)."""
    if isinstance(raw, dict):
        if not isinstance(written, dict):
            return [where]
        return [p for k, v in raw.items()
                for p in ([f"{where}.{k}"] if k not in written else _contained(v, written[k], f"{where}.{k}"))]
    if isinstance(raw, list):
        if not isinstance(written, list) or len(raw) != len(written):
            return [where]
        return [p for i, (a, b) in enumerate(zip(raw, written, strict=True)) for p in _contained(a, b, f"{where}.{i}")]
    return [] if raw == written else [where]


def test_the_tree_holds_real_documents_of_the_readable_schemas():
    """The documents written before the per-precision power section say SCHEMA_1 and are read
    through `upgrade`; the tree holds some, so the upgrade is exercised on real files."""
    assert len(DOCUMENTS) >= 4
    assert {json.loads(p.read_text())["schema"] for p in DOCUMENTS} <= set(READABLE_SCHEMAS)
    assert SCHEMA_1 in {json.loads(p.read_text())["schema"] for p in DOCUMENTS}


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_round_trip_on_the_real_documents(path):
    raw = json.loads(path.read_text())
    doc = CalibrationDocument.from_dict(raw)
    assert CalibrationDocument.from_dict(doc.to_dict()) == doc
    # nothing the file holds is lost or changed, but what the upgrade drops from a SCHEMA_1 power
    # section (its all-precision energy fit) and the tag
    dropped = {"schema"} | {f"power.{k}" for k in UPGRADE_1_DROPS}
    assert {p.lstrip(".") for p in _contained(raw, doc.to_dict())} <= dropped
    assert doc.schema == SCHEMA and doc.to_dict()["schema"] == SCHEMA
    # the figures as the file states them, read by attribute
    assert doc.machine_slug == raw["machine_slug"] and doc.chip.name == raw["chip"]["name"]
    assert [p.precision for p in doc.peaks] == [p["precision"] for p in raw["peaks"]]
    assert len(doc.observations.models) == len(raw["observations"]["models"])
    assert doc.validation.median_abs_error == raw["validation"]["median_abs_error"]
    assert doc.parameters.family_params.to_dict()["efficiency"] == raw["parameters"]["family_params"]["efficiency"]


def test_the_newest_document_is_written_back_with_the_same_keys_and_values():
    """The reference run has every section: to_dict gives back exactly what the file holds, upgraded."""
    raw = reference_document()
    assert {"skipped", "dispatch", "first_touch", "throttle_note"} <= set(raw)
    written = CalibrationDocument.from_dict(raw).to_dict()
    # the sections SCHEMA added, empty for a run before it (a SCHEMA_1 run without a power sensor)
    assert written["observations"].pop("holds") == [] and written["power"].pop("precisions") == []
    assert written == upgrade(raw)


def test_an_older_document_gets_the_defaults_of_the_sections_added_since():
    """The AVX2 EPYC run predates dispatch, first-touch, skipped lists and peak support."""
    raw = json.loads((MACHINES / "amd-epyc-avx2-2vcpu" / "calibration-quick.json").read_text())
    assert not {"skipped", "dispatch", "first_touch", "throttle_note"} & set(raw)
    assert "support" not in raw["peaks"][0] and "n_models" not in raw["validation"]
    doc = CalibrationDocument.from_dict(raw)
    assert doc.dispatch is None and doc.first_touch is None and doc.throttle_note is None
    assert doc.skipped.gemm_shapes == () and doc.skipped.models == ()
    assert doc.peaks[0].support == "native" and doc.validation.n_models is None
    assert doc.fingerprint.mkldnn_bf16 is None        # recorded before torch's oneDNN answers were


def test_typed_parameters_match_what_predict_loads(tmp_path):
    run = reference_run_dir(tmp_path)
    doc = store.load(run)
    assert doc.calibration_params(run / store.CALIBRATION_FILE) == store.load_calibration(run)
    raw = reference_document()
    assert doc.calibration_params(run / store.CALIBRATION_FILE).memory_bandwidth_bytes_per_s == \
        raw["chip"]["memory_bandwidth_bytes_per_s"]


def test_a_parameters_only_file_is_enough_for_prediction():
    raw = reference_document()
    part = ParametersDocument.from_dict({"schema": SCHEMA, "parameters": raw["parameters"]})
    assert part.chip is None and part.parameters.chip == "local-cpu"
    with pytest.raises(CalibrationError, match="needs chip.memory_bandwidth_bytes_per_s"):
        part.calibration_params(Path("x"))


def _damaged(tmp_path, edit) -> str:
    raw = reference_document()
    edit(raw)
    (tmp_path / store.CALIBRATION_FILE).write_text(json.dumps(raw))
    with pytest.raises(CalibrationError) as info:
        store.load(tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tmp_path / store.CALIBRATION_FILE))
    return message


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["validation"].pop("fit_data"), "missing field validation.fit_data"),
    (lambda d: d.pop("observations"), "missing field observations"),
    (lambda d: d["observations"]["models"][3].pop("median_s"), "missing field observations.models.3.median_s"),
    (lambda d: d["peaks"][1].update(n="12"), "field peaks.1.n has the wrong type (string, expected int)"),
    (lambda d: d["peaks"][0].update(n=True), "field peaks.0.n has the wrong type (bool, expected int)"),
    (lambda d: d["chip"].update(l3_bytes=3.5), "field chip.l3_bytes has the wrong type"),
    (lambda d: d["bandwidth"].update(fraction="high"), "field bandwidth.fraction has the wrong type"),
    (lambda d: d["peaks"][0].update(best_shape=[1, 2, "3"]), "field peaks.0.best_shape.2"),
    (lambda d: d["skipped"].update(gemm_shapes=[{"precision": "fp32", "shape": [1, 2], "predicted_call_s": 1.0,
                                                 "limit_s": 0.5}]),
     "field skipped.gemm_shapes.0.shape must have 3 items"),
    (lambda d: d.update(flags={"code": "x"}), "field flags has the wrong type (table, expected a list)"),
    (lambda d: d.update(fits=[]), "field fits has the wrong type (list, expected a table)"),
    (lambda d: d.update(dispatch="fast"), "missing field dispatch.per_op_s (dispatch is a string, not a table)"),
    (lambda d: d["parameters"]["family_params"].pop("source"), "parameters.family_params: family_params is missing"),
])
def test_a_missing_or_ill_typed_field_is_one_line_naming_it(tmp_path, edit, says):
    assert says in _damaged(tmp_path, edit)


def test_an_overflowing_number_is_refused(tmp_path):
    """1e999 is valid JSON that Python reads as inf."""
    text = json.dumps(reference_document())
    (tmp_path / store.CALIBRATION_FILE).write_text(text.replace('"fraction": ', '"fraction": 1e999, "x": ', 1))
    with pytest.raises(CalibrationError, match="field bandwidth.fraction must be a finite number, got inf"):
        store.load(tmp_path)


def test_a_null_measurement_is_a_figure_not_determined(tmp_path):
    """NaN is written as null (calibrate.store): a number field may read back as None."""
    raw = reference_document()
    raw["bandwidth"]["measured_bytes_per_s"] = None
    assert CalibrationDocument.from_dict(raw).bandwidth.measured_bytes_per_s is None


def test_the_document_loader_refuses_damage_in_one_line(tmp_path):
    """The fuzz cases of test_fuzz_loaders on the whole document: accepted, or a one-line
    CalibrationError; never another exception."""
    rng = random.Random(33)
    original = REFERENCE_RUN.read_bytes()
    n = {"accepted": 0, "refused": 0}
    for _kind, data, doc in cases(original, json.loads(original), rng):
        (tmp_path / store.CALIBRATION_FILE).write_bytes(data if data is not None else json.dumps(doc).encode())
        try:
            store.load(tmp_path)
        except CalibrationError as exc:
            assert "\n" not in str(exc)
            n["refused"] += 1
        else:
            n["accepted"] += 1
    assert n["refused"] > 0 and n["accepted"] > 0


def test_the_gpu_power_sections_round_trip(tmp_path):
    """No checked-in run had held its precisions: the recorded H100 traces replayed through the fake
    NVML (test_calibrate_power) stand in, their holds, energy fit and flags written and read back
    through JSON."""
    from test_calibrate_power import replayed_holds

    rows, (section, fit, flags) = replayed_holds()
    raw = upgrade(reference_document())
    raw["observations"]["holds"] = [r.to_dict() for r in rows]
    raw["power"], raw["fits"]["power"] = section.to_dict(), fit.to_dict()
    raw["flags"] = [f.to_dict() for f in flags]
    doc = CalibrationDocument.from_dict(json.loads(json.dumps(raw)))
    assert CalibrationDocument.from_dict(doc.to_dict()) == doc
    assert doc.power == section and doc.observations.holds == rows and doc.fits["power"].name == "power"
    assert [e.precision for e in doc.power.precisions] == ["fp32", "tf32", "fp16", "bf16", "fp8"]
    assert doc.observations.holds[-1].sample_clock_events[-1] == 4       # sw_power_cap at the end of the fp8 trace
    # the report: a row per precision with its engine and clock events, and the holds' power plot
    from chipcal.report.calibration import render_markdown
    from chipcal.report.plots import plot_writers

    text = render_markdown(doc)
    assert "physics at spec" in text and text.count("| tensor_cores |") == 4 and "| fp32 | cuda_cores |" in text
    assert "sw_power_cap" in text and "Static power (idle) 127 W" in text
    plot_writers(doc)["power.png"](tmp_path / "power.png")
    assert (tmp_path / "power.png").stat().st_size > 10_000


def test_a_schema_1_power_section_loses_only_its_all_precision_fit():
    """The recorded H100 quick run (SCHEMA_1) fitted one 10.8 pJ/FLOP over every precision's rows:
    read today, its power section keeps its source and rows, not that figure."""
    raw = json.loads((MACHINES / "nvidia-h100-sxm5" / "calibration-quick.json").read_text())
    assert raw["schema"] == SCHEMA_1 and raw["power"]["j_per_flop"] == pytest.approx(10.8e-12, rel=0.01)
    doc = CalibrationDocument.from_dict(raw)
    assert doc.power.available and doc.power.source == "nvml" and doc.power.precisions == ()
    assert "j_per_flop" not in doc.to_dict()["power"] and len(doc.observations.power) == 14
    assert doc.observations.holds == ()


def test_reading_a_calibration_loads_no_fitting_code():
    """Predicting from a calibration reads its document; the fitting code (scipy, ~0.4 s to import)
    is the calibration run's business, not the reader's. A fresh process loads every checked-in
    document and its parameters, and scipy is never imported."""
    import subprocess
    import sys

    paths = [str(p.parent) for p in sorted(ROOT.glob("results/*/*/calibration.json"))]
    assert paths
    code = ("import sys\nfrom chipcal.calibrate import store\n"
            f"for p in {paths!r}:\n    store.load_calibration(p); store.load(p)\n"
            "assert not [m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')], 'scipy imported'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_report_says_which_peaks_came_from_the_measurement_cache():
    """A calibration reuses the GEMM sweep cached for this machine's fingerprint; its peaks are then
    an earlier run's, and the report must say so (two runs printing identical peaks otherwise look
    like two measurements)."""
    import dataclasses

    from chipcal.report.calibration import render_markdown

    doc = CalibrationDocument.from_dict(reference_document())
    assert "measurement cache" not in render_markdown(doc)
    peaks = tuple(dataclasses.replace(p, cached=True) if p.precision in ("fp32", "int8") else p for p in doc.peaks)
    cached = CalibrationDocument.from_dict(dataclasses.replace(doc, peaks=peaks).to_dict())
    assert [p.precision for p in cached.peaks if p.cached] == ["fp32", "int8"]
    assert "- fp32, int8: read from the measurement cache" in render_markdown(cached)


def test_the_report_warns_of_a_fitted_value_its_uncertainty_swallows():
    """A switch cost of 1.95 us +- 5.2 us (a Zen 4 quick run) is consistent with 0: the report must
    not call it simply "fitted"; 0.67 on 3.55 (19%) is. A parameter the fit held at its prior keeps
    the fit's reason."""
    import dataclasses

    from chipcal.calibrate.document import FitRecord
    from chipcal.report.calibration import render_markdown

    doc = CalibrationDocument.from_dict(reference_document())
    fit = FitRecord(name="switch_overhead", model="t(chain) = ...", parameters={
        "switch_overhead_s": 1.95e-6, "network_memory_factor": 3.55, "held": 2.0},
        stderr={"switch_overhead_s": 5.2e-6, "network_memory_factor": 0.67, "held": None},
        residuals=(0.0,), residual_space="log", r2=0.99, n=4, unconstrained={"held": "the prior 2 is kept"})
    text = render_markdown(dataclasses.replace(doc, fits={**doc.fits, "switch_overhead": fit}))
    assert "| switch_overhead_s | 1.95e-06 | 5.2e-06 | fitted, barely constrained: 1σ is at least the value" in text
    assert "| network_memory_factor | 3.55 | 0.67 | fitted |" in text
    assert "| held | 2 | - | unconstrained: the prior 2 is kept |" in text
