"""Tiny CoBA runs on a streaming `IterableDataset`, for the one-process tests and the two-process script.

`torchrun --nproc_per_node 2 tests/scripts/streaming_coba.py OUT_DIR [CHECKPOINT]` trains on a stream of 8 prompts in
two shards of unequal length (5 and 3 rows), 4 prompts per round (3 with STREAM_PER_DEVICE=6), over three passes, saving every step; every rank
writes what it planned and what reached its reward function to OUT_DIR/rank{R}.json.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from datasets import IterableDataset  # noqa: E402

try:  # imported by the tests (from tests/), or run as a script by torchrun (from tests/scripts/)
    from scripts.tiny_coba import TINY_ARGS, RoundRecorder, tiny_model
except ImportError:
    from tiny_coba import TINY_ARGS, RoundRecorder, tiny_model

STREAM_ARGS = dict(per_device_train_batch_size=16, num_generations=4, max_steps=6, seed=5, **TINY_ARGS)


def _rows(shards):
    for start, stop in shards:
        for i in range(start, stop):
            yield {"prompt": f"Question {i}:", "uid": f"q{i}"}


def prompt_stream(num_prompts: int = 8, split: int = 5) -> IterableDataset:
    """A stream of `num_prompts` plain-text prompts with a `uid` column, in two shards of `split` and the rest."""
    return IterableDataset.from_generator(_rows, gen_kwargs={"shards": [(0, split), (split, num_prompts)]})


class CountingReward:
    """Records, per call, the rows of each prompt id. Rewards the parity of the completion's length (a success at even
    length), or with `by_step` a function of the prompt and the step alone, so that runs agree whatever the
    completions (a resumed run trains the saved rows of the round it was interrupted in)."""

    __name__ = "counting_reward"

    def __init__(self, by_step: bool = False):
        self.calls = []
        self.by_step = by_step

    def __call__(self, completions, uid, trainer_state, **kwargs):
        self.calls.append(dict(Counter(uid)))
        if self.by_step:
            return [float((int(u[1:]) + trainer_state.global_step) % 3 == 0) for u in uid]
        return [float(len(completion) % 2 == 0) for completion in completions]


def stream_trainer(out_dir: str, dataset=None, by_step: bool = False, **overrides):
    """A CoBA trainer on `prompt_stream()` (ids in `uid`), with a `CountingReward` and a `RoundRecorder` attached."""
    from coba_trl import CoBAConfig, CoBAGRPOTrainer

    model, tokenizer = tiny_model()
    args = CoBAConfig(output_dir=out_dir, **{**STREAM_ARGS, "prompt_id_column": "uid", **overrides})
    reward = CountingReward(by_step)
    dataset = prompt_stream() if dataset is None else dataset
    trainer = CoBAGRPOTrainer(model, reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    return trainer, reward, RoundRecorder(trainer)


def main(out_dir: str, resume_from: str | None = None) -> None:
    # 2 processes x 8 completions: 16 completions for 4 prompts per round, as one process with 16 gets; with
    # STREAM_PER_DEVICE=6, 12 completions for 3 prompts, which the two processes load as 2 + 2 (one padding row).
    per_device = int(os.environ.get("STREAM_PER_DEVICE", "8"))
    trainer, reward, rounds = stream_trainer(
        out_dir, per_device_train_batch_size=per_device, save_strategy="steps", save_steps=1
    )
    trainer.train(resume_from_checkpoint=resume_from)
    seen = {
        "rounds": rounds.rounds,
        "reward_calls": reward.calls,
        "history": trainer.pass_rate_history.state_dict(),
        "allocator": trainer.allocator.state_dict(),
        "global_step": trainer.state.global_step,
    }
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(seen, f)
    from coba_trl.distributed import leave_multiprocess_cpu_run

    leave_multiprocess_cpu_run()  # a gloo teardown bug: docs/training.md, "Teardown"


if __name__ == "__main__":
    main(*sys.argv[1:])
