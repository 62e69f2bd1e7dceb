"""torchvision classification models by name: build, default input size, characterize.

Names are torchvision.models.list_models(module=torchvision.models); models are built with
weights=None (no network). The default input size is the smallest crop size among the model's
published weights (299 for inception_v3, 384 for efficientnet_v2_s, 224 for vit_h_14, whose
518-pixel SWAG weights need a different architecture than weights=None builds).
"""

from __future__ import annotations

import contextlib
import warnings
from functools import cache

import torch

from chipcal.model.errors import UnknownName
from chipcal.model.workload.characterization import characterize
from chipcal.model.workload.fusion import partition_options
from chipcal.model.workload.types import Workload


class UnknownModelError(UnknownName):
    kind = "model"


@cache
def classification_models() -> tuple[str, ...]:
    import torchvision

    return tuple(sorted(torchvision.models.list_models(module=torchvision.models)))


def _check(name: str) -> str:
    valid = classification_models()
    if name not in valid:
        raise UnknownModelError(name, list(valid))
    return name


def build_model(name: str, device: str | torch.device | None = None) -> torch.nn.Module:
    """torchvision model `name` with weights=None, in eval mode, its tensors created on `device`."""
    import torchvision

    _check(name)
    with warnings.catch_warnings():
        # googlenet/inception_v3 warn that their default init will change; irrelevant without weights
        warnings.filterwarnings("ignore", category=FutureWarning, module="torchvision")
        if device is None:
            return torchvision.models.get_model(name, weights=None).eval()
        with torch.device(device):
            return torchvision.models.get_model(name, weights=None).eval()


@contextlib.contextmanager
def _uninitialized():
    """torch.nn.init's fills made no-ops while a model is built to be counted: modules and
    torchvision's constructors initialize through them (reset_parameters, the per-model init
    loops), and regnet_y_128gf's 644 M parameters took 11 s to fill for a count that reads none."""
    import torch.nn.init as init

    fills = {n: getattr(init, n) for n in dir(init) if n.endswith("_") and not n.startswith("_")}
    for n in fills:
        setattr(init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, fill in fills.items():
            setattr(init, n, fill)


@cache
def default_input_size(name: str) -> tuple[int, int, int]:
    """(C, H, W) the model is evaluated at: the smallest crop size of its published weights."""
    import torchvision

    weights = torchvision.models.get_model_weights(_check(name))
    crop = min(int(w.transforms.keywords["crop_size"]) for w in weights)
    return (3, crop, crop)


def _input_size(name: str, input_size) -> tuple[int, ...]:
    if input_size is None:
        return default_input_size(name)
    if isinstance(input_size, int):
        return (3, input_size, input_size)
    size = tuple(int(s) for s in input_size)
    if len(size) == 2:
        return (3, *size)
    if len(size) != 3 or min(size) <= 0:
        raise ValueError(f"input_size must be S, (H, W) or (C, H, W) of positive sizes, got {input_size!r}")
    return size


def characterize_model(name: str, batch: int = 1, input_size=None, partition: str = "fused") -> Workload:
    """Characterize torchvision model `name` at `batch` × input_size (default: default_input_size).

    `partition`: the kernels of a runtime (fusion.PARTITIONS; "eager": one kernel per op).

    The model is built on the meta device (no weights are allocated or initialized) unless its
    constructor needs real tensors (regnet computes its widths with tensors), then on the CPU with
    its weights allocated but not initialized (`_uninitialized`): a count reads shapes, not values.
    """
    if batch <= 0:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    size = _input_size(name, input_size)
    try:
        model = build_model(name, device="meta")
    except (NotImplementedError, RuntimeError):
        with _uninitialized():
            model = build_model(name)
    example = torch.empty((batch, *size), device="meta")
    return characterize(model, example, model_name=name, **partition_options(partition))
