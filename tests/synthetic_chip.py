"""A hypothetical one-engine systolic chip for tests whose numbers are worked out by hand."""

from __future__ import annotations

from chipcal.model.registry import chip_from_dict


def synthetic_chip(tdp_w: float, units: int, idle_w: float | None = None):
    """bf16 systolic MACs at 1 GHz on 7 nm, HBM2 at 1 TB/s; stated peak = 2 × units × 1 GHz."""
    doc = {
        "name": "synthetic", "display_name": "Synthetic", "vendor": "test", "kind": "tpu",
        "process_nm": 7, "hypothetical": True, "sources": ["hypothetical: test chip"],
        "power": {"tdp_w": tdp_w, "source": "hypothetical"},
        "memory": {"type": "hbm2", "bandwidth_bytes_per_s": 1e12, "capacity_bytes": 16e9, "source": "hypothetical"},
        "microarch": {"mxu_count": 1, "array_rows": 128, "array_cols": 128, "sram_bytes": 1 << 24,
                      "source": "hypothetical"},
        "engines": [{"name": "mxu", "circuit": "systolic_mac", "units": units, "clock_hz": 1e9,
                     "macs_per_unit_per_clock": {"bf16": 1}, "source": "hypothetical"}],
        "stated_peak_flop_per_s": {"bf16": 2e9 * units, "source": "hypothetical"},
    }
    if idle_w is not None:
        doc["power"]["idle_w"] = idle_w
    return chip_from_dict(doc)
