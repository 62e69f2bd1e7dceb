"""Capture: run a module once and record every ATen call, attributed to the graph node that made it.

Two paths, tried in order by `characterize`:
- "fx": torch.fx.symbolic_trace, then an fx Interpreter propagates shapes node by node
  (ShapeProp's job); each ATen call is attributed to the fx node running.
- "dispatch": the module runs as is; each ATen call is attributed to the outermost torch.nn leaf
  module running (fx's notion of a leaf), or stands alone when called from user code.
Both run under a TorchDispatchMode that records ATen calls and a TorchFunctionMode that records
F.scaled_dot_product_attention and F.multi_head_attention_forward whole (see attention.py);
the second also keeps nn.MultiheadAttention off its fused fast path.

Execution is "meta" by default: parameters, buffers and inputs are replaced by meta tensors
(torch.func.functional_call), so shapes propagate without arithmetic; "real" runs the module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from chipcal.model.workload.attention import COMPOSITES
from chipcal.model.workload.subnormal import SubnormalTracker


@dataclass(frozen=True)
class Owner:
    """The graph node (fx node, leaf-module call or lone ATen call) a recorded call belongs to."""

    name: str
    target: str


@dataclass(frozen=True, eq=False)
class Call:
    func: object            # torch._ops.OpOverload, or a COMPOSITES function
    args: tuple
    kwargs: dict
    out: object
    owner: int
    composite: bool
    subnormal_ops: float = 0.0      # element-operations on subnormal operands (subnormal.py)
    subnormal_split: tuple[float, ...] = ()   # the same by matrix, where known (subnormal.py)


@dataclass(eq=False)
class Capture:
    capture: str                      # "fx" | "dispatch"
    execution: str                    # "meta" | "real"
    calls: list[Call]
    owners: list[Owner]
    weights: dict[int, torch.Tensor]  # id -> parameter/buffer tensor as the run saw it
    inputs: tuple
    output: object


@dataclass(eq=False)
class _Recorder:
    calls: list[Call] = field(default_factory=list)
    owners: list[Owner] = field(default_factory=list)
    owner: int | None = None
    suppress: int = 0
    _names: dict[str, int] = field(default_factory=dict)
    subnormals: SubnormalTracker = field(default_factory=SubnormalTracker)

    def new_owner(self, name: str, target: str) -> int:
        seen = self._names.get(name, 0)
        self._names[name] = seen + 1
        self.owners.append(Owner(name if not seen else f"{name}_{seen}", target))
        return len(self.owners) - 1

    def add(self, func, args, kwargs, out, composite: bool) -> None:
        owner = self.owner
        if owner is None:
            label = func.overloadpacket.__name__ if not composite else func.__name__
            owner = self.new_owner(label, f"aten.{label}" if not composite else f"F.{label}")
        ops, split = (0.0, ()) if composite else self.subnormals.observe(func, args, kwargs, out)
        self.calls.append(Call(func, args, kwargs, out, owner, composite, ops, split))


class _Reporting:
    """Base of the two torch modes below: each reports the calls it sees to one _Recorder."""

    def __init__(self, rec: _Recorder):
        super().__init__()
        self.rec = rec


class _AtenRecorder(_Reporting, TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.rec.suppress:
            self.rec.add(func, args, kwargs, out, composite=False)
        return out


class _CompositeRecorder(_Reporting, TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in COMPOSITES or self.rec.suppress:
            return func(*args, **kwargs)
        self.rec.suppress += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.rec.suppress -= 1
        self.rec.add(func, args, kwargs, out, composite=True)
        return out


def is_leaf(module: torch.nn.Module) -> bool:
    """fx's default leaf: a torch.nn module other than a container."""
    return (module.__module__.startswith(("torch.nn", "torch.ao.nn"))
            and not isinstance(module, torch.nn.Sequential | torch.nn.ModuleList | torch.nn.ModuleDict))


def module_target(module: torch.nn.Module) -> str:
    cls = type(module)
    if cls.__module__.startswith("torch.nn"):
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _function_target(fn: Callable) -> str:
    module = getattr(fn, "__module__", None) or "torch"
    module = {"_operator": "operator", "torch._C._nn": "torch.nn.functional"}.get(module, module)
    return f"{module}.{getattr(fn, '__name__', repr(fn))}"


def _meta_state(module: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[int, torch.Tensor]]:
    """Meta stand-ins for every parameter and buffer (tied tensors stay tied)."""
    by_id: dict[int, torch.Tensor] = {}
    state = {}
    named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    for name, t in named:
        if id(t) not in by_id:
            by_id[id(t)] = t if t.device.type == "meta" else torch.empty_like(t, device="meta")
        state[name] = by_id[id(t)]
    return state, {id(t): t for t in by_id.values()}


def _real_state(module: torch.nn.Module) -> dict[int, torch.Tensor]:
    return {id(t): t for t in [*module.parameters(), *module.buffers()]}


def _as_meta(inputs: tuple) -> tuple:
    return tree_map(lambda x: torch.empty_like(x, device="meta") if isinstance(x, torch.Tensor) else x, inputs)


def _record(rec: _Recorder, run: Callable[[], object]) -> object:
    with torch.no_grad(), _AtenRecorder(rec), _CompositeRecorder(rec):
        return run()


class _Interpreter(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, rec: _Recorder, owner_of: dict):
        super().__init__(gm)
        self.rec, self.owner_of = rec, owner_of

    def run_node(self, n: torch.fx.Node):
        self.rec.owner = self.owner_of.get(n)
        return super().run_node(n)


class _Interpreted(torch.nn.Module):
    """Runs a GraphModule through the recording interpreter (so functional_call can swap its state)."""

    def __init__(self, gm: torch.fx.GraphModule, rec: _Recorder, owner_of: dict):
        super().__init__()
        self.gm = gm
        self.rec, self.owner_of = rec, owner_of

    def forward(self, *args):
        return _Interpreter(self.gm, self.rec, self.owner_of).run(*args)


def trace_fx(module: torch.nn.Module) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(module)


def run_fx(gm: torch.fx.GraphModule, inputs: tuple, execution: str) -> Capture:
    rec = _Recorder()
    owner_of = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            target = module_target(gm.get_submodule(node.target))
        elif node.op == "call_function":
            target = _function_target(node.target)
        elif node.op == "call_method":
            target = f"Tensor.{node.target}"
        else:
            continue
        owner_of[node] = rec.new_owner(node.name, target)
    if execution == "meta":
        state, weights = _meta_state(gm)
        inputs = _as_meta(inputs)
        wrapper = _Interpreted(gm, rec, owner_of)
        out = _record(rec, lambda: torch.func.functional_call(wrapper, {f"gm.{k}": v for k, v in state.items()},
                                                              inputs))
    else:
        weights = _real_state(gm)
        out = _record(rec, lambda: _Interpreter(gm, rec, owner_of).run(*inputs))
    return Capture("fx", execution, rec.calls, rec.owners, weights, inputs, out)


def run_dispatch(module: torch.nn.Module, inputs: tuple, execution: str) -> Capture:
    rec = _Recorder()
    names = {id(m): name for name, m in module.named_modules(remove_duplicate=False)}
    active: list[torch.nn.Module] = []

    def pre(mod, _args):
        if active:                      # inside a leaf: its submodule calls belong to it
            active.append(mod)
        elif is_leaf(mod):
            name = names.get(id(mod)) or type(mod).__name__.lower()
            rec.owner = rec.new_owner(name.replace(".", "_"), module_target(mod))
            active.append(mod)

    def post(mod, _args, _out):
        if active and active[-1] is mod:
            active.pop()
            if not active:
                rec.owner = None

    handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
               torch.nn.modules.module.register_module_forward_hook(post)]
    try:
        if execution == "meta":
            state, weights = _meta_state(module)
            inputs = _as_meta(inputs)
            out = _record(rec, lambda: torch.func.functional_call(module, state, inputs))
        else:
            weights = _real_state(module)
            out = _record(rec, lambda: module(*inputs))
    finally:
        for handle in handles:
            handle.remove()
    return Capture("dispatch", execution, rec.calls, rec.owners, weights, inputs, out)
