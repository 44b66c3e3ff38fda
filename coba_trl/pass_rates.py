"""Offline per-prompt pass rates of a training set, for `CoBAConfig.prior_pass_rate_column` (docs/algorithm.md,
"Known weak points").

Epoch 1 of a CoBA-RL run is a uniform split: no prompt has a pass-rate history yet. Scoring the training set once
beforehand with the model to be trained (k samples per prompt, graded like the training reward) gives every prompt
a prior pass rate p_i, so the allocation starts at step 1. Two commands (`examples/evaluate.py` calls this module):

    python examples/evaluate.py --model_name_or_path Qwen/Qwen2.5-7B-Instruct \\
        --train_dataset BytedTsinghua-SIA/DAPO-Math-17k --k 8 --output_dir outputs/pass_rates
    accelerate launch --config_file recipes/accelerate/zero3_8gpu.yaml examples/train_qwen.py \\
        --config recipes/qwen2.5-7b-instruct_coba.yaml \\
        --dataset_name outputs/pass_rates/train_pass_rates.parquet --prior_pass_rate_column pass_rate

A sample succeeds when its reward is >= `success_threshold` (1.0 by default), as in the trainer. The written file is
the normalised training set (`coba_trl.data.load_dapo_math`) with its prompt as the plain user text (the "processed"
DAPO schema, so it loads back as a training set with the same prompts and prompt ids) plus the `pass_rate` column.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
from datasets import Dataset

from coba_trl.evaluation import GenerateFn

PASS_RATE_COLUMN = "pass_rate"
PASS_RATES_FILE = "train_pass_rates.parquet"


def pass_rates(
    completions: list[list[str]], solutions: list[str], reward_func: Callable, success_threshold: float = 1.0
) -> list[float]:
    """Share of each prompt's scored completions whose reward is >= `success_threshold`: a NaN / None reward is neither
    a success nor a failure, as in training; NaN for a prompt none of whose completions was scored."""
    flat = [text for row in completions for text in row]
    gold = [solution for row, solution in zip(completions, solutions, strict=True) for _ in row]
    rewards = np.array([np.nan if r is None else r for r in reward_func(flat, gold)], dtype=float)
    scored = ~np.isnan(rewards)
    success = scored & (np.nan_to_num(rewards, nan=-np.inf) >= success_threshold)
    bounds = np.cumsum([0] + [len(row) for row in completions])
    rates = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        tries = int(scored[start:end].sum())
        rates.append(float(success[start:end].sum() / tries) if tries else float("nan"))
    return rates


def score_training_set(
    dataset: Dataset,
    generate: GenerateFn,
    k: int,
    reward_func: Callable,
    success_threshold: float = 1.0,
    column: str = PASS_RATE_COLUMN,
) -> Dataset:
    """`dataset` (rows with chat `prompt` and `solution`) with `column` = the pass rate of k samples per prompt."""
    completions = generate(list(dataset["prompt"]), k)
    rates = pass_rates(completions, list(dataset["solution"]), reward_func, success_threshold)
    if column in dataset.column_names:
        dataset = dataset.remove_columns(column)
    return dataset.add_column(column, rates)


def write_pass_rates(dataset: Dataset, output_dir: str) -> str:
    """Write the scored set as ``<output_dir>/train_pass_rates.parquet``, loadable by `load_dapo_math`."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, PASS_RATES_FILE)
    dataset.map(lambda row: {"prompt": row["prompt"][-1]["content"]}).to_parquet(path)
    return path


def describe(rates: list[float]) -> str:
    """One line: how many prompts are unsolved, partly solved and solved."""
    rates = np.asarray(rates)
    return (
        f"{rates.size} prompts, mean pass rate {np.nanmean(rates):.3f}: unsolved {np.mean(rates == 0):.1%}, "
        f"partly solved {np.mean((rates > 0) & (rates < 1)):.1%}, solved {np.mean(rates == 1):.1%}"
    )
