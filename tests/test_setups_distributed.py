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
