"""Tiny offline CoBA / GRPO runs for the trainer tests, and the script the two-process test launches.

`torchrun --nproc_per_node 2 tests/scripts/tiny_coba.py OUT_DIR` trains a tiny Qwen2 on CPU (gloo) with uneven
groups and writes, per rank, the allocations, the pass-rate history and the row counts to OUT_DIR/rank{R}.json.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from datasets import Dataset  # noqa: E402

from coba_trl.config import CHECKPOINTING_FIELD  # noqa: E402
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2  # noqa: E402

TINY_ARGS = dict(
    max_completion_length=8,
    bf16=False,
    use_cpu=True,
    report_to="none",
    logging_steps=1,
    save_strategy="no",
    **{CHECKPOINTING_FIELD: False},  # TRL's GRPOConfig takes only the installed transformers' name
    ddp_find_unused_parameters=False,  # every parameter gets a gradient: no extra DDP graph traversal (or warning)
    learning_rate=1e-2,
    dataloader_num_workers=0,
    disable_tqdm=True,
)


def prompt_dataset(num_prompts: int = 16, repeats: int = 1) -> Dataset:
    """Plain-text prompts with a stable id column; `repeats` lists every prompt that many times."""
    ids = list(range(num_prompts)) * repeats
    return Dataset.from_dict({"prompt": [f"Question {i}:" for i in ids], "uid": [f"q{i}" for i in ids]})


def parity_reward(completions, **kwargs):
    """1.0 for an even-length completion: a random but deterministic-given-the-completion success."""
    return [float(len(c) % 2 == 0) for c in completions]


def text_parity_reward(completions, **kwargs):
    """`parity_reward` of each completion's text, plain or conversational (the demo's)."""
    return parity_reward([c[-1]["content"] if isinstance(c, list) else c for c in completions])


def step_reward(completions, uid, trainer_state, **kwargs):
    """A reward that depends only on the prompt and the step, so runs agree whatever the completions."""
    return [float((int(u[1:]) + trainer_state.global_step) % 3 == 0) for u in uid]


def step_parity_reward(completions, uid, trainer_state, **kwargs):
    """`step_reward`, plus 0.25 for an even-length completion: the successes (reward >= 1) and so the allocations
    depend only on the prompt and the step, but a group's rewards differ, so its rows carry advantages and a loss."""
    parity = parity_reward([c[-1]["content"] if isinstance(c, list) else c for c in completions])
    return [s + 0.25 * p for s, p in zip(step_reward(completions, uid, trainer_state), parity, strict=True)]


def tiny_model(hidden_size: int = 16):
    tokenizer = build_byte_tokenizer()
    return build_tiny_qwen2(tokenizer, hidden_size=hidden_size), tokenizer


class Recorder:
    """Records, per generation round, the gathered rewards and the local advantages a trainer produces."""

    def __init__(self, trainer):
        self.rewards, self.advantages, self.allocations = [], [], []
        calculate, generate = trainer._calculate_rewards, trainer._generate_and_score_completions

        def record_rewards(*args, **kwargs):
            rewards = calculate(*args, **kwargs)
            self.rewards.append(rewards.clone())
            return rewards

        self.local_rows = []  # per round: (prompt text, completion parity, advantage) of this process's rows
        self.completions = []  # per round: the completion text of each of this process's rows
        self.trained_tokens = []  # per round: the completion tokens of each of this process's rows the loss counts
        self.num_items = []  # per round: TRL's token normaliser, num_items_in_batch
        tokenizer = trainer.processing_class

        def record_advantages(inputs):
            output = generate(inputs)
            self.advantages.append(output["advantages"].clone())
            if trainer.model.training:
                prompts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
                # every token after a completion's end is a special one (its end, then padding): decoded without the
                # completion mask, which zero_variance_groups="drop" zeroes, each row keeps its text
                completions = tokenizer.batch_decode(output["completion_ids"], skip_special_tokens=True)
                parity = parity_reward(completions)
                self.completions.append(completions)
                self.local_rows.append(list(zip(prompts, parity, output["advantages"].tolist(), strict=True)))
                self.trained_tokens.append(output["completion_mask"].sum(1).tolist())
                self.num_items.append(float(output["num_items_in_batch"]))
            return output

        trainer._calculate_rewards = record_rewards
        trainer._generate_and_score_completions = record_advantages
        if hasattr(trainer, "allocator"):
            allocate = trainer.allocator.allocate

            def record_allocation(pass_rates, total_budget):
                sizes = allocate(pass_rates, total_budget)
                self.allocations.append([int(s) for s in sizes])
                return sizes

            trainer.allocator.allocate = record_allocation


def assert_runs_agree(coba, coba_log: Recorder, grpo, grpo_log: Recorder) -> None:
    """Two runs, recorded by `Recorder`, saw equal rewards and advantages at every round and logged equal losses."""
    import torch

    assert len(coba_log.rewards) == len(grpo_log.rewards) >= 2
    for ours, theirs in zip(coba_log.rewards, grpo_log.rewards, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    for ours, theirs in zip(coba_log.advantages, grpo_log.advantages, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    ours = [h["loss"] for h in coba.state.log_history if "loss" in h]
    theirs = [h["loss"] for h in grpo.state.log_history if "loss" in h]
    np.testing.assert_allclose(ours, theirs, atol=1e-6, rtol=0)


class RoundRecorder:
    """Records every training round a CoBA trainer plans: (prompt ids, group sizes), in order."""

    def __init__(self, trainer):
        self.rounds, self.plans = [], []
        plan_round = trainer.round_runner.plan

        def record(*args, **kwargs):
            plan = plan_round(*args, **kwargs)
            self.rounds.append(([str(i) for i in plan.prompt_ids], [int(s) for s in plan.group_sizes]))
            self.plans.append(plan)
            return plan

        trainer.round_runner.plan = record


# 2 processes x 3 completions x 2 steps per generation, G = 4: 12 completions for 3 distinct prompts per round, a layout
# where the prompts of a round do not divide over the processes (stock GRPO trains it).
ODD_LAYOUT = dict(per_device_train_batch_size=3, num_generations=4, steps_per_generation=2, max_steps=6, seed=3)


def _odd_layout_args(out_dir: str, **overrides):
    """A CoBAConfig of `ODD_LAYOUT`."""
    from coba_trl import CoBAConfig

    config = dict(ODD_LAYOUT, min_generations=1, prompt_id_column="uid", **TINY_ARGS)
    return CoBAConfig(output_dir=out_dir, **{**config, **overrides})


def main(out_dir: str, mode: str = "scripted", resume_from: str | None = None) -> None:
    """Two-process run; every rank dumps what it saw to OUT_DIR/rank{R}.json, then tears down cleanly.

    `scripted`: scripted uneven group sizes, parity reward, groups without spread dropped from the loss. `coba`: the CoBA allocator with a step-dependent success
    reward (`step_parity_reward`: the completions' parity adds a loss), a checkpoint every step (resume with a third argument, the checkpoint folder). `two-phase`: `coba` with two-phase
    rounds and rescued zero-variance groups. `neighbours`: `coba` with `pass_rate_neighbour_column` (two levels). `fail`: `scripted` with an allocator that raises in round 2, on process 0
    only; every rank writes the error it raised to OUT_DIR/rank{R}.error. `uniform`: the uniform allocator, parity
    reward; `grpo`: TRL's GRPOTrainer in the same layout.
    """
    from trl import GRPOConfig, GRPOTrainer

    from coba_trl import CoBAGRPOTrainer

    model, tokenizer = tiny_model()
    dataset = prompt_dataset(6, repeats=2)  # 3 prompts per round: later rounds see prompts with history
    if mode == "grpo":
        args = GRPOConfig(output_dir=out_dir, **ODD_LAYOUT, **TINY_ARGS)
        trainer = GRPOTrainer(model, parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    elif mode == "uniform":
        args = _odd_layout_args(out_dir, budget_allocator="uniform")
        trainer = CoBAGRPOTrainer(model, parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    elif mode == "scripted":
        args = _odd_layout_args(out_dir, pass_rate_window=3, zero_variance_groups="drop")
        trainer = CoBAGRPOTrainer(model, parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
        sizes = iter([[1, 9, 2], [2, 3, 7], [6, 5, 1]])
        trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    elif mode == "fail":
        args = _odd_layout_args(out_dir)
        trainer = CoBAGRPOTrainer(model, parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
        calls = []

        def allocate(pass_rates, total_budget):
            calls.append(total_budget)
            if len(calls) == 2:
                raise ValueError("the allocator failed in round 2")
            return np.array([4, 4, 4])

        trainer.allocator.allocate = allocate
        try:
            trainer.train()
        except Exception as error:
            with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.error"), "w") as f:
                f.write(f"{type(error).__name__}: {error}")
            raise
        return
    else:
        extra = {
            "two-phase": dict(two_phase_rounds=True, zero_variance_groups="rescue", min_generations=2),
            "neighbours": dict(pass_rate_neighbour_column="level", pass_rate_prior_strength=2.0),
        }.get(mode, {})
        if mode == "neighbours":
            dataset = dataset.add_column("level", [int(uid[1:]) % 2 for uid in dataset["uid"]])
        args = _odd_layout_args(
            out_dir, max_steps=8, coba_window=3, pass_rate_window=2, save_strategy="steps", save_steps=1, **extra
        )
        reward = step_parity_reward if mode == "coba" else step_reward
        trainer = CoBAGRPOTrainer(model, reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    coba = isinstance(trainer, CoBAGRPOTrainer)
    recorder, rounds = Recorder(trainer), RoundRecorder(trainer) if coba else None
    trainer.train(resume_from_checkpoint=resume_from)
    seen = {
        "rows": [len(a) for a in recorder.advantages],
        "rewards": [r.tolist() for r in recorder.rewards],
        "local_rows": recorder.local_rows,
        "completions": recorder.completions,
        "trained_tokens": recorder.trained_tokens,
        "num_items": recorder.num_items,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "weights": [float(p.detach().double().sum()) for p in trainer.model.parameters()],
        "global_step": trainer.state.global_step,
    }
    if coba:
        seen.update(
            rounds=rounds.rounds,
            history=trainer.pass_rate_history.state_dict(),
            allocator=trainer.allocator.state_dict(),
            pass_rates=[plan.pass_rates.tolist() for plan in rounds.plans],
            neighbours=None
            if trainer.round_runner.neighbours is None
            else trainer.round_runner.neighbours.state_dict(),
        )
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(seen, f)
    # The script owns the process group: destroy it, then leave without interpreter finalization, which a gloo worker
    # thread still releasing a collective's tensors can abort (a PyTorch bug; docs/training.md, Teardown).
    trainer.accelerator.end_training()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
