"""The link a submitted system's all-reduces cross (validate.mlperf_links), read from the systems'
own descriptions as MLPerf v4.1 published them, and the PCIe rates worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chipcal.model.registry import load_registry
from chipcal.validate import mlperf
from chipcal.validate.mlperf_links import UnreadLink, pcie_link, with_system_link


@pytest.fixture(scope="module")
def systems():
    return {r.system: r for r in mlperf.read_csv(mlperf.PACKAGED)}


@pytest.mark.parametrize("text, per_direction", [
    ("PCIe Gen5 x16", 63.0e9),     # 32 GT/s x 16 lanes = 512 Gb/s, x 128/130 = 504.1 Gb/s = 63.0 GB/s
    ("PCIe Gen4 x16", 31.5e9),     # half the rate: 16 GT/s
    ("pcie gen5 x8", 31.5e9),      # half the lanes
    ("PCIe Gen3 x16", 15.75e9),    # 8 GT/s
])
def test_a_pcie_link_is_lanes_times_rate_after_128b130b(text, per_direction):
    link = pcie_link(text)
    assert link.kind == "pcie" and link.domain_devices is None
    assert link.per_direction_bytes_per_s == pytest.approx(per_direction, rel=2e-3)


@pytest.mark.parametrize("text", ["N/A", "", "18x 4th Gen NVLink, 900GB/s", "PCIe Gen6 x16", "CXL"])
def test_what_is_not_a_pcie_generation_and_width_read_here_is_none(text):
    assert pcie_link(text) is None


def test_the_v41_csv_keeps_the_links_as_the_systems_describe_them(systems):
    # closed/ASUSTeK/systems/ESC4000A_E12_4XH100_TRT.json and HPE's DL380a, as published
    asus, hpe = systems["ESC4000A_E12_4XH100_TRT"], systems["HPE_ProLiant_DL380a_H100_NVL_94GBx4_TRT"]
    assert (asus.accelerator_interconnect, asus.accelerator_host_interconnect) == ("N/A", "PCIe Gen5 x16")
    assert hpe.accelerator_interconnect == "4x 4th Gen NVLink, 900GB/s"


def test_a_system_without_its_chip_s_bridges_runs_over_its_host_pcie(systems):
    """Four H100 NVL with NVLink bridges (HPE) keep the registry's 300 GB/s; the same four without
    them (ASUSTeK's ESC4000A-E12, "N/A") cross PCIe Gen5 x16, and so do eight H100 PCIe (ESC8000A).
    The L40S has no bridge to lack: its registry link stays."""
    registry = load_registry()
    nvl = registry.get("h100-nvl")
    assert with_system_link(systems["HPE_ProLiant_DL380a_H100_NVL_94GBx4_TRT"], nvl) is nvl
    bare = with_system_link(systems["ESC4000A_E12_4XH100_TRT"], nvl)
    assert bare.interconnect.kind == "pcie" and bare.interconnect.per_direction_bytes_per_s == pytest.approx(63.0e9,
                                                                                                            rel=2e-3)
    assert bare.memory == nvl.memory and bare.engines == nvl.engines       # only the link differs
    assert with_system_link(systems["ESC8000A_E12_H100x8_TRT"], registry.get("h100-pcie")).interconnect.kind == "pcie"
    l40s = registry.get("l40s")
    assert with_system_link(systems["CDI_L40Sx8_TRT"], l40s) is l40s


def test_a_source_that_does_not_say_keeps_the_registry_s_link_and_an_unread_host_link_is_refused(systems):
    nvl = load_registry().get("h100-nvl")
    asus = systems["ESC4000A_E12_4XH100_TRT"]
    assert with_system_link(replace(asus, accelerator_interconnect=""), nvl) is nvl     # summary_results.json
    with pytest.raises(UnreadLink, match="ESC4000A_E12_4XH100_TRT has no accelerator interconnect"):
        with_system_link(replace(asus, accelerator_host_interconnect="OAM"), nvl)


def test_the_check_serves_an_llm_row_over_the_system_s_link(systems):
    """mlperf_check hands the serving the chip with the system's link, and names an unread one as
    the row's exclusion (a stub stands for the serving: no characterization)."""
    from chipcal.validate import mlperf_check
    from chipcal.validate.mlperf_llm import NotServed

    links = []

    def serve(bench, chip, devices, scenario, stack):
        links.append((chip.name, chip.interconnect.kind, devices))
        return NotServed("stub")

    registry = load_registry()
    asus = systems["ESC4000A_E12_4XH100_TRT"]
    rows = [r for r in mlperf.read_csv(mlperf.PACKAGED)
            if r.system == asus.system and r.benchmark == "llama2-70b-99" and r.scenario == "Offline"]
    assert mlperf_check._one(rows[0], registry, None, None, serve).reason == "stub"
    assert links == [("h100-nvl", "pcie", 4)]
    unread = mlperf_check._one(replace(rows[0], accelerator_host_interconnect="OAM"), registry, None, None, serve)
    assert "not a PCIe generation and width" in unread.reason and len(links) == 1


def test_a_csv_written_before_the_links_were_kept_still_reads(tmp_path):
    """An earlier chipcal's CSV (no link columns) loads, its links not said: the registry's stay."""
    import csv

    rows = mlperf.read_csv(mlperf.PACKAGED)[:3]
    path = tmp_path / "old.csv"
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, mlperf.COLUMNS_BEFORE_LINKS, lineterminator="\n", extrasaction="ignore")
        out.writeheader()
        out.writerows({k: ("" if v is None else v) for k, v in vars(r).items()} for r in rows)
    back = mlperf.read_csv(path)
    assert back == [replace(r, accelerator_interconnect="", accelerator_host_interconnect="") for r in rows]


def test_an_llm_row_s_record_names_the_link_it_was_served_over(systems):
    """The stub serving returns a prediction: the record carries the layout and the link."""
    from chipcal.validate import mlperf_check
    from chipcal.validate.mlperf_llm import Served

    def serve(bench, chip, devices, scenario, stack):
        return Served(tokens_per_s=4000.0, batch=64, layout="tp=1,dp=4", bottleneck="power", precision="fp8",
                      device_power_w=400.0)

    rows = [r for r in mlperf.read_csv(mlperf.PACKAGED) if r.benchmark == "llama2-70b-99" and r.scenario == "Offline"
            and r.system in ("ESC4000A_E12_4XH100_TRT", "HPE_ProLiant_DL380a_H100_NVL_94GBx4_TRT")]
    records = {r.system: mlperf_check._one(r, load_registry(), None, None, serve).record() for r in rows}
    assert records["ESC4000A_E12_4XH100_TRT"]["link"] == "pcie 63 GB/s"
    assert records["HPE_ProLiant_DL380a_H100_NVL_94GBx4_TRT"]["link"] == "nvlink 300 GB/s"   # the registry's bridges
    assert records["ESC4000A_E12_4XH100_TRT"]["predicted"] == 1000.0                        # 4000 tok/s over 4 GPUs
