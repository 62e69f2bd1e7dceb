"""What a calibration run is asked to do: its models, batches and precision, and the timing budgets
each mode gives its phases (`chipcal calibrate` and `--quick`; docs/calibration.md, step 6).
calibrate.run measures by it, and calibrate.journal records it so that `--resume` continues with it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from chipcal.measure.device import CPU, Device

# validation: the classic set, plus structures no micro-layer or chain was built from (grouped
# convs, inception branches, windowed attention, 7x7 depthwise)
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "densenet121",
                  "mobilenet_v3_large", "vit_b_16", "resnext50_32x4d", "googlenet", "swin_t", "convnext_tiny")
QUICK_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "mobilenet_v3_large", "vit_b_16",
                "resnext50_32x4d", "googlenet", "swin_t")
DEFAULT_BATCHES = (1, 8)
MODEL_MIN_SAMPLES = 5
MODEL_MAX_CALL_S = 4.0     # a validation model whose predicted forward pass is longer is not run


@dataclass(frozen=True)
class CalibrationConfig:
    device: Device = CPU
    quick: bool = False
    models: tuple[str, ...] = DEFAULT_MODELS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    precision: str = "fp32"          # precision of the layer and model measurements
    gemm_precisions: tuple[str, ...] | None = None   # GEMM sweep; None = the native ones (peak.default_precisions)
    remeasure: bool = False          # ignore cached peak/bandwidth results
    command: str = "chipcal calibrate"

    def to_fields(self) -> dict:
        """The configuration as JSON data (the journal's config.json): the device as its text."""
        return {**dataclasses.asdict(self), "device": str(self.device)}

    @classmethod
    def from_fields(cls, fields: dict) -> CalibrationConfig:
        """The configuration a journal recorded (`to_fields`); TypeError for a field this chipcal
        does not have, DeviceError for a device it cannot parse."""
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        if "device" in values:
            values["device"] = Device.parse(values["device"])
        return cls(**values)

    @property
    def rounds(self) -> int:
        """Interleaved measurement rounds (a transient slowdown spoils one, not the median)."""
        return 2 if self.quick else 3

    @property
    def layer_time_s(self) -> float:
        return 0.4 if self.quick else 1.8

    @property
    def validation_time_s(self) -> float:
        """Timing budget of the whole validation phase, shared by its (model, batch) entries.
        --quick: 70 s (100 until every call timed became a sample: a one-call block had cost
        three calls, so 70 s hold more samples than 100 did; issue 50)."""
        return 70.0 if self.quick else 200.0

    @property
    def model_time_s(self) -> float:
        return 1.5 if self.quick else 6.0

    @property
    def max_call_s(self) -> float:
        """The longest predicted pass a validation model may have to be run: MODEL_MAX_CALL_S, and
        at most half of one (model, batch) entry's share of the validation budget. A pass longer
        than that spends several times its share on its first call, the budget's call and one
        sample a round: in --quick (share 70 / 18 = 3.9 s) vit_b_16 at batch 8 took ~36 s of the
        AVX2 EPYC's run at 4.4 s a pass (issue 50); the full job's share (9.1 s) leaves the 4 s bound."""
        return min(MODEL_MAX_CALL_S, self.validation_time_s / (len(self.models) * len(self.batches)) / 2)

    @property
    def extra_rounds_time_s(self) -> float:
        """Time for rounds beyond `rounds` when the host is too noisy for the target (calibrate.noise)."""
        return 120.0 if self.quick else 300.0
