"""Allocator behaviour a trainer relies on: capability, invariants, uniform paths, paper mode, state, errors."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_trl.allocation import (
    CoBAAllocator,
    KnapsackAllocator,
    UniformAllocator,
    beta_parameters,
    build_allocator,
    coba_allocate,
    fill_to_budget,
    knapsack_value,
    psi,
)
from coba_trl.allocation.reference import dp_allocation, heap_greedy


@pytest.mark.parametrize(
    ("f_bar", "f_tilde", "alpha", "beta"),
    [(0.8, 0.80, 8.2, 2.8), (0.5, 0.50, 5.5, 5.5), (0.3, 0.12, 2.07, 8.93), (0.2, 0.05, 1.43, 9.57)],
)
def test_capability_table_of_section_3(f_bar, f_tilde, alpha, beta):
    assert psi(f_bar, 10.0) == pytest.approx(f_tilde, abs=0.005)
    a, b = beta_parameters(f_bar, 11.0, 10.0)
    assert (a, b) == (pytest.approx(alpha, abs=0.005), pytest.approx(beta, abs=0.005))
    grid = np.linspace(0.001, 0.999, 99_801)
    density = (a - 1) * np.log(grid) + (b - 1) * np.log(1 - grid)
    assert grid[np.argmax(density)] == pytest.approx(psi(f_bar, 10.0), abs=1e-4)


def test_psi_is_continuous_at_one_half():
    assert psi(0.5 - 1e-12, 10.0) == pytest.approx(psi(0.5 + 1e-12, 10.0), abs=1e-9)


def test_observe_drives_alpha_beta_with_window():
    allocator = CoBAAllocator(window=2)
    assert (allocator.alpha, allocator.beta) == (9.0, 2.0)
    allocator.observe([0.0, 0.5])
    assert allocator.metrics()["failure_rate"] == pytest.approx(0.75)
    allocator.observe([0.5, 1.0, 0.75])
    assert allocator.metrics()["failure_rate"] == pytest.approx(0.25)
    assert allocator.failure_rate == pytest.approx(0.5)
    assert (allocator.alpha, allocator.beta) == (pytest.approx(5.5), pytest.approx(5.5))
    assert allocator.alpha + allocator.beta == pytest.approx(11.0)


def test_all_unseen_is_the_uniform_split():
    counts = CoBAAllocator().allocate([np.nan] * 5, 17)
    assert counts.tolist() == [4, 4, 3, 3, 3]
    assert KnapsackAllocator().allocate([np.nan] * 5, 17).tolist() == [4, 4, 3, 3, 3]
    assert UniformAllocator().allocate([0.1, 0.9, 0.5, 0.0, 1.0], 17).tolist() == [4, 4, 3, 3, 3]


def test_budget_below_the_floors_is_the_uniform_split():
    assert CoBAAllocator(min_budget=4).allocate([0.5, 0.1, 0.9], 10).tolist() == [4, 3, 3]


history_like = st.lists(
    st.one_of(st.integers(0, 16).map(lambda k: k / 16), st.integers(0, 3).map(lambda k: k / 3), st.just(math.nan)),
    min_size=1,
    max_size=48,
)


@settings(max_examples=120, deadline=None)
@given(
    rates=history_like,
    per_prompt=st.floats(0.5, 140.0),
    kappa=st.sampled_from([3.0, 7.0, 11.0, 25.0]),
    observed=st.lists(st.integers(0, 16).map(lambda k: k / 16), max_size=10),
    caps=st.sampled_from([(1, 16), (2, 32), (2, 128), (4, 4)]),
    paper=st.booleans(),
)
def test_coba_counts_sum_to_budget_within_floor_and_cap(rates, per_prompt, kappa, observed, caps, paper):
    modes = dict(hard_threshold=0.0, easy_threshold=1.0, heap_fraction=1.0) if paper else {}
    allocator = CoBAAllocator(*caps, kappa=kappa, **modes)
    if observed:
        allocator.observe(observed)
    total = int(per_prompt * len(rates))
    counts = allocator.allocate(rates, total)
    assert counts.dtype == np.int64
    m, (low, high) = len(rates), caps
    if all(math.isnan(r) for r in rates) or total < m * low:
        assert counts.sum() == total and counts.max() - counts.min() <= 1
    else:
        assert counts.min() >= low and counts.max() <= high
        # the released single even pass can strand a few units at B_up; they are reported, and fill_to_budget
        # spends them wherever there is room
        assert counts.sum() == total - allocator.metrics()["unallocated"] <= m * high
        filled = fill_to_budget(counts, total, high)
        assert filled.sum() == min(total, m * high) and filled.max() <= high and (filled >= counts).all()


def test_the_released_even_pass_can_strand_a_unit_and_fill_to_budget_spends_it():
    allocator = CoBAAllocator(2, 128, kappa=3.0)
    counts = allocator.allocate([math.nan, math.nan, 0.125], 270)
    # heap: 211 of R = 264; step 6 shares the other 53 over [53, 53, 111] (weights 0.5, 0.5, 0.875): 14, 10 and 13
    # from the running remainder, then one even pass of 16 // 3 = 5 (+1 for the first) meets B_up at the third
    # prompt (room 4): one unit is left with nowhere to go in this group.
    assert counts.tolist() == [73, 68, 128] and allocator.metrics()["unallocated"] == 1
    assert fill_to_budget(counts, 270, 128).tolist() == [74, 68, 128]


@settings(max_examples=60, deadline=None)
@given(rates=history_like, per_prompt=st.floats(0.5, 140.0), caps=st.sampled_from([(1, 16), (2, 128)]))
def test_knapsack_counts_sum_to_budget_within_floor_and_cap(rates, per_prompt, caps):
    total = int(per_prompt * len(rates))
    counts = KnapsackAllocator(*caps).allocate(rates, total)
    if not all(math.isnan(r) for r in rates) and total >= len(rates) * caps[0]:
        assert counts.min() >= caps[0] and counts.max() <= caps[1]
        assert counts.sum() == min(total, len(rates) * caps[1])


def test_fast_and_heap_solvers_agree_inside_the_allocator():
    rng = np.random.default_rng(3)
    rates = rng.integers(0, 17, 256) / 16
    for alpha in (1.4, 5.5, 8.2):
        fast, _ = coba_allocate(rates, 4096, alpha, 11 - alpha, 2, 128)
        slow, _ = coba_allocate(rates, 4096, alpha, 11 - alpha, 2, 128, solver=heap_greedy)
        assert fast.tolist() == slow.tolist()


def test_higher_failure_rate_moves_budget_to_easier_prompts():
    rates = np.repeat([0.125, 0.375, 0.625, 0.875], 8)
    weak, strong = CoBAAllocator(), CoBAAllocator()
    weak.observe([0.1] * 8)
    strong.observe([0.9] * 8)
    weak_counts, strong_counts = weak.allocate(rates, 512), strong.allocate(rates, 512)
    assert weak.alpha > strong.alpha
    easy = rates > 0.5
    assert weak_counts[easy].sum() > strong_counts[easy].sum()
    assert (weak_counts * rates).sum() / 512 > (strong_counts * rates).sum() / 512


def test_paper_mode_sends_everything_through_the_heap():
    allocator = CoBAAllocator(hard_threshold=0.0, easy_threshold=1.0, heap_fraction=1.0, tau=5.0)
    allocator.observe([0.1, 0.3, 0.2])  # F_bar = 0.8: the density peaks at p = 0.8
    rates = np.array([0.0, 0.02, 0.3, 0.6, 0.8, 1.0])
    counts = allocator.allocate(rates, 96)
    metrics = allocator.metrics()
    assert metrics["heap_budget"] == 96 - 12 and metrics["n_explore"] == 6 and metrics["tau"] == 5.0
    assert counts.sum() == 96 and counts[4] == counts.max()


def test_released_bands_send_the_rest_to_very_hard_prompts():
    allocator = CoBAAllocator()
    counts = allocator.allocate([0.0, 0.0, 0.5, 0.5, 1.0], 100)
    metrics = allocator.metrics()
    assert metrics["n_very_hard"] == 2 and metrics["n_very_easy"] == 1
    assert metrics["heap_budget"] == math.floor(90 * (0.6 + 0.2 * (2 * 2 / 5)))
    assert counts[2] == counts[3] == 2 + 68 // 2  # the heap spends its whole budget on the two p = 0.5 prompts
    # The other 22 go to the very hard prompts from a *running* remainder (released code): the first takes
    # floor(22 * 1/2) = 11, the second floor(11 * 1/2) = 5, then an even pass splits the last 6 as 3 + 3.
    assert counts.tolist() == [2 + 11 + 3, 2 + 5 + 3, 36, 36, 2]


def test_budget_beyond_every_cap_fills_every_prompt():
    counts = CoBAAllocator(2, 8).allocate([0.0, 0.5, 1.0], 100)
    assert counts.tolist() == [8, 8, 8]


def test_knapsack_keeps_zero_value_prompts_at_the_floor_and_unseen_at_the_mean():
    allocator = KnapsackAllocator(2, 128)
    counts = allocator.allocate([0.0, 1.0, 0.5, np.nan, 0.25], 80)
    assert counts[0] == 2 and counts[1] == 2 and counts[3] == 16
    assert counts.sum() == 80


def test_knapsack_allocation_reaches_the_dp_optimum():
    rng = np.random.default_rng(5)
    budgets = 2 + np.arange(15)
    for _ in range(20):
        rates = rng.integers(0, 9, int(rng.integers(1, 7))) / 8
        total = int(rng.integers(2 * rates.size, 16 * rates.size + 1))
        counts = KnapsackAllocator(2, 16).allocate(rates, total)
        table = knapsack_value(budgets[None, :], rates[:, None])
        best, _ = dp_allocation(table - table[:, :1], total - 2 * rates.size)
        assert (table[np.arange(rates.size), counts - 2] - table[:, 0]).sum() == pytest.approx(best, abs=1e-12)


def test_knapsack_surplus_goes_to_unsolved_prompts():
    counts = KnapsackAllocator(2, 10).allocate([0.0, 0.5, 0.0, 1.0], 31)
    assert counts.tolist() == [10, 10, 9, 2]
    need_based = KnapsackAllocator(2, 128, need_based=True).allocate([0.0, 0.5, 0.0], 60)
    assert need_based[1] == 4 and need_based.tolist() == [28, 4, 28]


def test_metrics_report_the_capability_state():
    allocator = CoBAAllocator()
    metrics = allocator.metrics()
    assert {"alpha", "beta", "failure_rate", "failure_rate_smoothed", "tau"} <= set(metrics)
    assert math.isnan(metrics["tau"]) and math.isnan(metrics["failure_rate"])
    allocator.observe([0.25, 0.75])
    allocator.allocate([0.25, 0.75, 0.5], 30)
    assert 3.0 <= allocator.metrics()["tau"] <= 12.0
    assert all(isinstance(value, float) for value in allocator.metrics().values())


@pytest.mark.parametrize("name", ["coba", "knapsack", "uniform"])
def test_state_dict_round_trips_through_json(name):
    allocator = build_allocator(name, min_budget=2, max_budget=64, window=3)
    for rates in ([0.1, 0.2], [0.5, 0.5, 1.0], [0.9]):
        allocator.observe(rates)
    restored = build_allocator(name, min_budget=2, max_budget=64, window=3)
    restored.load_state_dict(json.loads(json.dumps(allocator.state_dict())))
    assert json.dumps(restored.metrics()) == json.dumps(allocator.metrics())
    probe = [0.3, np.nan, 0.9, 0.0]
    assert restored.allocate(probe, 40).tolist() == allocator.allocate(probe, 40).tolist()
    if name == "coba":
        assert (restored.alpha, restored.beta) == (allocator.alpha, allocator.beta)


def test_state_of_another_allocator_is_rejected():
    with pytest.raises(ValueError, match="knapsack"):
        CoBAAllocator().load_state_dict(KnapsackAllocator().state_dict())


def test_build_allocator_ignores_coba_options_for_baselines_and_names_bad_choices():
    assert isinstance(build_allocator("uniform", min_budget=2, max_budget=8, kappa=7.0), UniformAllocator)
    assert build_allocator("coba", min_budget=2, max_budget=8, kappa=7.0).tracker.kappa == 7.0
    with pytest.raises(ValueError, match="'grpo'.*coba"):
        build_allocator("grpo", min_budget=2, max_budget=8)
    with pytest.raises(ValueError, match="kapa"):
        build_allocator("coba", min_budget=2, max_budget=8, kapa=7.0)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"min_budget": 0}, "min_budget"),
        ({"min_budget": 9, "max_budget": 8}, "min_budget"),
        ({"max_budget": 2.5}, "max_budget"),
        ({"kappa": 2.0}, "kappa"),
        ({"window": 0}, "window"),
        ({"gamma": -1.0}, "gamma"),
        ({"tau": 0.0}, "tau"),
        ({"heap_fraction": 1.5}, "heap_fraction"),
        ({"hard_threshold": -0.1}, "hard_threshold"),
        ({"hard_threshold": 0.5, "easy_threshold": 0.4}, "hard_threshold"),
        ({"easy_threshold": math.nan}, "easy_threshold"),
    ],
)
def test_bad_configuration_is_a_value_error_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        CoBAAllocator(**kwargs)


@pytest.mark.parametrize(
    ("rates", "total", "argument"),
    [
        ([0.5, math.inf], 10, "pass_rates"),
        ([0.5, 1.5], 10, "pass_rates"),
        ([-0.1], 10, "pass_rates"),
        ([[0.5]], 10, "pass_rates"),
        ([0.5], -1, "total_budget"),
        ([0.5], 10.0, "total_budget"),
        ([0.5], True, "total_budget"),
        ([], 4, "pass_rates"),
    ],
)
def test_bad_allocate_inputs_are_value_errors(rates, total, argument):
    for allocator in (CoBAAllocator(), KnapsackAllocator(), UniformAllocator()):
        with pytest.raises(ValueError, match=argument):
            allocator.allocate(rates, total)


def test_observe_rejects_nan_and_out_of_range():
    for bad in ([0.5, math.nan], [1.2], []):
        with pytest.raises(ValueError, match="step_pass_rates"):
            CoBAAllocator().observe(bad)


def test_allocation_imports_without_torch_or_trl():
    code = "import sys, coba_trl.allocation; print(sorted({'torch', 'trl', 'transformers'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
