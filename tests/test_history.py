"""PassRateHistory: pooled pass rates over the last `window` appearances, any hashable id, JSON state, and the
Beta-posterior estimate (successes + s * m) / (rollouts + s) on hand-computed cases."""

import copy
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_trl.allocation import PassRateHistory


def test_pooled_rate_over_the_last_window_appearances():
    history = PassRateHistory(window=2)
    history.update([7], [1], [4])
    history.update([7], [3], [4])
    assert history.pass_rates([7]).tolist() == [0.5]
    history.update([7], [8], [8])
    assert history.pass_rates([7]).tolist() == [11 / 12]


def test_unseen_is_nan_unless_a_prior_is_given():
    history = PassRateHistory()
    history.update(["a"], [2], [2])
    rates = history.pass_rates(["a", "b", "c"])
    assert rates[0] == 1.0 and np.isnan(rates[1:]).all()
    with_prior = history.pass_rates(["a", "b", "c"], prior=[0.1, 0.3, np.nan])
    assert with_prior[:2].tolist() == [1.0, 0.3] and math.isnan(with_prior[2])


def test_len_contains_and_numpy_ids():
    history = PassRateHistory()
    history.update(np.array([3, 4]), np.array([0, 1]), np.array([2, 2]))
    assert len(history) == 2 and 3 in history and np.int64(4) in history and 5 not in history


def test_repeated_ids_in_one_update_are_one_appearance():
    history = PassRateHistory(window=1)
    history.update([1, 1], [1, 3], [2, 4])
    assert history.pass_rates([1]).tolist() == [4 / 6]


def test_state_round_trips_through_json_with_id_types():
    history = PassRateHistory(window=3)
    history.update([1, "1", (2, "x")], [1, 2, 0], [4, 4, 2])
    history.update([1], [4], [4])
    restored = PassRateHistory(window=3)
    restored.load_state_dict(json.loads(json.dumps(history.state_dict())))
    ids = [1, "1", (2, "x"), 2]
    np.testing.assert_array_equal(restored.pass_rates(ids), history.pass_rates(ids))
    assert 1 in restored and "1" in restored and restored.pass_rates([1]).tolist() == [5 / 8]


@pytest.mark.parametrize(
    ("ids", "successes", "rollouts", "message"),
    [
        ([1, 2], [1], [2, 2], "equal length"),
        ([1], [3], [2], "exceed"),
        ([1], [-1], [2], "successes"),
        ([1], [1], [-2], "rollouts"),
        ([1], [0.5], [2], "whole numbers"),
    ],
)
def test_bad_updates_are_value_errors(ids, successes, rollouts, message):
    with pytest.raises(ValueError, match=message):
        PassRateHistory().update(ids, successes, rollouts)


def test_bad_window_is_a_value_error():
    with pytest.raises(ValueError, match="window"):
        PassRateHistory(window=0)


def _round_of_four(prior_strength: float) -> PassRateHistory:
    """a 0/2, b 2/2, c 3/4, d 1/4: the round's mean pass rate over prompts is (0 + 1 + 0.75 + 0.25) / 4 = 0.5."""
    history = PassRateHistory(prior_strength=prior_strength)
    history.update(["a", "b", "c", "d"], [0, 2, 3, 1], [2, 2, 4, 4])
    return history


def test_prior_strength_zero_is_the_released_empirical_rate():
    history = _round_of_four(0.0)
    assert history.round_mean == 0.5
    assert history.pass_rates(["a", "b", "c", "d"]).tolist() == [0.0, 1.0, 0.75, 0.25]


def test_beta_posterior_mean_shrinks_towards_the_round_mean():
    rates = _round_of_four(2.0).pass_rates(["a", "b", "c", "d", "e"])
    # (0 + 2 * 0.5) / (2 + 2), (2 + 1) / 4, (3 + 1) / (4 + 2), (1 + 1) / 6; e is unseen and has no prior.
    np.testing.assert_allclose(rates[:4], [0.25, 0.75, 4 / 6, 2 / 6])
    assert math.isnan(rates[4])


def test_offline_prior_is_the_prior_mean_where_a_prompt_has_one():
    history = _round_of_four(2.0)
    rates = history.pass_rates(["a", "b", "e", "f"], prior=[0.9, np.nan, 0.2, np.nan])
    # a: (0 + 2 * 0.9) / 4; b has no offline prior -> round mean 0.5: (2 + 1) / 4; e unseen -> its prior 0.2.
    np.testing.assert_allclose(rates[:3], [0.45, 0.75, 0.2])
    assert math.isnan(rates[3])
    assert _round_of_four(0.0).pass_rates(["a", "e"], prior=[0.9, 0.2]).tolist() == [0.0, 0.2]


def test_window_pools_counts_and_the_latest_round_sets_the_mean():
    history = PassRateHistory(window=2, prior_strength=1.0)
    history.update(["x", "y"], [1, 0], [4, 4])
    assert history.round_mean == 0.125
    history.update(["x"], [3], [4])
    assert history.round_mean == 0.75
    # x pools 4/8 over its two appearances; y keeps 0/4 from the first round.
    np.testing.assert_allclose(history.pass_rates(["x", "y"]), [(4 + 0.75) / 9, (0 + 0.75) / 5])
    assert [c.tolist() for c in history.counts(["x", "y", "z"])] == [[4, 0, 0], [8, 4, 0]]


def test_the_estimate_needs_no_round_mean_when_every_seen_prompt_has_an_offline_prior():
    history = PassRateHistory(prior_strength=4.0)
    assert history.pass_rates(["a"], prior=[0.3]).tolist() == [0.3]
    assert math.isnan(history.round_mean)


def test_round_mean_survives_the_state_and_old_states_rebuild_it():
    history = _round_of_four(2.0)
    restored = PassRateHistory(prior_strength=2.0)
    restored.load_state_dict(json.loads(json.dumps(history.state_dict())))
    assert restored.round_mean == 0.5
    old = history.state_dict()
    del old["round_mean"]  # saved before the prior strength existed: rebuilt from each prompt's latest appearance
    restored.load_state_dict(old)
    assert restored.round_mean == 0.5


def test_bad_prior_strength_is_a_value_error():
    with pytest.raises(ValueError, match="prior_strength"):
        PassRateHistory(prior_strength=-0.5)


ids = st.integers(0, 7)
rounds = st.lists(st.tuples(ids, st.integers(0, 4), st.integers(0, 4)), max_size=10).map(
    lambda rows: [(prompt_id, min(wins, tries), tries) for prompt_id, wins, tries in rows]
)


@settings(max_examples=300, deadline=None)
@given(
    window=st.integers(1, 3),
    prior_strength=st.sampled_from([0.0, 0.5, 2.0]),
    past=st.lists(rounds, max_size=5),
    screening=rounds,
    with_prior=st.booleans(),
)
def test_pass_rates_after_equals_updating_a_copy_bit_for_bit(window, prior_strength, past, screening, with_prior):
    # What a two-phase round estimates from its screening: the same numbers as the deep copy it replaces, duplicate
    # ids (one appearance with summed counts), zero-rollout rows and windows that drop old appearances included.
    history = PassRateHistory(window=window, prior_strength=prior_strength)
    for past_round in past:
        history.update(*([list(column) for column in zip(*past_round, strict=True)] if past_round else ([], [], [])))
    before = history.state_dict()
    prompt_ids, successes, rollouts = [list(c) for c in zip(*screening, strict=True)] if screening else ([], [], [])
    prior = [np.nan if i % 3 == 0 else i / 8 for i in prompt_ids] if with_prior else None
    copied = copy.deepcopy(history)
    copied.update(prompt_ids, successes, rollouts)
    try:
        expected = copied.pass_rates(prompt_ids, prior=prior)
    except ValueError as error:  # prior_strength > 0 and no prior mean: both refuse alike
        with pytest.raises(ValueError, match=re.escape(str(error))):
            history.pass_rates_after(prompt_ids, successes, rollouts, prior=prior)
    else:
        actual = history.pass_rates_after(prompt_ids, successes, rollouts, prior=prior)
        assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes()
    assert history.state_dict() == before  # nothing recorded


def test_pass_rates_after_checks_its_round_like_update():
    with pytest.raises(ValueError, match="exceed"):
        PassRateHistory().pass_rates_after([1], [3], [2])
