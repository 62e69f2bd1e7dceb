"""How many layout passes PyTorch's CPU convolutions add around each kernel, counted in oneDNN's trace.

PyTorch eager keeps activations NCHW; oneDNN's convolution kernels work on a channel-blocked
layout (aBcd16b with AVX-512, aBcd8b with AVX2), so every conv call reorders its input into that
layout and its output back: two more passes over the activations, each reading and writing the
tensor. ONEDNN_VERBOSE on the 2-vCPU Zen 4 VM, depthwise 3x3/2 on 8x96x112x112: reorder 2.8 ms,
convolution 1.8 ms, reorder 0.6 ms. At batch 1 the copies stay in the cache; at batch 8 a mobile
network's high-resolution activations leave it, and the reorders run at DRAM speed
(docs/calibration.md). model.mapping.base.traffic charges them through FamilyParams.layout_passes.

`conv_layout_passes` runs one small NCHW convolution under oneDNN's verbose mode and counts the
reorders of its input and of its output (weights are reordered too, but once per call and
small): 1.0 when both are reordered, 0 where PyTorch does not use oneDNN for it.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from dataclasses import dataclass

# a conv whose input and output dims appear nowhere else in the trace
_BATCH, _CIN, _COUT, _SIDE = 2, 32, 48, 20
IN_DIMS = f"{_BATCH}x{_CIN}x{_SIDE}x{_SIDE}"
OUT_DIMS = f"{_BATCH}x{_COUT}x{_SIDE}x{_SIDE}"


@dataclass(frozen=True)
class LayoutPasses:
    passes: float     # (input reorders + output reorders) / 2 per conv call
    detail: str


def passes_in_trace(trace: str, in_dims: str = IN_DIMS, out_dims: str = OUT_DIMS) -> float:
    """(input reorders + output reorders) / 2 in oneDNN verbose output of one conv call: the
    `exec` lines of `reorder` primitives whose problem dims are the conv's input or output shape
    (oneDNN 3.x prints `onednn_verbose,v1,primitive,exec,cpu,reorder,...`, older releases
    `onednn_verbose,exec,cpu,reorder,...`; the dims are the second-last field in both)."""
    reorders = [line.split(",") for line in trace.splitlines() if ",exec," in line and ",reorder," in line]
    dims = [fields[-2] for fields in reorders if len(fields) >= 2]
    return (dims.count(in_dims) + dims.count(out_dims)) / 2


def conv_layout_passes() -> LayoutPasses:
    """Count the layout passes of one NCHW convolution call (module docstring)."""
    import torch

    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return LayoutPasses(0.0, "torch runs CPU convolutions without oneDNN: no layout reorders")
    conv = torch.nn.Conv2d(_CIN, _COUT, 3, padding=1).eval()
    x = torch.randn(_BATCH, _CIN, _SIDE, _SIDE)
    with torch.inference_mode():
        conv(x)                                  # primitives created outside the trace
        trace = _stdout_of(lambda: conv(x), torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON))
    if ",convolution," not in trace:
        return LayoutPasses(0.0, "oneDNN printed no trace of the conv (verbose mode not built in?): "
                                 "layout passes unknown, none charged")
    passes = passes_in_trace(trace)
    return LayoutPasses(passes, f"oneDNN trace of a {IN_DIMS} -> {OUT_DIMS} NCHW conv: {passes:g} layout "
                                "passes (input and output reorders / 2) per call")


def _stdout_of(call, context) -> str:
    """What `call` writes to file descriptor 1 (oneDNN prints from C) inside `context`."""
    libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile(mode="w+b") as out:
        saved = os.dup(1)
        libc.fflush(None)
        os.dup2(out.fileno(), 1)
        try:
            with context:
                call()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        return out.read().decode(errors="replace")
