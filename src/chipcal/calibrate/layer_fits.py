"""The calibration's fits of the model's free parameters to micro-benchmarks, through the predictor.

GEMM sweep -> saturating efficiency per precision; timed micro-layers -> per-op-class efficiency
and overhead and the size curve (log-latency, soft-L1, log-normal prior on the family defaults,
a grid-search start); layer chains -> the in-network switch overhead and memory factor. docs/calibration-fits.md has
the method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from chipcal.calibrate.fits import FitResult, fit_log_latency, fit_saturating_efficiency
from chipcal.measure.device import Device
from chipcal.model.estimate.placement import class_parameters_read
from chipcal.model.estimate.prediction import predict, predicted_latency_s
from chipcal.model.memo import Recent

RUNTIME = "eager"    # layers, chains and models are timed in PyTorch eager mode: one kernel per op
MODEL_SIGMA_FLOOR = 0.05   # per-layer log uncertainty floor: timing spread, else model misfit
PRIOR_SIGMA = 1.0     # log-space width of the prior around the family defaults (a factor of e)
EFFICIENCY_MAX = 2.0   # measured may exceed an *assumed* local peak (clock above the nominal one)
NETWORK_MEMORY_FACTOR_MAX = 4.0   # in-network on-chip time at most 4x the kernel's alone: about every
                                  # on-chip byte at DRAM speed (LLC plateau / DRAM 3.0-4.7 on the 2-vCPU VMs)


def as_timed(workload, chip, precision: str, params, fp32_mode: str = "pytorch"):
    """The prediction a timed eager PyTorch call is compared with: the eager runtime, the time per
    call of calls back to back (a timer's average: on a GPU the host runs a call ahead of its kernels,
    so the slower side sets the pace, estimate.host.run_queue), under the math mode it was timed in
    (`fp32_mode`: PyTorch's defaults unless the timing said otherwise). On a CPU host and kernels
    share the cores and the ops run in program order."""
    return predict(workload, chip, precision, params=params, runtime=RUNTIME, fp32_mode=fp32_mode, repeated=True)


def timed_latency_s(workload, chip, precision: str, params, fp32_mode: str = "pytorch") -> float:
    """as_timed(...).latency_s, the one number a fit compares (prediction.predicted_latency_s: on a
    CPU without building the prediction's record)."""
    return predicted_latency_s(workload, chip, precision, params, RUNTIME, fp32_mode, True)


def host_in_overheads(base, device: Device, dispatch_per_op_s: float | None):
    """(fit base, overhead floor) for a calibration on `device`: on a GPU the per-class overhead_s
    are the host's cost of issuing an op of that class (roofline.host_issue_s: the host runs ahead
    of the kernels, not in series with them), so the base carries host cost 0 and every class's
    overhead starts at the dispatch probe's per-op cost; the fit moves the classes the micro-layers
    exercise (on the H100 machine a lone max-pool issued in 11.6 us, a conv+BN+ReLU in 62 us).
    On a CPU host and kernels share the cores: nothing changes."""
    if not device.is_cuda:
        return base, 0.0
    probe = dispatch_per_op_s or 0.0
    return (dataclasses.replace(base, host_overhead_s=0.0,
                                overhead_s={c: max(v, probe) for c, v in base.overhead_s.items()}), probe)


def gemm_fits(curves, chip) -> dict[str, FitResult]:
    """Saturating efficiency curve per precision with a hardware unit, efficiency relative to the
    physics peak (an emulated precision's one point is a rate, not a unit's curve). `curves` maps
    each native precision to its swept points (anything with `flop` and `flop_per_s`: the run's
    measure.peak.GemmPoint, a recorded document's GemmRow)."""
    fits = {}
    for p, curve in curves.items():
        physics = chip.peak_flop_per_s(p)
        if physics and len(curve) >= 3:
            fits[f"gemm_efficiency_{p}"] = fit_saturating_efficiency(
                [pt.flop for pt in curve], [pt.flop_per_s / physics for pt in curve], name=f"gemm_efficiency_{p}")
    return fits


def gemm_informed(defaults, gemm_fit):
    """The family defaults with the MAC classes' efficiencies rescaled by the GEMM sweep.

    A family default efficiency is a fraction of the physics peak, and the defaults assume a
    large GEMM attains efficiency["matmul"] of it. The sweep measured what it attains: e_max
    (calibrate.fits.fit_saturating_efficiency, relative to the same physics peak). Where they
    differ, the whole MAC engine is faster or slower than assumed (a clock above the nominal
    one, fewer FMA ports than assumed), so every MAC class's default moves by the same factor
    e_max / efficiency["matmul"]. `gemm_fit` is a FitResult or FitRecord of the calibrated
    precision, or None (no sweep, no unit): the defaults unchanged, as when e_max is unconstrained.
    """
    from chipcal.model.mapping.base import MAC_CLASSES

    if gemm_fit is None or "e_max" in gemm_fit.unconstrained:
        return defaults
    scale = gemm_fit.parameters["e_max"] / defaults.efficiency["matmul"]
    eff = {c: v * scale if c in MAC_CLASSES else v for c, v in defaults.efficiency.items()}
    return dataclasses.replace(defaults, efficiency=eff)


def _runs_on_tensor_cores(op_class: str, chip, precision: str) -> bool:
    """Whether a micro-layer of `op_class` timed at `precision` under PyTorch's defaults (as_timed)
    runs on a GPU's tensor cores."""
    from chipcal.model.estimate.numerics import op_precision

    if chip.kind != "gpu":
        return False
    engine = chip.engine_for(op_precision(op_class, precision, chip))
    return engine is not None and engine.circuit == "tensor_core"


# Layer latencies that fits from one base share (fit_layer_params, calibrate.micro): keyed by the
# identities of the layer's workload, the chip and the base parameters (each entry holds them), the
# precision, and the names and values of the fitted parameters the layer reads. The cross-validation's
# folds start where the full fit started and their grids try the same values, so most of a fold's
# grid is the full fit's again; a full run's fit and its five folds keep ~110,000 (~40 MB).
PREDICTED_KEPT = 1 << 17


def fit_layer_params(observations: Sequence, chip, precision: str, base, overhead_floor_s: float = 0.0,
                     predicted: Recent | None = None):
    """Fit efficiency[c] and overhead_s[c] for every op class the micro-layers exercise, and the
    size curve's half_efficiency_flop, through the predictor itself.

    Prediction of a micro-layer = `as_timed` (the predictor under the eager runtime), so
    the mapper's own utilization and lane-fill penalties are not counted twice (the raw GEMM
    sweep fit only seeds half_efficiency_flop). bandwidth_efficiency stays as given in `base`
    (from the bandwidth probe). Returns (FamilyParams, FitResult).
    `overhead_floor_s` raises each class's overhead prior to at least that many seconds: a GPU's
    defaults put the per-kernel cost in clock cycles (overhead_s 0), and a prior centred on 0 s
    pinned every fitted overhead to its 0.1 µs bound on the H100, where the host's ~30 µs per op
    (the dispatch probe, which the calibration passes here) is what the micro-layers show.
    """

    classes = sorted({sg.op_class for o in observations for sg in o.workload.subgraphs
                      if sg.flop > 0 or sg.bytes_written > 0})
    # a GPU's host enters each timed call once before its ops (FamilyParams.host_call_s): alone, a
    # micro-layer pays it for one to six ops, a network for ~200; without it the class costs take it
    call = ["host_call_s"] if chip.kind == "gpu" else []
    names = ([f"efficiency.{c}" for c in classes] + [f"overhead_s.{c}" for c in classes]
             + ["half_efficiency_flop"] + call)
    x0 = ([min(base.class_efficiency(c, "tensor_core" if _runs_on_tensor_cores(c, chip, precision) else ""), 1.0)
           for c in classes]
          + [max(base.overhead_s[c], overhead_floor_s, 1e-7) for c in classes]
          + [max(base.half_efficiency_flop, 1.0)] + [max(base.host_call_s, overhead_floor_s, 1e-7)] * len(call))
    lower = [1e-3] * len(classes) + [1e-8] * len(classes) + [1.0] + [1e-8] * len(call)
    upper = [EFFICIENCY_MAX] * len(classes) + [1e-2] * len(classes) + [1e12] + [1e-2] * len(call)
    measured = [o.measurement.median_s for o in observations]
    # a class whose micro-layers ran on a GPU's tensor cores (fp32 convolutions in TF32 under
    # PyTorch's defaults) says nothing of its CUDA-core work: its fitted efficiency is the tensor
    # cores' (FamilyParams.tensor_efficiency), the CUDA cores keep their prior
    on_tensor = {c for c in classes if _runs_on_tensor_cores(c, chip, precision)}

    def params_from(values: dict[str, float]):
        eff = dict(base.efficiency)
        tensor = dict(base.tensor_efficiency or base.efficiency)
        over = dict(base.overhead_s)
        for c in classes:
            (tensor if c in on_tensor else eff)[c] = values[f"efficiency.{c}"]
            over[c] = values[f"overhead_s.{c}"]
        return dataclasses.replace(base, efficiency=eff, overhead_s=over,
                                   tensor_efficiency=tensor if on_tensor else base.tensor_efficiency,
                                   half_efficiency_flop=values["half_efficiency_flop"],
                                   host_call_s=values.get("host_call_s", base.host_call_s))

    # a layer's prediction reads the class parameters placement.class_parameters_read names and the
    # shared ones (host_call_s): a finite-difference Jacobian column or a grid trial that moves
    # another leaves it as it was, so it is reused (same inputs, same value)
    per_class = [n for n in names if n.startswith(("efficiency.", "overhead_s.")) or n == "half_efficiency_flop"]
    reads = []
    for o in observations:
        read = class_parameters_read(o.workload, chip, precision)
        reads.append(tuple(n for n in names if n not in per_class or n in read))
    fixed = (id(chip), precision, id(base))
    predicted = Recent(PREDICTED_KEPT) if predicted is None else predicted

    def predict_all(values: dict[str, float], which: Sequence[int] | None = None) -> np.ndarray:
        params = None
        out = []
        for i in range(len(observations)) if which is None else which:
            w = observations[i].workload
            key = (id(w), *fixed, reads[i], *(values[n] for n in reads[i]))
            latency = predicted.get(key)
            if latency is None:
                if params is None:
                    params = params_from(values)
                latency = predicted.keep(key, timed_latency_s(w, chip, precision, params), w, chip, base)
            out.append(latency)
        return np.array(out)

    sigma = [max(MODEL_SIGMA_FLOOR, o.measurement.iqr_s / 1.349 / o.measurement.median_s) for o in observations]
    defaults = list(x0)       # the prior is centred on the family defaults, the search starts from the grid
    touches = {c: [i for i, o in enumerate(observations)
                   if any(sg.op_class == c and (sg.flop > 0 or sg.bytes_written > 0) for sg in o.workload.subgraphs)]
               for c in classes}
    x0 = _coordinate_start(names, x0, lower, upper, predict_all, measured, sigma, touches)
    fit = fit_log_latency(names, x0, predict_all, measured, name="op_class_latency", prior_centre=defaults,
                          model="t(layer) = Σ_subgraphs max(FLOP/(peak·util·efficiency[c]·W/(W+W_half)), "
                                "bytes/(BW·bw_eff)) + overhead_s[c]",
                          lower=lower, upper=upper, prior_sigma=PRIOR_SIGMA, data_sigma=sigma, robust=True)
    return params_from(fit.parameters), fit


def _coordinate_start(names: list[str], x0: list[float], lower: list[float], upper: list[float],
                      predict_all, measured: Sequence[float], sigma: Sequence[float],
                      touches: dict[str, list[int]]) -> list[float]:
    """A starting point for the joint fit: two sweeps of per-class grid search.

    The roofline's max(compute, memory) is flat in efficiency wherever a layer is memory-bound,
    so a gradient method started there cannot see that a much lower efficiency fits (PyTorch's
    CPU max-pool is ~15x slower than its bytes suggest). A coarse log grid over each class's
    (efficiency, overhead) pair, others held, finds the right basin; the objective is the
    joint fit's own (soft-L1 of the scaled log residuals plus the prior). A class's grid is scored
    on the layers that run that class only (`touches`): the others' residuals and the other
    parameters' prior terms do not change along it, so the choice is the same and ~5x cheaper.
    Where a class's layers are affine in its overhead (a CPU: each kernel's fixed cost adds to the
    time of a host that runs the kernels, estimate.host.run_queue), the grid's overheads between
    its ends are interpolated, not predicted (`_along_overhead`).
    """
    values = dict(zip(names, x0, strict=True))
    centre = dict(values)
    log_meas = np.log(np.asarray(measured, dtype=float))
    sig = np.asarray(sigma, dtype=float)

    every = list(range(len(log_meas)))

    def score(latencies: np.ndarray, trial: dict[str, float], which: list[int], keys: Sequence[str]) -> float:
        r = (np.log(latencies) - log_meas[which]) / sig[which] / 2.0   # soft-L1, f_scale 2
        prior = sum((np.log(trial[k] / centre[k]) / PRIOR_SIGMA) ** 2 for k in keys)
        return float(np.sum(8.0 * (np.sqrt(1 + r * r) - 1)) + prior)

    def cost(trial: dict[str, float], which: list[int], keys: Sequence[str]) -> float:
        return score(predict_all(trial, which), trial, which, keys)

    bounds = {n: (lo, hi) for n, lo, hi in zip(names, lower, upper, strict=True)}
    classes = [n.split(".", 1)[1] for n in names if n.startswith("efficiency.")]
    for _ in range(2):
        for c in classes:
            e, o = f"efficiency.{c}", f"overhead_s.{c}"
            overheads = list(np.geomspace(*bounds[o], 9))
            scored = []      # (cost, (efficiency, overhead)) in the grid's order, the current point last
            for ev in np.geomspace(*bounds[e], 12):
                along = _along_overhead(lambda ov, ev=ev, e=e, o=o, c=c: predict_all({**values, e: ev, o: ov}, touches[c]),
                                        overheads)
                scored += [(score(lat, {**values, e: ev, o: ov}, touches[c], (e, o)), (ev, ov))
                           for ov, lat in zip(overheads, along, strict=True)]
            scored.append((cost(values, touches[c], (e, o)), (values[e], values[o])))
            values[e], values[o] = min(scored, key=lambda s: s[0])[1]
        h = "half_efficiency_flop"
        values[h] = min([*np.geomspace(1e3, 1e10, 8), values[h]], key=lambda w: cost({**values, h: w}, every, (h,)))
    return [values[n] for n in names]


AFFINE_RTOL = 1e-9    # the middle of an overhead grid predicted within this of the line through its ends


def _along_overhead(latencies, overheads: Sequence[float]) -> list[np.ndarray]:
    """latencies(ov) at each of `overheads` (ascending), predicted only where a chord cannot give it.
    A layer's latency is convex in a class's overhead (sums and maxima of terms affine in it: each
    kernel's time plus its fixed cost, the host queue's max(host, device), estimate.host.run_queue),
    and a convex function that meets its chord at an interior point is that chord over the whole
    interval. So the grid is halved until each part meets its chord at its middle (AFFINE_RTOL), and
    the points inside such a part are read off its chord. On a CPU the whole grid is one line (the
    host runs the kernels): 3 of its 9 overheads are predicted; on a GPU, flat while the device
    sets the pace and a line once the host does: 5-7 of 9. The same choice as predicting all nine
    (the same floats at the points it predicts)."""
    known = {0: latencies(overheads[0]), len(overheads) - 1: latencies(overheads[-1])}

    def fill(lo: int, hi: int) -> None:
        if hi - lo < 2:
            return
        mid = (lo + hi) // 2
        known[mid] = latencies(overheads[mid])
        slope = (known[hi] - known[lo]) / (overheads[hi] - overheads[lo])

        def line(i: int) -> np.ndarray:
            return known[lo] + slope * (overheads[i] - overheads[lo])

        if np.allclose(line(mid), known[mid], rtol=AFFINE_RTOL, atol=0.0):
            known.update({i: line(i) for i in range(lo + 1, hi) if i != mid})
        else:
            fill(lo, mid)
            fill(mid, hi)

    fill(0, len(overheads) - 1)
    return [known[i] for i in range(len(overheads))]


def fit_network_costs(chains: Sequence, chip, precision: str, params):
    """Fit what a kernel costs inside a network over its time alone, from the timed chains:

        t(chain) = the predictor (as_timed) with each kernel paying switch_overhead_s more and its
                   on-chip time × network_memory_factor

    Starts from `params` (the isolated-layer fit) with the kernels as if alone (`FamilyParams.alone`).
    The memory factor is why kernels fed from the cache slow down in a network (their data no
    longer hot, mapping.params); the switch cost what every kernel pays. A log-normal prior (PRIOR_SIGMA) centred on 1 holds the
    factor there where the chains cannot separate it from the switch cost (FitResult.unconstrained);
    the switch cost has no prior, as before the factor was fitted beside it. Both go through the
    predictor, so the switch cost lands where the prediction charges it (a GPU's host queue,
    roofline.kernel_fixed_costs) and a chain that waits on the other side does not absorb it. A factor that runs
    into NETWORK_MEMORY_FACTOR_MAX is held there, not at 1: the chains want at least that much (on
    the Zen 5 VM the batch-8 mobile chain ran 2x its kernels alone, and a factor put back to 1 left
    the mobile networks at batch 8 26-34% too fast).
    Returns (params with both fitted, FitResult).
    """
    alone = params.alone()

    def predict(v):
        inside = dataclasses.replace(alone, **v)
        return np.asarray([timed_latency_s(c.workload, chip, precision, inside) for c in chains])

    names = ["switch_overhead_s", "network_memory_factor"]
    fit = fit_log_latency(names, [1e-6, 1.0], predict,
                          [c.measurement.median_s for c in chains], name="switch_overhead",
                          model="t(chain) = Σ kernels as timed alone, on-chip memory time × network_memory_factor, "
                                "+ switch_overhead_s × kernels",
                          lower=[1e-9, 1.0], upper=[1e-3, NETWORK_MEMORY_FACTOR_MAX],
                          prior_sigma=[None, PRIOR_SIGMA], prior_centre=[1e-6, 1.0], ceiling=[False, True],
                          data_sigma=[max(MODEL_SIGMA_FLOOR, c.measurement.iqr_s / 1.349 / c.measurement.median_s)
                                      for c in chains])
    return dataclasses.replace(params, **{n: fit.parameters[n] for n in names}), fit
