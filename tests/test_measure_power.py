"""RAPL powercap on a fake sysfs tree (wraparound, domains, reasons) and the unavailable source."""

from __future__ import annotations

from pathlib import Path

import pytest

from chipcal.measure import power
from chipcal.measure.device import CPU
from chipcal.measure.power import PowerUnavailable, RaplSource, UnavailableSource, open_power_source

MAX_RANGE = 262143328850  # a real package max_energy_range_uj (2^32 energy units of 61.035 µJ)


def zone(root: Path, zone_id: str, name: str, energy_uj: int, max_range: int = MAX_RANGE) -> Path:
    d = root / f"intel-rapl:{zone_id}"
    d.mkdir(parents=True)
    (d / "name").write_text(f"{name}\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


@pytest.fixture
def rapl_tree(tmp_path):
    """package-0 (with a dram and a core subzone) and a psys zone, as /sys/class/powercap lists them."""
    root = tmp_path / "powercap"
    zone(root, "0", "package-0", MAX_RANGE - 1000)
    zone(root, "0:0", "dram", 5000, max_range=65712999613)
    zone(root, "0:1", "core", 7)          # inside the package figure: not a separate domain
    zone(root, "1", "psys", 9)            # whole platform: not counted
    return root


def set_energy(root: Path, zone_id: str, value: int) -> None:
    (root / f"intel-rapl:{zone_id}" / "energy_uj").write_text(f"{value}\n")


def test_discovers_package_and_dram_only(rapl_tree):
    src = RaplSource(rapl_tree)
    assert src.available and src.reason == ""
    assert sorted(src.zones) == ["dram-0", "package-0"]


def test_wraparound_in_one_window(rapl_tree):
    src = RaplSource(rapl_tree, sample_period_s=1000)   # no background sample inside the test
    with src.window() as w:
        set_energy(rapl_tree, "0", 500)      # wrapped: (MAX - 1000) -> 500 is +1500 µJ
        set_energy(rapl_tree, "0:0", 8000)   # +3000 µJ
    r = w.reading
    assert dict(r.domains) == pytest.approx({"dram-0": 3000e-6, "package-0": 1500e-6})
    assert r.energy_j == pytest.approx(4500e-6)
    assert r.repetitions == 1 and r.source == "rapl"


def test_several_wraps_caught_by_intermediate_samples(rapl_tree):
    src = RaplSource(rapl_tree, sample_period_s=1000)
    with src.window() as w:
        # MAX-1000 -> 10 (wrap, +1010) -> MAX-5 (+MAX-15) -> 20 (wrap, +25)
        set_energy(rapl_tree, "0", 10)
        w.sample()
        set_energy(rapl_tree, "0", MAX_RANGE - 5)
        w.sample()
        set_energy(rapl_tree, "0", 20)
    package = dict(w.reading.domains)["package-0"]
    assert package == pytest.approx((1010 + (MAX_RANGE - 15) + 25) * 1e-6)


def test_delta_without_wrap(rapl_tree):
    src = RaplSource(rapl_tree)
    assert src._delta("package-0", 1_000_000, 3_500_000) == pytest.approx(2.5)


def test_counter_that_does_not_move_is_flagged_not_zeroed_silently(rapl_tree):
    src = RaplSource(rapl_tree, sample_period_s=1000)
    with src.window() as w:
        pass
    assert any("did not advance" in n for n in w.reading.warnings)


def test_missing_powercap_reason(tmp_path):
    src = RaplSource(tmp_path / "no-such-dir")
    assert not src.available
    assert "does not exist" in src.reason and "VM" in src.reason


def test_no_rapl_zones_reason(tmp_path):
    (tmp_path / "powercap").mkdir()
    src = RaplSource(tmp_path / "powercap")
    assert not src.available and "no intel-rapl package zones" in src.reason


def test_permission_denied_reason(rapl_tree, monkeypatch):
    real = Path.read_text

    def deny(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", deny)
    src = RaplSource(rapl_tree)
    assert not src.available
    assert "permission denied" in src.reason and "root" in src.reason


def test_unavailable_source_refuses_to_measure():
    src = UnavailableSource("no sensor here")
    assert not src.available and src.reason == "no sensor here"
    with pytest.raises(PowerUnavailable, match="no sensor here"):
        src.measure(lambda: None)


def test_open_power_source_cpu_without_powercap(monkeypatch, tmp_path):
    monkeypatch.setattr(power, "RAPL_ROOT", tmp_path / "absent")
    src = open_power_source(CPU)
    assert not src.available and src.name == "unavailable"
    assert src.reason.startswith("RAPL: ") and "does not exist" in src.reason


def test_open_power_source_cpu_with_powercap(monkeypatch, rapl_tree):
    monkeypatch.setattr(power, "RAPL_ROOT", rapl_tree)
    src = open_power_source(CPU)
    assert src.available and src.name == "rapl"


@pytest.mark.timing
def test_sampler_failure_is_flagged_not_silent(rapl_tree):
    import time

    src = RaplSource(rapl_tree, sample_period_s=0.01)
    with src.window() as w:
        (rapl_tree / "intel-rapl:0" / "energy_uj").write_text("not a number\n")   # the sensor breaks
        time.sleep(0.2)                                                          # the sampler reads it
        set_energy(rapl_tree, "0", MAX_RANGE - 500)                             # readable again at the end
    assert w.failure and any(n.startswith("sampler failed") for n in w.reading.warnings)
