"""Workload cache: a data format (never code), names checked before they reach a path, an unsafe
directory refused, any bad entry characterized again; Workload <-> dict round trip."""

from __future__ import annotations

import json
import os
import pickle
from functools import cache

import pytest

from chipcal.cli import predict as predict_cli
from chipcal.measure import workloads
from chipcal.model.workload import characterize_model
from chipcal.model.workload.serialize import WorkloadDataError, workload_from_dict, workload_to_dict


@cache
def real(name: str, partition: str):
    return characterize_model(name, 1, partition=partition)


@pytest.mark.parametrize("name,partition", [("resnet18", "fused"), ("resnet18", "eager"), ("vit_b_16", "fused"),
                                            ("googlenet", "fused"), ("resnet18", "codegen")])
def test_round_trip_of_real_characterized_models(name, partition):
    w = real(name, partition)
    back = workload_from_dict(json.loads(json.dumps(workload_to_dict(w))))
    assert back == w                                      # every field, nested dataclasses included
    assert back.macs == w.macs and back.critical_path == w.critical_path
    assert any(op.gemm is not None for op in back.ops) and any(op.terms for op in back.ops)


@pytest.mark.parametrize("name,partition", [("resnet18", "fused"), ("vit_b_16", "fused"), ("resnet18", "codegen")])
def test_the_dict_is_what_dataclasses_asdict_gives(name, partition):
    """The per-type writer against the standard library's: the same JSON, field for field."""
    import dataclasses

    w = real(name, partition)
    assert json.dumps(workload_to_dict(w)) == json.dumps(dataclasses.asdict(w))


def test_an_llm_step_s_dict_is_what_dataclasses_asdict_gives(source):
    import dataclasses

    from chipcal.model.workload.llm_config import load_llm_config, step_key
    from chipcal.model.workload.serialize import llm_step_from_dict, llm_step_to_dict

    step = source.llm_step(step_key(load_llm_config("gpt2"), "eager", "decode", 2, 16, 4, "bf16"))
    text = json.dumps(llm_step_to_dict(step))
    assert text == json.dumps(dataclasses.asdict(step))
    assert llm_step_from_dict(json.loads(text)) == step


@pytest.mark.parametrize("mutate, says", [
    (lambda d: d.pop("ops"), "missing field 'ops'"),
    (lambda d: d.update(batch=True), "workload.batch: expected an integer"),
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d["ops"][0].update(gemm="x"), "workload.ops[0].gemm: expected an object"),
    (lambda d: d["ops"][0]["inputs"][0].update(shape={"a": 1}), "expected a list"),
    (lambda d: d.update(stages=[[1, "2"]]), "workload.stages[0][1]: expected an integer"),
])
def test_from_dict_names_the_bad_field(mutate, says):
    d = json.loads(json.dumps(workload_to_dict(real("resnet18", "fused"))))
    mutate(d)
    with pytest.raises(WorkloadDataError, match=says.replace("[", r"\[").replace("]", r"\]")):
        workload_from_dict(d)


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "workloads"


@pytest.fixture
def counted(monkeypatch):
    """characterize_model replaced by a counter returning the real resnet18 characterization."""
    from chipcal.model.workload import models

    calls = []

    def fake(name, batch, partition="fused"):
        calls.append((name, batch, partition))
        return real("resnet18", partition)

    monkeypatch.setattr(models, "characterize_model", fake)
    return calls


def source(notes):
    return workloads.WorkloadSource(use_cache=True, notify=notes.append)


def test_second_source_reads_json_entry_without_characterizing(cache_root, counted):
    notes = []
    first = source(notes).get("resnet18", 1)
    again = source(notes).get("resnet18", 1)
    assert first == again and counted == [("resnet18", 1, "fused")]
    files = list(cache_root.iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    assert json.loads(files[0].read_text())["format"] == workloads.FORMAT
    assert oct(cache_root.stat().st_mode & 0o777) == "0o700"


def test_planted_pickle_behind_a_traversing_model_name_is_never_loaded(cli, tmp_path, monkeypatch):
    """`--model ../evil` once built D/../evil-….pkl and unpickled it: the payload ran."""
    (tmp_path / "d" / "workloads").mkdir(parents=True)
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "d"))
    marker = tmp_path / "pwned"
    key = workloads._code_key()

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for fuse in ("fused", "eager"):
        for suffix in (".pkl", ".json"):
            (tmp_path / "d" / f"evil-b1-{fuse}-{key}{suffix}").write_bytes(pickle.dumps(Payload()))
    rc, _, err = cli(lambda a: predict_cli.main(a, prog="chipcal predict"),
                     ["--model", "../evil", "--hardware", "t4"])
    assert not marker.exists()
    assert rc == 2 and "unknown model '../evil'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_pickle_at_a_real_entry_name_is_not_executed(cache_root, counted, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    cache_root.mkdir(mode=0o700, parents=True)
    src = source(notes := [])
    path = src._path("resnet18", 1, "fused")
    path.write_bytes(pickle.dumps(Payload()))
    assert src.get("resnet18", 1) == real("resnet18", "fused")
    assert not marker.exists() and len(counted) == 1
    assert any("unusable" in n and "characterizing again" in n for n in notes)


def test_directory_writable_by_others_is_not_used(cache_root, counted):
    cache_root.mkdir(parents=True)
    os.chmod(cache_root, 0o777)
    notes = []
    source(notes).get("resnet18", 1)
    assert list(cache_root.iterdir()) == []
    assert any("not using the workload cache" in n and "others can write it" in n for n in notes)


def test_directory_of_another_user_is_not_used(cache_root, counted, monkeypatch):
    cache_root.mkdir(mode=0o700, parents=True)
    other = cache_root.stat().st_uid + 1
    monkeypatch.setattr(workloads.os, "geteuid", lambda: other)
    notes = []
    source(notes).get("resnet18", 1)
    assert list(cache_root.iterdir()) == []
    assert any("not by you" in n for n in notes)


def test_symlinked_directory_and_symlinked_entry_are_not_followed(tmp_path, monkeypatch, counted):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "root" / "workloads"
    link.parent.mkdir()
    link.symlink_to(target)
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(link.parent))
    notes = []
    source(notes).get("resnet18", 1)
    assert list(target.iterdir()) == [] and any("symbolic link" in n for n in notes)

    real_dir = tmp_path / "real"
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(real_dir))
    good = source([])
    good.get("resnet18", 1)                                 # a genuine entry to point at
    entry = good._path("resnet18", 1, "fused")
    stolen = tmp_path / "stolen.json"
    entry.rename(stolen)
    entry.symlink_to(stolen)
    notes = []
    assert source(notes).get("resnet18", 1) == real("resnet18", "fused")
    assert len(counted) == 3 and any("unreadable" in n for n in notes)


def test_edited_entry_fails_its_hash_and_is_recharacterized(cache_root, counted):
    src = source([])
    src.get("resnet18", 1)
    path = src._path("resnet18", 1, "fused")
    doc = json.loads(path.read_text())
    doc["workload"]["ops"][0]["macs"] += 1                  # valid JSON, valid types, wrong data
    path.write_text(json.dumps(doc))
    notes = []
    assert source(notes).get("resnet18", 1) == real("resnet18", "fused")
    assert len(counted) == 2 and any("content hash" in n for n in notes)
