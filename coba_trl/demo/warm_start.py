"""Warm-start phase of the CPU demo: a short supervised pass so the tiny model starts RL mediocre, not at zero.

Plain torch training loop (teacher forcing, loss on the completion tokens only): for a model this small it is
faster and simpler than a full ``SFTTrainer``. The phase is deliberately short, so that the model answers the easy
levels but not yet the hard ones and RL has room to improve it.
"""

from __future__ import annotations

import functools
import random

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, get_scheduler

from coba_trl.demo.config import WARM_START_WARMUP_STEPS
from coba_trl.demo.task import Problem


def encode_pair(tokenizer: PreTrainedTokenizerBase, problem: Problem) -> tuple[list[int], int]:
    """Token ids of prompt + completion + end-of-turn, and the index where the completion starts."""
    prompt_ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": problem.question}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    completion_ids = tokenizer(problem.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return list(prompt_ids) + completion_ids, len(prompt_ids)


def _collate(batch: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for row, (ids, start) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, start : len(ids)] = input_ids[row, start : len(ids)]
    return input_ids, attention, labels


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    steps: int,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    seed: int = 0,
    log_every: int = 50,
    lr_scheduler_type: str = "constant",
) -> list[float]:
    """Run ``steps`` AdamW steps of supervised fine-tuning on ``problems``; returns the loss of each step.

    The learning rate rises over the first 20 steps, then stays (``"constant"``) or decays to 0 at the last step
    (``"linear"`` or ``"cosine"``, transformers' schedules of those names, which need more than 20 steps)."""
    # Each problem is encoded when first drawn: a short warm start draws a few hundred of a pool of thousands.
    encoded = functools.cache(lambda index: encode_pair(tokenizer, problems[index]))
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    if lr_scheduler_type == "constant":
        warmup = WARM_START_WARMUP_STEPS
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    elif steps == 0 or steps > WARM_START_WARMUP_STEPS:
        schedule = get_scheduler(
            lr_scheduler_type, optimizer, num_warmup_steps=WARM_START_WARMUP_STEPS, num_training_steps=steps
        )
    else:  # the decay would never start
        raise ValueError(
            f"A {lr_scheduler_type} warm start needs more than {WARM_START_WARMUP_STEPS} steps (got {steps})."
        )
    model.train()
    losses = []
    for step in range(steps):
        batch = [encoded(rng.randrange(len(problems))) for _ in range(batch_size)]
        input_ids, attention, labels = _collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(f"[warm-start] step {step + 1}/{steps}  loss {loss.item():.3f}", flush=True)
    model.eval()
    return losses


def demo_warm_start(model, tokenizer, problems: list[Problem], demo, seed: int, log_every: int = 0) -> list[float]:
    """`warm_start` with the settings of `demo` (`DemoArguments`): its steps, learning rate and schedule."""
    return warm_start(
        model,
        tokenizer,
        problems,
        steps=demo.demo_warm_start_steps,
        learning_rate=demo.demo_warm_start_learning_rate,
        seed=seed,
        log_every=log_every,
        lr_scheduler_type=demo.demo_warm_start_lr_scheduler_type,
    )


def warm_started_demo(seed: int = 0, demo=None):
    """The demo's tiny model after its warm start for `seed`, its tokenizer, and the demo's training and held-out
    problems, as the demo builds them (without its logging): for benchmarks that start where the demo's RL starts.
    `demo` (`DemoArguments`, default the demo's) sets the task's levels, sizes and warm start, as a regime's recipe
    does. Returns (model, tokenizer, train problems, held-out problems)."""
    from coba_trl.demo.config import WARM_START_PROBLEMS, DemoArguments
    from coba_trl.demo.model import build_demo_model
    from coba_trl.demo.task import demo_problem_sets

    demo = DemoArguments() if demo is None else demo
    model, tokenizer = build_demo_model(demo, seed)
    train, heldout, sft = demo_problem_sets(
        demo.demo_num_train_prompts,
        demo.demo_num_heldout,
        WARM_START_PROBLEMS,
        seed,
        operands_per_level=tuple(demo.demo_operands),
        digits=demo.demo_operand_digits,
        warm_start_levels=demo.demo_warm_start_levels,
        warm_start_upper_share=demo.demo_warm_start_upper_share,
    )
    demo_warm_start(model, tokenizer, sft, demo, seed)
    return model, tokenizer, train, heldout
