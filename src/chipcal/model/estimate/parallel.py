"""An LLM served on many devices: tensor-parallel shards joined by all-reduces, pipeline stages
passing the hidden state on, replicated for data parallelism; a mixture of experts may keep its
experts whole, ep = tp of them spread over a stage's devices (expert parallelism, llm_shard).

Layout tp x pp x dp: each of dp replicas splits the model's layers into pp stages (consecutive
layers, llm_layers.with_layers) and each stage over tp devices (model.workload.llm_shard); a
stage's step is its shard's step plus, per layer, two all-reduces of the hidden state (after the
attention's output projection and after the MLP's down projection: Megatron-LM, arXiv:1909.08053,
section 3). The replicas serve separate requests, so tokens/s adds up over dp. A pipeline keeps pp
micro-batches in flight (estimate/llm_parallel.py); each stage sends its micro-batch's hidden state
to the next, one point-to-point transfer over the same link, with the same floor.

A ring all-reduce of S bytes over n devices (Patarasuk and Yuan 2009; NCCL's ring) sends
2 (n - 1) / n x S bytes each way from every device, over 2 (n - 1) steps:

    t = 2 (n - 1) / n x S / B  +  ALLREDUCE_FLOOR_S

B: the device's scale-up bandwidth in one direction (model.chip.Interconnect). The latency term is
taken as one floor per call, not per hop: NCCL picks tree or NVLink-SHARP algorithms for small
messages, and the end-to-end floor of a small all-reduce inside an HGX H100 node is about 10 us
(factryze.ai, "Scale atlas: tree-reduce latency": 5-10 us NVLink latency, ~10 us with NCCL's
dispatch). The same floor stands for Infinity Fabric and other links, for want of a published one.

The layout a serving engine picks for a fixed batch (`choose_layout`): the smallest tp (a power of
two that divides the devices and the heads, within the link's all-to-all domain) whose shard fits
one device's memory; the rest of the devices are replicas. Fewer shards mean fewer all-reduce
bytes per token, and each replica adds a full share of tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError

ALLREDUCE_FLOOR_S = 10e-6
ALLREDUCES_PER_LAYER = 2


class LayoutError(ChipcalError, ValueError):
    """A layout that cannot be run: malformed, or not fitting the devices, the chip or the model."""


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1         # the tp devices of a stage also split its experts whole (llm_shard.expert_shard)

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        extra = "".join(f"{k}={v}," for k, v in (("pp", self.pp), ("ep", self.ep)) if v > 1)
        return f"tp={self.tp},{extra}dp={self.dp}"


def parse_layout(text: str, devices: int | None = None) -> Layout:
    """'tp=8', 'tp=4,dp=2', 'tp=2,pp=2', 'tp=8,ep=8' (dp defaults to what fills `devices`; ep, if
    given, equals tp); LayoutError otherwise."""
    parts = dict.fromkeys(("tp", "pp", "ep", "dp"))
    for item in (t.strip() for t in text.split(",") if t.strip()):
        m = re.fullmatch(r"(tp|pp|ep|dp)=([1-9][0-9]{0,3})", item)
        if m is None or parts[m.group(1)] is not None:
            raise LayoutError(f"--layout {text!r}: give tp=N[,pp=P][,ep=N][,dp=M] (positive integers, each once)")
        parts[m.group(1)] = int(m.group(2))
    tp, pp = parts["tp"] or 1, parts["pp"] or 1
    if parts["ep"] not in (None, 1, tp):
        raise LayoutError(f"--layout {text}: ep splits the experts over the tp devices: give ep={tp}")
    if devices is not None and parts["dp"] is None and devices % (tp * pp):
        raise LayoutError(f"--layout {text}: tp x pp = {tp * pp} does not divide the {devices} devices of --devices")
    dp = parts["dp"] or (max(1, devices // (tp * pp)) if devices else 1)
    if devices is not None and tp * pp * dp != devices:
        raise LayoutError(f"--layout {text}: tp x pp x dp = {tp * pp * dp} devices, not the {devices} of --devices")
    return Layout(tp, dp, pp, parts["ep"] or 1)


def allreduce_s(message_bytes: float, n: int, chip: Chip) -> float:
    """One ring all-reduce of `message_bytes` over `n` devices of `chip` (module docstring); 0 for
    one device. LayoutError for a chip without a scale-up link or beyond its domain."""
    if n == 1:
        return 0.0
    link = chip.interconnect
    if link is None:
        raise LayoutError(f"{chip.name}: no scale-up interconnect in the registry; tensor parallelism needs one")
    if link.domain_devices is not None and n > link.domain_devices:
        raise LayoutError(f"{chip.name}: tp={n} is beyond its {link.kind} domain of {link.domain_devices} devices")
    return 2 * (n - 1) / n * message_bytes / link.per_direction_bytes_per_s + ALLREDUCE_FLOOR_S


def layouts(devices: int, heads: int, chip: Chip) -> list[Layout]:
    """Every layout of `devices` without a pipeline: tp a power of two dividing the devices and the
    heads, within the chip's all-to-all domain (1 without a scale-up link), fewest shards first."""
    return [Layout(tp, devices // tp) for tp in _powers(devices, chip) if devices % tp == 0 and heads % tp == 0]


def pipelines(devices: int, heads: int, chip: Chip, layers: int) -> list[Layout]:
    """Every layout of `devices` with pp > 1 stages: pp a power of two dividing the layers, tp as
    in `layouts`, tp x pp within the link's domain; fewest stages first. Serving engines keep to
    tensor parallelism inside a node (vLLM's and TensorRT-LLM's defaults) and add stages where it
    cannot hold the model (estimate/serving.py)."""
    powers = _powers(devices, chip)
    return [Layout(tp, devices // (tp * pp), pp) for pp in powers[1:] for tp in powers
            if tp * pp in powers and devices % (tp * pp) == 0 and heads % tp == 0 and layers % pp == 0]


def _powers(devices: int, chip: Chip) -> list[int]:
    """Powers of two up to the devices, within the chip's link domain (1 without a link)."""
    link = chip.interconnect
    limit = min(devices, link.domain_devices or devices) if link else 1
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def p2p_s(message_bytes: float, chip: Chip) -> float:
    """One stage's hidden state sent to the next (module docstring): bytes over the link one way
    plus the floor."""
    return message_bytes / chip.interconnect.per_direction_bytes_per_s + ALLREDUCE_FLOOR_S


def choose_layout(devices: int, heads: int, chip: Chip, fits: Callable[[int], bool]) -> Layout:
    """The layout a serving engine picks for a fixed batch (module docstring): `fits(tp)` says
    whether a shard fits one device. LayoutError if none does."""
    for layout in layouts(devices, heads, chip):
        if fits(layout.tp):
            return layout
    raise LayoutError(f"{chip.name}: no tensor-parallel split of {devices} device(s) holds the model "
                      f"in one device's memory")
