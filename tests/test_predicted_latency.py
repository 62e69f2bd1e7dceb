"""prediction.predicted_latency_s, the latency a calibration fit asks for without the
prediction's record, against predict's own latency_s on every path it takes."""

from __future__ import annotations

import dataclasses
import math

from test_mapping import chip
from test_predict import resnet_like

from chipcal.model.estimate.prediction import predict, predicted_latency_s
from chipcal.model.mapping import default_params


def test_predicted_latency_is_the_records_latency_on_every_path():
    """prediction.predicted_latency_s (what the calibration fits ask for, ~100,000 times a run)
    equals predict(...).latency_s to the last bit on each of its paths: an eager CPU whose clock
    the TDP does not lower (kernel times alone), an eager H100 within its TDP (the run's energy
    checked) and beyond it (ResNet-50's shapes at batch 256 in fp16: predict's power-limited clock),
    a fused runtime (predict's schedule), and NaN for a precision the chip has no engine for."""
    h100, cpu = chip("h100-sxm5"), dataclasses.replace(chip("xeon-platinum-8592-plus"), tdp_limits_clock=False)
    cases = [(cpu, "fp32", "eager", 1), (cpu, "fp32", "eager", 64), (h100, "fp16", "eager", 1),
             (h100, "fp32", "eager", 64), (h100, "fp16", "eager", 256), (h100, "fp16", "fused", 8)]
    for hw, precision, runtime, batch in cases:
        w, params = resnet_like(batch), default_params(hw.kind)
        record = predict(w, hw, precision, params=params, runtime=runtime, repeated=True)
        assert predicted_latency_s(w, hw, precision, params, runtime, "pytorch", True) == record.latency_s
        assert record.power_limited == (hw is h100 and batch == 256)      # each path taken
    assert math.isnan(predicted_latency_s(resnet_like(1), cpu, "fp8", default_params("cpu"), "eager"))
