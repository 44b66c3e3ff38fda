"""The CPU demo on vLLM, as the README runs it: `--use_vllm` (a colocated engine) and `--vllm_mode server` against the
server the README starts (`python -m coba_trl.demo.model`, then the server command); on a smaller task, so that each
run takes seconds after the engine's start."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.vllm_runs import RATIO_BOUND

from coba_trl.generation.cpu_server import SERVER_ENV, server_command

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
# The demo's model shape is kept (vLLM needs its head size of 32): only the task and the run are smaller.
SMALL_DEMO = (
    "--demo_warm_start_steps 20 --demo_num_heldout 20 --demo_num_train_prompts 16 --per_device_train_batch_size 16 "
    "--max_steps 4 --demo_eval_steps 0 --disable_tqdm true"
).split()


RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")


def run_demo(output_dir: Path, *flags: str) -> dict:
    command = [sys.executable, str(ROOT / "examples" / "train_qwen.py"), *flags, *SMALL_DEMO, "--output_dir"]
    # Not this process's rendezvous: a colocated engine of an earlier test set it up here and holds its port.
    env = {name: value for name, value in os.environ.items() if name not in RENDEZVOUS}
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    done = subprocess.run([*command, str(output_dir)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    with open(output_dir / "trainer_state.json") as handle:
        logs = json.load(handle)["log_history"]
    key = "sampling/importance_sampling_ratio/"
    extremes = [(log[key + "min"], log[key + "max"]) for log in logs if key + "min" in log]
    assert len(extremes) == 2  # one generation round every 2 steps (the demo's steps_per_generation)
    assert all(1 - RATIO_BOUND <= low and high <= 1 + RATIO_BOUND for low, high in extremes), extremes
    with open(output_dir / "demo_summary.json") as handle:
        return json.load(handle)


def test_the_demo_runs_on_colocated_vllm(tmp_path):
    summary = run_demo(tmp_path / "colocate", "--use_vllm")
    assert summary["steps"] == 4 and 0 <= summary["accuracy_after"] <= 1


def test_the_demo_runs_against_the_readme_server(tmp_path, vllm_server):
    base_url, _ = vllm_server
    summary = run_demo(tmp_path / "server", "--use_vllm", "--vllm_mode", "server", "--vllm_server_base_url", base_url)
    assert summary["steps"] == 4


def test_the_readme_starts_the_server_the_tests_start():
    # The demo's server commands (README, docs/demo.md, docs/vllm.md) are the ones these tests and the benchmark run.
    from tests.test_readme import fenced_blocks

    env = " ".join(f"{name}={value}" for name, value in SERVER_ENV.items())
    expected = f"{env} {shlex.join(server_command('outputs/demo-model'))}"
    for page in ("README.md", "docs/demo.md", "docs/vllm.md"):
        blocks = [code.replace("\\\n", " ") for _, code in fenced_blocks((ROOT / page).read_text())]
        commands = [" ".join(line.split("#")[0].split()) for code in blocks for line in code.splitlines()]
        assert expected in commands, page
        assert "python -m coba_trl.demo.model outputs/demo-model" in commands, page
        assert "python examples/train_qwen.py --use_vllm --vllm_mode server" in commands, page
