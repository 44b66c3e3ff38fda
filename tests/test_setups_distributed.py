"""Environments and tools on two real processes (torchrun, CPU, gloo): TRL's tool loop leaves the processes with
different numbers of rows to regenerate, and still every rollout gets its own environment and completion, as many
per task and round as the allocation log says, and no process waits for another."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from scripts.tool_tasks import SCRIPTED_SIZES, calls_wanted

from coba_trl.round_log import read_rounds

SCRIPT = Path(__file__).parent / "scripts" / "tool_tasks.py"


def _launch(out_dir: Path, mode: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*command, str(SCRIPT), str(out_dir), mode], env=env, capture_output=True, text=True, timeout=400
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(450)
@pytest.mark.parametrize("mode", ["environment", "tools"])
def test_tool_loops_on_two_processes_give_every_row_its_own_rollout(tmp_path, mode):
    ranks = _launch(tmp_path, mode)
    logged = read_rounds(str(tmp_path))
    assert [entry["group_sizes"] for entry in logged] == SCRIPTED_SIZES
    for index, entry in enumerate(logged):
        planned = Counter(dict(zip(entry["prompt_ids"], entry["group_sizes"], strict=True)))
        rounds = [rank["rounds"][index] for rank in ranks]
        assert len(rounds[0]["rewarded"]) == len(rounds[1]["rewarded"]) == 4  # 8 rows dealt 4 + 4
        assert sum((Counter(r["rewarded"]) for r in rounds), Counter()) == planned
        assert all(calls == calls_wanted(task) for r in rounds for task, calls in r["calls"])  # its own completion
        if mode == "environment":
            assert sum((Counter(task for _, task in r["resets"]) for r in rounds), Counter()) == planned
            scored = [pair for r in rounds for pair in r["scored"]]
            assert len(scored) == 8 and all(total == calls_wanted(task) for task, total in scored)
            sizes = zip(entry["prompt_ids"], entry["group_sizes"], strict=True)
            assert entry["successes"] == [size if calls_wanted(task) else 0 for task, size in sizes]
    # The processes regenerated different numbers of rows (each its own rows' tool calls) in some call.
    assert ranks[0]["batch_sizes"] != ranks[1]["batch_sizes"]
    call_frequency = [
        [e["tools/call_frequency"] for e in rank["log_history"] if "tools/call_frequency" in e] for rank in ranks
    ]
    assert call_frequency[0] == call_frequency[1] and len(call_frequency[0]) == 3
