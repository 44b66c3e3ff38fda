"""Neighbourhood priors (`pass_rate_neighbour_column`): a prompt's prior pass rate is its neighbourhood's current mean,
from the second round on, the same in a resumed run."""

import numpy as np
import pytest
from datasets import Dataset
from scripts.tiny_coba import TINY_ARGS, prompt_dataset, step_reward, tiny_model

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.allocation import KnapsackAllocator, NeighbourhoodPrior, PassRateHistory
from coba_trl.allocation.neighbours import combined_prior


def _history(rounds):
    history = PassRateHistory(window=1)
    for ids, successes, rollouts in rounds:
        history.update(ids, successes, rollouts)
    return history


def test_the_prior_is_the_mean_rate_of_the_neighbours_with_history():
    neighbours = NeighbourhoodPrior()
    neighbours.register(["a", "b", "c", "d", "e"], [1, 1, 1, 2, None], "level")
    history = _history([(["a", "b"], [2, 8], [8, 8])])  # 0.25 and 1.0; c, d and e unseen
    prior = neighbours.prior(history, ["a", "c", "d", "e"])
    np.testing.assert_allclose(prior[:2], [0.625, 0.625])  # a plain mean over prompts, not pooled over rollouts
    assert np.isnan(prior[2]) and np.isnan(prior[3])  # level 2 has no prompt with history; e has no level


def test_a_prompt_that_changes_neighbourhood_leaves_the_old_one():
    neighbours = NeighbourhoodPrior()
    neighbours.register(["a", "b"], ["x", "x"], "level")
    neighbours.register(["a"], ["y"], "level")
    history = _history([(["a", "b"], [0, 4], [4, 4])])
    np.testing.assert_allclose(neighbours.prior(history, ["a", "b"]), [0.0, 1.0])


def test_a_missing_value_in_a_float_column_is_no_neighbourhood():
    neighbours = NeighbourhoodPrior()
    neighbours.register(["a", "b"], [float("nan"), float("nan")], "level")
    history = _history([(["a", "b"], [0, 4], [4, 4])])
    assert np.isnan(neighbours.prior(history, ["a", "b"])).all()


def test_an_unregistered_prompt_is_an_error():
    with pytest.raises(ValueError, match="never registered"):
        NeighbourhoodPrior().prior(PassRateHistory(), ["a"])


def test_the_state_round_trips_with_tuple_ids_and_int_levels():
    import json

    neighbours = NeighbourhoodPrior()
    neighbours.register([("p", 1), ("p", 2), "q"], [3, 3, "easy"], "level")
    restored = NeighbourhoodPrior()
    restored.load_state_dict(json.loads(json.dumps(neighbours.state_dict())))
    history = _history([([("p", 1), "q"], [1, 3], [4, 4])])
    ids = [("p", 1), ("p", 2), "q"]
    np.testing.assert_array_equal(restored.prior(history, ids), neighbours.prior(history, ids))
    np.testing.assert_allclose(restored.prior(history, ids), [0.25, 0.25, 0.75])


def test_an_offline_prior_comes_first_and_the_neighbourhood_fills_the_rest():
    offline = np.array([0.3, np.nan, np.nan])
    neighbours = np.array([0.9, 0.5, np.nan])
    np.testing.assert_array_equal(combined_prior(offline, neighbours), [0.3, 0.5, np.nan])
    assert combined_prior(None, None) is None


def test_an_unsolved_prompt_gets_budget_back_when_its_neighbours_start_succeeding():
    # Released estimate: 0 of 8 is p = 0, which Knapsack-RL leaves at B_low. Shrunk towards its neighbourhood's mean
    # (prior strength 2), the same prompt reads as (0 + 2 m) / 10 > 0 once its neighbours succeed, and gets more.
    ids = ["unsolved", "n1", "n2", "other"]
    history = PassRateHistory(window=1, prior_strength=2.0)
    history.update(ids, [0, 4, 5, 3], [8, 8, 8, 8])
    neighbours = NeighbourhoodPrior()
    neighbours.register(ids, ["level", "level", "level", "far"], "level")
    allocator = KnapsackAllocator(min_budget=2, max_budget=32)
    successes, rollouts = history.counts(ids)
    released = allocator.allocate(successes / rollouts, 64)  # the released estimate S_i / N_i
    shrunk_rates = history.pass_rates(ids, prior=neighbours.prior(history, ids))
    assert shrunk_rates[0] == pytest.approx(2 * np.mean([0, 4 / 8, 5 / 8]) / 10)
    shrunk = allocator.allocate(shrunk_rates, 64)
    assert released[0] == 2 and shrunk[0] > 2


def _leveled(num_prompts=8, repeats=1):
    dataset = prompt_dataset(num_prompts, repeats)
    return dataset.add_column("level", [int(uid[1:]) % 2 for uid in dataset["uid"]])


def _trainer(output_dir, dataset, **overrides):
    model, tokenizer = tiny_model()
    config = dict(per_device_train_batch_size=16, num_generations=4, max_steps=3, seed=5, prompt_id_column="uid")
    args = CoBAConfig(output_dir=str(output_dir), **{**config, **TINY_ARGS, **overrides})
    return CoBAGRPOTrainer(model, step_reward, args=args, train_dataset=dataset, processing_class=tokenizer)


def _record_plans(trainer) -> list:
    plans, plan_round = [], trainer.round_runner.plan

    def record(*args, **kwargs):
        plans.append(plan_round(*args, **kwargs))
        return plans[-1]

    trainer.round_runner.plan = record
    return plans


def test_unseen_prompts_of_the_second_round_start_from_their_levels_mean(tmp_path):
    trainer = _trainer(tmp_path, _leveled(), pass_rate_neighbour_column="level", budget_allocator="knapsack")
    plans = _record_plans(trainer)
    trainer.train()
    first, second = plans[0], plans[1]
    assert np.isnan(first.pass_rates).all()  # nothing seen yet
    rates = {uid: float(int(uid[1:]) % 3 == 0) for uid in first.prompt_ids}  # step_reward at step 0
    for uid, rate in zip(second.prompt_ids, second.pass_rates, strict=True):
        level = int(uid[1:]) % 2
        mates = [r for other, r in rates.items() if int(other[1:]) % 2 == level]
        assert rate == pytest.approx(np.mean(mates)) if mates else np.isnan(rate)
    assert not np.isnan(second.pass_rates).all()


def test_without_the_column_the_second_round_is_unseen(tmp_path):
    trainer = _trainer(tmp_path, _leveled(), budget_allocator="knapsack")
    plans = _record_plans(trainer)
    trainer.train()
    assert np.isnan(plans[1].pass_rates).all()


def test_a_resumed_run_allocates_as_the_uninterrupted_one(tmp_path):
    overrides = dict(
        pass_rate_neighbour_column="level",
        pass_rate_prior_strength=2.0,
        budget_allocator="knapsack",
        per_device_train_batch_size=8,
        max_steps=8,
        save_strategy="steps",
        save_steps=1,
    )
    dataset = _leveled(12)
    full = _trainer(tmp_path / "full", dataset, **overrides)
    full_plans = _record_plans(full)
    full.train()
    resumed = _trainer(tmp_path / "resumed", dataset, **overrides)
    resumed_plans = _record_plans(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"))
    sizes = [plan.group_sizes.tolist() for plan in full_plans[4:]]
    assert sizes == [plan.group_sizes.tolist() for plan in resumed_plans]
    assert len({tuple(s) for s in sizes}) > 1  # the allocation is not uniform every round
    assert resumed.round_runner.neighbours.state_dict() == full.round_runner.neighbours.state_dict()


def test_a_missing_neighbour_column_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="pass_rate_neighbour_column is 'level'"):
        _trainer(tmp_path, prompt_dataset(8), pass_rate_neighbour_column="level")


def test_an_unhashable_neighbourhood_names_the_field_and_the_fix(tmp_path):
    dataset = Dataset.from_dict({"prompt": ["a", "b"], "uid": ["q0", "q1"], "tags": [["x"], ["y"]]})
    with pytest.raises(ValueError, match="pass_rate_neighbour_column 'tags' holds list.*at row 0.*dataset.map"):
        _trainer(tmp_path, dataset, pass_rate_neighbour_column="tags")


def test_a_streamed_value_that_cannot_be_a_neighbourhood_names_the_column_when_drawn():
    neighbours = NeighbourhoodPrior()
    with pytest.raises(ValueError, match="pass_rate_neighbour_column 'topic' holds dict.*prompt 'q3'.*dataset.map"):
        neighbours.register(["q2", "q3"], ["algebra", {"name": "x"}], "topic")


def test_the_column_survives_remove_unused_columns(tmp_path):
    trainer = _trainer(tmp_path, _leveled(), pass_rate_neighbour_column="level", remove_unused_columns=True)
    batch = next(iter(trainer.get_train_dataloader()))
    assert "level" in batch[0]
