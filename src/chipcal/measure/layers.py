"""Timed micro-layers: one small module per fused-kernel pattern and shape, for calibration.

Each case is a pattern a runtime launches as one kernel group (conv+bn+relu, 1×1 conv+bn,
depthwise+bn+relu6, linear+gelu, attention, layer norm, residual add+relu, pooling) at shapes
taken from real networks. They span compute-bound (wide 3×3 convs, big GEMMs) and memory-bound
(depthwise, norms, elementwise) regimes, so per-op-class efficiency and overhead can be fitted
separately. Whole models are never used here: they are the held-out validation set.
Run eagerly, each case is several kernels (conv, batch norm, activation): the norm and
elementwise classes are fitted from those too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.measure.device import CPU, Device
from chipcal.measure.timing import Measurement, time_callable


@dataclass(frozen=True)
class LayerCase:
    """A micro-layer: its op class, a label with its shape, and how to build it."""

    op_class: str
    label: str
    build: Callable[[], tuple[object, tuple]]   # -> (module, example inputs)
    cpu_batched: bool = False                    # also timed at CPU_LAYER_BATCH on a CPU
    batch: int = 1                               # the batch its inputs are built at


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


def _squeeze_excite(channels: int, hw: int, batch: int = 1):
    """MobileNetV3/EfficientNet squeeze-excite: global pool, two tiny 1x1 convs, gate multiply."""
    import torch
    from torch import nn

    class SqueezeExcite(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(channels, channels // 4, 1)
            self.fc2 = nn.Conv2d(channels // 4, channels, 1)

        def forward(self, x):
            s = self.fc2(torch.relu(self.fc1(self.pool(x))))
            return x * nn.functional.hardsigmoid(s)

    def build():
        return SqueezeExcite().eval(), (torch.randn(batch, channels, hw, hw),)

    return build


def _pool(kind: str, channels: int, hw: int, batch: int = 1):
    import torch
    from torch import nn

    def build():
        mod = nn.MaxPool2d(3, stride=2, padding=1) if kind == "max" else nn.AdaptiveAvgPool2d(1)
        return mod.eval(), (torch.randn(batch, channels, hw, hw),)

    return build


def _mobile_chain(batch: int = 1):
    """A small hand-built mobile network: stem, inverted residuals with squeeze-excite, head."""
    import torch
    from torch import nn

    def cba(cin, cout, k=1, stride=1, groups=1, act=nn.ReLU6):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act()]

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))

    class Block(nn.Module):
        def __init__(self, c, e, stride=1):
            super().__init__()
            self.body = nn.Sequential(*cba(c, c * e), *cba(c * e, c * e, 3, stride, c * e), SE(c * e),
                                      nn.Conv2d(c * e, c, 1, bias=False), nn.BatchNorm2d(c))
            self.res = stride == 1

        def forward(self, x):
            y = self.body(x)
            return x + y if self.res else y

    def build():
        net = nn.Sequential(*cba(3, 16, 3, 2, act=nn.Hardswish), Block(16, 4), Block(16, 4, 2), Block(16, 6),
                            *cba(16, 40, act=nn.Hardswish), Block(40, 3, 2), Block(40, 3),
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(40, 100))
        return net.eval(), (torch.randn(batch, 3, 160, 160),)

    return build


def _residual_chain():
    """A small hand-built residual network: stem, max-pool, basic blocks, head."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.b(self.a(x)))

    def build():
        net = nn.Sequential(nn.Conv2d(3, 32, 5, 2, 2, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                            nn.MaxPool2d(3, 2, 1), Basic(32), Basic(32),
                            nn.Conv2d(32, 96, 3, 2, 1, bias=False), nn.BatchNorm2d(96), nn.ReLU(), Basic(96),
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(96, 100))
        return net.eval(), (torch.randn(1, 3, 160, 160),)

    return build


def _transformer_chain():
    """Two hand-built pre-norm transformer encoder blocks on 64 tokens of width 384."""
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self, d=384, heads=6):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            h = self.n1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.n2(x))

    def build():
        return nn.Sequential(Encoder(), Encoder(), nn.LayerNorm(384)).eval(), (torch.randn(1, 64, 384),)

    return build


CHAIN_CLASS = "chain"


def default_chains() -> list[LayerCase]:
    """Hand-built small networks (not torchvision models) whose whole-network time, against
    the sum of their kernels timed alone, measures the cost of running different kernels back
    to back (calibrate: switch_overhead_s), and how much slower memory-bound kernels run among
    others than repeated alone (network_memory_factor): the batch-8 mobile chain's expanded
    activations (8 x 64 x 80 x 80 fp32, 13 MB) are where that shows; the batch-1 chains' are 1.6 MB
    or less."""
    return [LayerCase(CHAIN_CLASS, "chain: mobile blocks @160", _mobile_chain()),
            LayerCase(CHAIN_CLASS, "chain: mobile blocks @160 b8", _mobile_chain(CPU_LAYER_BATCH), batch=CPU_LAYER_BATCH),
            LayerCase(CHAIN_CLASS, "chain: residual blocks @160", _residual_chain()),
            LayerCase(CHAIN_CLASS, "chain: 2 encoder blocks x64", _transformer_chain())]


GPU_LAYER_BATCH = 32     # a GPU's second copy of the suite: device-bound where batch 1 is host-bound
CPU_LAYER_BATCH = 8      # a CPU's second copy of the `cpu_batched` cases


def default_cases(device_kind: str = "cpu") -> list[LayerCase]:
    """The calibration suite (the same for --quick, which only shortens the budgets). Shapes come
    from resnet/mobilenet/efficientnet/vit layers, two or more per class with different work, so
    efficiency and per-kernel overhead stay separable.

    On a GPU every batch-1 micro-layer is host-bound (on an H100, 20-150 us per layer whatever its
    FLOP): the fit could trade efficiency against overhead freely and came out at 9 % conv
    efficiency with 0.1 us overheads. The suite is therefore run twice there, at batch 1 (the fixed
    costs) and at batch GPU_LAYER_BATCH (the device's rate), labelled "... b32".
    On a CPU, layers fitted at batch 1 alone predicted batch-8 networks 23-35 % too slow (a
    small-spatial conv gains 1.4x per image from batch 8; a 1x1 conv whose batch-8 output leaves
    the cache loses 1.3x): one small and one large case per class (`cpu_batched`) is also timed at
    CPU_LAYER_BATCH, labelled "... b8"."""
    cases = _cases(1)
    if device_kind == "cuda":
        return cases + _cases(GPU_LAYER_BATCH)
    return cases + [c for c in _cases(CPU_LAYER_BATCH) if c.cpu_batched]


def _cases(batch: int) -> list[LayerCase]:
    def case(op_class, label, build, cpu_batched=False):
        return LayerCase(op_class, label if batch == 1 else f"{label} b{batch}", build, cpu_batched, batch)

    cases = [
        case("conv", "conv3x3 16->16 @56", _conv_bn_act(16, 16, 56, 3, batch=batch), cpu_batched=True),
        case("conv", "conv3x3 64->64 @56", _conv_bn_act(64, 64, 56, 3, batch=batch), cpu_batched=True),
        case("conv", "conv3x3 128->128 @28", _conv_bn_act(128, 128, 28, 3, batch=batch)),
        case("conv", "conv3x3 256->256 @14", _conv_bn_act(256, 256, 14, 3, batch=batch)),
        case("conv", "conv3x3 512->512 @7", _conv_bn_act(512, 512, 7, 3, batch=batch), cpu_batched=True),
        case("conv", "conv3x3/2 3->32 @224", _conv_bn_act(3, 32, 224, 3, stride=2, act="relu6", batch=batch)),
        case("conv", "conv7x7/2 3->64 @224", _conv_bn_act(3, 64, 224, 7, stride=2, batch=batch)),
        case("conv1x1", "conv1x1 16->96 @112", _conv_bn_act(16, 96, 112, 1, act="relu6", batch=batch)),
        case("conv1x1", "conv1x1 24->144 @56", _conv_bn_act(24, 144, 56, 1, act="relu6", batch=batch), cpu_batched=True),
        case("conv1x1", "conv1x1 144->24 @56", _conv_bn_act(144, 24, 56, 1, act="none", batch=batch)),
        case("conv1x1", "conv1x1 256->64 @56", _conv_bn_act(256, 64, 56, 1, batch=batch)),
        case("conv1x1", "conv1x1 64->256 @56", _conv_bn_act(64, 256, 56, 1, act="none", batch=batch)),
        case("conv1x1", "conv1x1 1024->256 @14", _conv_bn_act(1024, 256, 14, 1, batch=batch)),
        case("conv1x1", "conv1x1 960->160 @7", _conv_bn_act(960, 160, 7, 1, act="none", batch=batch)),
        case("conv1x1", "conv1x1 512->2048 @7", _conv_bn_act(512, 2048, 7, 1, act="none", batch=batch), cpu_batched=True),
        case("depthwise", "dw3x3 32 @112", _conv_bn_act(32, 32, 112, 3, groups=32, act="relu6", batch=batch)),
        case("depthwise", "dw3x3/2 96 @112",
             _conv_bn_act(96, 96, 112, 3, stride=2, groups=96, act="relu6", batch=batch), cpu_batched=True),
        case("depthwise", "dw3x3 144 @56", _conv_bn_act(144, 144, 56, 3, groups=144, act="relu6", batch=batch), cpu_batched=True),
        case("depthwise", "dw5x5 240 @28", _conv_bn_act(240, 240, 28, 5, groups=240, act="relu6", batch=batch)),
        case("depthwise", "dw3x3 384 @14", _conv_bn_act(384, 384, 14, 3, groups=384, act="relu6", batch=batch)),
        case("depthwise", "dw3x3 960 @7", _conv_bn_act(960, 960, 7, 3, groups=960, act="relu6", batch=batch), cpu_batched=True),
        case("matmul", "linear 768->3072+gelu x197", _linear_act(197, 768, 3072, act=True, batch=batch), cpu_batched=True),
        case("matmul", "linear 3072->768 x197", _linear_act(197, 3072, 768, act=False, batch=batch)),
        case("matmul", "linear 2048->1000 x1", _linear_act(1, 2048, 1000, act=False, batch=batch), cpu_batched=True),
        case("matmul", "linear 256->256 x49", _linear_act(49, 256, 256, act=False, batch=batch)),
        case("attention", "mha 768/12h x197", _attention(197, 768, 12, batch=batch), cpu_batched=True),
        case("attention", "mha 256/8h x49", _attention(49, 256, 8, batch=batch)),
        case("norm", "layernorm 768 x197", _layer_norm(197, 768, batch=batch), cpu_batched=True),
        case("norm", "layernorm 256 x49", _layer_norm(49, 256, batch=batch)),
        case("elementwise", "add+relu 256 @56", _add_relu(256, 56, batch=batch), cpu_batched=True),
        case("elementwise", "add+relu 2048 @7", _add_relu(2048, 7, batch=batch)),
        case("elementwise", "squeeze-excite 240 @28", _squeeze_excite(240, 28, batch=batch), cpu_batched=True),
        case("elementwise", "squeeze-excite 960 @7", _squeeze_excite(960, 7, batch=batch)),
        case("pool", "maxpool3x3/2 64 @112", _pool("max", 64, 112, batch=batch), cpu_batched=True),
        case("pool", "maxpool3x3/2 192 @56", _pool("max", 192, 56, batch=batch)),
        case("reduce", "avgpool 2048 @7", _pool("avg", 2048, 7, batch=batch), cpu_batched=True),
        case("reduce", "avgpool 576 @7", _pool("avg", 576, 7, batch=batch)),
    ]
    return cases


def case_workload(case: LayerCase, fuse: bool = False, built: tuple | None = None):
    """The Workload of a micro-layer or chain as a calibration counts it (our counter, unfused by
    default: PyTorch eager runs one kernel per op); `built` is the case's (module, inputs) where
    the caller has them, else it is built here."""
    from chipcal.model.workload import characterize

    module, inputs = built if built is not None else case.build()
    return characterize(module, inputs, model_name=case.label, fuse=fuse)


class LayerSet:
    """Cases built and characterized once (our counter, unfused by default: PyTorch eager runs
    one kernel per op), then timed one round at a time, samples pooled per case.

    Rounds let a caller interleave the timing of several phases (micro-layers, chains, whole
    models): a slowdown of the shared host that lasts seconds then hits one round of each, not
    a whole phase. `time_round` returns the round's timings as plain data (for a journal);
    `add_round` takes such data back (a resumed run)."""

    def __init__(self, cases: Sequence[LayerCase], device: Device = CPU, fuse: bool = False):
        self.device = device
        self.built = []
        for case in cases:
            module, inputs = case.build()
            workload = case_workload(case, fuse, (module, inputs))
            self.built.append((case, workload, module.to(str(device)), tuple(t.to(str(device)) for t in inputs)))
        self.samples: dict[str, list[float]] = {c.label: [] for c, *_ in self.built}
        self.last: dict[str, Measurement] = {}
        self.rounds = 0

    def __len__(self) -> int:
        return len(self.built)

    def time_round(self, max_time_s: float, min_samples: int,
                   progress: Callable[[str], None] | None = None) -> dict[str, dict]:
        """Time every case once, `max_time_s` each; returns {label: Measurement.to_dict()}."""
        import torch

        timings = {}
        for case, _, module, inputs in self.built:
            with torch.inference_mode():
                m = time_callable(lambda module=module, inputs=inputs: module(*inputs), device=self.device,
                                  max_time_s=max_time_s, min_samples=min_samples)
            timings[case.label] = m.to_dict()
            if progress:
                progress(case.label)
        self.add_round(timings)
        return timings

    def add_round(self, timings: dict[str, dict]) -> None:
        """Pool one round's timings (from `time_round`, or a journal) into the cases' samples."""
        for label, data in timings.items():
            m = Measurement.from_dict(data)
            self.samples[label].extend(m.samples_s)
            self.last[label] = m
        self.rounds += 1

    def observations(self) -> list[LayerObservation]:
        out = []
        for case, workload, _, _ in self.built:
            last = self.last[case.label]
            out.append(LayerObservation(case.label, case.op_class, workload, Measurement.from_samples(
                self.samples[case.label], method=f"{last.method}; {self.rounds} interleaved rounds",
                calls_per_sample=last.calls_per_sample, threads=last.threads, clocks_hz=last.clocks_hz)))
        return out


def measure_layers(cases: Sequence[LayerCase], *, device: Device = CPU, max_time_s: float = 1.0,
                   progress: Callable[[str], None] | None = None, fuse: bool = False,
                   rounds: int = 3) -> list[LayerObservation]:
    """Characterize (our counter) and time every case on `device`: `rounds` interleaved passes
    over all cases, `max_time_s / rounds` each, samples pooled per case (LayerSet)."""
    layer_set = LayerSet(cases, device, fuse)
    for _ in range(rounds):
        layer_set.time_round(max_time_s / rounds, max(3, 10 // rounds), progress)
    return layer_set.observations()
