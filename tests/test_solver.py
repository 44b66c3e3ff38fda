"""The fast greedy solver returns exactly the heap's counts, and the greedy total equals the DP optimum."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_trl.allocation.reference import dp_allocation, heap_greedy
from coba_trl.allocation.sharing import round_robin
from coba_trl.allocation.solver import greedy_counts
from coba_trl.allocation.values import (
    CoBAGains,
    KnapsackGains,
    canonical_pass_rate,
    coba_value,
    knapsack_value,
)


def coba_problem(rates, alpha, beta, tau):
    levels, group = np.unique(canonical_pass_rate(np.asarray(rates, dtype=np.float64)), return_inverse=True)
    return CoBAGains(levels, alpha, beta, tau), group


def knapsack_problem(rates):
    levels, group = np.unique(np.asarray(rates, dtype=np.float64), return_inverse=True)
    return KnapsackGains(levels), group


tied_rates = st.lists(st.integers(0, 16).map(lambda k: k / 16), min_size=1, max_size=40)
any_rates = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30)
effective_rates = st.lists(
    st.integers(1, 15).map(lambda k: k / 16) | st.floats(1e-6, 1 - 1e-6), min_size=1, max_size=30
)


@settings(max_examples=150, deadline=None)
@given(
    rates=tied_rates | any_rates,
    alpha=st.floats(1.0, 30.0),
    kappa_gap=st.floats(1.0, 30.0),
    tau=st.floats(0.5, 20.0),
    floor=st.integers(1, 4),
    units=st.integers(0, 200),
    fraction=st.floats(0.0, 1.2),
)
def test_fast_coba_solver_equals_heap(rates, alpha, kappa_gap, tau, floor, units, fraction):
    gains, group = coba_problem(rates, alpha, kappa_gap, tau)
    total = int(fraction * len(rates) * units)
    fast = greedy_counts(gains, group, floor, units, total)
    assert fast.tolist() == heap_greedy(gains, group, floor, units, total).tolist()
    assert fast.sum() == min(total, len(rates) * units)


@settings(max_examples=150, deadline=None)
@given(rates=effective_rates, floor=st.integers(1, 4), units=st.integers(0, 200), fraction=st.floats(0.0, 1.2))
def test_fast_knapsack_solver_equals_heap(rates, floor, units, fraction):
    gains, group = knapsack_problem(rates)
    total = int(fraction * len(rates) * units)
    fast = greedy_counts(gains, group, floor, units, total)
    assert fast.tolist() == heap_greedy(gains, group, floor, units, total).tolist()


def test_ties_go_to_the_lower_prompt_index():
    rates = [0.5] * 8
    gains, group = coba_problem(rates, 5.5, 5.5, 3.0)
    assert greedy_counts(gains, group, 2, 126, 11).tolist() == [2, 2, 2, 1, 1, 1, 1, 1]


def test_p_and_one_minus_p_tie_exactly_when_alpha_equals_beta():
    rates = [0.8, 0.3, 0.2, 0.7]
    gains, group = coba_problem(rates, 5.5, 5.5, 4.0)
    keys = gains.key(group, np.full(4, 7))
    assert keys[0] == keys[2] and keys[1] == keys[3]
    counts = greedy_counts(gains, group, 2, 126, 41)
    assert counts.tolist() == heap_greedy(gains, group, 2, 126, 41).tolist()
    assert counts[0] >= counts[2] and counts[1] >= counts[3]


def test_zero_density_prompts_only_take_what_nobody_else_can():
    gains, group = coba_problem([0.01, 0.99, 0.5], 400.0, 2.0, 3.0)
    assert not np.isfinite(gains.log_scale[0])
    for total in (5, 10, 13, 17):
        fast = greedy_counts(gains, group, 2, 5, total)
        assert fast.tolist() == heap_greedy(gains, group, 2, 5, total).tolist()
    assert greedy_counts(gains, group, 2, 5, 10).tolist() == [0, 5, 5]


def test_budget_far_beyond_the_gains_precision_stays_exact():
    rates = np.repeat([0.5, 0.25, 0.1], [3, 2, 4])
    gains, group = coba_problem(rates, 3.0, 8.0, 3.0)
    fast = greedy_counts(gains, group, 2, 5000, 30000)
    assert fast.tolist() == heap_greedy(gains, group, 2, 5000, 30000).tolist()


def test_key_is_elementwise_bitwise_independent_of_array_length():
    rng = np.random.default_rng(0)
    gains, _ = coba_problem(rng.random(300), 4.2, 6.8, 7.0)
    index, budget = rng.integers(0, len(gains), 1000), rng.integers(0, 500, 1000)
    batch = gains.key(index, budget)
    single = [gains.key(index[i : i + 1], budget[i : i + 1])[0] for i in range(1000)]
    assert np.array_equal(batch, single)


def test_keys_never_increase_with_budget():
    rng = np.random.default_rng(1)
    budgets = np.arange(1, 3000)
    for gains in (coba_problem(rng.random(50), 2.5, 8.5, 3.0)[0], knapsack_problem(rng.uniform(1e-4, 1, 50))[0]):
        for g in range(len(gains)):
            keys = gains.key(np.full(budgets.size, g), budgets)
            assert np.all(np.diff(keys) <= 0)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_value_equals_dp_optimum(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        m, floor, units = int(rng.integers(1, 7)), int(rng.integers(1, 4)), int(rng.integers(1, 12))
        total = int(rng.integers(0, m * units + 3))
        budgets = floor + np.arange(units + 1)
        rates = rng.integers(1, 16, m) / 16 if rng.random() < 0.5 else rng.uniform(0.01, 0.99, m)
        alpha = float(rng.uniform(1, 10))
        for value, (gains, group) in (
            (lambda b, p, a=alpha: coba_value(b, p, a, 11 - a, 5.0), coba_problem(rates, alpha, 11 - alpha, 5.0)),
            (knapsack_value, knapsack_problem(rates)),
        ):
            table = value(budgets[None, :], rates[:, None])
            best, _ = dp_allocation(table - table[:, :1], total)
            counts = greedy_counts(gains, group, floor, units, total)
            achieved = float((table[np.arange(m), counts] - table[:, 0]).sum())
            assert achieved == pytest.approx(best, rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(room=st.lists(st.integers(0, 20), max_size=15), amount=st.integers(0, 200))
def test_round_robin_equals_cycling(room, amount):
    room = np.array(room, dtype=np.int64)
    expected, left = np.zeros_like(room), amount
    while left > 0 and np.any(expected < room):
        for i in range(room.size):
            if left > 0 and expected[i] < room[i]:
                expected[i] += 1
                left -= 1
    assert round_robin(room, amount).tolist() == expected.tolist()


def test_flat_gains_are_solved_exactly():
    gains, group = knapsack_problem([1e-20, 1e-20, 0.5, 3e-17])
    assert gains.log_high[0] == 0.0
    for total in (0, 3, 40, 250, 400):
        fast = greedy_counts(gains, group, 2, 100, total)
        assert fast.tolist() == heap_greedy(gains, group, 2, 100, total).tolist()
