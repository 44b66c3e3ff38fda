"""vLLM code paths without vLLM: TRL's own `VLLMGeneration.generate` runs against recording stand-ins for the engine.

vllm is not installed here, so the trainer's `VLLMGeneration` is built without its `__init__` (which would start an
engine or connect to a server) and given a fake `vllm.LLM` (colocate) or a fake `VLLMClient` (server). The TRL code
between the trainer and the engine runs unchanged, so the test sees what a real engine would receive.
"""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import trl.generation.vllm_generation as vllm_generation
import trl.trainer.grpo_trainer as grpo_trainer
from scripts.tiny_coba import TINY_ARGS, parity_reward, prompt_dataset, tiny_model

from coba_trl import CoBAConfig, CoBAGRPOTrainer

SIZES = [1, 9, 5, 1]
COMPLETION = [97, 98, 99]  # "abc", then EOS


class FakeLLM:
    """Colocate mode: stands in for `vllm.LLM`; records the prompts and sampling parameters of each call."""

    def __init__(self, eos_token_id):
        self.eos_token_id, self.calls = eos_token_id, []

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append((prompts, sampling_params))
        tokens = [*COMPLETION, self.eos_token_id]
        logprobs = [{token: SimpleNamespace(rank=1, logprob=-1.0)} for token in tokens]
        return [
            SimpleNamespace(
                prompt_token_ids=prompt["prompt_token_ids"],
                outputs=[SimpleNamespace(token_ids=tokens, logprobs=logprobs)] * sampling_params["n"],
            )
            for prompt in prompts
        ]


class FakeClient:
    """Server mode: stands in for `trl.generation.vllm_client.VLLMClient`; records each `generate` request."""

    def __init__(self, eos_token_id):
        self.eos_token_id, self.calls = eos_token_id, []

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def generate(self, prompts, features, n, **sampling):
        self.calls.append((prompts, n))
        tokens = [*COMPLETION, self.eos_token_id]
        return {
            "prompt_ids": prompts,
            "completion_ids": [tokens for _ in prompts for _ in range(n)],
            "logprobs": [[[-1.0] for _ in tokens] for _ in prompts for _ in range(n)],
        }


@pytest.mark.parametrize("two_phase", [False, True], ids=["one-pass", "two-phase"])
@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_gets_one_row_per_completion_with_n_1(tmp_path, monkeypatch, mode, two_phase):
    model, tokenizer = tiny_model()
    engine = (FakeLLM if mode == "colocate" else FakeClient)(tokenizer.eos_token_id)

    def build_generation(**kwargs):
        generation = object.__new__(vllm_generation.VLLMGeneration)
        generation.__dict__.update(kwargs, generation_kwargs=kwargs["generation_kwargs"] or {})
        generation.sync_weights = lambda: None
        generation.llm = generation.vllm_client = engine
        return generation

    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", build_generation)
    monkeypatch.setattr(vllm_generation, "SamplingParams", dict, raising=False)
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=4,
        min_generations=1,
        max_steps=1,
        use_vllm=True,
        vllm_mode=mode,
        two_phase_rounds=two_phase,
        **TINY_ARGS,
    )
    trainer = CoBAGRPOTrainer(
        model, parity_reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer
    )
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(SIZES)
    trainer.train()

    calls = []
    for call in engine.calls:
        if mode == "colocate":
            prompts, sampling_params = call
            calls.append(([tuple(p["prompt_token_ids"]) for p in prompts], sampling_params["n"]))
        else:
            calls.append(([tuple(p) for p in call[0]], call[1]))
    assert all(n == 1 for _, n in calls)
    assert sum(len(prompts) for prompts, _ in calls) == args.generation_batch_size == sum(SIZES)
    if two_phase:  # one screening row per prompt (min_generations 1), then the rest of each group in a second call
        (screening, _), (rest, _) = calls
        assert sorted(Counter(screening).values()) == [1, 1, 1, 1]
        assert sorted(Counter(rest).values()) == sorted(size - 1 for size in SIZES if size > 1)
    else:
        ((prompts, _),) = calls
        assert sorted(Counter(prompts).values()) == sorted(SIZES)
    assert trainer.state.global_step == 1
