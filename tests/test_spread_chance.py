"""The chance that a group has spread under a Beta posterior (`coba_trl.allocation.spread`), and the skipper that
skips by it (`skip_rule="spread_chance"`)."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coba_trl.allocation.spread import beta_power_mean, population_prior, spread_chance
from coba_trl.rounds.skipping import SpreadChanceSkipper


def test_the_beta_moments_are_exact():
    assert beta_power_mean(np.array([1.0]), np.array([1.0]), 3)[0] == pytest.approx(1 / 4)  # E[p^3], p uniform
    rng = np.random.default_rng(0)
    draws = rng.beta(2.5, 7.0, size=400_000)
    assert beta_power_mean(np.array([2.5]), np.array([7.0]), 8)[0] == pytest.approx(np.mean(draws**8), rel=0.02)


def test_a_uniform_prior_gives_the_known_chance_and_one_completion_never_has_spread():
    # p uniform: E[p^n] = E[(1 - p)^n] = 1 / (n + 1), so a group of 8 has spread with chance 7 / 9.
    assert spread_chance([0], [0], 8)[0] == pytest.approx(7 / 9)
    assert spread_chance([3], [5], 1)[0] == pytest.approx(0.0)


@given(st.integers(0, 16), st.integers(0, 16), st.integers(2, 32))
def test_the_chance_is_a_probability_and_symmetric_in_successes_and_failures(successes, failures, group_size):
    chance = spread_chance([successes], [successes + failures], group_size, (0.7, 1.3))[0]
    mirrored = spread_chance([failures], [successes + failures], group_size, (1.3, 0.7))[0]
    assert 0.0 <= chance <= 1.0 and chance == pytest.approx(mirrored, abs=1e-12)


def test_a_prompt_that_failed_among_prompts_that_mostly_fail_is_unlikely_to_spread():
    # 60% of prompts never solved, the rest half the time: the fitted prior sits low, so 0 of 8 says "settled".
    successes = np.array([0] * 60 + [4] * 40)
    prior = population_prior(successes, np.full(100, 8))
    assert prior[0] / sum(prior) == pytest.approx(0.2, abs=0.01)
    assert spread_chance([0], [8], 8, prior)[0] < 0.35 < spread_chance([4], [8], 8, prior)[0]
    assert population_prior([0], [8]) == (1.0, 1.0)  # one prompt: no population yet
    a, b = population_prior([0] * 30, [8] * 30)  # every prompt failed: a strong prior near 0, not a point mass
    assert a + b == pytest.approx(50) and 0 < a / (a + b) < 0.01


def test_the_skipper_never_skips_a_prompt_it_has_not_seen_and_skips_a_settled_one_up_to_the_cap():
    skipper = SpreadChanceSkipper(group_size=8, min_chance=0.5, max_skips_in_a_row=2)
    assert not skipper.visit("new")
    ids = [f"hard{i}" for i in range(6)] + [f"mixed{i}" for i in range(4)]
    skipper.observe_round(ids, None, [0] * 6 + [4] * 4, [8] * 10)
    assert [skipper.visit("hard0") for _ in range(6)] == [True, True, False, True, True, False]
    assert not any(skipper.visit("mixed0") for _ in range(5))
    assert skipper.metrics()["coba/skip_prior_mean"] == pytest.approx(0.2, abs=0.01)


def test_the_skippers_state_round_trips_through_json():
    skipper = SpreadChanceSkipper(group_size=4)
    skipper.observe_round([("a", 1), "b", "c"], None, [0, 2, 4], [4, 4, 4])
    skipper.visit(("a", 1))
    restored = SpreadChanceSkipper(group_size=4)
    restored.load_state_dict(json.loads(json.dumps(skipper.state_dict())))
    assert restored.state_dict() == skipper.state_dict()
    assert [restored.visit(("a", 1)) for _ in range(4)] == [skipper.visit(("a", 1)) for _ in range(4)]


def _level_skipper() -> SpreadChanceSkipper:
    """A skipper under the neighbourhood prior that has seen two never-solved prompts of level "hard" and two
    half-solved ones of level "mid"."""
    skipper = SpreadChanceSkipper(group_size=8, neighbour_column="level")
    for uid, level in (("h0", "hard"), ("h1", "hard"), ("m0", "mid"), ("m1", "mid")):
        skipper.visit(uid, {"level": level})
    skipper.observe_round(["h0", "h1", "m0", "m1"], None, [0, 0, 4, 4], [8, 8, 8, 8])
    return skipper


def test_the_neighbourhood_prior_skips_an_unseen_prompt_of_a_level_that_fails_and_not_one_that_spreads():
    skipper = _level_skipper()
    assert skipper.visit("h9", {"level": "hard"})  # never seen, but its level never succeeds
    assert not skipper.visit("m9", {"level": "mid"})
    assert not skipper.visit("x0", {"level": "new"})  # a level with no prompt seen: no prior to judge it by
    assert not skipper.visit("n0", {"level": None})  # no neighbourhood at all
    population = SpreadChanceSkipper(group_size=8)  # the population prior never skips an unseen prompt
    population.observe_round(["h0", "h1", "m0", "m1"], None, [0, 0, 4, 4], [8, 8, 8, 8])
    assert not population.visit("h9", {"level": "hard"})


def test_the_neighbourhood_prior_brings_a_levels_prompts_back_once_the_level_starts_succeeding():
    skipper = _level_skipper()
    assert skipper.visit("h9", {"level": "hard"})
    skipper.observe_round(["h0", "h1"], None, [3, 4], [8, 8])  # the level moves
    assert not skipper.visit("h9", {"level": "hard"})
    assert not skipper.visit("h0", {"level": "hard"})


def test_the_neighbourhood_skippers_state_round_trips_through_json():
    skipper = _level_skipper()
    skipper.visit("h9", {"level": "hard"})
    restored = SpreadChanceSkipper(group_size=8, neighbour_column="level")
    restored.load_state_dict(json.loads(json.dumps(skipper.state_dict())))
    assert restored.state_dict() == skipper.state_dict()
    visits = [("h9", "hard"), ("h8", "hard"), ("m8", "mid"), ("h7", "hard")]
    assert [restored.visit(u, {"level": lv}) for u, lv in visits] == [
        skipper.visit(u, {"level": lv}) for u, lv in visits
    ]
