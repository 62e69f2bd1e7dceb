"""Whole-model inference: latency distribution, delivered FLOP/s and energy per forward pass.

FLOP come from chipcal's workload counter (`chipcal.model.workload`, 2 FLOP per MAC), counted
once per model and batch and independent of precision. Delivered FLOP/s = FLOP / median latency.
A forward pass runs on a whole batch; `energy_j` is per forward pass and `energy_per_sample_j`
divides it by the batch.

Precision: the model and its input are cast to fp32/bf16/fp16. fp32 means what the user's PyTorch
does by default (`fp32_mode` "pytorch": cuDNN convolutions in TF32, matmuls in fp32, PyTorch's own
defaults, set explicitly), or "strict" (TF32 off for both) or "tf32" (on for both); each
measurement records the switches it ran with (`Numerics`). cuDNN autotuning (`cudnn.benchmark`) is
on, its search absorbed by the warm-up calls.

Runtime: "eager" times the module as it is; "compiled" times `torch.compile(module, mode=...)` as
users run it: mode "reduce-overhead" on CUDA (Inductor's kernels replayed as a CUDA graph),
the default mode on a CPU (CUDA graphs exist only on CUDA; Inductor generates C++/OpenMP kernels
and calls oneDNN/MKL for convolutions and GEMMs). Dynamo's caches are reset first, so every row
compiles afresh and never falls back to eager past the recompile limit; the first call compiles,
and its time is recorded as `compile_s` (not a sample).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from chipcal.measure.device import CPU, Device
from chipcal.measure.kernel_profile import KernelProfile, profile_passes, profiled
from chipcal.measure.layer_times import LayerTimes, time_layers
from chipcal.measure.power import PowerReading, PowerSource
from chipcal.measure.timing import Measurement, budget_s, time_callable
from chipcal.model.errors import OutOfMemory, UnsupportedPrecision

MODEL_PRECISIONS = ("fp32", "bf16", "fp16")
MODEL_RUNTIMES = ("eager", "compiled")
# what fp32 means in measure_model's timings by default (model.estimate.numerics.FP32_MODES)
MODEL_FP32_MODE = "pytorch"
# the TF32 switches of each fp32 mode: (torch.backends.cudnn.allow_tf32, float32 matmul precision)
FP32_SWITCHES = {"pytorch": (True, "highest"), "strict": (False, "highest"), "tf32": (True, "high")}


@dataclass(frozen=True)
class Numerics:
    """The switches a measurement ran with (PyTorch's names)."""

    fp32_mode: str
    cudnn_allow_tf32: bool
    float32_matmul_precision: str
    cudnn_benchmark: bool


@dataclass(frozen=True)
class ModelMeasurement:
    model: str
    batch: int
    precision: str
    device: str
    flop: int                         # per forward pass of the batch, 2 per MAC
    latency: Measurement              # seconds per forward pass
    delivered_flop_per_s: float       # flop / latency.median_s
    power: PowerReading | None
    power_source: str                 # "nvml", "rapl" or "unavailable"
    power_note: str                   # why power is unavailable, or the reading's method
    numerics: Numerics | None = None  # the switches it ran with
    layers: LayerTimes | None = None  # each leaf module's time inside the pass (by_layer)
    runtime: str = "eager"            # MODEL_RUNTIMES; "generate" for an LLM timed end to end
    autocast: bool = False            # the forward ran under bf16 autocast (fp32 weights)
    compile_mode: str | None = None   # torch.compile's mode of a compiled row
    compile_s: float | None = None    # its first call: tracing, code generation, the first run
    kernels: KernelProfile | None = None   # each kernel's own time in a pass (profile)
    profile_note: str | None = None        # why a profile asked for is missing

    @property
    def energy_j(self) -> float | None:
        return None if self.power is None else self.power.energy_per_call_j

    @property
    def energy_per_sample_j(self) -> float | None:
        return None if self.power is None else self.power.energy_per_call_j / self.batch

    @property
    def avg_power_w(self) -> float | None:
        return None if self.power is None else self.power.avg_power_w


def out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (CUDA), or the CPU allocator's / a driver's out-of-memory RuntimeError
    (DefaultCPUAllocator: "can't allocate memory ... Cannot allocate memory")."""
    import torch

    text = str(exc).lower()
    return isinstance(exc, torch.OutOfMemoryError) or any(
        phrase in text for phrase in ("out of memory", "not enough memory", "can't allocate memory",
                                      "cannot allocate memory"))


def oom_error(name: str, batch: int, precision: str, device: Device, exc: BaseException) -> OutOfMemory:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return OutOfMemory(f"out of memory: {name} at batch {batch} ({precision}) on {device}; "
                       f"try a smaller --batch ({first[:120]})")


def _dtype(precision: str):
    import torch

    try:
        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    except KeyError:
        raise ValueError(f"unknown model precision {precision!r}; valid: {', '.join(MODEL_PRECISIONS)}") from None


@contextlib.contextmanager
def numerics(precision: str, device: Device, fp32_mode: str = MODEL_FP32_MODE) -> Iterator[Numerics]:
    """The TF32 switches of `fp32_mode` (FP32_SWITCHES), cuDNN autotuning on CUDA; restored after."""
    import torch

    if fp32_mode not in FP32_SWITCHES:
        raise ValueError(f"unknown fp32 mode {fp32_mode!r}; valid: {', '.join(FP32_SWITCHES)}")
    allow_tf32, matmul = FP32_SWITCHES[fp32_mode]
    prior = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.backends.cudnn.benchmark = device.is_cuda
    try:
        yield Numerics(fp32_mode, allow_tf32, matmul, torch.backends.cudnn.benchmark)
    finally:
        torch.set_float32_matmul_precision(prior[0])
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = prior[1], prior[2]


def compile_mode(device: Device) -> str:
    """torch.compile's mode for `device` (module docstring, Runtime)."""
    return "reduce-overhead" if device.is_cuda else "default"


def _runnable(model, runtime: str, device: Device):
    """`model` itself (eager), or compiled (module docstring) after a reset of Dynamo's caches."""
    import torch

    if runtime not in MODEL_RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; valid: {', '.join(MODEL_RUNTIMES)}")
    if runtime == "eager":
        return model
    torch._dynamo.reset()
    return torch.compile(model, mode=compile_mode(device))


def measure_module(module, example_input, flop: int, *, name: str, batch: int, precision: str = "fp32",
                   device: Device = CPU, power: PowerSource | None = None, max_time_s: float = 5.0,
                   min_samples: int = 10, threads: int | None = None,
                   clock_probe=None, fp32_mode: str = MODEL_FP32_MODE, by_layer: bool = False,
                   runtime: str = "eager", autocast: bool = False, profile: bool = False) -> ModelMeasurement:
    """Time `module(example_input)` at `precision` on `device`; energy when `power` is available;
    with `by_layer`, each leaf module's time inside the pass too, in a second budget of
    `max_time_s`, and alone on its inputs in a third (measure.layer_times); with `profile`, each
    kernel's own time over a few more passes (measure.kernel_profile).
    `example_input` is a tensor or a tuple of the forward's arguments (floating-point tensors are
    cast to the precision, every tensor moved to the device).

    The timing budget is `max_time_s`, stretched up to 4× for slow passes so that at least 6
    samples (the fewest with a 95% CI of the median) fit.

    `flop` is the work of one forward pass (2 per MAC). `runtime`: eager or compiled (module
    docstring; `by_layer` needs eager: hooks split a compiled graph). `autocast`: every call under
    `torch.autocast(device, torch.bfloat16)`, the weights at `precision` (fp32 as AMP keeps them). Raises OutOfMemory when the
    model or its first forward pass does not fit, UnsupportedPrecision when the first forward
    pass fails otherwise at this precision on this device.
    """
    if by_layer and runtime != "eager":
        raise ValueError("by_layer times an eager module: forward hooks would split a compiled graph")
    import torch
    from torch.utils._pytree import tree_map

    dtype = _dtype(precision)

    def place(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.to(device=str(device), dtype=dtype) if t.is_floating_point() else t.to(device=str(device))

    args = (example_input,) if isinstance(example_input, torch.Tensor) else tuple(example_input)
    try:
        model = module.to(device=str(device), dtype=dtype).eval()
        x = tree_map(place, args)
    except RuntimeError as exc:
        if out_of_memory(exc):
            raise oom_error(name, batch, precision, device, exc) from None
        raise

    run = _runnable(model, runtime, device)

    def forward():
        if not autocast:
            return run(*x)
        with torch.autocast(device.kind, dtype=torch.bfloat16):
            return run(*x)

    with numerics(precision, device, fp32_mode) as switches:
        try:
            with torch.inference_mode():
                start = time.perf_counter()
                forward()
                if device.is_cuda:
                    torch.cuda.synchronize()
                first_s = time.perf_counter() - start
        except (RuntimeError, NotImplementedError) as exc:
            raise first_call_failure(exc, name, batch, precision, device) from None
        budget = budget_s(forward, device, max_time_s, min(min_samples, 6), warm=True)   # the call above warmed it
        # a CUDA graph tree records on the second call and replays from the third (torch/_inductor/cudagraph_trees.py)
        latency = time_callable(forward, device=device, min_samples=min_samples, max_time_s=budget,
                                warmup=0 if runtime == "eager" else 2, threads=threads, clock_probe=clock_probe)
        reading = None
        if power is not None and power.available:
            def timed_forward():
                with torch.inference_mode():
                    forward()
            reading = power.measure(timed_forward, call_time_s=latency.median_s)
        layers = kernels = profile_note = None
        if by_layer:
            with torch.inference_mode():
                layers = time_layers(forward, model, device=device, max_time_s=max_time_s, alone=True)
        if profile:
            with torch.inference_mode():
                kernels, profile_note = profiled(lambda: profile_passes(forward, device))
    source, note = power_provenance(power, reading)
    return ModelMeasurement(model=name, batch=batch, precision=precision, device=str(device), flop=int(flop),
                            latency=latency, delivered_flop_per_s=flop / latency.median_s, power=reading,
                            power_source=source, power_note=note, numerics=switches, layers=layers,
                            runtime=runtime, autocast=autocast,
                            compile_mode=compile_mode(device) if runtime == "compiled" else None,
                            compile_s=first_s if runtime == "compiled" else None, kernels=kernels,
                            profile_note=profile_note)


def first_call_failure(exc: Exception, name: str, batch: int, precision: str, device: Device) -> Exception:
    """What a failed first call of a model means: OutOfMemory when it ran out of device or host
    memory, else UnsupportedPrecision naming the framework's first line."""
    if out_of_memory(exc):
        return oom_error(name, batch, precision, device, exc)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UnsupportedPrecision(f"unsupported: {name} at {precision} on {device}: {first}")


def power_provenance(power: PowerSource | None, reading) -> tuple[str, str]:
    """(power_source, power_note) of a ModelMeasurement: the sensor and its method, or why none."""
    if power is None:
        return "unavailable", "power not requested"
    if power.available:
        return power.name, reading.method
    return "unavailable", power.reason


def measure_model(name: str, batch: int = 1, precision: str = "fp32", device: Device = CPU, *,
                  power: PowerSource | None = None, max_time_s: float = 5.0, min_samples: int = 10,
                  threads: int | None = None, clock_probe=None, flop: int | None = None,
                  fp32_mode: str = MODEL_FP32_MODE, by_layer: bool = False, runtime: str = "eager",
                  autocast: bool = False, profile: bool = False) -> ModelMeasurement:
    """Build torchvision model `name` (weights=None), count its FLOP, and measure it at `batch`
    under `fp32_mode` and `runtime` (module docstring), each leaf module too with `by_layer` and
    each kernel with `profile` (measure_module).

    `flop` (2 per MAC) skips the count when the caller has characterized the model already.
    """
    import torch

    from chipcal.model.workload import build_model, characterize_model, default_input_size

    if flop is None:
        flop = characterize_model(name, batch=batch).flop
    module = build_model(name)
    try:
        x = torch.randn((batch, *default_input_size(name)), generator=torch.Generator().manual_seed(0))
    except RuntimeError as exc:
        if out_of_memory(exc):
            raise oom_error(name, batch, precision, CPU, exc) from None
        raise
    return measure_module(module, x, flop, name=name, batch=batch, precision=precision, device=device,
                          power=power, max_time_s=max_time_s, min_samples=min_samples, threads=threads,
                          clock_probe=clock_probe, fp32_mode=fp32_mode, by_layer=by_layer, runtime=runtime,
                          autocast=autocast, profile=profile)
