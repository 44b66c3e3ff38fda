"""The CPU demo on vLLM, as the README runs it: `--use_vllm` (a colocated engine) and the README's training command
against the server the README's commands start (`vllm_server`), with LoRA at a learning rate that moves the weights;
on a smaller task, so that each run takes seconds after the engine's start."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.vllm_fixtures import readme_server_commands
from scripts.vllm_runs import RATIO_BOUND

from coba_trl.generation.cpu_server import server_command

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
    done = subprocess.run([*command, str(output_dir)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
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


def test_the_demo_runs_against_the_readme_server_with_lora(tmp_path, vllm_server):
    # The README's training command against the server its commands started (on a free port, hence the URL), with a
    # LoRA adapter at a learning rate that moves it: the server must sample from the merged weights (the ratio bound
    # of `run_demo`). The small task's accuracy reward is 0 throughout (no gradient), so a reward with spread (the
    # parity of the completion's length) moves the adapter. No LoRA dropout: TRL's default, 0.05, is active when the
    # trainer computes its logprobs, which then differ from vLLM's whatever the weights.
    base_url, _ = vllm_server
    python, script, *flags = shlex.split(readme_server_commands()[2])
    assert (python, script) == ("python", "examples/train_qwen.py")
    lora = "--use_peft --lora_target_modules q_proj v_proj --learning_rate 5e-2".split()  # the demo: no dropout
    reward = ["--reward_funcs", "tests.scripts.tiny_coba.text_parity_reward"]
    summary = run_demo(tmp_path / "server", *flags, "--vllm_server_base_url", base_url, *lora, *reward)
    assert summary["steps"] == 4
    assert (tmp_path / "server" / "adapter_config.json").exists()  # trained as an adapter
    with open(tmp_path / "server" / "trainer_state.json") as handle:
        assert any(log.get("grad_norm", 0) > 0 for log in json.load(handle)["log_history"])  # the adapter moved


def test_the_benchmark_and_the_docs_start_the_readmes_server():
    # The tests start the README's commands themselves; the server benchmark starts `server_command`, and the demo's
    # pages repeat the README's commands.
    from tests.test_readme import fenced_blocks

    readme = readme_server_commands()
    assert readme[1] == server_command("outputs/demo-model")
    for page in ("docs/demo.md", "docs/vllm.md"):
        blocks = [code.replace("\\\n", " ") for _, code in fenced_blocks((ROOT / page).read_text())]
        commands = [" ".join(line.split("#")[0].split()) for code in blocks for line in code.splitlines()]
        assert all(command in commands for command in readme), page
