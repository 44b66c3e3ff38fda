"""Environments and tools on two real processes (torchrun, CPU, gloo): TRL's tool loop leaves the processes with
different numbers of rows to regenerate, and still every rollout gets its own environment and completion, as many
per task and round as the allocation log says, and no process waits for another."""

import pytest
from scripts.tool_tasks import assert_two_processes_gave_every_row_its_rollout, launch_two_processes

from coba_trl.rounds.log import read_rounds


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["environment", "tools"])
def test_tool_loops_on_two_processes_give_every_row_its_own_rollout(tmp_path, mode):
    ranks = launch_two_processes(tmp_path, mode)
    assert_two_processes_gave_every_row_its_rollout(ranks, read_rounds(str(tmp_path)), mode)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_grpo_rollout_func_on_two_processes_is_never_called_empty(tmp_path):
    """Rounds [1, 7], [5, 3], [2, 6] dealt over two processes leave a process without any group of some local size:
    it still makes that call, in step with the other, with padding (never an empty list, which a function written
    for GRPOTrainer reading `prompts[0]` would crash on); each task reaches the reward as often as the log says."""
    from collections import Counter

    ranks = launch_two_processes(tmp_path, "rollout_func")
    logged = read_rounds(str(tmp_path))
    for index, entry in enumerate(logged):
        planned = Counter(dict(zip(entry["prompt_ids"], entry["group_sizes"], strict=True)))
        rounds = [rank["rounds"][index] for rank in ranks]
        assert sum((Counter(r["rewarded"]) for r in rounds), Counter()) == planned
    calls = [rank["rollout_calls"] for rank in ranks]
    assert [size for _, size, _ in calls[0]] == [size for _, size, _ in calls[1]]  # in step
    assert all(rows > 0 and rows % size == 0 for rank in calls for rows, size, _ in rank)
    assert len(calls[0]) > len(logged)  # some round needed more than one call: the padding was exercised
