"""Fuzz the three loaders that read files a user (or a crash, or a full disk) can spoil.

Registry TOML, calibration.json and workload cache entries are mutated from real files: random
bytes, truncations, bit flips, a field given the wrong type, a number made NaN/±inf. A loader
may accept a case or refuse it with its own ChipcalError (the CLI: one line, exit 2; the cache:
characterize again with a note). It may never raise anything else, never print a traceback,
and never hand back altered data. Seeded, so a failure reproduces; the number of cases per
loader is fixed below (docs: issue #13).
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import tomllib
from pathlib import Path

import pytest
from recorded import REFERENCE_RUN, reference_run_dir

from chipcal.calibrate.store import load_calibration
from chipcal.cli import hardware as hardware_cli
from chipcal.cli import predict as predict_cli
from chipcal.measure import workloads
from chipcal.model import registry as registry_mod
from chipcal.model.errors import ChipcalError
from chipcal.model.mapping.params import CalibrationError, CalibrationParams
from chipcal.model.registry import RegistryError, chip_from_dict, load_registry

HARDWARE_DIR = Path(registry_mod.__file__).parent / "hardware"

CASES_PER_KIND = 60           # per mutation kind and loader
KINDS = ("random_bytes", "truncate", "bit_flips", "wrong_type", "non_finite")


# --- mutations -------------------------------------------------------------------------------------


def random_bytes(data: bytes, rng: random.Random) -> bytes:
    return rng.randbytes(rng.randrange(0, 2 * len(data) // 3 + 2))


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(0, len(data))]


def bit_flips(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


BYTE_MUTATIONS = {"random_bytes": random_bytes, "truncate": truncate, "bit_flips": bit_flips}


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indices) to a value inside nested dicts/lists."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_paths(value, (*prefix, key)))
    return out


def _set(doc: object, path: tuple, value: object) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _get(doc: object, path: tuple) -> object:
    for key in path:
        doc = doc[key]
    return doc


def _json_type(value: object) -> str:
    return "bool" if isinstance(value, bool) else "number" if isinstance(value, int | float) else type(value).__name__


WRONG = ("text", 7, 2.5, True, [1, "x"], {"k": 1}, None)


def wrong_type(doc: dict, rng: random.Random) -> dict:
    """`doc` with one value (anywhere) replaced by a value of another JSON type. An object is not
    replaced by null: an object's place may hold an optional record (a subgraph's GEMM shape),
    where null is a valid value, not a wrong one."""
    doc = copy.deepcopy(doc)
    path = rng.choice(_paths(doc))
    old = _get(doc, path)
    _set(doc, path, rng.choice([w for w in WRONG if _json_type(w) != _json_type(old)
                                and not (w is None and isinstance(old, dict))]))
    return doc


def non_finite(doc: dict, rng: random.Random) -> dict:
    """`doc` with one number (anywhere) replaced by NaN, inf or -inf."""
    doc = copy.deepcopy(doc)
    numbers = [p for p in _paths(doc) if _json_type(_get(doc, p)) == "number"]
    _set(doc, rng.choice(numbers), rng.choice([math.nan, math.inf, -math.inf]))
    return doc


def cases(data: bytes, doc: dict, rng: random.Random):
    """(kind, mutated bytes or None, mutated document or None), CASES_PER_KIND of each kind."""
    for kind in KINDS:
        for _ in range(CASES_PER_KIND):
            if kind in BYTE_MUTATIONS:
                yield kind, BYTE_MUTATIONS[kind](data, rng), None
            else:
                yield kind, None, (wrong_type if kind == "wrong_type" else non_finite)(doc, rng)


# --- registry ---------------------------------------------------------------------------------------

REGISTRY_FILES = ("t4.toml", "jetson_agx_orin_64gb.toml", "xeon_platinum_8480_plus.toml", "kpu_t64.toml")
NON_FINITE_TOML = re.compile(r"(?<=[=,{\[] )[-+]?\d[\d_.eE+-]*")


def _toml_non_finite(text: str, rng: random.Random) -> bytes:
    """A number literal in the TOML text replaced by nan/inf/-inf (TOML has those literals)."""
    spots = list(NON_FINITE_TOML.finditer(text))
    m = rng.choice(spots)
    return (text[:m.start()] + rng.choice(["nan", "inf", "-inf", "+nan"]) + text[m.end():]).encode()


def _check_chip(chip) -> None:
    """A chip the loader accepted has only finite, positive figures."""
    assert math.isfinite(chip.tdp_w) and chip.tdp_w > 0
    assert math.isfinite(chip.memory.bandwidth_bytes_per_s)
    assert all(math.isfinite(m.tdp_w) for m in chip.power_modes)
    assert all(math.isfinite(v) for v in chip.microarch.values() if isinstance(v, float))
    for precision in chip.precisions:
        assert math.isfinite(chip.peak_flop_per_s(precision))


def test_registry_loader_fuzz(tmp_path):
    rng = random.Random(13)
    n = {"accepted": 0, "refused": 0}
    for name in REGISTRY_FILES:
        original = (HARDWARE_DIR / name).read_text()
        for kind, data, doc in cases(original.encode(), tomllib.loads(original), rng):
            if kind == "non_finite":
                data = _toml_non_finite(original, rng)
            if data is not None:
                path = tmp_path / "fuzzed.toml"
                path.write_bytes(data)
                reg = load_registry(tmp_path)                    # never raises
                assert len(reg.chips) + len(reg.errors) == 1, kind
                assert all(isinstance(e, RegistryError) and e.file == "fuzzed.toml" for e in reg.errors)
                for chip in reg.chips.values():
                    _check_chip(chip)
                n["accepted" if reg.chips else "refused"] += 1
                continue
            try:
                _check_chip(chip_from_dict(doc, name))
                n["accepted"] += 1
            except RegistryError:
                n["refused"] += 1
    assert sum(n.values()) == len(REGISTRY_FILES) * len(KINDS) * CASES_PER_KIND == 1200
    assert n["refused"] > n["accepted"] > 0


def test_registry_cli_survives_fuzzed_files(cli, tmp_path, monkeypatch):
    """`chipcal hardware list` with 40 spoiled files next to a good one: exit 0, the good chip
    listed, one warning line per spoiled file, no traceback."""
    rng = random.Random(7)
    original = (HARDWARE_DIR / "t4.toml").read_text()
    (tmp_path / "good.toml").write_text(original)
    for i in range(40):
        mutate = BYTE_MUTATIONS[rng.choice(sorted(BYTE_MUTATIONS))]
        (tmp_path / f"bad{i:02d}.toml").write_bytes(mutate(original.replace('"t4"', f'"bad{i}"').encode(), rng))
    real = registry_mod.load_registry
    monkeypatch.setattr(registry_mod, "load_registry", lambda directory=None: real(tmp_path))
    rc, out, err = cli(hardware_cli.main, ["list", "--json"])
    assert rc == 0 and "Traceback" not in err
    names = {r["name"] for r in json.loads(out)}
    assert "t4" in names and err.count("warning: skipped registry file") == 41 - len(names)


# --- calibration ------------------------------------------------------------------------------------


def test_calibration_loader_fuzz(tmp_path):
    rng = random.Random(21)
    original = REFERENCE_RUN.read_bytes()
    genuine = load_calibration(reference_run_dir(tmp_path / "genuine"))
    n = {"accepted": 0, "refused": 0}
    for _kind, data, doc in cases(original, json.loads(original), rng):
        path = tmp_path / "calibration.json"
        path.write_bytes(data if data is not None else json.dumps(doc).encode())
        try:
            cal = load_calibration(tmp_path)
        except CalibrationError as exc:
            assert "\n" not in str(exc)
            n["refused"] += 1
            continue
        assert isinstance(cal, CalibrationParams)
        # what was accepted is usable: finite parameters, the chip's bandwidth where it has one
        assert all(math.isfinite(v) for v in cal.params.efficiency.values())
        assert cal.memory_bandwidth_bytes_per_s is None or math.isfinite(cal.memory_bandwidth_bytes_per_s)
        if cal.chip == genuine.chip and data is None:
            assert cal.memory_bandwidth_bytes_per_s is not None
        n["accepted"] += 1
    assert sum(n.values()) == len(KINDS) * CASES_PER_KIND == 300
    assert n["refused"] > 0 and n["accepted"] > 0


def test_predict_with_fuzzed_calibration_exits_0_or_2_in_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    from test_mapping import mlp

    monkeypatch.setattr(workloads.WorkloadSource, "get", lambda self, model, batch, partition="fused": mlp(batch))
    rng = random.Random(5)
    original = REFERENCE_RUN.read_bytes()
    doc = json.loads(original)
    outcomes = {0: 0, 2: 0}
    for i in range(40):
        kind = KINDS[i % len(KINDS)]
        if kind in BYTE_MUTATIONS:
            data = BYTE_MUTATIONS[kind](original, rng)
        else:
            data = json.dumps((wrong_type if kind == "wrong_type" else non_finite)(doc, rng)).encode()
        (tmp_path / "calibration.json").write_bytes(data)
        rc, out, err = cli(lambda a: predict_cli.main(a, prog="chipcal predict"),
                           ["--model", "mlp1024", "--hardware", "local", "--calibration", str(tmp_path), "--json"])
        assert rc in outcomes and "Traceback" not in err, (kind, err)
        if rc == 2:
            assert len(err.strip().splitlines()) == 1
        else:
            assert all(r["latency_s"] is not None and math.isfinite(r["latency_s"]) for r in json.loads(out))
        outcomes[rc] += 1
    assert outcomes[2] > 0


# --- workload cache ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def genuine():
    from chipcal.model.workload import characterize_model

    return characterize_model("resnet18", 1)


def test_workload_cache_loader_fuzz(tmp_path, monkeypatch, genuine):
    """Every spoiled entry gives back the genuine workload (loaded, or characterized again with
    a note); nothing raises. wrong_type/non_finite cases carry a recomputed content hash, so they
    reach the field-by-field check behind it."""
    from chipcal.model.workload import models

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(models, "characterize_model", lambda *a, **k: calls.append(a) or genuine)
    source = workloads.WorkloadSource(use_cache=True)
    source.get("resnet18", 1)
    path = source._path("resnet18", 1, "fused")
    original = path.read_bytes()
    entry = json.loads(original)
    rng = random.Random(99)
    n = {"loaded": 0, "characterized again": 0}
    for kind, data, doc in cases(original, entry["workload"], rng):
        if data is None:
            data = json.dumps({**entry, "workload": doc, "sha256": workloads._digest(doc)}).encode()
        path.write_bytes(data)
        notes, before = [], len(calls)
        got = workloads.WorkloadSource(use_cache=True, notify=notes.append).get("resnet18", 1)
        assert got == genuine, kind                          # never altered data
        if len(calls) > before:
            assert len(notes) >= 1 and all("\n" not in note for note in notes)
            n["characterized again"] += 1
        else:
            n["loaded"] += 1
    assert sum(n.values()) == len(KINDS) * CASES_PER_KIND == 300
    assert n["characterized again"] > 0


def test_chipcal_error_is_the_only_refusal():
    """The loaders' refusals are ChipcalErrors, which the CLI turns into one line and exit 2."""
    from chipcal.model.workload.serialize import WorkloadDataError

    assert all(issubclass(e, ChipcalError) for e in (RegistryError, CalibrationError, WorkloadDataError))
