"""A `rollout_func`'s output read as GRPOTrainer reads it, row copies of their own, and the success reward fields,
without a trainer."""

import numpy as np
import pytest
import torch

from coba_trl.rounds.grouping import expand_rows
from coba_trl.rounds.rollouts import per_row
from coba_trl.rounds.scoring import ScoredRound, unscored_groups_warning
from coba_trl.validation import check_success_reward


def test_a_field_that_is_not_a_list_reaches_every_row_and_none_stays_none():
    output = {"prompt_ids": [[1], [1]], "completion_ids": [[2], [3]], "logprobs": None, "env_mask": None, "v": 7}
    placed = per_row(output, num_rows=2, size=2)
    assert placed["v"] == [7, 7] and placed["logprobs"] is None and placed["env_mask"] is None
    assert placed["completion_ids"] == [[2], [3]]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"prompt_ids": [[1]], "completion_ids": [[2], [3]], "logprobs": None}, r"'prompt_ids' with 1 entries for 2"),
        ({"prompt_ids": [[1], [1]], "completion_ids": None, "logprobs": None}, r"'completion_ids' as NoneType"),
    ],
)
def test_an_output_grpo_trainer_would_also_refuse_names_the_field(output, message):
    with pytest.raises(ValueError, match=message):
        per_row(output, num_rows=2, size=2)


def test_each_rollout_gets_its_own_copy_of_the_row():
    prompts = [{"prompt": "q", "notes": [], "meta": {"seen": 0}, "n": 1}]
    rows = expand_rows(prompts, np.array([0, 0, 0]))
    rows[0]["notes"].append("x")
    rows[1]["meta"]["seen"] = 1
    assert [row["notes"] for row in rows] == [["x"], [], []] and prompts[0]["notes"] == []
    assert [row["meta"]["seen"] for row in rows] == [0, 1, 0] and prompts[0]["meta"] == {"seen": 0}


def test_success_reward_func_takes_one_name_or_several_in_order():
    names = ["accuracy", "Odd", "Even"]
    assert check_success_reward(None, names) == (0,)
    assert check_success_reward("Even", names) == (2,)
    assert check_success_reward(["Odd", "Even"], names) == (1, 2)
    with pytest.raises(ValueError, match=r"success_reward_func is empty: name at least one"):
        check_success_reward([], names)
    with pytest.raises(ValueError, match=r"'Evn' is not one of the reward functions"):
        check_success_reward(["Odd", "Evn"], names)


def test_prompts_left_without_any_success_reward_are_warned_about():
    def scored_round(scored):
        empty = torch.zeros(0)
        return ScoredRound(empty, empty, np.zeros(len(scored)), np.array(scored), {})

    assert unscored_groups_warning(scored_round([2, 1]), ["a", "b"], "Odd", "Odd") is None
    message = unscored_groups_warning(scored_round([2, 0, 0]), ["a", "b", "c"], "Odd", "Odd")
    assert message.startswith("2 prompt(s) of this round (the first: 'b') had no completion with a success reward")
    assert "success_reward_func" in message and "\n" not in message


def test_a_padding_call_gets_new_environments_reset_with_its_row():
    """A process without a group of some size pads that call with one of its rows: each padding prompt gets a new
    environment of the row's kind, reset with the row as TRL resets one (the routing column left out)."""
    from types import SimpleNamespace

    from coba_trl.rounds.rollouts import new_environments

    class Counter:
        def reset(self, task, **row):
            self.task, self.row = task, row

    trainer = SimpleNamespace(environment_factories={"count": Counter, "other": None}, _multi_environment=True)
    row = {"prompt": [{"role": "user", "content": "Task 3"}], "task": 3, "environment": "count"}
    environments = new_environments(trainer, row, 2)
    assert len({id(env) for env in environments}) == 2 and all(isinstance(env, Counter) for env in environments)
    assert all(env.task == 3 and "environment" not in env.row for env in environments)


def test_a_rollout_func_that_answers_wrongly_on_one_process_stops_every_process_with_the_same_error():
    # Process 1's function returns one completion too few: process 0 must not go on alone into its next collective
    # (the next group size's call, or TRL's gather), where it would wait for process 1 until a timeout.
    from types import SimpleNamespace

    from scripts.fake_collectives import World

    from coba_trl import distributed
    from coba_trl.rounds import rollouts
    from coba_trl.rounds.rollouts import RolloutGroups, grouped_rollout

    world = World(2, timeout=5)

    def rollout_func(prompts, trainer):
        count = len(prompts) - (trainer.accelerator.process_index == 1)
        return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * count, "logprobs": None}

    def process(rank):
        rows = [{"prompt": "q"}] * 2
        groups = RolloutGroups([0, 0], [4], inputs=rows)
        trainer = SimpleNamespace(
            accelerator=world.accelerator(rank), rollout_groups=groups, environments=None, num_generations=4
        )
        try:
            return grouped_rollout(rollout_func)(["q", "q"], trainer)
        except ValueError as error:
            return str(error)

    with world.patch(distributed, rollouts):
        errors = world.run(lambda: process(0), lambda: process(1))
    assert errors[0] == errors[1]
    assert errors[0].startswith("rollout_func returned 'completion_ids' with 1 entries for 2 prompts")
