"""A `rollout_func` written for GRPOTrainer, unchanged under variable groups: whichever way it counts its prompts
(row by row, every `num_generations`-th row, or the distinct prompts), each prompt gets as many completions as the
allocation log says, and `trainer.rollout_groups` names each row's group while it runs."""

import json
from collections import Counter

import numpy as np
import pytest
from scripts.tiny_coba import TINY_ARGS, prompt_dataset, tiny_model

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.rounds.log import read_rounds

SIZES = [[1, 9, 2], [3, 3, 6], [6, 5, 1]]  # a round with two groups of 3: one call holds both


def _distinct(prompts, trainer):
    """The distinct prompts, in order, by value."""
    return list({json.dumps(prompt): prompt for prompt in prompts}.values())


def _every_nth(prompts, trainer):
    """GRPOTrainer's rows repeat each prompt num_generations times in a row: every num_generations-th is distinct."""
    return prompts[:: trainer.num_generations]


def _rollout_func(pick, calls):
    """A rollout_func as one writes it for GRPOTrainer: `trainer.num_generations` completions per distinct prompt
    (when `pick` is None, one per row), each naming its prompt and its index in the group."""

    def rollout_func(prompts, trainer):
        calls.append((list(prompts), trainer.num_generations, trainer.rollout_groups))
        tokenizer = trainer.processing_class
        distinct = prompts if pick is None else pick(prompts, trainer)
        per_prompt = 1 if pick is None else trainer.num_generations
        prompt_ids, completion_ids = [], []
        for prompt in distinct:
            ids = tokenizer.encode(prompt, add_special_tokens=False)
            for child in range(per_prompt):
                prompt_ids.append(ids)
                completion_ids.append(
                    tokenizer.encode(f" {child}", add_special_tokens=False) + [tokenizer.eos_token_id]
                )
        logprobs = [[0.0] * len(ids) for ids in completion_ids]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout_func


@pytest.mark.slow
@pytest.mark.parametrize("pick", [None, _every_nth, _distinct], ids=["row-by-row", "every-nth", "distinct"])
def test_a_grpo_rollout_func_gives_each_prompt_its_group(tmp_path, monkeypatch, pick):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    seen, calls = [], []

    def reward(prompts, completions, uid, **kwargs):
        seen.append(list(zip(uid, completions, strict=True)))
        return [float(len(c) % 2) for c in completions]

    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=12,
        num_generations=4,
        max_steps=3,
        prompt_id_column="uid",
        log_allocations=True,
        min_generations=1,
        **TINY_ARGS,
    )
    trainer = CoBAGRPOTrainer(
        model,
        reward,
        args=args,
        train_dataset=prompt_dataset(9),
        processing_class=tokenizer,
        rollout_func=_rollout_func(pick, calls),
    )
    sizes = iter(SIZES)
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    trainer.train()
    logged = read_rounds(str(tmp_path))
    assert [entry["group_sizes"] for entry in logged] == SIZES
    for rows, entry in zip(seen, logged, strict=True):
        assert Counter(uid for uid, _ in rows) == dict(zip(entry["prompt_ids"], entry["group_sizes"], strict=True))
        for uid, size in zip(entry["prompt_ids"], entry["group_sizes"], strict=True):
            # a group's completions are the k different children its call sampled (row by row: all child 0)
            children = sorted(int(c) for u, c in rows if u == uid)
            assert children == ([0] * size if pick is None else list(range(size)))
    # One call per distinct group size in a round, each prompt's rows together, num_generations = that size.
    assert [k for _, k, _ in calls] == [1, 2, 9, 3, 6, 1, 5, 6]
    for prompts, k, groups in calls:
        assert len(prompts) % k == 0 and all(len(set(prompts[i : i + k])) == 1 for i in range(0, len(prompts), k))
        assert sum(groups.group_sizes) == 12 and len(groups.group_ids) == 12 and len(groups.rows) == len(prompts)
        assert all(groups.group_sizes[groups.group_ids[row]] == k for row in groups.rows)  # 1 process: whole groups
    assert trainer.num_generations == 4 and trainer.rollout_groups is None  # restored after the round
