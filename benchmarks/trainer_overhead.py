"""Overhead of CoBAGRPOTrainer over GRPOTrainer: step time on one process.

    python benchmarks/trainer_overhead.py [--steps 16] [--trials 4]

1. Step time: the same tiny Qwen2, the same completions per step (32 of exactly 16 tokens), one process, fp32 on CPU.
   GRPOTrainer and CoBAGRPOTrainer (coba allocator) run in turn with the same seed, `--trials` times; each pair gives
   a ratio of median step times. Prints the median ratio over pairs and its range. Target <= 1.05. Every completion
   has the same length (`min_new_tokens`), so that both runs generate the same number of tokens: with lengths left to
   sampling, the two runs of a seed sample different lengths, which moved a pair's ratio by several percent either
   way. CoBA's own code per round (its `_generate_and_score_completions` less TRL's method inside it: plan, deal,
   expansion, scoring, logging) is timed too and printed as a share of GRPO's step.
How a round's rows lie over processes: `benchmarks/process_layout.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from unittest.mock import patch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")




def _reward(completions, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]


def _step_times(use_coba: bool, steps: int, seed: int) -> list[float]:
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from coba_trl import CoBAConfig, CoBAGRPOTrainer
    from coba_trl.config import CHECKPOINTING_FIELD
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    tokenizer = build_byte_tokenizer()
    model = build_tiny_qwen2(tokenizer, hidden_size=32)
    ids = list(range(16)) * 8  # 8 distinct prompts per round: from round 3 on, allocations use pass rates
    dataset = Dataset.from_dict({"prompt": [f"Question {i}:" for i in ids], "uid": ids})
    common = dict(
        per_device_train_batch_size=32,
        num_generations=4,
        max_completion_length=16,
        max_steps=steps,
        bf16=False,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        **{CHECKPOINTING_FIELD: False},  # TRL's GRPOConfig takes only the installed transformers' name
        disable_tqdm=True,
        seed=seed,
        generation_kwargs={"min_new_tokens": 16},  # every completion 16 tokens: equal generation work in both runs
    )
    own = []  # CoBA's own time per round: its round method less TRL's method inside it
    with tempfile.TemporaryDirectory() as output_dir:
        if use_coba:
            args = CoBAConfig(output_dir, max_generations=16, prompt_id_column="uid", **common)
            trainer = CoBAGRPOTrainer(model, _reward, args=args, train_dataset=dataset, processing_class=tokenizer)
            _time_own_code(trainer, own)
        else:
            args = GRPOConfig(output_dir, **common)
            trainer = GRPOTrainer(model, _reward, args=args, train_dataset=dataset, processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h][1:]  # drop the warm-up step
    return times, own[1:]


def _time_own_code(trainer, own: list) -> None:
    """Append to `own`, per round, the time `trainer` spends in its round method outside TRL's method."""
    import time

    from trl import GRPOTrainer

    inner = []
    round_method, original = trainer._generate_and_score_completions, GRPOTrainer._generate_and_score_completions

    def trl_method(inputs):
        start = time.perf_counter()
        try:
            return original(trainer, inputs)
        finally:
            inner.append(time.perf_counter() - start)

    def timed(inputs):
        inner.clear()
        start = time.perf_counter()
        with patch.object(GRPOTrainer, "_generate_and_score_completions", lambda self, rows: trl_method(rows)):
            output = round_method(inputs)
        own.append(time.perf_counter() - start - sum(inner))
        return output

    trainer._generate_and_score_completions = timed


def step_time_ratio(steps: int, trials: int) -> float:
    ratios, grpo_ms, coba_ms, own_shares = [], [], [], []
    for trial in range(trials):  # paired and interleaved: load from other processes hits both runs of a pair alike
        grpo = statistics.median(_step_times(False, steps, seed=trial)[0])
        coba_times, own = _step_times(True, steps, seed=trial)
        coba = statistics.median(coba_times)
        ratios.append(coba / grpo)
        own_shares.append(statistics.median(own) / grpo)
        grpo_ms.append(grpo * 1e3)
        coba_ms.append(coba * 1e3)
    ratio = statistics.median(ratios)
    print(
        f"step time over {trials} paired trials (median, range): GRPOTrainer {statistics.median(grpo_ms):.1f} ms "
        f"({min(grpo_ms):.1f}-{max(grpo_ms):.1f}), CoBAGRPOTrainer {statistics.median(coba_ms):.1f} ms "
        f"({min(coba_ms):.1f}-{max(coba_ms):.1f}); ratio {ratio:.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
        "target <= 1.05"
    )
    share = statistics.median(own_shares)
    print(
        f"CoBA's own code per round: {share:.3f} of GRPOTrainer's step (range {min(own_shares):.3f}-"
        f"{max(own_shares):.3f}), i.e. a step-time ratio of {1 + share:.3f} at equal generation time"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    step_time_ratio(args.steps, args.trials)


if __name__ == "__main__":
    main()
