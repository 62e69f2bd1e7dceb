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
With `alone`, one more pass times each leaf alone where it first runs: called back to back on a
copy of the inputs it was just given, as a micro-layer is timed, its calls per pass × the median
call. A leaf timed inside the network over the same leaf alone is what the network adds to it
(colder caches, the runtime's switch between kernels: FamilyParams.network_memory_factor and
switch_overhead_s). An in-place leaf (`inplace=True`) would be fed its own output call after call
(repeated Hardswish drives values to subnormals): its input copy is restored before every call
and the restores, timed alone the same way, are subtracted.
`chipcal predict --by-layer --runtime eager` gives the model's figure for each of these ops, its
row named after the module with dots as underscores ("layer1_0_conv1" for "layer1.0.conv1").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from chipcal.measure.device import CPU, Device
from chipcal.measure.timing import Measurement

WARMUP_PASSES = 2
MIN_PASSES = 6            # the fewest samples with a 95% CI of the median (timing.median_ci_ranks)
MAX_PASSES = 200
ALONE_SAMPLES = MIN_PASSES   # blocks of back-to-back calls per leaf timed alone
ALONE_BLOCK_S = 1e-3         # a block lasts at least this long (perf_counter's and the loop's cost stay small)


@dataclass(frozen=True)
class LayerTime:
    """One leaf module's time per forward pass (all its calls in the pass)."""

    name: str                 # qualified module name, e.g. "features.2.conv.0.0"
    kind: str                 # module class, e.g. "Conv2d"
    calls: int                # calls per forward pass
    time: Measurement         # seconds per forward pass spent inside the module
    alone: Measurement | None = None   # the same calls repeated alone on copies of its inputs, per pass


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


def time_layers(forward: Callable[[], object], module, *, device: Device = CPU, max_time_s: float = 5.0,
                min_passes: int = MIN_PASSES, max_passes: int = MAX_PASSES, alone: bool = False) -> LayerTimes:
    """Time every leaf module of `module` inside `forward()` (one forward pass of it), for up to
    `max_time_s` of passes after WARMUP_PASSES, at least `min_passes` and at most `max_passes`
    (module docstring); with `alone`, each leaf alone too, within a second `max_time_s` (a leaf
    reached after it has none). The caller sets the numerics and the inference mode; the hooks
    are removed before this returns."""
    import torch

    cuda = device.is_cuda

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device.index)

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
    by_itself = _time_each_alone(forward, leaves, ran, pass_calls, sync, max_time_s, cuda) if alone else {}
    layers = tuple(LayerTime(name=leaves[i][0], kind=type(leaves[i][1]).__name__, calls=pass_calls[i],
                             time=Measurement.from_samples([max(s, 1e-9) for s in per_layer[i]], method=method),
                             alone=by_itself.get(i))
                   for i in ran)
    return LayerTimes(layers=layers, hooked=Measurement.from_samples(passes, method=method))


def _time_each_alone(forward: Callable[[], object], leaves: list, ran: list[int], calls: list[int],
                     sync: Callable[[], None], max_time_s: float, synchronized: bool) -> dict[int, Measurement]:
    """{leaf index: its calls per pass timed alone} for the leaves in `ran`, each timed inside its
    forward hook at its first call of one more pass (module docstring), until `max_time_s` is spent."""
    import torch

    timed: dict[int, Measurement] = {}
    given: dict[int, tuple] = {}             # an in-place leaf's inputs as it was given them
    busy = [False]                           # the leaf's own calls inside its hook run unhooked
    deadline = time.perf_counter() + max_time_s

    def hooks_for(i: int):
        def before(leaf, args, kwargs):
            if not busy[0] and i not in timed and getattr(leaf, "inplace", False):
                given[i] = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)

        def after(leaf, args, kwargs, _out):
            if busy[0] or i in timed or time.perf_counter() > deadline:
                return
            busy[0] = True
            try:
                timed[i] = _alone(leaf, given.pop(i, args), kwargs, calls[i], sync, synchronized)
            finally:
                busy[0] = False
        return before, after

    handles = []
    for i in ran:
        before, after = hooks_for(i)
        handles += [leaves[i][1].register_forward_pre_hook(before, with_kwargs=True),
                    leaves[i][1].register_forward_hook(after, with_kwargs=True)]
    try:
        forward()
        sync()
    finally:
        for h in handles:
            h.remove()
    return timed


def _alone(leaf, args: tuple, kwargs: dict, calls: int, sync: Callable[[], None], synchronized: bool) -> Measurement:
    """`calls` × the median call of `leaf` back to back on copies of `args`/`kwargs`: ALONE_SAMPLES
    blocks of as many calls as fill ALONE_BLOCK_S; an in-place leaf's input restored before each
    call, less the restores' own median (module docstring). Each call ends with `sync`, as each
    leaf's window in the pass does: on a GPU a call alone is then launch, kernels and synchronize,
    what the pass's figure holds, not calls pipelined behind the host (on an H100, in the pass over
    alone, per-leaf median: resnet18 at batch 1 1.63x pipelined, 1.19x synchronized; vit_b_16 1.75x
    and 1.04x). Not timing.time_callable: it sizes the block of each callable within a budget of
    its own, and here one budget serves every leaf of a network (mobilenet_v2: 141), so it would
    time a few and leave the rest."""
    import torch

    def copied(v):
        return v.clone() if isinstance(v, torch.Tensor) else v

    work, named = tuple(copied(a) for a in args), {k: copied(v) for k, v in kwargs.items()}
    pairs = [(w, a) for w, a in zip(work, args, strict=True) if isinstance(w, torch.Tensor)]
    inplace = bool(getattr(leaf, "inplace", False))

    def restore() -> None:
        for w, a in pairs:
            w.copy_(a)

    def call() -> None:
        if inplace:
            restore()
        leaf(*work, **named)

    def per_call(fn, n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            sync()
        return (time.perf_counter() - t0) / n

    first = per_call(call, 1)                # also the warm-up call
    block = max(1, int(ALONE_BLOCK_S / max(first, 1e-9)))
    samples = [per_call(call, block) for _ in range(ALONE_SAMPLES)]
    restores = sorted(per_call(restore, block) for _ in range(ALONE_SAMPLES)) if inplace else [0.0]
    spent = restores[len(restores) // 2]
    method = (f"alone: {ALONE_SAMPLES} blocks of {block} back-to-back calls on copies of its inputs, "
              f"time.perf_counter{', device synchronized after each' if synchronized else ''}{'; input restored before each call, restores subtracted' if inplace else ''}")
    return Measurement.from_samples([max(s - spent, 1e-9) * calls for s in samples], method=method)
