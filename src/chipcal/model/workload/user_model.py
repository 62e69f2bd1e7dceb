"""The user's own model: `--model path/to/file.py:factory` or `--model package.module:factory`.

Contract: `factory` is a callable of the file (or importable module) that returns
`(module, inputs)`: a `torch.nn.Module` and its example input, a tensor or a tuple of the
forward's positional arguments (`module(*inputs)` must run). When `factory` takes a `batch`
argument it is called as `factory(batch=B)` for each batch size asked for; otherwise it is called
once with no arguments and its inputs' first dimension is the batch.

The file is executed: importing it runs its top-level code with your permissions, as
`python file.py` would. Only name files you trust. Nothing from it is cached on disk (its code
can change between runs). Every mistake (no such file or module, no such factory, not a module,
inputs that are not tensors, a module that fails on its inputs) is a `UserModelError`: one line.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path

from chipcal.model.errors import ChipcalError

_SPEC = re.compile(r"(?P<target>[^:]+):(?P<factory>[A-Za-z_]\w*)")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class UserModelError(ChipcalError, ValueError):
    """The user's model cannot be loaded or run; says what and where."""


def is_user_model(name: str) -> bool:
    """`file.py:factory` or `package.module:factory`."""
    match = _SPEC.fullmatch(name)
    return bool(match) and (match["target"].endswith(".py") or bool(_MODULE.fullmatch(match["target"])))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _import(target: str):
    if target.endswith(".py"):
        path = Path(target).expanduser()
        if not path.is_file():
            raise UserModelError(f"{target}: no such file")
        name = "chipcal_user_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module      # dataclasses and pickling look their module up by name
        try:
            spec.loader.exec_module(module)
        except Exception as exc:        # the user's code may raise anything
            del sys.modules[name]
            raise UserModelError(f"{target}: running it raised {_first_line(exc)}") from None
        return module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise UserModelError(f"{target}: no module named {exc.name!r}") from None
    except Exception as exc:
        raise UserModelError(f"{target}: importing it raised {_first_line(exc)}") from None


def takes_batch(factory) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "batch" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def load_user_model(spec: str, batch: int | None = None) -> tuple[object, tuple]:
    """(module in eval mode, inputs as a tuple) from `spec` (module docstring), at `batch` when
    the factory takes one."""
    import torch

    match = _SPEC.fullmatch(spec)
    if not match or not is_user_model(spec):
        raise UserModelError(f"{spec}: give path/to/file.py:factory or package.module:factory")
    target, name = match["target"], match["factory"]
    factory = getattr(_import(target), name, None)
    if factory is None:
        raise UserModelError(f"{target} has no {name!r}")
    if not callable(factory):
        raise UserModelError(f"{target}:{name} is a {type(factory).__name__}, not a function")
    try:
        made = factory(batch=batch) if batch is not None and takes_batch(factory) else factory()
    except Exception as exc:
        raise UserModelError(f"{spec}: calling it raised {_first_line(exc)}") from None
    if not isinstance(made, tuple | list) or len(made) != 2:
        raise UserModelError(f"{spec} must return (module, inputs), got {type(made).__name__}")
    module, inputs = made
    if not isinstance(module, torch.nn.Module):
        raise UserModelError(f"{spec} returned a {type(module).__name__} where a torch.nn.Module belongs")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else inputs
    if not isinstance(inputs, tuple | list) or not any(isinstance(x, torch.Tensor) for x in inputs):
        raise UserModelError(f"{spec}: inputs must be a tensor or a tuple of the forward's arguments "
                             f"with at least one tensor, got {type(inputs).__name__}")
    return module.eval(), tuple(inputs)


def characterize_user_model(spec: str, batch: int | None = None, partition: str = "fused"):
    """The Workload of the user's model on its example inputs, partitioned as `partition`
    (fusion.PARTITIONS; capture errors: one line each)."""
    from chipcal.model.workload.characterization import CaptureError, characterize
    from chipcal.model.workload.fusion import partition_options

    module, inputs = load_user_model(spec, batch)
    try:
        return characterize(module, inputs, model_name=spec, **partition_options(partition))
    except CaptureError as exc:
        raise UserModelError(f"{spec}: the module does not run on its inputs ({exc.reasons[-1]})") from None
