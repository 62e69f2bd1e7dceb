"""Per-layer time inside a network: each leaf module's time in a forward pass, timed in place.

A micro-layer timed alone runs on hot caches with no neighbours; inside a network the same layer
reads what the layer before it has just written and pays the framework's dispatch between ops.
Here each leaf module (a module without children) is timed where it runs: a forward pre-hook and
a forward hook read `time.perf_counter` around each of its calls, summed over its calls in one
pass (on CUDA after a device synchronize at both ends, so each layer's kernels finish inside its
own interval: the pass runs serialized). One sample per pass, as many passes as the budget allows.
The hooks cost a few µs per call, so the hooked pass is recorded beside the model's own timing;
the hooked pass minus the leaves' sum is what no leaf covers (functional ops in the container's
forward, the hooks themselves).
`chipcal predict --by-layer --runtime eager` gives the model's figure for each of these ops, its
row named after the module with dots as underscores ("layer1_0_conv1" for "layer1.0.conv1").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from chipcal.measure.timing import Measurement

WARMUP_PASSES = 2
MIN_PASSES = 6            # the fewest samples with a 95% CI of the median (timing.median_ci_ranks)
MAX_PASSES = 200


@dataclass(frozen=True)
class LayerTime:
    """One leaf module's time per forward pass (all its calls in the pass)."""

    name: str                 # qualified module name, e.g. "features.2.conv.0.0"
    kind: str                 # module class, e.g. "Conv2d"
    calls: int                # calls per forward pass
    time: Measurement         # seconds per forward pass spent inside the module


@dataclass(frozen=True)
class LayerTimes:
    """Every leaf module that ran, in the order of its first call, and the hooked pass."""

    layers: tuple[LayerTime, ...]
    hooked: Measurement       # the whole forward pass with the hooks in place

    @property
    def covered_s(self) -> float:
        """Sum of the leaves' medians: the part of the hooked pass the leaves account for."""
        return sum(layer.time.median_s for layer in self.layers)


def leaf_modules(module) -> list[tuple[str, object]]:
    """(qualified name, module) of every module without children; the root when it has none."""
    return [(name or type(m).__name__, m) for name, m in module.named_modules() if not any(True for _ in m.children())]


def time_layers(forward: Callable[[], object], module, *, device: str = "cpu", max_time_s: float = 5.0,
                min_passes: int = MIN_PASSES, max_passes: int = MAX_PASSES) -> LayerTimes:
    """Time every leaf module of `module` inside `forward()` (one forward pass of it), for up to
    `max_time_s` of passes after WARMUP_PASSES, at least `min_passes` and at most `max_passes`
    (module docstring). The caller sets the numerics and the inference mode; the hooks are removed
    before this returns."""
    import torch

    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    leaves = leaf_modules(module)
    spent = [0.0] * len(leaves)
    calls = [0] * len(leaves)
    started: dict[int, float] = {}
    first_called: dict[int, None] = {}       # leaf indices in the order of their first call

    def hooks_for(i: int):
        def before(_mod, _args):
            sync()
            started[i] = time.perf_counter()

        def after(_mod, _args, _out):
            sync()
            spent[i] += time.perf_counter() - started.pop(i)
            calls[i] += 1
            first_called.setdefault(i)
        return before, after

    handles = []
    try:
        for i, (_, leaf) in enumerate(leaves):
            before, after = hooks_for(i)
            handles += [leaf.register_forward_pre_hook(before), leaf.register_forward_hook(after)]
        for _ in range(WARMUP_PASSES):
            forward()
        sync()
        per_layer: list[list[float]] = [[] for _ in leaves]
        passes: list[float] = []
        pass_calls = calls[:]
        deadline = time.perf_counter() + max_time_s
        while len(passes) < max_passes and (len(passes) < min_passes or time.perf_counter() < deadline):
            spent[:] = [0.0] * len(leaves)
            calls[:] = [0] * len(leaves)
            t0 = time.perf_counter()
            forward()
            sync()
            passes.append(time.perf_counter() - t0)
            for i, s in enumerate(spent):
                per_layer[i].append(s)
            pass_calls = calls[:]
    finally:
        for h in handles:
            h.remove()
    method = (f"forward pre-hook and hook on each of {len(leaves)} leaf modules, time.perf_counter"
              f"{', device synchronized at each' if cuda else ''}; one sample per pass, {WARMUP_PASSES} warm-up passes")
    ran = [i for i in first_called if pass_calls[i] > 0]
    layers = tuple(LayerTime(name=leaves[i][0], kind=type(leaves[i][1]).__name__, calls=pass_calls[i],
                             time=Measurement.from_samples([max(s, 1e-9) for s in per_layer[i]], method=method))
                   for i in ran)
    return LayerTimes(layers=layers, hooked=Measurement.from_samples(passes, method=method))
