"""How many layout passes PyTorch's CPU convolutions add around each kernel, counted in oneDNN's trace.

PyTorch eager keeps activations NCHW; oneDNN's convolution kernels work on a channel-blocked
layout (aBcd16b with AVX-512, aBcd8b with AVX2), so every conv call reorders its input into that
layout and its output back: two more passes over the activations, each reading and writing the
tensor. ONEDNN_VERBOSE on the 2-vCPU Zen 4 VM, depthwise 3x3/2 on 8x96x112x112: reorder 2.8 ms,
convolution 1.8 ms, reorder 0.6 ms. At batch 1 the copies stay in the cache; at batch 8 a mobile
network's high-resolution activations leave it, and the reorders run at DRAM speed
(docs/findings/2026-11-24-onednn-layout-reorders.md). model.mapping.base.traffic charges them through FamilyParams.layout_passes.

`conv_layout_passes` runs one small NCHW convolution under oneDNN's verbose mode and counts the
reorders of its input and of its output: 1.0 when both are reordered, 0 where PyTorch does not
use oneDNN for it.

The weights are reordered too, in every call (PyTorch hands oneDNN OIHW tensors), and that pass
is not small: on the Zen 5 VM a 512->512 3x3 convolution at 7x7, batch 1, spends 0.34 ms
reordering its 9.4 MB of weights and 0.49 ms convolving; at 64 channels and 56x56 (the same FLOP,
0.15 MB of weights) 0.007 ms and 0.47 ms. So a calibrated ResNet-18 at batch 1 came out 14% too
fast while every shape's convolution fitted. The probe also times the weight reorders of a large
3x3 and a large 1x1 convolution (oneDNN's own per-primitive times, median over WEIGHT_CALLS calls;
the 3x3 layout also transposes the kernel window and runs slower) and returns their rates in
weight bytes per second, which the roofline charges as a serial pass per call (FamilyParams.
weight_layout_bytes_per_s, pointwise_weight_layout_bytes_per_s).

A oneDNN convolution call also costs a fixed time outside its primitives (PyTorch's dispatch,
ideep building the primitive descriptor and its tensors): on the Zen 5 VM at batch 1, 20-52 us
per call for 1x1, 3x3 and depthwise convolutions alike (depthwise 3x3 64 at 7x7: 56 us for the
call, 11 us in its four primitives; 1x1 256->256 at 14x14: 146 and 94 us). The probe times a
small depthwise convolution (PyTorch hands every grouped convolution to oneDNN) whole, and its
primitives in the trace; the difference is the prior of the convolution classes' overhead_s
(calibrate.document.LayoutSection.charged_in), which the micro-layers alone leave unconstrained.
A 1x1 call does not pay it (a 1x1 16->16 on a 2x2 map at batch 2 takes 5 us in all, a 3x3 38 us;
docs/calibration.md, step 3b): for conv1x1 the prior stands in for thin 1x1 convolutions' cost
inside a network, not for a fixed cost.
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


# (field of LayoutPasses, input channels, output channels, kernel): convolutions on a 7x7 batch-1
# input with ResNet's largest weights of each kind (9.4 MB and 4.2 MB in fp32)
WEIGHT_PROBES = (("weight_bytes_per_s", 512, 512, 3), ("pointwise_weight_bytes_per_s", 512, 2048, 1))
WEIGHT_CALLS = 7
_WEIGHT_SIDE = 7
# the fixed-cost probe: depthwise 3x3 over 64 channels at 7x7, batch 1 (a few us of primitives)
_FIXED_CHANNELS, _FIXED_SIDE = 64, 7
FIXED_CALLS = 15


@dataclass(frozen=True)
class LayoutPasses:
    passes: float     # (input reorders + output reorders) / 2 per conv call
    detail: str
    # weight bytes reordered per second in every call, k x k and 1x1 kernels; None: not reordered per call
    weight_bytes_per_s: float | None = None
    pointwise_weight_bytes_per_s: float | None = None
    # seconds per oneDNN convolution call outside its primitives; None: not timed
    call_overhead_s: float | None = None


def passes_in_trace(trace: str, in_dims: str = IN_DIMS, out_dims: str = OUT_DIMS) -> float:
    """(input reorders + output reorders) / 2 in oneDNN verbose output of one conv call: the
    `exec` lines of `reorder` primitives whose problem dims are the conv's input or output shape
    (oneDNN 3.x prints `onednn_verbose,v1,primitive,exec,cpu,reorder,...`, older releases
    `onednn_verbose,exec,cpu,reorder,...`; the dims are the second-last field in both)."""
    reorders = [line.split(",") for line in trace.splitlines() if ",exec," in line and ",reorder," in line]
    dims = [fields[-2] for fields in reorders if len(fields) >= 2]
    return (dims.count(in_dims) + dims.count(out_dims)) / 2


def reorder_times_s(trace: str, dims: str) -> list[float]:
    """Execution times in seconds of the `reorder` primitives on `dims` in oneDNN verbose output
    (its last field, in milliseconds)."""
    return [float(fields[-1]) / 1e3 for fields in
            (line.split(",") for line in trace.splitlines() if ",exec," in line and ",reorder," in line)
            if len(fields) >= 2 and fields[-2] == dims]


def primitive_time_s(trace: str) -> float:
    """Total execution time in seconds of every primitive in oneDNN verbose output."""
    return sum(float(fields[-1]) / 1e3 for fields in
               (line.split(",") for line in trace.splitlines() if ",exec," in line) if len(fields) >= 2)


def _call_overhead() -> tuple[float | None, str]:
    """(seconds per call outside oneDNN's primitives, what was seen) for the fixed-cost probe:
    the whole call's median (measure.timing, verbose off) less the primitives' mean per call in
    the trace of FIXED_CALLS calls."""
    import torch

    from chipcal.measure.timing import time_callable

    conv = torch.nn.Conv2d(_FIXED_CHANNELS, _FIXED_CHANNELS, 3, padding=1, groups=_FIXED_CHANNELS,
                           bias=False).eval()
    x = torch.randn(1, _FIXED_CHANNELS, _FIXED_SIDE, _FIXED_SIDE)

    def calls():
        for _ in range(FIXED_CALLS):
            conv(x)

    with torch.inference_mode():
        whole = time_callable(lambda: conv(x), max_time_s=0.5, min_samples=30)
        trace = _stdout_of(calls, torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON))
    what = f"depthwise 3x3 {_FIXED_CHANNELS} @{_FIXED_SIDE}"
    if ",exec," not in trace:
        return None, f"{what}: no primitive in its trace, no fixed cost measured"
    inside = primitive_time_s(trace) / FIXED_CALLS
    overhead = max(0.0, whole.median_s - inside)
    return overhead, (f"{what}: call {whole.median_s * 1e6:.1f} µs (IQR {whole.iqr_s * 1e6:.1f} µs, n = "
                      f"{whole.n}), its primitives {inside * 1e6:.1f} µs per call: {overhead * 1e6:.1f} µs "
                      f"outside them, the prior of the convolutions' overhead")


def _weight_rate(cin: int, cout: int, kernel: int) -> tuple[float | None, str]:
    """(weight bytes per second, what was seen) for one probe convolution of WEIGHT_PROBES."""
    import numpy as np
    import torch

    conv = torch.nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False).eval()
    x = torch.randn(1, cin, _WEIGHT_SIDE, _WEIGHT_SIDE)
    dims = f"{cout}x{cin}x{kernel}x{kernel}"

    def calls():
        for _ in range(WEIGHT_CALLS):
            conv(x)

    with torch.inference_mode():
        conv(x)
        times = reorder_times_s(_stdout_of(calls, torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON)),
                                dims)
    weight_bytes = cout * cin * kernel * kernel * 4
    if not times:
        return None, f"{dims} weights: no reorder in {WEIGHT_CALLS} calls, none charged"
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    rate = float(weight_bytes / median)
    return rate, (f"{dims} weights ({weight_bytes / 1e6:.1f} MB) reordered in every call: median {median * 1e3:.3f} ms "
                  f"over {len(times)} (IQR {q1 * 1e3:.3f}-{q3 * 1e3:.3f} ms), {rate / 1e9:.1f} GB/s")


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
    rates, seen = {}, []
    for field, cin, cout, kernel in WEIGHT_PROBES:
        rates[field], text = _weight_rate(cin, cout, kernel)
        seen.append(text)
    rates["call_overhead_s"], text = _call_overhead()
    seen.append(text)
    return LayoutPasses(passes, f"oneDNN trace of a {IN_DIMS} -> {OUT_DIMS} NCHW conv: {passes:g} layout "
                                f"passes (input and output reorders / 2) per call; {'; '.join(seen)}", **rates)


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
