"""What a calibration run is asked to do: its models, batches and precision, and the timing budgets
each mode gives its phases (`chipcal calibrate`, `--quick` and `--smoke`; docs/calibration.md, step 6).
calibrate.run measures by it, and calibrate.journal records it so that `--resume` continues with it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from chipcal.measure.device import CPU, Device

# validation: the classic set, plus structures no micro-layer or chain was built from (grouped
# convs, inception branches, windowed attention, 7x7 depthwise)
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "densenet121",
                  "mobilenet_v3_large", "vit_b_16", "resnext50_32x4d", "googlenet", "swin_t", "convnext_tiny")
QUICK_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "mobilenet_v3_large", "vit_b_16",
                "resnext50_32x4d", "googlenet", "swin_t")
SMOKE_MODELS = ("resnet18",)
DEFAULT_BATCHES = (1, 8)
SMOKE_BATCHES = (1,)
MODEL_MIN_SAMPLES = 5
SMOKE_PROBE_SCALE = 0.125   # --smoke: a GEMM or bandwidth point timed for this share of its budget
MODEL_MAX_CALL_S = 4.0     # a validation model whose predicted forward pass is longer is not run


@dataclass(frozen=True)
class CalibrationConfig:
    device: Device = CPU
    quick: bool = False
    # --smoke: every phase at the shortest budgets that still time each step (a fleet's check that
    # a node runs chipcal end to end, and the test suite's real Slurm run): its figures are noisy
    smoke: bool = False
    models: tuple[str, ...] = DEFAULT_MODELS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    precision: str = "fp32"          # precision of the layer and model measurements
    gemm_precisions: tuple[str, ...] | None = None   # GEMM sweep; None = the native ones (peak.default_precisions)
    remeasure: bool = False          # ignore cached peak/bandwidth results
    by_node: bool = False            # written under OUT/<node>/ (a fleet's store), not OUT/<machine>/
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

    def folder(self, machine_slug: str) -> str:
        """The directory under the results root that the run is written to: its node's
        (measure.node), with --by-node, else its machine class's."""
        from chipcal.measure.node import this_node

        return this_node().folder if self.by_node else machine_slug

    def journal_root(self, out: Path) -> Path:
        """Where the run's journal (calibrate.journal) is made: under its node's folder with
        --by-node, so that a requeued fleet task finds its own, else under OUT."""
        from chipcal.measure.node import this_node

        return Path(out) / this_node().folder if self.by_node else Path(out)

    @property
    def rounds(self) -> int:
        """Interleaved measurement rounds (a transient slowdown spoils one, not the median)."""
        return 2 if self.quick or self.smoke else 3

    @property
    def users_run_time_s(self) -> float:
        """Wall budget of a GPU run's compiled and generate rows (calibrate.users_run): issue 55's
        ~90 s on top of a --quick run, twice that for the main job, a tenth for --smoke."""
        return 9.0 if self.smoke else 90.0 if self.quick else 180.0

    @property
    def layer_time_s(self) -> float:
        return 0.05 if self.smoke else 0.4 if self.quick else 1.8

    @property
    def validation_time_s(self) -> float:
        """Timing budget of the whole validation phase, shared by its (model, batch) entries.
        --quick: 70 s (100 until every call timed became a sample: a one-call block had cost
        three calls, so 70 s hold more samples than 100 did; issue 50)."""
        return 8.0 if self.smoke else 70.0 if self.quick else 200.0

    @property
    def model_time_s(self) -> float:
        return 0.3 if self.smoke else 1.5 if self.quick else 6.0

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
        return 0.0 if self.smoke else 120.0 if self.quick else 300.0

    def probe_budget(self, default_s: float) -> dict:
        """Keyword arguments of the GEMM sweep and the bandwidth probe (measure.peak,
        measure.bandwidth), whose budget per point is `default_s`: none but the cache switch,
        except in --smoke, which times each point for SMOKE_PROBE_SCALE of it and neither reads
        nor writes the measurement cache, so that a smoke run's short-budget figures never stand
        in for a real run's."""
        if self.smoke:
            return {"max_time_s": SMOKE_PROBE_SCALE * default_s, "use_cache": False, "remeasure": True}
        return {"remeasure": self.remeasure}

    def bandwidth_sizes(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """The bandwidth probe's working sets: all of `sizes` (measure.bandwidth's), or in
        --smoke every sixth and the two largest (those the DRAM figure is read from)."""
        return tuple(sorted(set(sizes[::6]) | set(sizes[-2:]))) if self.smoke else tuple(sizes)
