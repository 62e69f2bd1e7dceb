"""Estimators: per-subgraph roofline, concurrency-aware totals, energy, memory liveness, opportunities.

    estimate_subgraph(subgraph, chip, precision, params) -> SubgraphEstimate   (roofline.py)
    predict(workload, chip, precision, params=None, calibration=None) -> Prediction   (prediction.py;
        at the power-limited clock when the listed clocks would exceed the TDP: throttle.py)
    opportunities(prediction, workload, chip, params, workload_at=None) -> tuple[Opportunity, ...]
"""

from chipcal.model.estimate.opportunities import Opportunity, opportunities
from chipcal.model.estimate.prediction import Prediction, predict
from chipcal.model.estimate.roofline import SubgraphEstimate, estimate_subgraph

__all__ = ["Opportunity", "Prediction", "SubgraphEstimate", "estimate_subgraph", "opportunities", "predict"]
