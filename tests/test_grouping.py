"""Expansion / deal of groups over processes, and advantages over variable-size groups."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.trainer.utils import nanstd

from coba_trl.allocation import build_allocator
from coba_trl.rounds.advantages import group_advantages, zero_spread_groups
from coba_trl.rounds.grouping import deal_groups, distinct_groups, expected_length_weight, imbalance


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=24),
    num_ranks=st.sampled_from([1, 2, 3, 4, 8]),
    seed=st.integers(0, 1000),
)
def test_deal_gives_every_rank_the_same_rows_and_loses_none(sizes, num_ranks, seed):
    sizes = np.array(sizes)
    sizes[0] += (-sizes.sum()) % num_ranks  # make the total divisible
    weights = expected_length_weight(np.random.default_rng(seed).uniform(size=len(sizes)))
    dealt = deal_groups(sizes, num_ranks, weights)
    assert {len(rows) for rows in dealt} == {sizes.sum() // num_ranks}
    np.testing.assert_array_equal(np.bincount(np.concatenate(dealt), minlength=len(sizes)), sizes)
    assert all(np.all(np.diff(rows) >= 0) for rows in dealt)  # groups stay contiguous within a rank
    again = deal_groups(sizes, num_ranks, weights)
    assert all(np.array_equal(a, b) for a, b in zip(dealt, again, strict=True))


def test_one_rank_keeps_the_grpo_row_order():
    (rows,) = deal_groups(np.array([3, 1, 2]), 1)
    np.testing.assert_array_equal(rows, [0, 0, 0, 1, 2, 2])


def _in_prompt_order(sizes, num_ranks):
    """GRPO's per-process slices: the groups in prompt order, cut into equal contiguous slices."""
    return np.split(np.repeat(np.arange(len(sizes)), sizes), num_ranks)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    num_ranks=st.sampled_from([2, 3, 4, 8]),
    seed=st.integers(0, 1000),
)
def test_a_group_is_split_only_at_a_boundary_and_tokens_are_never_less_balanced_than_prompt_order(
    sizes, num_ranks, seed
):
    sizes = np.array(sizes)
    sizes[0] += (-sizes.sum()) % num_ranks
    weights = expected_length_weight(np.random.default_rng(seed).uniform(size=len(sizes)))
    dealt = deal_groups(sizes, num_ranks, weights)
    ranks_of = [[rank for rank, rows in enumerate(dealt) if np.any(rows == group)] for group in range(len(sizes))]
    assert all(ranks == list(range(ranks[0], ranks[-1] + 1)) for ranks in ranks_of)  # consecutive ranks
    # at most one group split at each boundary: each process prefills its whole groups and at most the two cut ones
    boundaries = [rank for ranks in ranks_of for rank in ranks[1:]]
    assert len(boundaries) == len(set(boundaries)) <= num_ranks - 1
    assert sum(distinct_groups(dealt)) <= len(sizes) + num_ranks - 1
    assert imbalance(dealt, weights) <= imbalance(_in_prompt_order(sizes, num_ranks), weights) + 1e-12


@pytest.mark.parametrize("num_ranks", [2, 3, 4, 8])
def test_equal_groups_are_grpos_slices_row_for_row(num_ranks):
    # uniform allocation (and a screening phase): every process holds exactly the rows GRPOTrainer gives it
    sizes = np.full(24, 8)
    weights = expected_length_weight(np.random.default_rng(0).uniform(size=24))
    for dealt in (deal_groups(sizes, num_ranks, weights), deal_groups(sizes, num_ranks)):
        assert all(np.array_equal(a, b) for a, b in zip(dealt, _in_prompt_order(sizes, num_ranks), strict=True))


def test_unequal_groups_of_a_coba_round_balance_the_expected_tokens():
    # 256 prompts x 16 on 8 processes, CoBA's allocation of a failure-heavy mix (groups of 2 to 123)
    rng = np.random.default_rng(0)
    pass_rates = np.concatenate([np.zeros(8), rng.beta(2.0, 2.0, 216), np.ones(32)])
    rng.shuffle(pass_rates)
    allocator = build_allocator("coba", min_budget=2, max_budget=128, kappa=11.0)
    allocator.observe(pass_rates)
    sizes = allocator.allocate(pass_rates, 256 * 16)
    weights = expected_length_weight(pass_rates)
    dealt = deal_groups(sizes, 8, weights)
    assert imbalance(dealt) == 1.0
    assert imbalance(dealt, weights) <= 1.015 < imbalance(_in_prompt_order(sizes, 8), weights)
    assert sum(distinct_groups(dealt)) <= 256 + 7


def _narrowing_swap(dealt: list[np.ndarray], sizes: np.ndarray, weights: np.ndarray) -> tuple | None:
    """A swap of two equal groups, one wholly on the heaviest rank and one wholly on the lightest, that narrows the gap
    of expected tokens between them; None when no such swap is left."""
    loads = [float(np.sum(weights[rows])) for rows in dealt]
    heavy, light = int(np.argmax(loads)), int(np.argmin(loads))
    gap = loads[heavy] - loads[light]
    holders = [{rank for rank, rows in enumerate(dealt) if np.any(rows == group)} for group in range(len(sizes))]
    on_heavy = [g for g, ranks in enumerate(holders) if ranks == {heavy}]
    on_light = [g for g, ranks in enumerate(holders) if ranks == {light}]
    for a in on_heavy:
        for b in on_light:
            if sizes[a] == sizes[b] and abs(gap - 2 * sizes[a] * (weights[a] - weights[b])) < gap - 1e-9:
                return a, b
    return None


@pytest.mark.parametrize("num_ranks", [2, 4])
def test_the_deal_of_a_coba_round_leaves_no_swap_that_would_balance_it_better(num_ranks):
    # Any group lying wholly on a rank, one that ends right at a slice boundary included, can be swapped: after the
    # deal no swap of equal groups between the heaviest and the lightest rank would narrow their gap.
    allocator = build_allocator("coba", min_budget=2, max_budget=32, kappa=11.0)
    for seed in range(50):
        pass_rates = np.random.default_rng(seed).beta(0.6, 0.6, 24)
        allocator.observe(pass_rates)
        sizes = allocator.allocate(pass_rates, 24 * 8)
        weights = expected_length_weight(pass_rates)
        assert _narrowing_swap(deal_groups(sizes, num_ranks, weights), sizes, weights) is None, seed


def test_deal_rejects_an_uneven_total():
    with pytest.raises(ValueError, match="evenly"):
        deal_groups(np.array([3, 2]), 2)


def _trl_equal_group_advantages(rewards_per_func, weights, num_generations, scale_rewards, aggregation):
    """TRL 1.16's formulas for equal groups (the `view(-1, G)` path), as the reference."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        grouped = rewards.view(-1, num_generations)
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
        if scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards)
        else:
            std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    else:
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
        normalized = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (
            nanstd(grouped, dim=1, keepdim=True) + 1e-4
        )
        rewards = (normalized.view(-1, rewards_per_func.shape[1]) * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        advantages = (rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_equal_groups_match_trl_including_nan_and_weights(scale_rewards, aggregation):
    torch.manual_seed(0)
    rewards = torch.randn(24, 2)
    rewards[3, 0] = torch.nan  # one function unscored
    rewards[5] = torch.nan  # every function unscored: advantage 0
    rewards[8:12, 1] = 1.0  # a zero-std group for the second function
    weights = torch.tensor([1.0, 0.5])
    group_ids = torch.arange(6).repeat_interleave(4)
    ours = group_advantages(rewards, group_ids, 6, weights, scale_rewards, aggregation)
    theirs = _trl_equal_group_advantages(rewards, weights, 4, scale_rewards, aggregation)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    assert ours[5] == 0.0


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_a_group_of_one_gets_advantage_zero(scale_rewards):
    rewards = torch.tensor([[1.0], [0.0], [1.0], [0.0], [1.0]])
    group_ids = torch.tensor([0, 1, 1, 1, 2])
    advantages = group_advantages(rewards, group_ids, 3, torch.ones(1), scale_rewards)
    assert advantages[0] == 0.0 and advantages[4] == 0.0
    assert advantages[2] > 0 > advantages[1]


def test_unknown_modes_name_the_field():
    rewards, group_ids = torch.zeros(4, 1), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(rewards, group_ids, 2, torch.ones(1), "per-token")
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        group_advantages(rewards, group_ids, 2, torch.ones(1), "group", "product")


def test_zero_spread_is_judged_per_group_leaving_unscored_rows_out():
    nan = float("nan")
    values = [1, 1, 1, 1] + [0, 1] + [0.5] + [nan, 0] + [nan, 1, 0] + [1, nan, 1]
    group_ids = torch.arange(6).repeat_interleave(torch.tensor([4, 2, 1, 2, 3, 3]))
    flat = zero_spread_groups(torch.tensor(values).unsqueeze(1), group_ids, 6, torch.ones(1))
    # constant; mixed; a group of one; one scored row; mixed around an unscored row; constant around an unscored row
    assert flat.tolist() == [True, False, True, True, False, True]


def test_normalize_then_sum_judges_each_reward_function_on_its_own():
    # r1 = 1 for an even-length completion, r2 = 2 (1 - r1), weights [1, 0.5]: every weighted sum is 1, but each
    # function normalised on its own gives the groups of mixed parity an advantage.
    r1 = torch.tensor([1.0, 0.0, 1.0] + [1.0, 1.0] + [0.0, 0.0, 0.0, 0.0])
    rewards, weights = torch.stack([r1, 2 * (1 - r1)], dim=1), torch.tensor([1.0, 0.5])
    group_ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    assert zero_spread_groups(rewards, group_ids, 3, weights, "normalize_then_sum").tolist() == [False, True, True]
    assert zero_spread_groups(rewards, group_ids, 3, weights, "sum_then_normalize").tolist() == [True, True, True]
    # a function with weight 0 moves no advantage, so its spread does not count
    assert zero_spread_groups(rewards, group_ids, 3, torch.tensor([0.0, 0.0]), "normalize_then_sum").all()


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_exactly_the_zero_spread_groups_get_advantage_zero_on_every_row(scale_rewards, aggregation):
    # Random variable-size rounds of two reward functions with unscored (NaN) values: a group is judged flat if and
    # only if TRL's formulas give every one of its rows advantage 0.
    generator = torch.Generator().manual_seed(0)
    weights = torch.tensor([1.0, 0.5])
    for _ in range(200):
        sizes = torch.randint(1, 6, (6,), generator=generator)
        group_ids = torch.arange(6).repeat_interleave(sizes)
        rewards = torch.randint(0, 2, (len(group_ids), 2), generator=generator).float()
        rewards[torch.rand(rewards.shape, generator=generator) < 0.2] = torch.nan
        flat = zero_spread_groups(rewards, group_ids, 6, weights, aggregation)
        advantages = group_advantages(rewards, group_ids, 6, weights, scale_rewards, aggregation)
        largest = torch.stack([advantages[group_ids == group].abs().max() for group in range(6)])
        assert (largest[flat] < 1e-5).all() and (largest[~flat] > 1e-3).all()
