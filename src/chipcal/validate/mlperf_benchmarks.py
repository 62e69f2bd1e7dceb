"""What one LoadGen sample of each MLPerf Inference benchmark asks of the network chipcal builds for
it (model.workload.mlperf_networks): which network, at which precision the closed division submits
it, and how many network calls one sample is.

Most benchmarks run the network once per sample. 3D-UNet does not: a sample is one KiTS19 CT
case, resampled to 1.6 x 1.2 x 1.2 mm voxels, padded or cropped to the nearest multiple of 64 (at
least 128) per axis, and run as 128^3 sub-volumes at a stride of 64, each weighted into the output,
then one argmax per case (NVIDIA's v4.1 harness, `closed/NVIDIA/code/harness/harness_3dunet/
lwis_3dunet.cpp` L640-752, and `closed/NVIDIA/code/3d-unet/tensorrt/preprocess_data.py` L126-411,
mlcommons/inference_results_v4.1 at 198fc467; the reference implementation's sliding window is the
same). The sub-volumes of the 43 cases of the benchmark's sample set are in
validate/data/kits19_windows.csv, derived from each case's NIfTI header (docs/validation-corpus.md):
2761 in all, 64.2 per case on average, 8 to 144.

DLRM v2 does not either: a sample is one user's aggregated run of 100 to 700 user-item pairs
(mlcommons/inference v4.1 `recommendation/dlrm_v2/pytorch/README.md` L286, drawn from
`tools/dist_quantile.txt`: 100, 100, 200 x 12, 300, 300, 400, 500, 600, 700), and the network runs
once per pair. The mean is 89,137,319 pairs (the first half of Criteo's day 23, the same README
L118-124) over the 330,067 samples LoadGen reports (`qsl_reported_total_count` in the v4.1 logs,
e.g. `closed/NVIDIA/results/H200-SXM-141GBx8_TRT/dlrm-v2-99/Offline/performance/run_1/
mlperf_log_detail.txt` L12): 270.06. NVIDIA's harness batches pairs, not samples (its
`gpu_batch_size` of 600,000 for an H200 counts pairs), so the batches tried are large.

So an Offline throughput of calls is divided by the mean calls per sample (LoadGen draws the
samples evenly), and a SingleStream latency is the time of the sample at the 90th percentile of
calls (LoadGen's metric is the 90th percentile of the samples' latencies).

Stable Diffusion XL runs three networks per sample, a pipeline (`Stage`): its two text encoders
on the prompt and the negative prompt, 20 UNet steps on two latents (classifier-free guidance,
guidance 8: mlcommons/inference v4.1 `text_to_image/backend_pytorch.py` L18-19), then the VAE's
decoder on one (model.workload.sdxl). NVIDIA batches each network apart (`closed/NVIDIA/configs/
stable-diffusion-xl/Offline/__init__.py` and `Server/__init__.py`: the UNet at 32 or 8 samples
on Hopper, 1 on the L40S; the VAE at most 8 images; the UNet at the benchmark's precision, fp8 or
int8, the rest fp16, `stable-diffusion-xl/__init__.py` L26; bf16 on a chip without fp16). A batch
of samples therefore costs each stage's calls at its own batch, added up.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

KITS19_WINDOWS = Path(str(resources.files("chipcal.validate") / "data" / "kits19_windows.csv"))


@dataclass(frozen=True)
class Stage:
    """One network of a pipeline sample (module docstring): `calls` per batch of samples, each on
    `per_sample` items a sample (latents, prompts), at most `most` items a call (None: the whole
    batch), at the first of `precisions` the chip has (none given: the benchmark's)."""

    network: str
    calls: int = 1
    per_sample: int = 1
    most: int | None = None
    precisions: tuple[str, ...] = ()

    def precision_on(self, chip, benchmark_precision: str) -> str:
        """The stage's precision on `chip`: the first of its own the chip has, else the benchmark's."""
        return next((p for p in self.precisions if chip.supports(p)), benchmark_precision)

    def runs(self, samples: int) -> tuple[int, int]:
        """(calls, items a call) for a batch of `samples`."""
        items = samples * self.per_sample
        size = min(items, self.most or items)
        return self.calls * math.ceil(items / size), size


@dataclass(frozen=True)
class Benchmark:
    """A benchmark as chipcal predicts it.

    `network`: model.workload.mlperf_networks' or a torchvision model. `batches`: those a serving
    engine picks among at saturation, every `gpu_batch_size` of NVIDIA's v4.1 Offline configs
    (`closed/NVIDIA/configs/<benchmark>/Offline/__init__.py`), in calls (3D-UNet: sub-volumes;
    DLRM: user-item pairs). `precisions`: the closed division's, the first a chip has being the
    one submitted on it, unless the submission's stack is in `stack_precisions`. Network calls per
    sample: the mean over the sample set (`calls_per_sample`) and the sample at the 90th
    percentile (`calls_p90`). `server_latency_s`: the Server scenario's 99th-percentile latency
    limit, as LoadGen prints it in every v4.1 Server summary (`target_latency (ns)`: resnet50
    15 ms, retinanet 100 ms, bert 130 ms, dlrm-v2 60 ms, stable-diffusion-xl 20 s, as v4.1's
    mlperf.conf L59 sets it; 3D-UNet has no Server scenario)."""

    network: str
    batches: tuple[int, ...]
    precisions: tuple[str, ...] = ("int8",)
    calls_per_sample: float = 1.0
    calls_p90: int = 1
    server_latency_s: float | None = None
    stack_precisions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    pipeline: tuple[Stage, ...] = ()        # a sample of several networks (module docstring); batches in samples

    def precision_on(self, chip, stack: str) -> str | None:
        """The precision `stack` (validate.mlperf_stack.stack_of) submits on `chip`, or None if
        the chip has none of them."""
        precisions = dict(self.stack_precisions).get(stack, self.precisions)
        return next((p for p in precisions if chip.supports(p)), None)


@cache
def kits19_windows() -> tuple[int, ...]:
    """The 128^3 sub-volumes each of the 43 KiTS19 inference cases runs (module docstring)."""
    with KITS19_WINDOWS.open(newline="") as fh:
        return tuple(int(row["windows"]) for row in csv.DictReader(fh))


def _unet3d() -> Benchmark:
    windows = sorted(kits19_windows())
    p90 = windows[math.ceil(0.9 * len(windows)) - 1]          # the nearest-rank 90th percentile
    return Benchmark("unet3d_kits19", (1, 2, 4, 8), calls_per_sample=sum(windows) / len(windows), calls_p90=p90)


HALF = ("fp16", "bf16")          # a TPU has no fp16: bf16 is its half precision
# the text encoders at NVIDIA's 2 prompts a sample, one sample a call: NVIDIA batches them with the
# UNet, but they are 0.08 % of a sample's MACs (model.workload.sdxl), so one traced batch serves all
SDXL_PIPELINE = (Stage("sdxl_text_encoders", per_sample=2, most=2, precisions=HALF),
                 Stage("sdxl_unet", calls=20, per_sample=2),
                 Stage("sdxl_vae_decoder", most=8, precisions=HALF))


@cache
def benchmarks() -> dict[str, Benchmark]:
    """The benchmarks chipcal predicts, by MLPerf's name. The 99 % and 99.9 % accuracy targets run
    the same network, in int8 except BERT's 99.9 %: fp8 where the chip has it (Hopper, Ada), else
    fp16 (NVIDIA's v4.1 configs: `closed/NVIDIA/configs/bert/__init__.py` L27 and the `use_fp8`
    of `bert/Offline/__init__.py`'s `*_High_Accuracy` classes, L173-178; `3d-unet/__init__.py` L28,
    whose README says int8 meets both targets; `dlrm-v2/__init__.py` L30-41). DLRM's 99.9 % runs
    its cross layers, two thirds of its MACs, in fp16 and the rest in int8; chipcal predicts one
    precision per network, so it is predicted in fp16 (its tables are then read at 2 bytes a
    row element, not 1)."""
    unet3d = _unet3d()
    dlrm = (1_400, 7_500, 51_200, 600_000)
    # pairs per user: the mean, and the 18th of dist_quantile.txt's 20 equiprobable quantiles
    pairs = {"calls_per_sample": 89_137_319 / 330_067, "calls_p90": 500, "server_latency_s": 0.060}
    bert, bert_limit = (16, 32, 256, 384, 1024, 1280), {"server_latency_s": 0.130}
    return {
        "resnet50": Benchmark("resnet50", (32, 64, 256, 2048), server_latency_s=0.015),
        "retinanet": Benchmark("retinanet_800", (2, 4, 12, 16, 32, 48), server_latency_s=0.100),
        "bert-99": Benchmark("bert_large_squad", bert, **bert_limit),
        "bert-99.9": Benchmark("bert_large_squad", bert, ("fp8", "fp16"), **bert_limit),
        "3d-unet-99": unet3d,
        "3d-unet-99.9": unet3d,
        "dlrm-v2-99": Benchmark("dlrm_v2", dlrm, **pairs),
        "dlrm-v2-99.9": Benchmark("dlrm_v2", dlrm, ("fp16",), **pairs, stack_precisions=(("pytorch", ("int8",)),)),
        "stable-diffusion-xl": Benchmark("sdxl_unet", (1, 8, 32), ("fp8", "int8", "fp16"), server_latency_s=20.0,
                                         pipeline=SDXL_PIPELINE),
    }
