"""One cache root for measurements and workloads, decided in src/chipcal/measure/cache.py."""

from __future__ import annotations

from pathlib import Path

from chipcal.measure import cache
from chipcal.measure.device import Device


def test_chipcal_cache_dir_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "mine" / "measurements"
    assert cache.workload_dir() == tmp_path / "mine" / "workloads"
    assert cache.cache_path("gemm", Device("cuda", 0), "host").parent == tmp_path / "mine" / "measurements"


def test_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("CHIPCAL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.workload_dir() == tmp_path / "xdg" / "chipcal" / "workloads"
    monkeypatch.setenv("XDG_CACHE_HOME", "")                 # empty: unset (XDG base-dir spec)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "chipcal" / "measurements"
    assert cache.cache_root() == Path(tmp_path / "home" / ".cache" / "chipcal")


def test_workload_source_writes_under_the_root(tmp_path, monkeypatch):
    from chipcal.measure.workloads import WorkloadSource

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "root"))
    path = WorkloadSource(use_cache=True)._path("resnet18", 1, True)
    assert path.parent == tmp_path / "root" / "workloads"
