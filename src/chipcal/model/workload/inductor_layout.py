"""The copies TorchInductor adds before a convolution network's convolutions under torch.compile.

Inductor lays a convolution network out channels-last (torch/_inductor/graph.py, `decide_layout_opt`:
always on a CPU with oneDNN, and for the convolution networks of the validation set on a GPU), and
a convolution's weight is a graph input in PyTorch's contiguous OIHW layout. Without freezing
(`torch._inductor.config.freezing`, off by default; only `fw_compiler_freezing` in
torch/_inductor/compile_fx.py converts the weights once, `convert_conv_weights_to_channels_last`),
the compiled graph copies every such weight into channels-last on every call: a generated kernel
that reads and writes the weight. `run_and_get_code` of torchvision's ResNet-18 (torch 2.14, CPU)
shows them, `empty_strided_cpu((64, 64, 3, 3), (576, 1, 192, 64))` filled by a transposing loop;
under torch.profiler on the 2-vCPU Zen 5 VM at batch 1 those kernels took most of the compiled
graph's own 4.5 ms (docs/findings/2026-11-30-compiled-weight-layout.md).

A weight whose channels-last layout is its contiguous one needs no copy: a 1×1 kernel, or one input
channel per group (a depthwise convolution's). So the codegen partition gives every other
convolution a `weight_layout` part before it, data class, no FLOP, reading the weight and writing its
copy, which the convolution then reads as its weight (the same bytes: what is on chip, reordered by
oneDNN or cast under autocast is unchanged). A workload does not know its device, so the copies are
there on a GPU too where `decide_layout_opt` would leave the layout alone (a graph of at least 300
nodes per convolution: ViT-B/16's one patch convolution, a copy of 2.4 MB too many).
"""

from __future__ import annotations

import dataclasses

import torch

from chipcal.model.workload.parts import Part, tensor_parallelism

WEIGHT_LAYOUT = "weight_layout"         # the copy's label; its output is a weight (dataflow.build_dataflow)


def with_weight_copies(parts: list[Part], is_weight) -> list[Part]:
    """`parts` with the channels-last weight copy before a convolution among them (module docstring)."""
    conv = next((p for p in parts if p.kind == "conv"), None)
    weight = conv and next((t for t in conv.reads if is_weight(t) and t.dim() == 4), None)
    if weight is None or weight.shape[1] == 1 or weight.shape[2] * weight.shape[3] == 1:
        return parts
    if weight.is_contiguous(memory_format=torch.channels_last):
        return parts
    copy = torch.empty_like(weight, memory_format=torch.channels_last)
    layout = Part(f"{conv.target}:{WEIGHT_LAYOUT}", WEIGHT_LAYOUT, "reshape", "data", "data", 0, 0, None,
                  tensor_parallelism(copy), True, True, (weight,), (copy,))
    reads_copy = dataclasses.replace(conv, reads=tuple(copy if t is weight else t for t in conv.reads))
    return [layout, *(reads_copy if p is conv else p for p in parts)]
