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
    codes = {f.code for f in flags.noise_flags(v, 120.0, 0.12)}
    assert codes == {"noise_limits_accuracy", "error_within_noise"}
    quiet = [_model([0.100, 0.101], calls=20, spread=0.0005), _model([0.200, 0.2015], calls=20, spread=0.0005)]
    v = noise.verdict(quiet, base_rounds=2, rounds=2, median_abs_error=0.12)
    assert v.permitted < noise.allowed() and not v.explained_by_noise
    assert flags.noise_flags(v, 120.0, 0.12) == []
