"""A deep decoder's forward built from traces of a few layers (model/workload/llm_layers.py) is
the forward traced layer by layer: every op and subgraph, dependency, stage and count."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("transformers")

from tiny_llm import TINY, TINY_MOE

from chipcal.model.workload import llm
from chipcal.model.workload.llm_config import parse_config, step_key
from chipcal.model.workload.llm_layers import TRACED, NotRepeating, expand, with_layers


def unnamed(w):
    """The workload with its op and subgraph names blanked: a copy of a layer is named after the
    first copy ("<name>.r<copy>"), a trace after its node counter."""
    return replace(w, ops=tuple(replace(op, name="") for op in w.ops),
                   subgraphs=tuple(replace(sg, name="") for sg in w.subgraphs))


@pytest.mark.parametrize("fields, runtime, phase", [
    (TINY, "compiled", "decode"),            # a static cache, TorchInductor's kernels
    (TINY, "eager", "prefill"),              # one kernel per op, a dynamic cache
    (TINY_MOE, "compiled", "decode"),        # a mixture of experts, each layer routed evenly
])
def test_expansion_is_the_full_trace(fields, runtime, phase):
    config = parse_config({**fields, "num_hidden_layers": 7}, "deep", "test")
    key = step_key(config, runtime, phase, 3, 24, 8, "bf16")
    full = llm.trace_step(key)
    few = [llm.trace_step(replace(key, config=with_layers(config, n))) for n in TRACED]
    built = expand(*(s.workload for s in few), 7)
    assert unnamed(built) == unnamed(full.workload)
    assert built.params == full.params and len(built.subgraphs) == len(full.workload.subgraphs)
    # the copies are told apart by name, the first copy keeps its own
    names = [sg.name for sg in built.subgraphs]
    assert any(n.endswith(".r4") for n in names) and not any(n.endswith(".r5") for n in names)


def test_a_deep_model_is_characterized_from_few_layers(monkeypatch):
    config = parse_config({**TINY, "num_hidden_layers": 2 * sum(TRACED) + 1}, "deep", "test")
    key = step_key(config, "eager", "decode", 2, 16, 8, "bf16")
    full = llm.trace_step(key)
    traced = []
    real = llm.trace_step
    monkeypatch.setattr(llm, "trace_step", lambda k: traced.append(k.config.layers) or real(k))
    step = llm.characterize_step(key)
    assert traced == list(TRACED)
    assert unnamed(step.workload) == unnamed(full.workload)
    assert replace(step, workload=None) == replace(full, workload=None)     # params, matrix counts


def test_the_cache_keeps_a_deep_model_s_few_traces_and_builds_the_step_without_tracing(tmp_path, monkeypatch):
    """A WorkloadSource keeps the traces of TRACED layers, not the expanded step (a 70B decoder's
    is 7 MB of JSON); a second source builds the same step from them without tracing anything."""
    from chipcal.measure.workloads import WorkloadSource

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path))
    config = parse_config({**TINY, "num_hidden_layers": 2 * sum(TRACED) + 1}, "deep", "test")
    key = step_key(config, "eager", "decode", 2, 16, 8, "bf16")
    first = WorkloadSource().llm_step(key)
    entries = sorted(tmp_path.glob("workloads/llm-*.json"))
    assert len(entries) == len(TRACED)                   # one per traced depth, none for the 13 layers
    monkeypatch.setattr(llm, "trace_step", lambda k: pytest.fail(f"traced {k.config.layers} layers again"))
    again = WorkloadSource().llm_step(key)
    assert again == first and len(again.workload.subgraphs) == len(first.workload.subgraphs)


def test_a_config_with_a_value_per_layer_is_traced_whole():
    config = parse_config({**TINY, "num_hidden_layers": 3, "layer_types": ["full_attention"] * 3}, "typed", "test")
    with pytest.raises(NotRepeating, match="layer_types holds a value per layer"):
        with_layers(config, 2)


def test_traces_that_do_not_repeat_are_refused():
    config = parse_config({**TINY, "num_hidden_layers": 2}, "t", "test")
    a = llm.trace_step(step_key(config, "eager", "decode", 1, 8, 4, "bf16")).workload
    with pytest.raises(NotRepeating, match="a layer adds"):
        expand(a, a, a, 9)
