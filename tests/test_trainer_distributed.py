"""Two real processes (torchrun, CPU, gloo) with uneven groups: the ranks agree on everything and training completes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "tiny_coba.py"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_two_processes_agree_on_allocations_and_history(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*command, str(SCRIPT), str(tmp_path)], env=env, capture_output=True, text=True, timeout=540
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 3
    assert ranks[0]["rows"] == ranks[1]["rows"] == [8, 8, 8]  # 16 completions per round, dealt 8 + 8
    assert ranks[0]["rewards"] == ranks[1]["rewards"]  # both ranks hold the same gathered rewards
    assert ranks[0]["history"] == ranks[1]["history"]
    assert ranks[0]["allocator"] == ranks[1]["allocator"]
    # The scripted group sizes reach the history (window 3 keeps every appearance): 3 rounds of 16 completions.
    seen = [tries for _, appearances in ranks[0]["history"]["records"] for _, tries in appearances]
    assert sum(seen) == 48 and max(seen) >= 7
