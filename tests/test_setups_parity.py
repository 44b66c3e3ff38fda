"""Each setup gives what GRPOTrainer gives on the same input, or is refused at construction: stock `GRPOTrainer` runs
beside `CoBAGRPOTrainer` wherever it applies (rows of their own, `rollout_func` outputs, environments paired with their
rows, success per environment, prompt ids of any hashable kind)."""

import logging

import numpy as np
import pytest
from datasets import Dataset
from scripts.tiny_coba import TINY_ARGS, prompt_dataset, tiny_model
from scripts.tool_tasks import TOOL_ARGS, build, calls_wanted, scripted_generate, task_dataset, tool_tokenizer
from trl import GRPOConfig, GRPOTrainer

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.rounds.log import read_rounds
from coba_trl.tiny import build_tiny_qwen2

LAYOUT = dict(per_device_train_batch_size=8, num_generations=4, max_steps=2)


def _train(trainer_class, tmp_path, reward, dataset, config=None, scripted=None, **kwargs):
    """Train `trainer_class` (GRPOTrainer or CoBAGRPOTrainer) on the tiny model; returns the trainer."""
    model, tokenizer = tiny_model()
    settings = {**TINY_ARGS, **LAYOUT, **(config or {})}
    args = (CoBAConfig if trainer_class is CoBAGRPOTrainer else GRPOConfig)(output_dir=str(tmp_path), **settings)
    trainer = trainer_class(model, reward, args=args, train_dataset=dataset, processing_class=tokenizer, **kwargs)
    if scripted is not None:
        sizes = iter(scripted)
        trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    trainer.train()
    return trainer


def _notes_dataset(stream: bool):
    dataset = prompt_dataset(4).add_column("notes", [[] for _ in range(4)])
    return dataset.to_iterable_dataset() if stream else dataset


TRAINERS = pytest.mark.parametrize("trainer_class", [GRPOTrainer, CoBAGRPOTrainer], ids=["grpo", "coba"])


@pytest.mark.slow
@TRAINERS
@pytest.mark.parametrize("stream", [False, True], ids=["dataset", "stream"])
def test_each_rollout_gets_its_own_copy_of_a_list_column(tmp_path, trainer_class, stream):
    """A reward (or an environment) that keeps state in a row's list sees only its own rollout's state."""
    seen = []

    def reward(completions, notes, **kwargs):
        scores = []
        for row_notes in notes:  # the row's list: empty unless another rollout's row is the same object
            scores.append(float(row_notes == []))
            row_notes.append("seen")
        seen.append(scores)
        return scores

    coba = trainer_class is CoBAGRPOTrainer
    config = {"prompt_id_column": "uid"} if coba else {}
    _train(trainer_class, tmp_path, reward, _notes_dataset(stream), config, [[1, 7], [2, 6]] if coba else None)
    assert seen and all(score == 1.0 for scores in seen for score in scores)


def _rollout_func(record):
    def rollout_func(prompts, trainer):
        tokenizer = trainer.processing_class
        prompt_ids = [tokenizer.encode(prompt, add_special_tokens=False) for prompt in prompts]
        completion_ids = [tokenizer.encode(" a", add_special_tokens=False) + [tokenizer.eos_token_id] for _ in prompts]
        record.append(len(prompts))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "policy_version": 7}

    return rollout_func


@pytest.mark.slow
@TRAINERS
def test_a_rollout_func_output_grpo_accepts_is_accepted(tmp_path, monkeypatch, trainer_class):
    """A field that is not a list reaches every row (TRL copies it), and `logprobs=None` means no sampling logprobs."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    versions, calls = [], []

    def reward(completions, policy_version, **kwargs):
        versions.extend(policy_version)
        return [0.0] * len(completions)

    coba = trainer_class is CoBAGRPOTrainer
    config = {"prompt_id_column": "uid"} if coba else {}
    scripted = [[1, 7], [4, 4]] if coba else None
    _train(trainer_class, tmp_path, reward, prompt_dataset(4), config, scripted, rollout_func=_rollout_func(calls))
    assert versions == [7] * 16
    assert calls == ([1, 7, 8] if coba else [8, 8])  # CoBA: one call per group size


class Task:
    """An environment that knows its task; a `rollout_func` answers each prompt with its environment's task."""

    def reset(self, task, **row):
        self.task = int(task)

    def note(self, text: str) -> str:
        """
        Take a note.

        Args:
            text: The note.

        Returns:
            The note.
        """
        return text


def _paired_rollout_func(prompts, trainer):
    """Answers each prompt with the task of the environment at its position in `trainer.environments`."""
    tokenizer = trainer.processing_class
    prompt_ids, completion_ids = [], []
    for prompt, environment in zip(prompts, trainer.environments, strict=True):
        prompt_ids.append(
            tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
        completion_ids.append(tokenizer.encode(f"{environment.task}<|im_end|>", add_special_tokens=False))
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


@pytest.mark.slow
@TRAINERS
def test_a_rollout_func_sees_each_prompt_beside_its_own_environment(tmp_path, monkeypatch, trainer_class):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer, answers = tool_tokenizer(), []

    def reward(completions, task, **kwargs):
        answers.extend((int(t), completion[-1]["content"]) for t, completion in zip(task, completions, strict=True))
        return [0.0] * len(completions)

    coba = trainer_class is CoBAGRPOTrainer
    settings = dict(TOOL_ARGS, **LAYOUT, max_completion_length=16)
    settings.pop("log_allocations") if not coba else settings.update(prompt_id_column="task")
    args = (CoBAConfig if coba else GRPOConfig)(output_dir=str(tmp_path), **settings)
    model = build_tiny_qwen2(tokenizer, hidden_size=16, max_position_embeddings=2048)
    trainer = trainer_class(
        model,
        reward,
        args=args,
        train_dataset=task_dataset(4),
        processing_class=tokenizer,
        environment_factory=Task,
        rollout_func=_paired_rollout_func,
    )
    if coba:
        sizes = iter([[1, 7], [6, 2]])
        trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    trainer.train()
    assert len(answers) == 16 and all(str(task) == answer for task, answer in answers)


@pytest.mark.slow
def test_each_environment_s_own_reward_defines_its_rows_success(tmp_path):
    """Two environments, each rewarding its own rows: both define success, and the rows the other environment's
    reward leaves unscored (NaN) count neither as successes nor as failures."""
    trainer, _, _ = build(str(tmp_path), "environments", success_reward_func=["Odd", "Even"])
    trainer.train()
    dataset = task_dataset(environments=["even", "odd"])
    for entry in read_rounds(str(tmp_path)):
        tasks = [dataset[row]["task"] for row in entry["prompt_ids"]]
        wanted = [size if calls_wanted(task) else 0 for task, size in zip(tasks, entry["group_sizes"], strict=True)]
        assert entry["successes"] == wanted
        assert entry["scored_rollouts"] == entry["group_sizes"]
    successes = {
        dataset[row]["environment"]
        for entry in read_rounds(str(tmp_path))
        for row, s in zip(entry["prompt_ids"], entry["successes"], strict=True)
        if s
    }
    assert successes == {"even", "odd"}


@pytest.mark.slow
def test_environments_write_the_prompt_of_a_dataset_without_one(tmp_path):
    """A routing dataset with no `prompt` column: each environment's reset() writes the prompt, as in GRPOTrainer."""

    class Writer(Task):
        def reset(self, task, **row):
            super().reset(task)
            return f"Task {task}"

    tokenizer, batch_sizes = tool_tokenizer(), []
    dataset = Dataset.from_dict({"task": [0, 1, 2, 3]})
    seen = []

    def reward(prompts, completions, task, **kwargs):
        seen.extend((int(t), p[-1]["content"]) for t, p in zip(task, prompts, strict=True))
        return [0.0] * len(completions)

    args = CoBAConfig(output_dir=str(tmp_path), **dict(TOOL_ARGS, **LAYOUT, max_completion_length=64))
    model = build_tiny_qwen2(tokenizer, hidden_size=16, max_position_embeddings=2048)
    trainer = CoBAGRPOTrainer(
        model, reward, args=args, train_dataset=dataset, processing_class=tokenizer, environment_factory=Writer
    )
    trainer.model.generate = scripted_generate(tokenizer, batch_sizes)
    trainer.train()
    assert len(seen) == 16 and all(content == f"Task {task}" for task, content in seen)
    logged = read_rounds(str(tmp_path))
    assert [sum(entry["group_sizes"]) for entry in logged] == [8, 8]


def _construct(tmp_path, dataset, **config):
    """A CoBAGRPOTrainer on the tiny model, built and not trained."""
    args = CoBAConfig(output_dir=str(tmp_path), **TINY_ARGS, **LAYOUT, **config)
    model, tokenizer = tiny_model()
    reward = lambda completions, **kwargs: [0.0] * len(completions)  # noqa: E731
    return CoBAGRPOTrainer(model, reward, args=args, train_dataset=dataset, processing_class=tokenizer)


def test_two_phase_rounds_refuse_images_at_construction(tmp_path):
    dataset = prompt_dataset(4).add_column("image", [None] * 4)
    with pytest.raises(ValueError, match=r"two_phase_rounds .* image column 'image'.*two_phase_rounds=False"):
        _construct(tmp_path, dataset, two_phase_rounds=True, min_generations=2)


def test_refill_refuses_images_at_construction(tmp_path):
    # Refill adds generation phases, whose image inputs cannot be merged: refused like two_phase_rounds.
    dataset = prompt_dataset(4).add_column("image", [None] * 4)
    with pytest.raises(ValueError, match=r"zero_variance_groups='refill' .* image column 'image'.*'keep' or 'drop'"):
        _construct(tmp_path, dataset, zero_variance_groups="refill")


@pytest.mark.slow
def test_list_prompt_ids_key_the_history_as_tuples(tmp_path):
    dataset = prompt_dataset(4).add_column("key", [[i, 7] for i in range(4)])
    trainer = _train(
        CoBAGRPOTrainer,
        tmp_path,
        lambda completions, **kw: [1.0] * len(completions),
        dataset,
        {"prompt_id_column": "key"},
    )
    assert set(trainer.pass_rate_history._records) == {(i, 7) for i in range(4)}
    np.testing.assert_array_equal(trainer.pass_rate_history.pass_rates([(0, 7), (3, 7)]), [1.0, 1.0])


@pytest.mark.parametrize("stream", [False, True], ids=["dataset", "stream"])
def test_unhashable_prompt_ids_are_refused_at_construction(tmp_path, stream):
    dataset = prompt_dataset(4).add_column("key", [{"n": i} for i in range(4)])
    dataset = dataset.to_iterable_dataset() if stream else dataset
    with pytest.raises(ValueError, match=r"prompt_id_column 'key' holds dict values .* at row 0.*json.dumps"):
        _construct(tmp_path, dataset, prompt_id_column="key")


@pytest.mark.slow
def test_the_graded_reward_warning_is_checked_in_every_round(tmp_path, caplog):
    """Round 1 is right-or-wrong; from round 2 the reward is graded and never reaches the threshold: one warning."""

    def reward(completions, trainer_state, **kwargs):
        if trainer_state.global_step == 0:
            return [float(i % 2) for i in range(len(completions))]
        return [0.25] * len(completions)

    with caplog.at_level(logging.WARNING):
        _train(CoBAGRPOTrainer, tmp_path, reward, prompt_dataset(4), {"max_steps": 3})
    warnings = [r.getMessage() for r in caplog.records if "no completion reached success_threshold" in r.getMessage()]
    assert len(warnings) == 1
