"""Environments and tools under variable groups, one process: every rollout gets its own environment, reset with its
task, as many times per round as the allocation log says; the environment's reward can define success."""

from collections import Counter

import pytest
from scripts.tool_tasks import SCRIPTED_SIZES, build, calls_wanted, task_dataset, tool_tokenizer

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.rounds.log import read_rounds
from coba_trl.tiny import build_tiny_qwen2


def _assert_rounds_match_the_log(record_rounds: list[dict], logged: list[dict], task_of=lambda prompt_id: prompt_id):
    """Per round: the tasks the environments were reset with and the completions that reached the reward are the
    logged group sizes, and every environment made exactly its own task's calls."""
    assert len(record_rounds) == len(logged)
    for seen, entry in zip(record_rounds, logged, strict=True):
        planned = Counter()
        for prompt_id, size in zip(entry["prompt_ids"], entry["group_sizes"], strict=True):
            planned[task_of(prompt_id)] += size
        assert Counter(seen["rewarded"]) == planned
        assert all(calls == calls_wanted(task) for task, calls in seen["calls"])  # each row its own conversation
        if seen["resets"]:
            assert Counter(task for _, task in seen["resets"]) == planned
            assert sorted(seen["scored"]) == sorted([task, calls_wanted(task)] for task, _ in seen["scored"])
            assert len(seen["scored"]) == sum(planned.values())


@pytest.mark.slow
def test_an_environment_per_rollout_through_variable_groups(tmp_path):
    trainer, record, batch_sizes = build(str(tmp_path), "environment")
    trainer.train()
    logged = read_rounds(str(tmp_path))
    assert [entry["group_sizes"] for entry in logged] == SCRIPTED_SIZES
    _assert_rounds_match_the_log(record.rounds, logged)
    # The environment's own reward (TRL names it after the class) defines success: a task that needs calls succeeds.
    assert trainer.reward_func_names == ["reward", "Adder"]
    for entry in logged:
        sizes = zip(entry["prompt_ids"], entry["group_sizes"], strict=True)
        assert entry["successes"] == [size if calls_wanted(task) else 0 for task, size in sizes]
    # TRL's tool loop regenerated only the rows that called a tool: 8 rows, then those still calling.
    assert batch_sizes[0] == 8 and len(batch_sizes) > 3
    assert any("tools/call_frequency" in entry for entry in trainer.state.log_history)


@pytest.mark.slow
def test_a_dict_of_environments_routed_by_a_column(tmp_path):
    trainer, record, _ = build(str(tmp_path), "environments")
    trainer.train()
    logged = read_rounds(str(tmp_path))
    dataset = task_dataset(environments=["even", "odd"])
    _assert_rounds_match_the_log(record.rounds, logged, task_of=lambda row: dataset[row]["task"])  # ids: row indices
    resets = [reset for seen in record.rounds for reset in seen["resets"]]
    assert {name for name, _ in resets} == {"Even", "Odd"}
    assert all((name == "Odd") == (task % 2 == 1) for name, task in resets)  # each task reached its own environment


@pytest.mark.slow
def test_the_coba_allocator_drives_the_environments_on_revisited_tasks(tmp_path):
    trainer, record, _ = build(str(tmp_path), "environment", scripted=False, max_steps=6)
    trainer.train()
    logged = read_rounds(str(tmp_path))
    _assert_rounds_match_the_log(record.rounds, logged)
    assert len({tuple(entry["group_sizes"]) for entry in logged}) > 1


def test_an_environment_without_a_train_dataset_is_refused_with_the_way_out(tmp_path):
    tokenizer = tool_tokenizer()
    args = CoBAConfig(output_dir=str(tmp_path), max_steps=1, use_cpu=True, bf16=False, report_to="none")

    class Game:
        def reset(self, **kwargs):
            return "Guess the word."

    with pytest.raises(ValueError, match="environment_factory without a train_dataset.*Pass a train_dataset of tasks"):
        CoBAGRPOTrainer(
            build_tiny_qwen2(tokenizer, hidden_size=16),
            lambda completions, **kwargs: [0.0] * len(completions),
            args=args,
            processing_class=tokenizer,
            environment_factory=Game,
        )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["environment", "rollout_func"])
def test_refill_runs_every_refill_batch_through_the_environments_and_rollout_func(tmp_path, mode):
    # The scripted tasks are all solved or all failed: every group is flat, so each round refills up to its bound
    # and says so; every batch, refills included, reaches the environments (or the rollout_func) as the log says.
    trainer, record, _ = build(
        str(tmp_path), mode, scripted=False, max_steps=2, zero_variance_groups="refill", max_refill_phases=1
    )
    trainer.train()
    logged = read_rounds(str(tmp_path))
    planned = Counter()
    for entry in logged:
        assert len(entry["refills"]) == 1 and entry["bound_reached"]
        for batch in [entry, *entry["refills"]]:
            for task, size in zip(batch["prompt_ids"], batch["group_sizes"], strict=True):
                planned[task] += size
    assert Counter(task for seen in record.rounds for task in seen["rewarded"]) == planned
    generated = [h["coba/rollouts_generated"] for h in trainer.state.log_history if "coba/rollouts_generated" in h]
    assert sum(generated) == sum(planned.values()) == trainer.rollouts_generated
    if mode == "environment":
        assert Counter(task for seen in record.rounds for _, task in seen["resets"]) == planned
