"""CoBAGRPOTrainer in one process: GRPO parity, variable-group advantages, telemetry and the model card."""

import numpy as np
import pytest
import torch
from scripts.tiny_coba import TINY_ARGS, Recorder, assert_runs_agree, parity_reward, prompt_dataset, tiny_model
from trl import GRPOConfig, GRPOTrainer

from coba_trl import CoBAConfig, CoBAGRPOTrainer


def _train(trainer_cls, config_cls, tmp_path, reward_funcs=parity_reward, stub_sizes=None, **overrides):
    model, tokenizer = tiny_model()
    args = config_cls(output_dir=str(tmp_path), **{**TINY_ARGS, **overrides})
    trainer = trainer_cls(model, reward_funcs, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer)
    if stub_sizes is not None:
        sizes = iter(stub_sizes)
        trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    recorder = Recorder(trainer)
    trainer.train()
    return trainer, recorder


@pytest.mark.parametrize(
    "layout",
    [
        dict(per_device_train_batch_size=8, num_generations=4, max_steps=3),
        dict(
            per_device_train_batch_size=4,
            num_generations=2,
            gradient_accumulation_steps=2,
            num_iterations=2,
            max_steps=3,
        ),
    ],
    ids=["one-step-per-round", "grad-accum-and-iterations"],
)
@pytest.mark.parametrize("group_weighting", ["row", "prompt"])
def test_uniform_allocation_reproduces_grpo(tmp_path, layout, group_weighting):
    grpo, grpo_log = _train(GRPOTrainer, GRPOConfig, tmp_path / "grpo", seed=7, **layout)
    coba, coba_log = _train(
        CoBAGRPOTrainer,
        CoBAConfig,
        tmp_path / "coba",
        seed=7,
        budget_allocator="uniform",
        group_weighting=group_weighting,
        **layout,
    )
    assert_runs_agree(coba, coba_log, grpo, grpo_log)


def _numpy_advantages(rewards, sizes, scale_rewards):
    """Reference: per-group (r - mean) / (std + 1e-4) with Bessel std, written with numpy from docs/algorithm.md,
    "Training settings of the released run"."""
    group_ids = np.repeat(np.arange(len(sizes)), sizes)
    advantages = np.zeros_like(rewards)
    for group in range(len(sizes)):
        r = rewards[group_ids == group]
        centred = r - r.mean()
        if scale_rewards == "group":
            centred = centred / (r.std(ddof=1) + 1e-4) if len(r) > 1 else 0.0 * centred
        elif scale_rewards == "batch":
            centred = centred / (rewards.std(ddof=1) + 1e-4)
        advantages[group_ids == group] = centred
    return advantages


@pytest.mark.parametrize(
    "scale_rewards, group_weighting", [("group", "row"), ("batch", "row"), ("none", "row"), ("group", "prompt")]
)
def test_scripted_allocation_gives_those_groups_and_numpy_advantages(tmp_path, scale_rewards, group_weighting):
    sizes = [[2, 11, 5, 2], [1, 3, 12, 4]]
    trainer, log = _train(
        CoBAGRPOTrainer,
        CoBAConfig,
        tmp_path,
        stub_sizes=sizes,
        per_device_train_batch_size=20,
        num_generations=5,
        min_generations=1,
        max_steps=2,
        scale_rewards=scale_rewards,
        group_weighting=group_weighting,
    )
    for round_sizes, rewards, advantages in zip(sizes, log.rewards, log.advantages, strict=True):
        assert len(rewards) == len(advantages) == sum(round_sizes)
        expected = _numpy_advantages(rewards[:, 0].numpy().astype(np.float64), round_sizes, scale_rewards)
        if group_weighting == "prompt":  # row by row: the row weighting's advantage times n_bar / n_i
            expected = expected * 5 / np.repeat(round_sizes, round_sizes)
        np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-5)
    history = trainer.pass_rate_history.state_dict()
    assert len(trainer.pass_rate_history) == 8  # two rounds of 4 distinct prompts
    assert history


def test_telemetry_and_fixed_metrics_reach_the_logs(tmp_path):
    trainer, log = _train(
        CoBAGRPOTrainer,
        CoBAConfig,
        tmp_path,
        stub_sizes=[[1, 3, 12, 4]],
        per_device_train_batch_size=20,
        num_generations=5,
        min_generations=1,
        max_steps=1,
    )
    logs = trainer.state.log_history[0]
    assert (logs["budget/min"], logs["budget/max"], logs["budget/mean"]) == (1.0, 12.0, 5.0)
    assert logs["budget/mean_by_pass_rate/unseen"] == 5.0
    assert logs["coba/allocation_time"] >= 0.0
    assert logs["coba/prompts_with_history"] == 0.0
    rewards = log.rewards[0][:, 0].numpy()
    groups = np.split(rewards, np.cumsum([1, 3, 12])[:])
    expected_zero_std = np.mean([len(g) == 1 or np.ptp(g) == 0 for g in groups])
    assert logs["frac_reward_zero_std"] == pytest.approx(expected_zero_std)
    np.testing.assert_allclose(list(trainer._logs["advantages"]), log.advantages[0].numpy(), atol=1e-6)
    # TRL's `reward` weighs prompts by their rollouts; coba/reward_per_prompt weighs each prompt once, as GRPO does.
    assert logs["reward"] == pytest.approx(rewards.mean())
    per_prompt = np.mean([g.mean() for g in groups])
    assert logs["coba/reward_per_prompt"] == pytest.approx(per_prompt)
    assert logs["coba/rewards/parity_reward/mean_per_prompt"] == pytest.approx(per_prompt)


def test_a_reward_path_that_bypasses_the_capture_fails_loudly(tmp_path):
    model, tokenizer = tiny_model()
    args = CoBAConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)
    trainer = CoBAGRPOTrainer(
        model, parity_reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer
    )
    # An override that skips CoBA's capture: the round must not silently reuse stale rewards.
    trainer._calculate_rewards = lambda *args: GRPOTrainer._calculate_rewards(trainer, *args)
    with pytest.raises(RuntimeError, match="gathered rewards have shape None"):
        trainer.train()


def test_a_generation_seed_still_gives_distinct_completions_per_group(tmp_path):
    seen = []

    def recording_reward(completions, **kwargs):
        seen.append(list(completions))
        return parity_reward(completions)

    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=4,
        max_steps=2,
        budget_allocator="uniform",
        generation_kwargs={"seed": 1234},  # transformers generation: sampling draws from the torch RNG per row
        **TINY_ARGS,
    )
    trainer = CoBAGRPOTrainer(
        model, recording_reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer
    )
    trainer.train()
    groups = [batch[i : i + 4] for batch in seen for i in range(0, len(batch), 4)]
    assert len(groups) == 8 and all(len(set(group)) > 1 for group in groups)


def test_model_card_names_coba(tmp_path):
    trainer, _ = _train(
        CoBAGRPOTrainer, CoBAConfig, tmp_path, per_device_train_batch_size=4, num_generations=2, max_steps=1
    )
    trainer.create_model_card(model_name="tiny")
    card = (tmp_path / "README.md").read_text()
    assert "coba-rl" in card
    assert "2602.03048" in card


def _sometimes_unscored(completions, **kwargs):
    """A second objective that abstains (None) on odd-length completions."""
    return [None if len(c) % 2 else float(len(c)) / 8 for c in completions]


def test_peft_bf16_multi_objective_with_unscored_rows_trains(tmp_path):
    from peft import LoraConfig

    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        steps_per_generation=2,
        max_steps=2,
        reward_weights=[1.0, 0.5],
        multi_objective_aggregation="normalize_then_sum",
        success_reward_func="parity_reward",
        **{**TINY_ARGS, "bf16": True},
    )
    trainer = CoBAGRPOTrainer(
        model,
        [parity_reward, _sometimes_unscored],
        args=args,
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
    )
    log = Recorder(trainer)
    trainer.train()
    assert trainer.state.global_step == 2
    assert all(torch.isfinite(a).all() for a in log.advantages)
    assert len(trainer.pass_rate_history) == 4  # one round of 4 distinct prompts, used over 2 steps


def test_evaluation_stays_on_the_stock_fixed_group_path(tmp_path):
    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        num_generations_eval=2,
        per_device_eval_batch_size=4,
        eval_strategy="steps",
        eval_steps=1,
        max_steps=1,
        **TINY_ARGS,
    )
    trainer = CoBAGRPOTrainer(
        model,
        parity_reward,
        args=args,
        train_dataset=prompt_dataset(),
        eval_dataset=prompt_dataset(4),
        processing_class=tokenizer,
    )
    trainer.train()
    evaluation = next(h for h in trainer.state.log_history if "eval_loss" in h)
    assert "eval_reward" in evaluation and "eval_budget/mean" not in evaluation
    assert trainer.num_generations == 4


@pytest.mark.parametrize("allocator", ["coba", "knapsack"])
def test_every_allocator_trains_on_revisited_prompts(tmp_path, allocator):
    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=4,
        max_steps=3,
        budget_allocator=allocator,
        prompt_id_column="uid",
        **TINY_ARGS,
    )
    dataset = prompt_dataset(4)  # one round per epoch: the same 4 prompts every round
    trainer = CoBAGRPOTrainer(model, parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    log = Recorder(trainer)
    trainer.train()
    assert [sum(sizes) for sizes in log.allocations] == [16, 16, 16]
    assert len(trainer.pass_rate_history) == 4
    last = trainer.state.log_history[-2]
    assert last["coba/prompts_with_history"] == 4.0 and "coba/failure_rate" in last
