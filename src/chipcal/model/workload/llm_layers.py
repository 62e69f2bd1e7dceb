"""A decoder's forward at L layers, built from traces of a few: its layers repeat exactly.

Tracing Llama-2-70B's 80 layers on meta tensors takes ~3 s a forward; serving predictions need
dozens of forwards (batches, shards), and a test suite cannot wait for them. Every layer after
the first runs the same ops on the same shapes (the first also builds the rotary tables and the
mask), so the forward of L layers is the forward of TRACED[0] layers with L - TRACED[0] copies
of one layer inserted, each copy reading the copy before it and the tables every layer reads.

`expand(a, b, c, layers)` works that out from traces of TRACED = (2, 3, 4) layers (the first
layer and the last, then one and two layers between them):
    p = |ops of b| - |ops of a|, q = the same of subgraphs       (one layer: must be c - b too)
    k, s: where b inserts its p ops and q subgraphs into a's     (a[:k] = b[:k], a[k:] = b[k+p:],
                                                                 compared without positions)
    a dependency of the inserted layer on a subgraph before it: "previous layer" where c's second
    copy reads q further on than its first, "shared" where both read the same subgraph
    ops, subgraphs:  a's before k (s), the layer L - 2 times (indices, op indices and previous-
                     layer dependencies q (p) further on each time), a's after (shifted)
    params:          a's + (L - 2) x (b's - a's)
    stages, critical path: worked out again from the dependencies (concurrency.py)
and checks itself: the expansion of (a, b, c) to 4 layers must be c, position for position, names
aside (an inserted copy's are its first's, "<name>.r<copy>"). Where a config holds a value per layer
(a list as long as its layers), or any check fails, `NotRepeating` says why and the caller traces
every layer. tests/test_llm_layers.py compares the expansion with a full trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from chipcal.model.errors import ChipcalError
from chipcal.model.memo import moved
from chipcal.model.workload import concurrency
from chipcal.model.workload.llm_config import LAYER_KEYS, LlmConfig, StepKey, parse_config
from chipcal.model.workload.types import LlmStep, Op, Workload, content_key

TRACED = (2, 3, 4)


class NotRepeating(ChipcalError, ValueError):
    """The traces do not show one layer repeating exactly; says where."""


def with_layers(config: LlmConfig, layers: int) -> LlmConfig:
    """`config` with `layers` layers and nothing else changed; NotRepeating where its config.json
    holds a value per layer (a list as long as its layers: layer types, window pattern)."""
    raw = config.fields()
    per_layer = [k for k, v in raw.items() if isinstance(v, list) and len(v) == config.layers]
    if per_layer:
        raise NotRepeating(f"{config.name}: {per_layer[0]} holds a value per layer")
    key = next(k for k in LAYER_KEYS if raw.get(k) is not None)
    return parse_config({**raw, key: layers}, config.name, config.source, config.published_params)


def _op_shape(op: Op) -> Op:
    return moved(op, index=0, name="")


def _unnamed(w: Workload) -> Workload:
    return replace(w, ops=tuple(moved(op, name="") for op in w.ops),
                   subgraphs=tuple(moved(sg, name="") for sg in w.subgraphs))


def _insertion(short: Sequence, long: Sequence, period: int, same: Callable) -> range:
    """The positions k where `long` is short[:k] + `period` items + short[k:] (items compared by
    `same`'s key)."""
    a, b = [same(x) for x in short], [same(x) for x in long]
    prefix = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
    suffix = next((i for i in range(len(a)) if a[-1 - i] != b[-1 - i]), len(a))
    return range(max(0, len(a) - suffix), prefix + 1)


def _rules(first: Sequence[int], second: Sequence[int], shift: int, where: str) -> tuple[bool, ...]:
    """Per dependency of a repeated subgraph: True where the next copy reads `shift` further on
    (the layer before), False where it reads the same subgraph (shared tables)."""
    if len(first) != len(second):
        raise NotRepeating(f"{where}: {len(first)} dependencies, then {len(second)}")
    rules = []
    for d1, d2 in zip(first, second, strict=True):
        if d2 not in (d1, d1 + shift):
            raise NotRepeating(f"{where}: reads subgraph {d1}, then {d2}")
        rules.append(d2 != d1)
    return tuple(rules)


def _moved(deps: Sequence[int], rules: Sequence[bool], by: int) -> tuple[int, ...]:
    return tuple(d + by if moves else d for d, moves in zip(deps, rules, strict=True))


def expand(a: Workload, b: Workload, c: Workload, layers: int) -> Workload:
    """The workload of `layers` layers from the traces of TRACED layers (module docstring)."""
    p, q = len(b.ops) - len(a.ops), len(b.subgraphs) - len(a.subgraphs)
    if p <= 0 or q <= 0 or (len(c.ops) - len(b.ops), len(c.subgraphs) - len(b.subgraphs)) != (p, q):
        raise NotRepeating(f"{a.model}: a layer adds {p}, then {len(c.ops) - len(b.ops)} ops")
    built = _expanded(a, b, c, layers, p, q)
    if _unnamed(_expanded(a, b, c, TRACED[2], p, q)) != _unnamed(c):
        raise NotRepeating(f"{a.model}: two layers inserted do not give the trace of {TRACED[2]}")
    return built


def _expanded(a: Workload, b: Workload, c: Workload, layers: int, p: int, q: int) -> Workload:
    ops_at = _insertion(a.ops, b.ops, p, _op_shape)
    for s in _insertion(a.subgraphs, b.subgraphs, q, content_key):
        used = [o for sg in b.subgraphs[s:s + q] for o in sg.op_indices]
        if not used:
            continue
        for k in range(max(ops_at.start, max(used) - p + 1), min(ops_at.stop, min(used) + 1)):
            if _splits(b, k, p, s, q):
                return _inserted(a, b, c, layers - TRACED[0], k, p, s, q)
    raise NotRepeating(f"{a.model}: no place where one layer's ops and subgraphs go in together")


def _splits(b: Workload, k: int, p: int, s: int, q: int) -> bool:
    """Whether b's subgraphs split at s and s + q as its ops do at k and k + p: the inserted
    subgraphs use the inserted ops only, the ones after use none of them, and the ones before
    none after them (a subgraph before may take a few ops of every layer: the rotary tables' views)."""
    def none_in(sgs, low, high):
        return not any(low <= o < high for sg in sgs for o in sg.op_indices)
    return (none_in(b.subgraphs[:s], k + p, len(b.ops)) and none_in(b.subgraphs[s:s + q], 0, k)
            and none_in(b.subgraphs[s:s + q], k + p, len(b.ops)) and none_in(b.subgraphs[s + q:], k, k + p))


def _op_indices(indices: Sequence[int], k: int, p: int, copies: int) -> tuple[int, ...]:
    """Op indices of b's subgraph before or after the inserted layer, with the layer `copies`
    times: before it the same, in it once per copy, after it `copies - 1` layers further on."""
    return (*(o for o in indices if o < k), *(o + j * p for j in range(copies) for o in indices if k <= o < k + p),
            *(o + (copies - 1) * p for o in indices if o >= k + p))


def _inserted(a: Workload, b: Workload, c: Workload, copies: int, k: int, p: int, s: int, q: int) -> Workload:
    """b with its layer (ops [k, k + p), subgraphs [s, s + q)) `copies` times (_splits holds),
    so a's layers and `copies` more."""
    layer = b.subgraphs[s:s + q]
    rules = [_rules(sg.depends_on, c.subgraphs[s + q + i].depends_on, q, f"{b.model} subgraph {s + i}")
             for i, sg in enumerate(layer)]
    after = [_rules(sg.depends_on, c.subgraphs[s + 2 * q + i].depends_on, q, f"{b.model} subgraph {s + q + i}")
             for i, sg in enumerate(b.subgraphs[s + q:])]
    ops = list(b.ops[:k])
    subgraphs = [moved(sg, op_indices=_op_indices(sg.op_indices, k, p, copies)) for sg in b.subgraphs[:s]]
    for j in range(copies):
        suffix = f".r{j}" if j else ""
        ops += [moved(op, index=op.index + j * p, name=op.name + suffix) for op in b.ops[k:k + p]]
        subgraphs += [moved(sg, index=sg.index + j * q, name=sg.name + suffix,
                            op_indices=tuple(o + j * p for o in sg.op_indices),
                            depends_on=_moved(sg.depends_on, rule, j * q))
                      for sg, rule in zip(layer, rules, strict=True)]
    ops += [moved(op, index=op.index + (copies - 1) * p) for op in b.ops[k + p:]]
    subgraphs += [moved(sg, index=sg.index + (copies - 1) * q,
                        op_indices=_op_indices(sg.op_indices, k, p, copies),
                        depends_on=_moved(sg.depends_on, rule, (copies - 1) * q))
                  for sg, rule in zip(b.subgraphs[s + q:], after, strict=True)]
    depends_on = [sg.depends_on for sg in subgraphs]
    level, stages = concurrency.stages(depends_on)
    subgraphs = [moved(sg, stage=lv) for sg, lv in zip(subgraphs, level, strict=True)]
    return replace(b, ops=tuple(ops), subgraphs=tuple(subgraphs), stages=stages,
                   critical_path=concurrency.critical_path(depends_on, [sg.flop for sg in subgraphs]),
                   params=a.params + copies * (b.params - a.params))


def expanded_step(key: StepKey, traced: Callable[[StepKey], LlmStep]) -> LlmStep:
    """The forward `key` names, from `traced` (a key's forward with every layer traced: the tracer
    itself, or a cache of its results): a deep model's from the traces of TRACED layers, its layers
    repeated (`expand`), unless they do not repeat exactly; then, and for a shallow one, traced
    whole. Torch-free, so that a cache of the few traces serves a deep model without torch (a 70B
    step is 7 MB of JSON expanded, its traces about a tenth of that; the expansion takes ~0.07 s)."""
    config = key.config
    if config.layers > 2 * sum(TRACED):     # the few traces hold sum(TRACED) layers, and cost more each
        try:
            few = [traced(replace(key, config=with_layers(config, n))) for n in TRACED]
            workload = expand(*(step.workload for step in few), config.layers)
        except NotRepeating:
            pass
        else:
            return replace(few[0], workload=workload, params=workload.params,
                           matrix_params=per_layer_count([step.matrix_params for step in few], config.layers),
                           matrix_channels=per_layer_count([step.matrix_channels for step in few], config.layers))
    return traced(key)


def per_layer_count(counts: Sequence[int], layers: int) -> int:
    """A count linear in the layers (parameters, matrix channels) at `layers`, from its values at
    TRACED[0] and TRACED[1] layers."""
    return counts[0] + (layers - TRACED[0]) * (counts[1] - counts[0])

