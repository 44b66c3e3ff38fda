"""What the real-vLLM tests read off a training run: the group sizes planned and the completions rewarded per round,
and TRL's importance-sampling ratio at every step."""

from __future__ import annotations

from collections import Counter

from scripts.tiny_coba import TINY_ARGS, parity_reward, prompt_dataset
from transformers import AutoTokenizer

from coba_trl import CoBAConfig, CoBAGRPOTrainer

RATIO_BOUND = 0.03  # every step's min and max importance-sampling ratio within 1 +- this
LEARNING_RATE = 1e-2  # moves the tiny models' weights visibly in a few steps


class RoundWatch:
    """Per training round: the allocator's group size per prompt id, and how many completions of each prompt the
    reward function scored (both phases of a two-phase round together)."""

    def __init__(self):
        self.planned, self.rewarded = [], []
        self.requests = []  # per round, in server mode: (n, number of prompts) of each request sent to the server

    def reward(self, completions, uid, **kwargs):
        self.rewarded[-1].update(uid)
        return parity_reward(completions)

    def attach(self, trainer) -> None:
        plan_round, generate = trainer.round_runner.plan, trainer._generate_and_score_completions

        def plan(*args, **kwargs):
            plan = plan_round(*args, **kwargs)
            self.planned.append({str(i): int(k) for i, k in zip(plan.prompt_ids, plan.group_sizes, strict=True)})
            return plan

        def generate_round(inputs):
            if trainer.model.training:
                self.rewarded.append(Counter())
                self.requests.append([])
            return generate(inputs)

        trainer.round_runner.plan, trainer._generate_and_score_completions = plan, generate_round
        client = getattr(trainer.vllm_generation, "vllm_client", None) if trainer.use_vllm else None
        if client is not None:
            send = client.generate

            def record_request(prompts, n=1, **kwargs):
                self.requests[-1].append((n, len(prompts)))
                return send(prompts, n=n, **kwargs)

            client.generate = record_request


def coba_trainer(
    model_dir: str,
    output_dir: str,
    watch: RoundWatch,
    reward=None,
    peft_config=None,
    train_dataset=None,
    **overrides,
) -> CoBAGRPOTrainer:
    """A CoBA trainer on `model_dir` with vLLM generation: 4 prompts of 8 per round, 16 completions, uneven groups.

    `reward` replaces the parity reward `watch` counts with (then only the planned sizes are recorded);
    `train_dataset` replaces the 8 prompts of `prompt_dataset(8)`."""
    config = dict(
        per_device_train_batch_size=16,
        num_generations=4,
        min_generations=2,
        max_generations=8,
        max_steps=6,
        use_vllm=True,
        vllm_mode="colocate",
        prompt_id_column="uid",
        seed=5,
        **{**TINY_ARGS, "learning_rate": LEARNING_RATE},
    )
    args = CoBAConfig(output_dir=output_dir, **{**config, **overrides})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = CoBAGRPOTrainer(
        model_dir,
        reward or watch.reward,
        args=args,
        train_dataset=prompt_dataset(8) if train_dataset is None else train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    watch.attach(trainer)
    return trainer


def ratio_extremes(trainer) -> list[tuple[float, float]]:
    """(min, max) of TRL's importance-sampling ratio at every logged training step."""
    key = "sampling/importance_sampling_ratio/"
    return [(log[key + "min"], log[key + "max"]) for log in trainer.state.log_history if key + "min" in log]


def assert_vllm_followed_the_trainer(trainer, watch: RoundWatch) -> None:
    """Every step's ratio within 1 +- RATIO_BOUND; every prompt got exactly its group size; groups were uneven."""
    extremes = ratio_extremes(trainer)
    assert len(extremes) == trainer.state.global_step
    assert all(1 - RATIO_BOUND <= low and high <= 1 + RATIO_BOUND for low, high in extremes), extremes
    assert [dict(counts) for counts in watch.rewarded] == watch.planned
    assert any(len(set(sizes.values())) > 1 for sizes in watch.planned)
