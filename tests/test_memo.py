"""model.memo: recent results of pure functions of frozen records are reused by identity, and a
prediction is the same whether its mappings were reused or computed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from test_mapping import REGISTRY, mlp

from chipcal.model.estimate.prediction import predict
from chipcal.model.mapping import map_subgraph
from chipcal.model.memo import recent


@dataclass(frozen=True)
class Box:
    value: float


def counted(maxsize=64):
    calls = []

    @recent(maxsize)
    def f(box, scale):
        calls.append((box, scale))
        return object()

    return f, calls


def test_a_repeated_call_is_reused_and_an_equal_record_is_not():
    f, calls = counted()
    a = Box(1.0)
    first = f(a, 2.0)
    assert f(a, 2.0) is first and len(calls) == 1
    assert f(Box(1.0), 2.0) is not first and len(calls) == 2     # keyed by identity, not equality
    assert f(a, 3.0) is not first and len(calls) == 3


def test_plain_arguments_are_told_apart_by_type():
    f, calls = counted()
    a = Box(1.0)
    results = {f(a, 1), f(a, 1.0), f(a, True)}
    assert len(results) == 3 and len(calls) == 3


def test_a_tuple_of_plain_values_is_keyed_by_value():
    # OpNumerics.scales builds a new (in, weight, out) tuple at each call: by identity the mapping
    # of every subgraph was computed afresh at every prediction of a fit
    f, calls = counted()
    a = Box(1.0)
    first = f(a, tuple([1.0, 0.5, 1.0]))           # two tuples built at run time: equal, not the same
    assert f(a, tuple([1.0, 0.5, 1.0])) is first and len(calls) == 1
    assert f(a, (1.0, 0.5, 2.0)) is not first and f(a, (1, 0.5, 1.0)) is not first and len(calls) == 3
    boxed = (Box(1.0),)              # a tuple holding a record is keyed by its identity
    assert f(a, boxed) is f(a, boxed) and f(a, (Box(1.0),)) is not f(a, boxed) and len(calls) == 5


def test_a_fit_maps_each_subgraph_once(monkeypatch):
    # predictions that differ only in the fitted parameters reuse every mapping, on a GPU (whose
    # fp32 runs as TF32: per-tensor scales) and on a CPU
    from chipcal.model.mapping import cpu, gpu
    from chipcal.model.mapping.params import default_params

    for name, mapper, precision in (("a100-sxm4-80gb", gpu, "fp32"), ("xeon-platinum-8480-plus", cpu, "fp32")):
        chip, w = REGISTRY.get(name), mlp(8)
        calls = []
        monkeypatch.setattr(mapper, "allocate", lambda *a, real=mapper.allocate, calls=calls: calls.append(a) or real(*a))
        map_subgraph.cache_clear()
        for half in (1e6, 1e7, 1e8):
            params = dataclasses.replace(default_params(chip.kind), half_efficiency_flop=half)
            predict(w, chip, precision, runtime="eager", params=params)
        assert len(calls) == len(w.subgraphs), name


def test_keyword_calls_are_not_reused():
    f, calls = counted()
    a = Box(1.0)
    assert f(a, scale=1.0) is not f(a, scale=1.0) and len(calls) == 2


def test_the_least_recently_used_entry_is_dropped():
    f, calls = counted(maxsize=2)
    a, b, c = Box(1.0), Box(2.0), Box(3.0)
    kept, dropped = f(a, 1.0), f(b, 1.0)
    assert f(a, 1.0) is kept          # used again: b is now the least recent
    f(c, 1.0)                         # a third entry pushes b out, not a
    assert f(a, 1.0) is kept and f(b, 1.0) is not dropped
    assert len(calls) == 4


def test_prediction_is_the_same_with_and_without_reused_mappings():
    chip = REGISTRY.get("a100-sxm4-80gb")
    w = mlp(8)
    warm = predict(w, chip, "fp16", runtime="eager")
    assert predict(w, chip, "fp16", runtime="eager") == warm
    map_subgraph.cache_clear()
    cold = predict(w, chip, "fp16", runtime="eager")
    assert cold.latency_s == warm.latency_s and cold.subgraphs == warm.subgraphs
    # an equal but distinct chip (a record rebuilt) maps afresh and agrees
    twin = dataclasses.replace(chip)
    assert predict(w, twin, "fp16", runtime="eager").latency_s == warm.latency_s


def test_repeated_layers_are_placed_once_and_estimated_at_their_own_positions(monkeypatch):
    # fc2 and fc3 (and relu1, relu2) differ only in position: a decoder's repeated layers
    from test_mapping import elementwise_subgraph, gemm_subgraph, workload

    from chipcal.model.estimate import placement
    from chipcal.model.mapping import gpu

    chip = REGISTRY.get("a100-sxm4-80gb")
    w = workload([gemm_subgraph(0, 8, 512, 512, name="fc1"), elementwise_subgraph(1, 8 * 512, deps=(0,)),
                  gemm_subgraph(2, 8, 512, 512, deps=(1,), name="fc2"), elementwise_subgraph(3, 8 * 512, deps=(2,)),
                  gemm_subgraph(4, 8, 512, 512, deps=(3,), name="fc3")])
    calls = []
    monkeypatch.setattr(gpu, "allocate", lambda *a, real=gpu.allocate: calls.append(a[0].name) or real(*a))
    map_subgraph.cache_clear()
    shared = predict(w, chip, "fp16", runtime="eager")
    assert calls == ["fc1", "ew1", "fc2"]             # three kinds: fc1 (no producer), relu, fc
    assert [(e.index, e.name, e.stage) for e in shared.subgraphs] == [(s.index, s.name, s.stage) for s in w.subgraphs]
    # the same prediction with every subgraph a kind of its own, placed and estimated alone
    monkeypatch.setattr(placement, "kinds", lambda workload: tuple(range(len(workload.subgraphs))))
    placement.placed_workload.cache_clear()
    map_subgraph.cache_clear()
    alone = predict(w, chip, "fp16", runtime="eager")
    placement.placed_workload.cache_clear()
    assert len(calls) == 3 + 5 and alone == shared
