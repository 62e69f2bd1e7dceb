"""Workload characterization: exact operation counts, fusion and concurrency of a torch model.

    characterize(module, example_inputs) -> Workload
    characterize_model("resnet50", batch=1) -> Workload

Ops carry MACs (multiply-accumulates) and FLOP (= 2 × MACs for MAC work, documented counts
for the rest), bytes and parallelism; subgraphs are the fused kernels a runtime would launch;
stages and the critical path describe what may run concurrently. Conventions: docs/workload.md.
"""

from chipcal.model.workload.types import (
    FAMILIES,
    OP_CLASSES,
    OP_KINDS,
    GemmShape,
    Op,
    Parallelism,
    Subgraph,
    TensorSpec,
    Term,
    Workload,
)

# The tracing half imports torch (~2-3 s); the data types above do not. Load it on first use
# (PEP 562) so that code which only reads workloads (prediction from a cache) stays fast.
_LAZY = {
    "CaptureError": "chipcal.model.workload.characterization",
    "characterize": "chipcal.model.workload.characterization",
    "UnknownModelError": "chipcal.model.workload.models",
    "build_model": "chipcal.model.workload.models",
    "characterize_model": "chipcal.model.workload.models",
    "classification_models": "chipcal.model.workload.models",
    "default_input_size": "chipcal.model.workload.models",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FAMILIES", "OP_CLASSES", "OP_KINDS", "CaptureError", "GemmShape", "Op", "Parallelism", "Subgraph",
    "TensorSpec", "Term", "UnknownModelError", "Workload", "build_model", "characterize",
    "characterize_model", "classification_models", "default_input_size",
]
