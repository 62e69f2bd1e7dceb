"""Registry chips as the flat records of `chipcal hardware list|show --json`: the derived dense
peaks per precision, and for `show` every figure with its source."""

from __future__ import annotations

from chipcal.model.chip import Chip
from chipcal.model.precision import PRECISIONS


def list_record(chip: Chip) -> dict:
    """Name, kind, process, TDP, memory and the dense peak of every precision the chip runs."""
    row = {"name": chip.name, "kind": chip.kind, "vendor": chip.vendor, "process_nm": chip.process_nm,
           "tdp_w": chip.tdp_w, "memory_type": chip.memory.type,
           "memory_bandwidth_bytes_per_s": chip.memory.bandwidth_bytes_per_s,
           "memory_capacity_bytes": chip.memory.capacity_bytes}
    for p in PRECISIONS:
        if chip.supports(p):
            row[f"peak_flop_per_s_{p}"] = chip.peak_flop_per_s(p)
    row["hypothetical"] = chip.hypothetical
    return row


def _figures(chip: Chip) -> dict:
    """Power modes, stated peaks, engines, clocks and published measurements, as text."""
    row = {"power_mode": chip.active_mode,
           "power_modes": ", ".join(f"{m.name}={m.tdp_w:g}W" for m in chip.power_modes) or None}
    for p, v in chip.stated_peak_flop_per_s.items():
        row[f"stated_peak_flop_per_s_{p}"] = v
    for i, e in enumerate(chip.engines):
        rates = ", ".join(f"{p}={r:g}" for p, r in e.macs_per_unit_per_clock.items())
        row[f"engine_{i}"] = f"{e.name} [{e.circuit}] {e.units} units @ {e.clock_hz / 1e9:g} GHz; MAC/unit/clk: {rates}"
    row["base_clock_hz"], row["boost_clock_hz"] = chip.base_clock_hz, chip.boost_clock_hz
    row["clock_source"] = chip.clock_source or None
    for i, m in enumerate(chip.measured):
        extra = "".join(f", {label} {value:g}" for label, value in
                        (("board W", m.board_power_w), ("SM GHz", m.sm_clock_hz and m.sm_clock_hz / 1e9)) if value)
        row[f"measured_{i}"] = (f"{m.precision} {m.flop_per_s / 1e12:.4g} TFLOP/s sustained GEMM{extra}: "
                                f"{m.title}, {m.url} ({m.date})")
    row["microarch"] = ", ".join(f"{k}={v}" for k, v in chip.microarch.items() if k != "source")
    link = chip.interconnect
    row["interconnect"] = link and link.kind
    row["interconnect_per_direction_bytes_per_s"] = link and link.per_direction_bytes_per_s
    row["interconnect_domain_devices"] = link and link.domain_devices
    price = chip.price
    row["price_usd_per_device_hour"] = price and price.usd_per_device_hour
    row["price"] = price and price.basis
    return row


def _sources(chip: Chip) -> dict:
    """Where each figure comes from, then the registry's notes."""
    row = {"sources": " | ".join(chip.sources), "power_source": chip.power_source,
           "memory_source": chip.memory.source, "stated_peak_source": chip.stated_peak_source or None,
           "microarch_source": str(chip.microarch.get("source", ""))}
    for i, e in enumerate(chip.engines):
        row[f"engine_{i}_source"] = e.source
    row["interconnect_source"] = chip.interconnect and chip.interconnect.source
    row["price_source"] = chip.price and chip.price.source
    row["notes"] = chip.notes or None
    return row


def show_record(chip: Chip) -> dict:
    """One chip in full: its display name, list_record's fields, every figure, and the sources."""
    return {"display_name": chip.display_name, **list_record(chip), **_figures(chip), **_sources(chip)}
