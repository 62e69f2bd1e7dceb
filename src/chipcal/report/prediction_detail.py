"""One prediction in detail for the terminal: its per-subgraph roofline table (`chipcal predict
--by-layer`) and its energy, memory and latency breakdown with the opportunities (`--explain`).

Rows come back as records of text cells (the CLI aligns them), lines already folded to
render.TEXT_WIDTH; the figures are the model's (estimate/prediction.py, estimate/opportunities.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from chipcal.model.estimate.opportunities import Opportunity, top_consumers
from chipcal.model.estimate.prediction import STATUS_UNSUPPORTED, Prediction
from chipcal.model.mapping.params import CONCURRENT_RUNTIMES, HOST_RUNTIMES
from chipcal.report.render import wrap

MB = 1e6
NAME_WIDTH = 24                 # a subgraph's name in the table is cut to this many characters
LAYER_LEGEND = f"(names cut to {NAME_WIDTH} characters; engine, occupancy, bytes and energy split in --by-layer --json)"


def layer_heading(p: Prediction) -> str:
    return f"\n{p.model} on {p.chip}, batch {p.batch}, {p.precision}: per subgraph"


def layer_rows(p: Prediction) -> list[dict]:
    """One row per subgraph: units, waves, fill, time split, bound, attained rate, energy."""
    return [{"#": e.index, "name": e.name[:NAME_WIDTH], "class": e.op_class,
             "units": f"{e.units_allocated}/{e.units_total}", "waves": e.waves,
             "util": f"{e.utilization:.0%}", "fill": f"{e.lane_fill:.0%}",
             "lat_us": f"{e.latency_s * 1e6:.3g}", "comp_us": f"{e.compute_time_s * 1e6:.3g}",
             "mem_us": f"{e.memory_time_s * 1e6:.3g}", "bound": e.bottleneck,
             "TFLOP/s": f"{e.attained_flop_per_s / 1e12:.3g}", "energy_uJ": f"{e.energy_j * 1e6:.3g}"}
            for e in p.subgraphs]


def slowest_lines(p: Prediction, n: int = 5) -> list[str]:
    """The `n` slowest subgraphs (ties by index), each with why it takes its time."""
    slowest = sorted(p.subgraphs, key=lambda e: (-e.latency_s, e.index))[:n]
    return ["slowest subgraphs, why:", *(wrap(f"  {e.explanation}", indent="    ") for e in slowest)]


def _latency_line(p: Prediction) -> str:
    if p.runtime in HOST_RUNTIMES:
        return (f"  latency: {p.latency_s * 1e3:.4g} ms ({p.runtime}: one stream behind the host); host issues "
                f"{len(p.subgraphs)} ops at {p.host_per_op_s * 1e6:.3g} us = {p.host_s * 1e3:.4g} ms, device busy "
                f"{p.serial_latency_s * 1e3:.4g} ms, idle {p.host_wait_s * 1e3:.4g} ms waiting for the host")
    if p.runtime not in CONCURRENT_RUNTIMES:
        return (f"  latency: {p.latency_s * 1e3:.4g} ms ({p.runtime}: its kernels one after another on one stream), "
                f"{p.critical_path_latency_s * 1e3:.4g} ms critical path")
    return (f"  latency: {p.latency_s * 1e3:.4g} ms with stage concurrency, {p.serial_latency_s * 1e3:.4g} ms "
            f"serial, {p.critical_path_latency_s * 1e3:.4g} ms critical path")


def _memory_lines(p: Prediction) -> list[str]:
    mem = p.memory
    at = next((m.name for m in mem.timeline if m.index == mem.peak_index), "start")
    return [f"  memory: peak {mem.peak_bytes / MB:.4g} MB at {at} = weights {mem.weight_bytes / MB:.4g} MB + "
            f"activations {mem.peak_activation_bytes / MB:.4g} MB (no workspace: implicit-GEMM lowering); "
            f"weights {'stay on chip' if p.weights_on_chip else 'stream from DRAM'}",
            "  memory timeline (MB after each subgraph): " + " ".join(f"{m.live_bytes / MB:.3g}" for m in mem.timeline)]


def _fold(line: str) -> str:
    return wrap(line, indent="    ")


def explain_lines(p: Prediction, found: Sequence[Opportunity]) -> Iterator[str]:
    """The heading, then folded: the energy split and its top consumers, the memory peak and
    timeline, the latency's parts, and each opportunity; one line at a time, as written."""
    yield f"\n{p.model} on {p.chip}, batch {p.batch}, {p.precision}"
    if p.status == STATUS_UNSUPPORTED:        # nothing was predicted: no energy, memory or latency to explain
        yield _fold(f"  unsupported: {p.reason}")
        return
    total = p.energy_j
    yield _fold(f"  energy {total * 1e3:.4g} mJ: compute {p.compute_energy_j / total:.0%} (of which the clocks of "
                f"busy units {p.clock_energy_j / total:.0%}), memory "
                f"{p.memory_energy_j / total:.0%}, static {p.static_energy_j / total:.0%}; idle units waste "
                f"{p.wasted_energy_j * 1e3:.4g} mJ ({p.wasted_energy_j / total:.0%})")
    yield _fold("  top energy: " + "; ".join(f"{e.name} {e.energy_j * 1e3:.3g} mJ" for e in top_consumers(p)))
    yield from map(_fold, _memory_lines(p))
    yield _fold(_latency_line(p))
    for o in found:
        yield _fold(f"  opportunity ({o.kind}): {o.summary}")
