"""The setups of docs/setups.md on a real vLLM (vLLM's CPU build): a `rollout_func` written for GRPOTrainer that
samples with the trainer's colocated engine, and tool calls on two processes with a vLLM server."""

import os
import sys
from collections import Counter

import pytest
from scripts.tiny_coba import TINY_ARGS, prompt_dataset
from scripts.tool_tasks import assert_two_processes_gave_every_row_its_rollout, launch_two_processes
from scripts.vllm_fixtures import KV_CACHE_GIB, MODEL_SHAPE
from scripts.vllm_runs import RATIO_BOUND, ratio_extremes
from transformers import AutoTokenizer

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.rounds.log import read_rounds

pytestmark = pytest.mark.vllm


def test_a_grpo_rollout_func_samples_with_the_colocated_engine(tmp_path, vllm_models, shared_engines, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    seen, calls = [], []

    def rollout_func(prompts, trainer):
        """As written for GRPOTrainer: every num_generations-th row is a distinct prompt; the engine samples each."""
        tokenizer = trainer.processing_class
        distinct = [tokenizer.encode(p, add_special_tokens=False) for p in prompts[:: trainer.num_generations]]
        rows = [ids for ids in distinct for _ in range(trainer.num_generations)]
        calls.append(trainer.num_generations)
        prompt_ids, completion_ids, logprobs, _ = trainer.vllm_generation.generate(
            prompts=rows, images=None, num_generations=trainer.num_generations
        )
        top = [[step[0] for step in steps] for steps in logprobs]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": top}

    def reward(completions, uid, **kwargs):
        seen.append(Counter(uid))
        return [float(len(c) % 2) for c in completions]

    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=4,
        min_generations=2,
        max_generations=8,
        max_steps=6,
        use_vllm=True,
        vllm_mode="colocate",
        prompt_id_column="uid",
        log_allocations=True,
        seed=5,
        **TINY_ARGS,
    )
    model_dir = vllm_models["tied"]
    trainer = CoBAGRPOTrainer(
        model_dir,
        reward,
        args=args,
        train_dataset=prompt_dataset(8),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        rollout_func=rollout_func,
    )
    trainer.train()
    logged = read_rounds(str(tmp_path))
    assert [dict(counts) for counts in seen] == [
        dict(zip(entry["prompt_ids"], entry["group_sizes"], strict=True)) for entry in logged
    ]
    assert any(len(set(entry["group_sizes"])) > 1 for entry in logged) and max(calls) > 4
    # TRL's importance-sampling ratio: the engine's logprobs (through the rollout_func) match the trainer's
    extremes = ratio_extremes(trainer)
    assert len(extremes) == 6 and all(1 - RATIO_BOUND <= low and high <= 1 + RATIO_BOUND for low, high in extremes)


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    """A server on a tiny model with room for tool schemas in its prompts (2,048 positions); (base URL, folder)."""
    from coba_trl.generation.cpu_server import running_server, server_command
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    root = tmp_path_factory.mktemp("tool_server")
    folder = str(root / "model")
    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, max_position_embeddings=2048, **MODEL_SHAPE).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB, "HF_HUB_OFFLINE": "1"}
    command = server_command(folder, str(root / "server"), python=sys.executable)
    with running_server(command, str(root / "server" / "vllm.sock"), str(root / "server.log"), env=env) as base_url:
        yield base_url, folder


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_tool_calls_on_two_processes_with_the_vllm_server(tmp_path, tool_server):
    base_url, folder = tool_server
    env = {"TOOL_TASKS_VLLM_SERVER": base_url, "TOOL_TASKS_MODEL": folder}
    ranks = launch_two_processes(tmp_path, "tools", env=env)
    assert_two_processes_gave_every_row_its_rollout(ranks, read_rounds(str(tmp_path)), "tools")
