"""PassRateHistory: pooled pass rates over the last `window` appearances, any hashable id, JSON state."""

import json
import math

import numpy as np
import pytest

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
