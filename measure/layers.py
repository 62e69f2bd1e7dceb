"""Timed micro-layers: one small module per fused-kernel pattern and shape, for calibration.

Each case is a pattern a runtime launches as one kernel group (conv+bn+relu, 1×1 conv+bn,
depthwise+bn+relu6, linear+gelu, attention, layer norm, residual add+relu, pooling) at shapes
taken from real networks. They span compute-bound (wide 3×3 convs, big GEMMs) and memory-bound
(depthwise, norms, elementwise) regimes, so per-op-class efficiency and overhead can be fitted
separately. Whole models are never used here: they are the held-out validation set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.measure.timing import Measurement, time_callable


@dataclass(frozen=True)
class LayerCase:
    """A micro-layer: its op class, a label with its shape, and how to build it."""

    op_class: str
    label: str
    build: Callable[[], tuple[object, tuple]]   # -> (module, example inputs)
    quick: bool = False                          # part of the --quick suite


@dataclass(frozen=True)
class LayerObservation:
    case: str
    op_class: str
    workload: object            # chipcal.model.workload.Workload of the micro-layer
    measurement: Measurement

    @property
    def flop(self) -> int:
        return self.workload.flop


def _conv_bn_act(cin: int, cout: int, hw: int, k: int, stride: int = 1, groups: int = 1,
                 act: str = "relu", batch: int = 1):
    import torch
    from torch import nn

    def build():
        layers = [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act == "relu":
            layers.append(nn.ReLU())
        elif act == "relu6":
            layers.append(nn.ReLU6())
        return nn.Sequential(*layers).eval(), (torch.randn(batch, cin, hw, hw),)

    return build


def _linear_act(tokens: int, fin: int, fout: int, act: bool, batch: int = 1):
    import torch
    from torch import nn

    def build():
        mod = nn.Sequential(nn.Linear(fin, fout), nn.GELU()) if act else nn.Linear(fin, fout)
        return mod.eval(), (torch.randn(batch, tokens, fin) if tokens > 1 else torch.randn(batch, fin),)

    return build


def _attention(tokens: int, dim: int, heads: int, batch: int = 1):
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    def build():
        return Attention().eval(), (torch.randn(batch, tokens, dim),)

    return build


def _layer_norm(tokens: int, dim: int, batch: int = 1):
    import torch
    from torch import nn

    def build():
        return nn.LayerNorm(dim).eval(), (torch.randn(batch, tokens, dim),)

    return build


def _add_relu(channels: int, hw: int, batch: int = 1):
    import torch
    from torch import nn

    class AddRelu(nn.Module):
        def forward(self, x, y):
            return torch.relu(x + y)

    def build():
        return AddRelu().eval(), (torch.randn(batch, channels, hw, hw), torch.randn(batch, channels, hw, hw))

    return build


def _pool(kind: str, channels: int, hw: int, batch: int = 1):
    import torch
    from torch import nn

    def build():
        mod = nn.MaxPool2d(3, stride=2, padding=1) if kind == "max" else nn.AdaptiveAvgPool2d(1)
        return mod.eval(), (torch.randn(batch, channels, hw, hw),)

    return build


def default_cases(quick: bool = False) -> list[LayerCase]:
    """The calibration suite. Shapes come from resnet/mobilenet/vit layers; `quick` keeps a
    compute-bound and a memory-bound case of each class where the class has both."""
    cases = [
        LayerCase("conv", "conv3x3 64->64 @56", _conv_bn_act(64, 64, 56, 3), quick=True),
        LayerCase("conv", "conv3x3 128->128 @28", _conv_bn_act(128, 128, 28, 3)),
        LayerCase("conv", "conv3x3 256->256 @14", _conv_bn_act(256, 256, 14, 3)),
        LayerCase("conv", "conv3x3 512->512 @7", _conv_bn_act(512, 512, 7, 3), quick=True),
        LayerCase("conv", "conv7x7/2 3->64 @224", _conv_bn_act(3, 64, 224, 7, stride=2)),
        LayerCase("conv", "conv3x3 16->16 @56", _conv_bn_act(16, 16, 56, 3)),
        LayerCase("conv1x1", "conv1x1 256->64 @56", _conv_bn_act(256, 64, 56, 1), quick=True),
        LayerCase("conv1x1", "conv1x1 64->256 @56", _conv_bn_act(64, 256, 56, 1, act="none")),
        LayerCase("conv1x1", "conv1x1 1024->256 @14", _conv_bn_act(1024, 256, 14, 1)),
        LayerCase("conv1x1", "conv1x1 512->2048 @7", _conv_bn_act(512, 2048, 7, 1, act="none"), quick=True),
        LayerCase("conv1x1", "conv1x1 24->144 @56", _conv_bn_act(24, 144, 56, 1, act="relu6")),
        LayerCase("depthwise", "dw3x3 32 @112", _conv_bn_act(32, 32, 112, 3, groups=32, act="relu6")),
        LayerCase("depthwise", "dw3x3 144 @56", _conv_bn_act(144, 144, 56, 3, groups=144, act="relu6"), quick=True),
        LayerCase("depthwise", "dw3x3 384 @14", _conv_bn_act(384, 384, 14, 3, groups=384, act="relu6")),
        LayerCase("depthwise", "dw3x3 960 @7", _conv_bn_act(960, 960, 7, 3, groups=960, act="relu6"), quick=True),
        LayerCase("matmul", "linear 768->3072+gelu x197", _linear_act(197, 768, 3072, act=True), quick=True),
        LayerCase("matmul", "linear 3072->768 x197", _linear_act(197, 3072, 768, act=False)),
        LayerCase("matmul", "linear 2048->1000 x1", _linear_act(1, 2048, 1000, act=False), quick=True),
        LayerCase("matmul", "linear 256->256 x49", _linear_act(49, 256, 256, act=False)),
        LayerCase("attention", "mha 768/12h x197", _attention(197, 768, 12), quick=True),
        LayerCase("attention", "mha 256/8h x49", _attention(49, 256, 8)),
        LayerCase("norm", "layernorm 768 x197", _layer_norm(197, 768), quick=True),
        LayerCase("norm", "layernorm 256 x49", _layer_norm(49, 256)),
        LayerCase("elementwise", "add+relu 256 @56", _add_relu(256, 56), quick=True),
        LayerCase("elementwise", "add+relu 2048 @7", _add_relu(2048, 7)),
        LayerCase("pool", "maxpool3x3/2 64 @112", _pool("max", 64, 112), quick=True),
        LayerCase("pool", "avgpool 2048 @7", _pool("avg", 2048, 7), quick=True),
    ]
    return [c for c in cases if c.quick] if quick else cases

def measure_layers(cases: Sequence[LayerCase], *, device: str = "cpu", max_time_s: float = 1.0,
                   progress: Callable[[str], None] | None = None) -> list[LayerObservation]:
    """Characterize (our counter) and time every case on `device`."""
    import torch

    from chipcal.model.workload import characterize

    observations = []
    for case in cases:
        if progress:
            progress(case.label)
        module, inputs = case.build()
        workload = characterize(module, inputs, model_name=case.label)
        module = module.to(device)
        inputs = tuple(t.to(device) for t in inputs)
        with torch.inference_mode():
            m = time_callable(lambda module=module, inputs=inputs: module(*inputs), device=device,
                              max_time_s=max_time_s, min_samples=10)
        observations.append(LayerObservation(case.label, case.op_class, workload, m))
    return observations
