"""Run a test script on two CPU processes (torchrun, gloo) and read back what each rank wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def launch(script: Path, out_dir: Path, *args: str, env: dict | None = None, timeout: int = 540):
    """`script out_dir *args` on two processes, one torch thread each; the finished run (`subprocess` result)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    return subprocess.run(
        [*TORCHRUN, str(script), str(out_dir), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def run_ranks(script: Path, out_dir: Path, *args: str, env: dict | None = None, timeout: int = 540) -> list[dict]:
    """`launch`, which must succeed; each rank's `rank{r}.json` from `out_dir`."""
    result = launch(script, out_dir, *args, env=env, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(2)]
