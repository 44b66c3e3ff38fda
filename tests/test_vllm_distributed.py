"""CoBA on real vLLM over two processes (CPU, gloo), launched as users launch it: torchrun with colocated engines
(tensor parallel 1 and 2) and with a server, and `accelerate launch` of the main script with `--use_vllm`.

Each run checks, across both processes, that every prompt's completions reached the reward function as many times as
the allocation log says (the completions per prompt each process scored, added up), that both processes scored rows
and agreed on the plan, that the groups differed, and that TRL's importance-sampling ratio stayed within
1 +- `RATIO_BOUND` at every step while the weights moved (vLLM generated with the trainer's weights). One launch per
configuration trains a one-phase and a two-phase run on the same engines (`scripts/vllm_multi.py`).
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from scripts.vllm_runs import RATIO_BOUND

from coba_trl.rounds.log import read_rounds

pytestmark = [pytest.mark.vllm, pytest.mark.distributed, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "scripts" / "vllm_multi.py"
SHARED_MEMORY = Path("/dev/shm")
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
# `--multi_gpu` is accelerate's launcher for several local processes (torchrun underneath); on a machine without GPUs
# the processes run on the CPU over gloo. Without it, `--num_processes 2` (with or without `--cpu`) starts one process.
ACCELERATE_TWO_PROCESSES = "--multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no"
DEMO_FLAGS = (
    "--use_vllm --demo_warm_start_steps 100 --demo_num_heldout 20 --demo_num_train_prompts 16 "
    "--per_device_train_batch_size 16 --max_steps 6 --demo_eval_steps 0 --disable_tqdm true "
    "--reward_funcs tests.scripts.vllm_multi.counting_accuracy_reward"
)


def clean_env(**extra: str) -> dict:
    """The environment of a launch: without this process's rendezvous (a colocated engine of an earlier test in this
    session set one up here and holds its port), one thread per process, 1 GiB of KV cache per engine."""
    env = {name: value for name, value in os.environ.items() if name not in RENDEZVOUS}
    return {**env, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **extra}


def run(command: list[str], timeout: int, **env: str) -> None:
    done = subprocess.run(command, cwd=ROOT, env=clean_env(**env), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def torchrun(out_dir: Path, model_dir: str, mode: str, target: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run([*command, str(SCRIPT), str(out_dir), model_dir, mode, target], timeout=600)


def logged_plans(run_dir: Path) -> list[dict[str, int]]:
    """Per round, each prompt's group size as the allocation log holds it."""
    return [dict(zip(map(str, r["prompt_ids"]), r["group_sizes"], strict=True)) for r in read_rounds(str(run_dir))]


def assert_ratio_bound(extremes: list) -> None:
    assert all(1 - RATIO_BOUND <= low and high <= 1 + RATIO_BOUND for low, high in extremes), extremes


def assert_two_processes_followed_the_plan(run_dir: Path) -> None:
    ranks = [json.loads((run_dir / f"rank{rank}.json").read_text()) for rank in range(2)]
    plans = logged_plans(run_dir)
    assert len(plans) == ranks[0]["global_step"] == 4  # one round per step
    assert ranks[0]["planned"] == ranks[1]["planned"] == plans
    scored = [
        Counter(zero) + Counter(one) for zero, one in zip(ranks[0]["rewarded"], ranks[1]["rewarded"], strict=True)
    ]
    assert scored == plans
    for zero, one in zip(ranks[0]["rewarded"], ranks[1]["rewarded"], strict=True):
        assert sum(zero.values()) == sum(one.values()) == 16  # each process scored its half of the 32 completions
    assert all(len(set(plan.values())) > 1 for plan in plans)  # priors 0.05 to 0.95: uneven groups from round 1
    assert len(ranks[0]["ratio"]) == 4
    assert_ratio_bound(ranks[0]["ratio"])
    assert ranks[0]["moved"] == ranks[1]["moved"] > 0.05


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tensor_parallel", [1, 2], ids=["tp1", "tp2"])
def test_colocated_vllm_on_two_processes(tmp_path, vllm_models, tensor_parallel):
    segments = set(SHARED_MEMORY.glob("*cpushm*"))
    torchrun(tmp_path, vllm_models["tied"], "colocate", str(tensor_parallel))
    for name in ("one-phase", "two-phase"):
        assert_two_processes_followed_the_plan(tmp_path / name)
    # The processes leave through os._exit: the tensor-parallel group's shared memory must not outlive them, or the
    # next launch on this machine stops at engine start (coba_trl.generation.cpu_shm).
    assert set(SHARED_MEMORY.glob("*cpushm*")) == segments


@pytest.mark.timeout(900)
def test_server_with_two_trainer_processes(tmp_path, vllm_server):
    base_url, model_dir = vllm_server
    torchrun(tmp_path, model_dir, "server", base_url)
    for name in ("one-phase", "two-phase"):
        assert_two_processes_followed_the_plan(tmp_path / name)


@pytest.mark.timeout(900)
def test_the_main_script_with_vllm_through_accelerate_launch_on_two_processes(tmp_path):
    counts = tmp_path / "reward_counts"
    counts.mkdir()
    launch = [sys.executable, "-m", "accelerate.commands.launch", *ACCELERATE_TWO_PROCESSES.split()]
    output_dir = tmp_path / "run"
    script = [str(ROOT / "examples" / "train_qwen.py"), *DEMO_FLAGS.split(), "--output_dir", str(output_dir)]
    run([*launch, *script], timeout=600, COBA_REWARD_COUNTS=str(counts))
    calls = [[json.loads(line) for line in (counts / f"rank{rank}.jsonl").read_text().splitlines()] for rank in (0, 1)]
    assert len(calls[0]) == len(calls[1]) == 3  # both processes scored rows in each of the 3 rounds
    scored = [Counter(zero["counts"]) + Counter(one["counts"]) for zero, one in zip(*calls, strict=True)]
    plans = logged_plans(output_dir)
    assert scored == plans
    assert all(sum(plan.values()) == 64 for plan in plans)  # 16 rows x 2 processes x 2 steps per round
    # The warm-started model solves some prompts of round 1, which round 3 (16 prompts, 8 a round) meets again.
    assert any(len(set(plan.values())) > 1 for plan in plans)
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    key = "sampling/importance_sampling_ratio/"
    extremes = [(log[key + "min"], log[key + "max"]) for log in history if key + "min" in log]
    assert len(extremes) == 3  # one round every 2 steps (the demo's steps_per_generation)
    assert_ratio_bound(extremes)
    summary = json.loads((output_dir / "demo_summary.json").read_text())
    assert summary["steps"] == 6 and summary["rollouts"] == 3 * 64
