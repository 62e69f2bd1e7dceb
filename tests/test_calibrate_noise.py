"""A noisy host calibrates honestly (calibrate.noise): rounds are added while the noise exceeds
what the target allows and time is left; the accuracy the noise permits is stated; a validation
error no larger than it is flagged as explained by noise alone. Synthetic timings only."""

from __future__ import annotations

import numpy as np
import pytest

from chipcal.calibrate import flags, noise


def _model(round_medians, calls=3, spread=0.01):
    """Timings of one (model, batch): `calls` samples around each round's median."""
    samples = [m * (1 + spread * (i - 1)) for m in round_medians for i in range(calls)]
    return noise.RoundTimings(tuple(samples), tuple(round_medians))


def test_round_noise_is_half_the_spread_of_the_round_medians():
    quiet = [_model([0.100, 0.102]), _model([0.050, 0.0505])]
    assert noise.round_noise(quiet) == pytest.approx(np.median([0.01, 0.005]))   # (0.102/0.1 - 1)/2 = 1 %
    assert np.isnan(noise.round_noise([_model([0.1])]))                         # one round: no spread


def test_a_quiet_host_gets_no_extra_round():
    quiet = [_model([0.100, 0.101]), _model([0.200, 0.203])]
    assert noise.round_noise(quiet) < noise.allowed()
    assert not noise.another_round(quiet, rounds_done=2, round_s=10.0, left_s=100.0)


def test_a_noisy_host_gets_rounds_while_the_median_is_loose_and_time_is_left():
    # rounds 40 % apart (the Xeon VM: the same network up to 2x from one minute to the next)
    noisy = [_model([0.100, 0.140]), _model([0.200, 0.290])]
    assert noise.round_noise(noisy) > noise.allowed() and noise.median_ci(noisy) > noise.allowed()
    assert noise.another_round(noisy, rounds_done=2, round_s=10.0, left_s=100.0)
    assert not noise.another_round(noisy, rounds_done=2, round_s=10.0, left_s=9.0)      # no time for one
    assert not noise.another_round(noisy, rounds_done=noise.MAX_ROUNDS, round_s=1.0, left_s=100.0)


def test_rounds_stop_once_the_pooled_median_is_tight_enough():
    # the rounds still disagree (a slow first round), but many calls pin the pooled median down
    many = [noise.RoundTimings(tuple([0.140] * 5 + [0.100 + 1e-5 * i for i in range(60)]),
                               (0.140, 0.100, 0.1003))]
    assert noise.round_noise(many) > noise.allowed()
    assert noise.median_ci(many) < noise.allowed()
    assert not noise.another_round(many, rounds_done=3, round_s=1.0, left_s=100.0)


def test_the_verdict_says_what_the_noise_permits_and_whether_it_explains_the_error():
    noisy = [_model([0.100, 0.140]), _model([0.200, 0.290])]
    v = noise.verdict(noisy, base_rounds=2, rounds=5, median_abs_error=0.12)
    assert (v.rounds, v.added_rounds) == (5, 3)
    assert v.permitted == pytest.approx(max(noise.round_noise(noisy), noise.median_ci(noisy)))
    assert v.permitted > 0.12 and v.explained_by_noise
    # at p90 over the two models: half-spreads 0.20 and 0.225, by linear interpolation 0.2225
    v90 = noise.verdict(noisy, base_rounds=2, rounds=5, median_abs_error=0.12, p90_abs_error=0.25)
    assert noise.round_noise(noisy, 90) == pytest.approx(0.2225)
    assert v90.permitted_p90 == pytest.approx(max(0.2225, noise.median_ci(noisy, 90)))
    assert v90.permitted_p90 >= v90.permitted and v90.p90_explained_by_noise == (0.25 <= v90.permitted_p90)
    codes = {f.code for f in flags.noise_flags(v, 120.0, 0.12)}
    assert codes == {"noise_limits_accuracy", "error_within_noise"}
    quiet = [_model([0.100, 0.101], calls=20, spread=0.0005), _model([0.200, 0.2015], calls=20, spread=0.0005)]
    v = noise.verdict(quiet, base_rounds=2, rounds=2, median_abs_error=0.12)
    assert v.permitted < noise.allowed() and not v.explained_by_noise
    assert flags.noise_flags(v, 120.0, 0.12) == []


def _recorded(noise_rel, cis, median_abs_error, p90_abs_error=0.5, **noise_fields):
    """A recorded run's validation (the reference document's) with these noise figures, its
    median |error| as re-fitted, and model rows of median 1 s with these (low, high) CIs."""
    import dataclasses

    from recorded import reference_document

    from chipcal.calibrate.document import CalibrationDocument

    doc = CalibrationDocument.from_dict(reference_document())
    row = doc.observations.models[0]
    rows = [dataclasses.replace(row, median_s=1.0, ci_low_s=lo, ci_high_s=hi) for lo, hi in cis]
    validation = dataclasses.replace(doc.validation, noise_rel=noise_rel, median_abs_error=median_abs_error,
                                     p90_abs_error=p90_abs_error, **noise_fields)
    return validation, rows


def test_a_refit_says_whether_the_noise_explains_its_own_median():
    """A refit re-checks the noise verdict against its new median (refit.noise_rechecked). A run
    recorded before calibrate.noise kept its round noise and each model's CI: the median CI is the
    median of (high − low) / 2 / median over the models (here 0.10, 0.20, 0.05: 0.10), and what
    the noise permits the larger of it and the round noise (0.15)."""
    from chipcal.calibrate.refit import RECOMPUTED_FLAGS, noise_rechecked

    cis = [(0.9, 1.1), (0.8, 1.2), (0.95, 1.05)]
    within, rows = _recorded(0.15, cis, 0.12)
    checked = noise_rechecked(within, rows)
    assert checked.median_ci_rel == pytest.approx(0.10)
    assert checked.noise_permits == pytest.approx(0.15)
    assert checked.explained_by_noise is True
    # at p90: the CI half-widths' 90th percentile, 0.10 + 0.8 × (0.20 − 0.10) = 0.18, above the round noise
    assert checked.noise_permits_p90 == pytest.approx(0.18)
    assert checked.p90_explained_by_noise is False
    assert noise_rechecked(_recorded(0.15, cis, 0.12, p90_abs_error=0.17)[0], rows).p90_explained_by_noise is True
    beyond = noise_rechecked(_recorded(0.15, cis, 0.20)[0], rows)
    assert beyond.noise_permits == pytest.approx(0.15) and beyond.explained_by_noise is False
    # a run that worked the verdict out keeps what its noise permits; the verdict follows the new median
    judged, _ = _recorded(0.03, cis, 0.08, rounds=4, median_ci_rel=0.02, noise_permits=0.05, explained_by_noise=True)
    again = noise_rechecked(judged, rows)
    assert (again.noise_permits, again.median_ci_rel, again.explained_by_noise) == (0.05, 0.02, False)
    # the flag is worked out again, not copied from the run
    assert "error_within_noise" in RECOMPUTED_FLAGS
    assert flags.error_within_noise(0.12, 0.15, {}).code == "error_within_noise"
    assert flags.error_within_noise(0.20, 0.15, {}) is None


def test_a_refit_of_a_run_without_noise_figures_leaves_the_verdict_unknown():
    from chipcal.calibrate.refit import noise_rechecked

    validation, _ = _recorded(None, [], 0.12)
    assert noise_rechecked(validation, []) == validation
