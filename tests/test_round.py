"""The round as pure functions (`coba_trl.rounds`), without a trainer: plan, score, observe, and the round's metrics."""

import numpy as np
import pytest
import torch

from coba_trl.allocation import PassRateHistory, build_allocator
from coba_trl.rounds.metrics import merge_phase_metrics, round_metrics
from coba_trl.rounds.plan import RoundPlan, Screening, check_plan, plan_round, replayed_plan
from coba_trl.rounds.scoring import Phase, Scoring, group_successes, observe_round, score_round, screen_round


class Scripted:
    """An allocator that returns the given sizes and records what it saw."""

    def __init__(self, sizes):
        self.sizes, self.seen, self.observed = np.array(sizes), [], []

    def allocate(self, pass_rates, total_budget):
        self.seen.append(np.array(pass_rates))
        return self.sizes

    def metrics(self):
        return {"failure_rate": 0.5}

    def observe(self, pass_rates):
        self.observed.append(np.array(pass_rates))


def _settings(**overrides):
    values = dict(
        reward_weights=torch.ones(1),
        scale_rewards="group",
        multi_objective_aggregation="sum_then_normalize",
        group_weighting="row",
        zero_variance_groups="keep",
        success_indices=(0,),
        success_threshold=1.0,
        pad_token_id=0,
    )
    return Scoring(**{**values, **overrides})


def _phase(rewards, sizes, processes=1):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    rewards = rewards.unsqueeze(1) if rewards.dim() == 1 else rewards
    rows = len(rewards) // processes
    output = {"completion_mask": torch.ones(rows, 3), "num_items_in_batch": torch.tensor(3.0 * len(rewards))}
    return Phase(output, rewards, np.repeat(np.arange(len(sizes)), sizes))


def test_plan_reads_the_history_and_changes_nothing():
    history = PassRateHistory()
    history.update(["a", "b"], [1, 0], [2, 2])
    before = history.state_dict()
    allocator = Scripted([3, 5])
    plan = plan_round(["a", "b"], allocator, history, budget=8, max_generations=8)
    np.testing.assert_array_equal(allocator.seen[0], [0.5, 0.0])
    assert plan.group_sizes.tolist() == [3, 5] and plan.observe and plan.screening is None
    assert history.state_dict() == before and allocator.observed == []
    assert plan.record["pass_rates"] == [0.5, 0.0] and plan.record["screen_rollouts"] is None
    assert plan.metrics["budget/max"] == 5.0 and plan.metrics["coba/failure_rate"] == 0.5


def test_a_screening_is_the_latest_appearance_but_is_not_recorded():
    history = PassRateHistory()
    history.update(["a", "b"], [0, 0], [4, 4])
    allocator = Scripted([4, 4])
    screening = Screening(2, np.array([2, 1]), np.array([True, False]))
    plan = plan_round(["a", "b"], allocator, history, 8, 8, screening=screening)
    np.testing.assert_array_equal(allocator.seen[0], [1.0, 0.5])  # window 1: the screening alone
    assert plan.remaining.tolist() == [2, 2] and plan.record["screen_successes"] == [2, 1]
    np.testing.assert_array_equal(history.pass_rates(["a", "b"]), [0.0, 0.0])


def test_rescue_takes_rows_from_the_largest_group_even_an_all_equal_one():
    # Screening 2 per prompt: "a" went 0/2 but the allocator funded it with 12 rows; "b" went 2/2 with 2 rows.
    allocator = Scripted([12, 2, 6])
    screening = Screening(2, np.array([0, 2, 1]), np.array([True, True, False]))
    plan = plan_round(["a", "b", "c"], allocator, PassRateHistory(), 20, 16, screening=screening, rescue=True)
    assert plan.group_sizes.tolist() == [10, 4, 6]  # "b" rescued from "a", the largest, not from "c", the spread
    assert plan.rescued.tolist() == [False, True, False]  # only the groups that received rows count
    assert plan.metrics["coba/rescued_groups"] == 1.0 and plan.metrics["coba/rescued_rows"] == 2.0


def test_an_allocation_that_misses_the_budget_is_refused():
    plan = RoundPlan(["a", "b"], np.array([3, 3]), np.full(2, np.nan))
    with pytest.raises(ValueError, match="summing to generation_batch_size \\(8\\)"):
        check_plan(plan, "Scripted", num_prompts=2, budget=8)


def test_a_saved_plan_replays_only_for_its_own_prompts():
    saved = {"prompt_ids": ["a", "b"], "group_sizes": [3, 5], "pass_rates": [None, 0.5]}
    plan = replayed_plan(saved, ["a", "b"])
    assert plan.group_sizes.tolist() == [3, 5] and not plan.observe and np.isnan(plan.pass_rates[0])
    assert replayed_plan(saved, ["b", "a"]) is None and replayed_plan(None, ["a", "b"]) is None


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_prompt_weighting_scales_each_row_by_mean_size_over_group_size(scale_rewards):
    sizes = np.array([2, 6])
    plan = RoundPlan(["a", "b"], sizes, np.full(2, np.nan))
    rewards = [1, 0, 1, 1, 0, 0, 0, 1]
    row = score_round(plan, [_phase(rewards, sizes)], _settings(scale_rewards=scale_rewards), rank=0)
    weighted = score_round(
        plan, [_phase(rewards, sizes)], _settings(scale_rewards=scale_rewards, group_weighting="prompt"), rank=0
    )
    factor = torch.tensor([4 / 2] * 2 + [4 / 6] * 6)  # n_bar = 8 / 2 prompts = 4
    torch.testing.assert_close(weighted.advantages, row.advantages * factor)
    torch.testing.assert_close(weighted.batch["advantages"], weighted.advantages)
    assert weighted.group_weights.tolist() == pytest.approx([2.0, 4 / 6])


def test_prompt_weighting_leaves_equal_groups_bit_for_bit():
    sizes = np.array([4, 4])
    plan = RoundPlan(["a", "b"], sizes, np.full(2, np.nan))
    rewards = [1, 0, 0, 1, 1, 1, 0, 1]
    row = score_round(plan, [_phase(rewards, sizes)], _settings(), rank=0)
    weighted = score_round(plan, [_phase(rewards, sizes)], _settings(group_weighting="prompt"), rank=0)
    assert torch.equal(row.advantages, weighted.advantages)


def test_each_process_gets_its_slice_of_every_phase():
    sizes = np.array([2, 2])
    screening = Screening(2, np.array([1, 2]), np.array([False, True]))
    plan = RoundPlan(["a", "b"], np.array([4, 4]), np.full(2, np.nan), screening)
    phases = [_phase([1, 0, 1, 1], sizes, processes=2), _phase([0, 0, 1, 1], sizes, processes=2)]
    scored = score_round(plan, phases, _settings(pad_token_id=0), rank=1, num_processes=2)
    # rank 1 holds rows 2-3 of phase 1 and rows 6-7 of the concatenated round
    torch.testing.assert_close(scored.batch["advantages"], scored.advantages[[2, 3, 6, 7]])
    assert scored.successes.tolist() == [1, 4]  # whole groups, both phases


def test_dropped_groups_leave_the_loss_and_its_token_count():
    sizes = np.array([2, 2])
    plan = RoundPlan(["a", "b"], sizes, np.full(2, np.nan))
    scored = score_round(plan, [_phase([1, 1, 0, 1], sizes)], _settings(zero_variance_groups="drop"), rank=0)
    assert scored.dropped_groups == 1 and scored.dropped_tokens == 6.0
    assert scored.batch["completion_mask"][:2].sum() == 0 and scored.batch["num_items_in_batch"] == 6.0


def _parity_rewards(r1):
    """The two reward functions r1 (1 for an even-length completion) and r2 = 2 (1 - r1): every weighted sum with
    weights [1, 0.5] is 1."""
    r1 = torch.tensor(r1, dtype=torch.float32)
    return torch.stack([r1, 2 * (1 - r1)], dim=1).tolist()


def test_drop_under_normalize_then_sum_keeps_the_groups_whose_functions_have_a_spread():
    sizes = np.array([3, 2, 4])
    plan = RoundPlan(["a", "b", "c"], sizes, np.full(3, np.nan))
    phase = _phase(_parity_rewards([1, 0, 1] + [1, 1] + [0, 0, 0, 0]), sizes)  # mixed, all even, all odd
    weights = torch.tensor([1.0, 0.5])
    settings = _settings(
        reward_weights=weights, multi_objective_aggregation="normalize_then_sum", zero_variance_groups="drop"
    )
    scored = score_round(plan, [phase], settings, rank=0)
    assert scored.zero_spread.tolist() == [False, True, True] and scored.dropped_groups == 2
    mask = scored.batch["completion_mask"]
    assert (mask[:3] == 1).all() and (mask[3:] == 0).all() and scored.batch["num_items_in_batch"] == 9.0
    assert (scored.advantages[:3].abs() > 0.1).all()  # the kept group carries a gradient
    replaced, added = round_metrics(plan, scored, [phase], weights, ["r1", "r2"])
    assert replaced["frac_reward_zero_std"] == pytest.approx(2 / 3) and added["coba/dropped_groups"] == 2.0


def test_the_rescue_funds_the_screening_groups_with_zero_spread():
    # Two reward functions normalised on their own: "a" went even / odd (a spread), "b" and "c" share a parity.
    # Success is r1 alone; with a partial-credit reward a group without successes could still have a spread.
    settings = _settings(reward_weights=torch.tensor([1.0, 0.5]), multi_objective_aggregation="normalize_then_sum")
    screening = screen_round(_phase(_parity_rewards([1, 0, 1, 1, 0, 0]), [2, 2, 2]), settings, 3, rollouts=2)
    assert screening.successes.tolist() == [1, 2, 0] and screening.zero_spread.tolist() == [False, True, True]
    plan = plan_round(["a", "b", "c"], Scripted([8, 2, 2]), PassRateHistory(), 12, 12, None, screening, rescue=True)
    assert plan.group_sizes.tolist() == [4, 4, 4] and plan.rescued.tolist() == [False, True, True]
    partial = screen_round(_phase([0.5, 0.0, 0.0, 0.0], [2, 2]), _settings(), 2, rollouts=2)
    assert partial.successes.tolist() == [0, 0] and partial.zero_spread.tolist() == [False, True]


def test_observe_merges_duplicate_prompts_and_takes_f_from_the_screening():
    history, allocator = PassRateHistory(), Scripted([])
    screening = Screening(2, np.array([1, 0, 0]), np.array([False, True, True]))
    plan = RoundPlan(["a", "a", "b"], np.array([4, 2, 2]), np.full(3, np.nan), screening)
    scored = score_round(plan, [_phase([1, 1, 0, 0, 1, 0, 0, 0], [4, 2, 2])], _settings(), rank=0)
    observe_round(history, allocator, plan, scored)
    assert history.counts(["a", "b"])[1].tolist() == [6, 2]  # "a" listed twice: one appearance, summed
    np.testing.assert_array_equal(allocator.observed[0], [0.25, 0.0])  # screening: a 1/4, b 0/2


def test_allocator_observes_whole_groups_in_a_one_phase_round():
    history, allocator = PassRateHistory(), build_allocator("uniform", min_budget=1, max_budget=8)
    plan = RoundPlan(["a", "b"], np.array([3, 1]), np.full(2, np.nan))
    scored = score_round(plan, [_phase([1, 1, 0, 1], [3, 1])], _settings(), rank=0)
    observe_round(history, allocator, plan, scored)
    assert allocator.metrics()["failure_rate"] == pytest.approx(1 - (2 / 3 + 1) / 2)


def test_round_reward_leaves_unscorable_rows_out_as_trl_does():
    # Two phases; the NaN row was unscorable for every reward function: TRL's `reward` leaves it out (1.0, not 0.75).
    screening = Screening(1, np.array([1, 0]), np.array([True, True]))
    plan = RoundPlan(["a", "b"], np.array([2, 2]), np.full(2, np.nan), screening)
    phases = [_phase([1, float("nan")], [1, 1]), _phase([1, 1], [1, 1])]
    scored = score_round(plan, phases, _settings(), rank=0)
    replaced, added = round_metrics(plan, scored, phases, torch.ones(1), ["acc"])
    assert replaced["reward"] == 1.0 and replaced["reward_std"] == 0.0 and replaced["rewards/acc/mean"] == 1.0
    assert added["coba/reward_per_prompt"] == 1.0


def test_phase_metrics_combine_by_rows():
    logged = {
        "completions/mean_length": [99.0, 10.0, 4.0],  # an earlier round's value, then this round's two phases
        "completions/min_length": [10.0, 2.0],
        "completions/max_length": [10.0, 30.0],
        "completions/clipped_ratio": [0.0, 1.0],
        "completions/mean_terminated_length": [10.0, 0.0],  # phase 2 had no terminated row: TRL logs 0
        "completions/min_terminated_length": [10.0, 0.0],
        "sampling/importance_sampling_ratio/mean": [1.0, 0.5],
        "reward": [0.3, 0.4],
    }
    merged = merge_phase_metrics(logged, rows=[8, 24])
    assert merged["completions/mean_length"] == pytest.approx((10 * 8 + 4 * 24) / 32)
    assert merged["completions/min_length"] == 2.0 and merged["completions/max_length"] == 30.0
    assert merged["completions/clipped_ratio"] == pytest.approx(0.75)
    assert merged["completions/mean_terminated_length"] == 10.0 and merged["completions/min_terminated_length"] == 10
    assert merged["sampling/importance_sampling_ratio/mean"] == pytest.approx((8 + 12) / 32)
    assert "reward" not in merged


def test_rows_without_a_success_reward_are_neither_successes_nor_failures():
    """Two success rewards (one per environment): a row's success is the first that scored it; a row neither scored
    (NaN in both) is not counted, and a group with no scored row is not an appearance in the history."""
    nan = float("nan")
    rewards = torch.tensor([[1.0, nan], [nan, 1.0], [nan, 0.0], [nan, nan], [nan, nan]])
    successes, scored = group_successes(rewards, np.array([0, 0, 1, 1, 2]), 3, (0, 1), 1.0)
    assert successes.tolist() == [2, 0, 0] and scored.tolist() == [2, 1, 0]
    history, allocator = PassRateHistory(), build_allocator("uniform", min_budget=1, max_budget=8)
    plan = RoundPlan(["a", "b", "c"], np.array([2, 2, 1]), np.full(3, np.nan))
    scored_round = score_round(
        plan, [Phase({}, rewards, np.array([0, 0, 1, 1, 2]))], _settings(success_indices=(0, 1))
    )
    observe_round(history, allocator, plan, scored_round)
    assert history.pass_rates(["a", "b", "c"]).tolist()[:2] == [1.0, 0.0] and "c" not in history


def test_the_end_of_run_line_counts_one_round_in_the_singular():
    from coba_trl.rounds.spending import Spending

    spending = Spending()
    spending.add(
        {"coba/rollouts_generated": 16, "coba/rows_trained": 16, "coba/rows_with_spread": 8, "coba/prompts_skipped": 1}
    )
    assert spending.summary_line() == (
        "[coba] 16 completions generated in 1 round, 16 rows trained, 8 with spread (2.00 generated per trained row "
        "with spread), 1 prompt visit skipped, 0 rounds at the refill bound"
    )
