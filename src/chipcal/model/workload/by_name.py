"""The Workload of any name `chipcal workload --model` takes: an LLM (a preset or a config.json;
one forward, docs/llm.md), your own model (file.py:factory or package.module:factory; the file is
executed), an MLPerf network (model.workload.mlperf_networks) or a torchvision classification model.

An LLM is counted as `chipcal workload` counts every model: traced in float32, fused, with a
dynamic KV cache (llm_config.counting_key). torch is imported only when a name needs tracing.
"""

from __future__ import annotations

from chipcal.model.errors import ChipcalError
from chipcal.model.workload.llm_config import is_llm
from chipcal.model.workload.types import Workload
from chipcal.model.workload.user_model import is_user_model


class InputSizeError(ChipcalError, ValueError):
    """A torchvision model cannot run on the input size asked for; the model's own message says why."""


def characterize_torchvision(name: str, batch: int, input_size: tuple[int, ...] | None = None) -> Workload:
    """torchvision model `name` at `batch` on (C, H, W) `input_size` (None: its evaluation crop).
    A size the model's own code refuses raises InputSizeError with the sizes it named."""
    from chipcal.model.workload import CaptureError, characterize_model

    try:
        return characterize_model(name, batch=batch, input_size=input_size)
    except CaptureError as exc:
        if input_size is None:
            raise
        shape = "x".join(map(str, (batch, *input_size)))
        # the dispatch path runs the model's own Python, so its message names the actual sizes
        reason = next((r for r in exc.reasons if r.startswith("dispatch/meta: ")), exc.reasons[-1])
        raise InputSizeError(f"{name} cannot run on a {shape} input: {reason.split(': ', 1)[1]}") from None


def characterize_named(name: str, batch: int, input_size: tuple[int, ...] | None = None, *,
                       phase: str = "decode", context: int = 512, new_tokens: int = 128) -> Workload:
    """The workload of model name `name` at `batch`. An LLM: the prefill over `context` prompt
    tokens, or the decode step at the mean context of `new_tokens` generated (`phase`);
    `input_size` is for torchvision models only."""
    if is_llm(name):
        from chipcal.model.workload.llm import characterize_step
        from chipcal.model.workload.llm_config import counting_key, load_llm_config

        return characterize_step(counting_key(load_llm_config(name), phase, batch, context, new_tokens)).workload
    if is_user_model(name):
        from chipcal.model.workload.user_model import characterize_user_model

        return characterize_user_model(name, batch)
    from chipcal.model.workload.mlperf_networks import characterize_network, is_mlperf_network

    if is_mlperf_network(name) and input_size is None:
        return characterize_network(name, batch)
    return characterize_torchvision(name, batch, input_size)
