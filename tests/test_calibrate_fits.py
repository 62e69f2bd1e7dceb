"""Each fit recovers known parameters from synthetic data generated with noise."""

from __future__ import annotations

import numpy as np
import pytest

from chipcal.calibrate.fits import (
    FitResult,
    fit_log_latency,
    fit_saturating_efficiency,
    saturating,
)
from chipcal.measure.device import CPU, Device


def test_saturating_fit_recovers_parameters():
    rng = np.random.default_rng(0)
    work = np.logspace(6, 12, 30)
    # true: e_max 0.8, half-efficiency at 5e8 FLOP; 3% multiplicative noise
    eff = saturating(work, 0.8, 5e8) * np.exp(rng.normal(0, 0.03, work.size))
    fit = fit_saturating_efficiency(work, eff)
    assert fit.parameters["e_max"] == pytest.approx(0.8, rel=0.05)
    assert fit.parameters["w_half_flop"] == pytest.approx(5e8, rel=0.2)
    # truth lies within 3 standard errors
    assert abs(fit.parameters["e_max"] - 0.8) < 3 * fit.stderr["e_max"]
    assert fit.r2 > 0.95 and fit.n == 30


def test_saturating_fit_rejects_bad_input():
    with pytest.raises(ValueError):
        fit_saturating_efficiency([1, 2], [0.1, 0.2])
    with pytest.raises(ValueError):
        fit_saturating_efficiency([1, 2, 3], [0.1, 0.0, 0.2])


def test_log_latency_fit_recovers_efficiency_and_overhead():
    rng = np.random.default_rng(2)
    flop = np.logspace(5, 10, 25)
    peak = 1e11
    # true model: t = FLOP / (peak * eff) + overhead, eff 0.6, overhead 20 µs; 5% noise
    true = flop / (peak * 0.6) + 20e-6
    measured = true * np.exp(rng.normal(0, 0.05, flop.size))

    def predict(p):
        return flop / (peak * p["eff"]) + p["overhead_s"]

    fit = fit_log_latency(["eff", "overhead_s"], [0.3, 1e-5], predict, measured, name="t",
                          model="FLOP/(peak*eff) + overhead", lower=[1e-3, 1e-9], upper=[2, 1])
    assert fit.parameters["eff"] == pytest.approx(0.6, rel=0.05)
    assert fit.parameters["overhead_s"] == pytest.approx(20e-6, rel=0.15)
    assert abs(fit.parameters["eff"] - 0.6) < 3 * fit.stderr["eff"]
    assert fit.r2 > 0.98


def test_unconstrained_parameter_gets_nan_stderr():
    measured = np.array([1.0, 2.0, 3.0])

    def predict(p):
        return measured * p["scale"] + 0 * p["unused"]

    fit = fit_log_latency(["scale", "unused"], [0.5, 1.0], predict, measured, name="t", model="t")
    assert fit.parameters["scale"] == pytest.approx(1.0, rel=1e-4)
    assert np.isnan(fit.stderr["unused"])


def test_fit_result_round_trips_through_json():
    import json

    fit = fit_saturating_efficiency([1e6, 1e8, 1e10, 1e12], [0.1, 0.4, 0.7, 0.75])
    again = FitResult.from_dict(json.loads(json.dumps(fit.to_dict())))
    assert again == fit


def test_prior_holds_unidentified_parameters_and_spares_identified_ones():
    rng = np.random.default_rng(3)
    flop = np.logspace(8, 10, 10)          # all compute-bound: overhead barely matters
    measured = flop / (1e11 * 0.6) * np.exp(rng.normal(0, 0.02, flop.size))

    def predict(p):
        return flop / (1e11 * p["eff"]) + p["overhead_s"]

    free = fit_log_latency(["eff", "overhead_s"], [0.3, 1e-5], predict, measured, name="t", model="m",
                           lower=[1e-3, 1e-9], upper=[2, 1])
    held = fit_log_latency(["eff", "overhead_s"], [0.3, 1e-5], predict, measured, name="t", model="m",
                           lower=[1e-3, 1e-9], upper=[2, 1], prior_sigma=1.0, data_sigma=0.02)
    # the data pin eff (to ~2%) either way
    assert held.parameters["eff"] == pytest.approx(0.6, rel=0.05)
    # overhead (<< 2 ms compute) is nearly unconstrained: the prior keeps it within a factor e^2
    # of its 10 µs start, and the residuals reported are the data's only
    assert 1e-5 / np.e**2 < held.parameters["overhead_s"] < 1e-5 * np.e**2
    assert len(held.residuals) == flop.size and "prior" in held.model
    assert free.r2 >= held.r2 - 0.01


def test_saturated_sweep_leaves_w_half_unconstrained():
    # every size at the same 80 % efficiency: the knee is not in the data (the AMD run's 7.6e-9 ± 0)
    from chipcal.calibrate.fits import fit_saturating_efficiency

    fit = fit_saturating_efficiency([1e9, 1e10, 1e11], [0.8, 0.8, 0.8])
    assert fit.parameters["e_max"] == pytest.approx(0.8, rel=1e-3)
    assert "w_half_flop" in fit.unconstrained


def test_parameter_the_data_cannot_move_is_held_at_its_prior():
    import numpy as np

    from chipcal.calibrate.fits import fit_log_latency

    measured = [2.0, 4.0, 6.0]
    work = np.array([1.0, 2.0, 3.0])
    # t = a * work; b has no effect at all; the truth is a = 2
    fit = fit_log_latency(["a", "b"], [1.0, 5.0], lambda v: v["a"] * work, measured, name="t", model="t = a w",
                          lower=[1e-3, 1e-3], upper=[1e3, 1e3], prior_sigma=1.0, prior_centre=[1.0, 5.0],
                          data_sigma=0.01)
    assert fit.parameters["a"] == pytest.approx(2.0, rel=0.05)
    assert fit.parameters["b"] == pytest.approx(5.0) and "b" in fit.unconstrained


def test_parameter_that_runs_into_its_bound_falls_back_to_its_prior():
    import numpy as np

    from chipcal.calibrate.fits import fit_log_latency

    work = np.array([1.0, 2.0, 3.0])
    # the data want a = 2, but the upper bound is 1.5: the fit would sit on the bound
    fit = fit_log_latency(["a"], [1.0], lambda v: v["a"] * work, [2.0, 4.0, 6.0], name="t", model="t = a w",
                          lower=[1e-3], upper=[1.5], prior_sigma=10.0, prior_centre=[1.0])
    assert "a" in fit.unconstrained and "bound" in fit.unconstrained["a"]
    assert fit.parameters["a"] == pytest.approx(1.0)


def test_a_parameter_without_a_prior_is_fitted_freely_beside_one_with_a_prior():
    work = np.array([1.0, 2.0, 3.0])
    # t = a * work with a = 200, far from its start 1: with a prior of width 1 on it the fit would be
    # pulled below 200 (prior residual ln 200 = 5.3 against data sigma 0.01); without one it is not.
    # b has no effect and keeps its prior.
    fit = fit_log_latency(["a", "b"], [1.0, 5.0], lambda v: v["a"] * work, [200.0, 400.0, 600.0], name="t",
                          model="t = a w", lower=[1e-3, 1e-3], upper=[1e3, 1e3], prior_sigma=[None, 1.0],
                          prior_centre=[1.0, 5.0], data_sigma=0.01)
    assert fit.parameters["a"] == pytest.approx(200.0, rel=1e-4) and "a" not in fit.unconstrained
    assert fit.parameters["b"] == pytest.approx(5.0) and "b" in fit.unconstrained
    assert "b 1" in fit.model and "a 1" not in fit.model


def test_chains_give_back_the_switch_cost_and_memory_factor_they_were_made_with(tmp_path):
    """Chain timings made by the predictor with a 10 µs switch cost and memory time x 1.6 in a
    network: the switch fit recovers both (a memory-bound batch-8 chain beside overhead-bound
    batch-1 ones separates them). Exact timings, so what is left is the prior's pull of the factor
    towards 1 (log residual ln 1.6 = 0.47 at width 1 against the 5 % data floor), which the switch
    cost makes up for: within a few percent."""
    import dataclasses
    import json

    from recorded import MACHINES, recorded_chip

    from chipcal.calibrate.document import CalibrationDocument
    from chipcal.calibrate.layer_fits import as_timed, fit_network_costs
    from chipcal.measure.layers import LayerObservation, default_chains
    from chipcal.measure.timing import Measurement
    from chipcal.model.mapping.params import default_params
    from chipcal.model.workload import characterize

    doc = CalibrationDocument.from_dict(
        json.loads((MACHINES / "amd-epyc-avx2-2vcpu" / "calibration-quick.json").read_text()))
    chip = recorded_chip(tmp_path, "amd-epyc-avx2-2vcpu", doc)
    params = default_params("cpu")
    truth = dataclasses.replace(params, switch_overhead_s=10e-6, network_memory_factor=1.6)
    chains = []
    for case in default_chains():
        module, inputs = case.build()
        workload = characterize(module, inputs, model_name=case.label, fuse=False)
        t = as_timed(workload, chip, "fp32", truth).latency_s
        chains.append(LayerObservation(case.label, case.op_class, workload, Measurement.from_samples([t] * 5)))
    fitted, fit = fit_network_costs(chains, chip, "fp32", params)
    assert fitted.network_memory_factor == pytest.approx(1.6, rel=0.03)
    assert fitted.switch_overhead_s == pytest.approx(10e-6, rel=0.05)
    assert not fit.unconstrained


def test_gpu_suite_adds_a_batch_32_twin_of_every_micro_layer_and_a_cpu_a_batch_8_twin_of_some():
    from chipcal.measure.layers import CPU_LAYER_BATCH, GPU_LAYER_BATCH, default_cases
    from chipcal.model.workload import characterize

    cpu, gpu = default_cases(), default_cases(device_kind="cuda")
    single = [c for c in cpu if c.batch == 1]
    assert [c.label for c in gpu] == [c.label for c in single] + [f"{c.label} b{GPU_LAYER_BATCH}" for c in single]
    twins = [f"{c.label} b{CPU_LAYER_BATCH}" for c in single if c.cpu_batched]
    assert [c.label for c in cpu] == [c.label for c in single] + twins
    # every op class has at least one batched case
    assert {c.op_class for c in single} == {c.op_class for c in single if c.cpu_batched}
    # conv3x3 16->16 on 56x56, padding 1: 56·56·16·16·9 = 7,225,344 MACs per sample
    first, gpu_twin, cpu_twin = gpu[0], gpu[len(single)], cpu[len(single)]
    assert characterize(*first.build(), model_name="a", fuse=False).macs == 7_225_344
    assert characterize(*gpu_twin.build(), model_name="b", fuse=False).macs == 32 * 7_225_344
    assert characterize(*cpu_twin.build(), model_name="c", fuse=False).macs == 8 * 7_225_344


def test_host_share_goes_into_the_gpu_overheads_only():
    from chipcal.calibrate.layer_fits import host_in_overheads
    from chipcal.model.mapping.params import default_params

    gpu, cpu = default_params("gpu"), default_params("cpu")
    base, floor = host_in_overheads(gpu, Device("cuda", 0), 30e-6)
    assert base.host_overhead_s == 0.0 and floor == 30e-6
    assert host_in_overheads(cpu, CPU, 7e-6) == (cpu, 0.0)


def test_gemm_sweep_rescales_every_mac_class_prior_and_nothing_else():
    """The CPU defaults assume a large GEMM attains 0.8 of the physics peak. A sweep reaching
    1.2 of it (a clock 1.5x above the assumed one) moves every MAC class by 1.2 / 0.8 = 1.5:
    conv 0.65 -> 0.975, depthwise 0.25 -> 0.375, matmul 0.8 -> 1.2; the vector classes
    (norm 0.3, pool 0.3) stay. No sweep, or an e_max the sweep cannot pin, changes nothing."""
    from chipcal.calibrate.layer_fits import gemm_informed
    from chipcal.model.mapping.params import default_params

    cpu = default_params("cpu")
    assert cpu.efficiency["matmul"] == 0.8 and cpu.efficiency["conv"] == 0.65
    sweep = FitResult(name="gemm_efficiency_fp32", model="", parameters={"e_max": 1.2, "w_half_flop": 1e6},
                      stderr={}, residuals=(), residual_space="log", r2=1.0, n=8)
    eff = gemm_informed(cpu, sweep).efficiency
    assert eff["conv"] == pytest.approx(0.975) and eff["depthwise"] == pytest.approx(0.375)
    assert eff["matmul"] == pytest.approx(1.2) and eff["attention"] == pytest.approx(0.75)
    assert eff["norm"] == 0.3 and eff["pool"] == 0.3
    assert gemm_informed(cpu, None) == cpu
    loose = FitResult(name="gemm_efficiency_fp32", model="", parameters={"e_max": 1.2, "w_half_flop": 1e6},
                      stderr={}, residuals=(), residual_space="log", r2=1.0, n=8, unconstrained={"e_max": "at its bound"})
    assert gemm_informed(cpu, loose) == cpu


def test_a_parameter_at_its_physical_ceiling_is_held_there_not_at_its_prior():
    import numpy as np

    from chipcal.calibrate.fits import fit_log_latency

    work = np.array([1.0, 2.0, 3.0])
    # the data want a = 2 (t = 2w); the ceiling is 1.5: held at 1.5 (the prior centre 1 is the far side).
    # Without `ceiling` the same fit falls back to the prior (the test above).
    fit = fit_log_latency(["a"], [1.0], lambda v: v["a"] * work, [2.0, 4.0, 6.0], name="t", model="t = a w",
                          lower=[1e-3], upper=[1.5], prior_sigma=10.0, prior_centre=[1.0], ceiling=[True])
    assert fit.parameters["a"] == pytest.approx(1.5)
    assert "held there" in fit.unconstrained["a"]
    # a ceiling the data do not reach changes nothing: t = 1.2 w fits to 1.2
    fit = fit_log_latency(["a"], [1.0], lambda v: v["a"] * work, [1.2, 2.4, 3.6], name="t", model="t = a w",
                          lower=[1e-3], upper=[1.5], prior_sigma=10.0, prior_centre=[1.0], ceiling=[True],
                          data_sigma=0.01)
    assert fit.parameters["a"] == pytest.approx(1.2, rel=1e-3) and "a" not in fit.unconstrained


@pytest.mark.usefixtures("characterize_once")
@pytest.mark.parametrize(("chip_name", "precision"), [("xeon-platinum-8480-plus", "fp32"),
                                                      ("xeon-platinum-8480-plus", "bf16"),
                                                      ("h100-sxm5", "fp32"), ("h100-sxm5", "fp16")])
def test_a_micro_layer_reads_the_parameters_of_its_own_classes_only(chip_name, precision):
    """The layer fit reuses a micro-layer's prediction while only other classes' parameters move
    (layer_fits.fit_layer_params): that holds only if its prediction reads no class parameter but
    those of its subgraphs' classes and a cast kernel's (elementwise). Every other class's
    efficiency, tensor-core efficiency and overhead x3: each micro-layer predicted exactly as before."""
    import dataclasses

    from test_mapping import REGISTRY

    from chipcal.calibrate.layer_fits import as_timed
    from chipcal.measure.layers import default_cases
    from chipcal.model.mapping.params import default_params
    from chipcal.model.workload import characterize

    chip = REGISTRY.get(chip_name)
    params = default_params(chip.kind)
    params = dataclasses.replace(params, tensor_efficiency=params.tensor_efficiency or dict(params.efficiency))
    for case in (c for c in default_cases() if c.batch == 1):
        workload = characterize(*case.build(), model_name=case.label, fuse=False)
        own = {sg.op_class for sg in workload.subgraphs} | {"elementwise"}
        others = [c for c in params.efficiency if c not in own]
        assert others, case.label

        def tripled(table, others=others):
            return {c: v * 3 if c in others else v for c, v in table.items()}

        moved = dataclasses.replace(params, efficiency=tripled(params.efficiency),
                                    tensor_efficiency=tripled(params.tensor_efficiency),
                                    overhead_s=tripled(params.overhead_s))
        assert as_timed(workload, chip, precision, moved).latency_s == as_timed(workload, chip, precision, params).latency_s, \
            case.label


def test_the_overhead_grid_reads_lines_off_their_chords_and_predicts_around_a_kink():
    """_along_overhead: latencies affine in the overhead (a CPU layer: 3 kernels of the class, 2 ms
    of work) are predicted at the ends and the middle only, and every other point equals the
    line worked out by hand. A host-bound kink (max(host, device), as a GPU's queue) on the grid's
    5th point (1e-5 s): flat on the first half, a line on the second, so 5 predictions (the ends,
    the middle, the middle of each half); a kink between two points (1/77000 s, between the 5th
    and the 6th) leaves the second half's chord off at its middle, so its quarters are predicted
    too: 7. Every value is the function's, the kinked ones included."""
    from chipcal.calibrate.layer_fits import _along_overhead

    overheads = list(np.geomspace(1e-8, 1e-2, 9))
    asked = []

    def cpu(ov):
        asked.append(ov)
        return np.array([2e-3 + 3 * ov, 5e-4 + ov])

    got = _along_overhead(cpu, overheads)
    assert len(asked) == 3
    for ov, lat in zip(overheads, got, strict=True):
        assert lat == pytest.approx([2e-3 + 3 * ov, 5e-4 + ov], rel=1e-12)

    for per_op, predictions in ((100, 5), (77, 7)):
        asked.clear()

        def gpu(ov, per_op=per_op):
            asked.append(ov)
            return np.array([max(1e-3, per_op * ov)])       # host-bound past 1e-3 / per_op s per op

        got = _along_overhead(gpu, overheads)
        assert len(asked) == predictions
        assert [g[0] for g in got] == pytest.approx([max(1e-3, per_op * ov) for ov in overheads], rel=1e-12)
