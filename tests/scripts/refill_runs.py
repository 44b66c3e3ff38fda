"""Runs for the refill and skipping tests, on one process (imported) or two (`torchrun ... refill_runs.py OUT MODE`).

`settled_reward` makes some prompts always solved (uid q<i>, i % 3 == 0), some never (i % 3 == 1) and the rest mixed:
a mixed prompt's completions are rewarded 1 and 0 by turns, in the order the reward function receives them, so any two
rows of a group that one process generates together differ. `SpendingRecorder` keeps what the reward saw (every
generated completion) and what reached the loss (each round's batch), to compare with the logged figures.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from scripts.tiny_coba import TINY_ARGS, prompt_dataset, tiny_model  # noqa: E402


def settled_reward(completions, uid, **kwargs):
    """1 for prompts q<i> with i % 3 == 0, 0 for i % 3 == 1, 1 and 0 by turns (row order) for the others."""
    return [
        1.0 if int(u[1:]) % 3 == 0 else 0.0 if int(u[1:]) % 3 == 1 else float(position % 2 == 0)
        for position, u in enumerate(uid)
    ]


def settled(uid: str) -> bool:
    return int(uid[1:]) % 3 != 2


def kind_dataset(num_prompts: int = 12):
    """`prompt_dataset` with each prompt's kind (`uid` index % 3: always solved, never, mixed) as its `kind` column,
    the neighbourhood of `pass_rate_neighbour_column="kind"`."""
    dataset = prompt_dataset(num_prompts)
    return dataset.add_column("kind", [int(uid[1:]) % 3 for uid in dataset["uid"]])


class SpendingRecorder:
    """Per trainer: the uids of every completion the reward scored on this process (`seen`, one list per call), and
    each round's batch for the loss on this process (`batches`: advantages, completion mask, num_items_in_batch)."""

    def __init__(self, trainer):
        self.seen, self.batches = [], []
        self.generated = []  # per round: (uid, completion ids) of every row this process generated
        self.rewarded = []  # per round: (uid, completion ids, reward) of every row this process generated
        reward = trainer.reward_funcs[0]
        tokenizer = trainer.processing_class

        def record_reward(completions, uid, **kwargs):
            self.seen.append(list(uid))
            rewards = reward(completions, uid, **kwargs)
            if trainer.model.training:
                rows = list(zip(uid, kwargs["completion_ids"], rewards, strict=True))
                self.generated[-1] += [[u, list(ids)] for u, ids, _ in rows]
                self.rewarded[-1] += [[u, list(ids), r] for u, ids, r in rows]
            return rewards

        record_reward.__name__ = reward.__name__
        trainer.reward_funcs[0] = record_reward
        generate = trainer._generate_and_score_completions

        def record_round(inputs):
            if trainer.model.training:
                self.generated.append([])
                self.rewarded.append([])
            output = generate(inputs)
            if trainer.model.training:
                ids, mask = output["completion_ids"], output["completion_mask"].bool()
                prompts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
                uids = ["q" + prompt.split()[-1].rstrip(":") for prompt in prompts]  # "Question i:" is q<i>
                trained = [i for i, keep in enumerate(mask) if keep.any()]
                self.batches.append(
                    {
                        "advantages": output["advantages"].tolist(),
                        "trained_tokens": output["completion_mask"].sum(1).tolist(),
                        "num_items_in_batch": float(output["num_items_in_batch"]),
                        "trained": [ids[i][mask[i]].tolist() for i in trained],
                        # (uid, completion ids, advantage) of each trained row
                        "trained_rows": [
                            [uids[i], ids[i][mask[i]].tolist(), output["advantages"][i].item()] for i in trained
                        ],
                        # each trained row's prompt and completion masks, to read which side they are padded on
                        "trained_masks": [
                            [output["prompt_mask"][i].tolist(), output["completion_mask"][i].tolist()] for i in trained
                        ],
                    }
                )
            return output

        trainer._generate_and_score_completions = record_round


def assert_refill_logged(trainer, recorder: SpendingRecorder, rows: int | None = None) -> None:
    """The logged completions are those the reward scored, the round refilled at least once, and every trained row
    (`rows` a round on this process, when given) comes from a group with spread unless the round logged its bound."""
    logs = [h for h in trainer.state.log_history if "coba/rollouts_generated" in h]
    assert sum(h["coba/rollouts_generated"] for h in logs) == sum(len(call) for call in recorder.seen)
    assert sum(h["coba/refill_phases"] for h in logs) > 0
    for batch, log in zip(recorder.batches, logs, strict=True):
        assert rows is None or len(batch["advantages"]) == rows
        assert log["coba/refill_bound_reached"] or all(a != 0 for a in batch["advantages"])


def refill_trainer(output_dir, num_prompts: int = 12, train_dataset=None, reward=settled_reward, **overrides):
    """A uniform-allocator refill run on `num_prompts` prompts (4 completions each, 2 prompts per round per process);
    `train_dataset` replaces them (a stream, say), `reward` the reward function."""
    from coba_trl import CoBAConfig, CoBAGRPOTrainer

    model, tokenizer = tiny_model()
    config = dict(
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=6,
        prompt_id_column="uid",
        budget_allocator="uniform",
        zero_variance_groups="refill",
        seed=3,
        **TINY_ARGS,
    )
    args = CoBAConfig(output_dir=str(output_dir), **{**config, **overrides})
    dataset = prompt_dataset(num_prompts) if train_dataset is None else train_dataset
    return CoBAGRPOTrainer(model, reward, args=args, train_dataset=dataset, processing_class=tokenizer)


# Skipping by the chance of spread under each prompt's neighbourhood prior (its kind).
LEVEL_SKIP = {"skip_rule": "spread_chance", "skip_prior": "neighbourhood", "pass_rate_neighbour_column": "kind"}

MODES = {
    "refill": {},
    "refill-skip": {"skip_settled_prompts": True, "max_steps": 12},
    "refill-two-phase": {"two_phase_rounds": True, "min_generations": 2},
    "refill-spread": {"skip_settled_prompts": True, "skip_rule": "spread_chance", "max_steps": 12},
    "refill-level": {"skip_settled_prompts": True, "max_steps": 12, **LEVEL_SKIP},  # on `kind_dataset`
    "diverge": {"skip_settled_prompts": True, "max_steps": 4},  # process 1's dataset in another order
    "resume": {"steps_per_generation": 2, "save_strategy": "steps", "save_steps": 1, "skip_settled_prompts": True},
}


def main(out_dir: str, mode: str, resume_from: str | None = None) -> None:
    """Every rank dumps what it saw to OUT_DIR/rank{R}.json, then leaves the run (`leave_multiprocess_cpu_run`)."""
    from coba_trl.distributed import leave_multiprocess_cpu_run

    dataset = None
    if mode == "diverge" and os.environ.get("RANK") == "1":
        dataset = prompt_dataset(12).shuffle(seed=1)
    if mode == "refill-level":
        dataset = kind_dataset(12)
    trainer = refill_trainer(out_dir, train_dataset=dataset, **MODES[mode])
    recorder = SpendingRecorder(trainer)
    rank = trainer.accelerator.process_index
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except RuntimeError as error:
        with open(os.path.join(out_dir, f"rank{rank}.error"), "w") as f:
            f.write(str(error))
        raise
    result = {
        "seen": recorder.seen,
        "generated": recorder.generated,
        "rewarded": recorder.rewarded,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "weights": [float(p.detach().double().sum()) for p in trainer.model.parameters()],
        "batches": recorder.batches,
        "logs": [{k: v for k, v in h.items() if isinstance(v, (int, float))} for h in trainer.state.log_history],
        "rollouts_generated": trainer.rollouts_generated,
        "history": trainer.pass_rate_history.state_dict(),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    torch.distributed.barrier()
    leave_multiprocess_cpu_run()


if __name__ == "__main__":
    main(*sys.argv[1:])
