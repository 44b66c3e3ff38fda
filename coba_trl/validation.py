"""Construction-time checks of a CoBA run: the round layout over processes, the dataset, and GRPO features.

Config-only checks (min / max generations, allocator parameters) live in `CoBAConfig.__post_init__`; these need the
dataset, the number of processes or the trainer's arguments. Every error names the field and the fix.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers

from datasets import Dataset, IterableDataset


def check_round_layout(
    generation_batch_size: int, num_generations: int, num_processes: int, steps_per_generation: int
) -> int:
    """Check that a round's completion rows divide evenly over the processes; returns the prompts per round (M).

    M itself need not divide by the number of processes: the sampler pads each process's share of the round's distinct
    prompts (`coba_trl.sampling`), and the completion rows are dealt evenly whatever the group sizes.
    """
    rows_per_process = generation_batch_size // num_processes
    if generation_batch_size % num_processes != 0 or rows_per_process % steps_per_generation != 0:
        raise ValueError(
            f"Each process holds generation_batch_size / num_processes = {generation_batch_size} / {num_processes} "
            f"completions per round, which must be a whole number divisible by steps_per_generation "
            f"({steps_per_generation}). Set generation_batch_size to a multiple of "
            f"num_processes * steps_per_generation."
        )
    return generation_batch_size // num_generations


def check_two_phase_layout(prompts_per_round: int, min_generations: int, num_processes: int) -> None:
    """The screening phase's rows (M x min_generations) must divide evenly over the processes."""
    if prompts_per_round * min_generations % num_processes != 0:
        raise ValueError(
            f"two_phase_rounds screens each of the round's {prompts_per_round} prompts with min_generations "
            f"({min_generations}) completions: {prompts_per_round * min_generations} rows, which must divide evenly "
            f"over the {num_processes} processes. Change min_generations or the batch layout so that it does."
        )


def check_dataset(train_dataset, prompt_id_column: str | None, prior_pass_rate_column: str | None) -> None:
    """The train set must be a map-style `Dataset` holding the configured id and prior columns."""
    if train_dataset is None:
        raise ValueError(
            "CoBAGRPOTrainer needs a train_dataset: pass rates are tracked per dataset prompt. Pass a `Dataset` with "
            "a 'prompt' column."
        )
    if isinstance(train_dataset, IterableDataset):
        raise ValueError(
            "train_dataset is an IterableDataset, which CoBAGRPOTrainer does not support: each round needs indexed, "
            "distinct prompts. Load the dataset without `streaming=True` (or convert it with `Dataset.from_list`)."
        )
    if not isinstance(train_dataset, Dataset):
        raise ValueError(f"train_dataset must be a `datasets.Dataset`, got `{type(train_dataset).__name__}`.")
    for field_name, column in (
        ("prompt_id_column", prompt_id_column),
        ("prior_pass_rate_column", prior_pass_rate_column),
    ):
        if column is not None and column not in train_dataset.column_names:
            raise ValueError(
                f"{field_name} is {column!r}, but train_dataset has no such column (columns: "
                f"{train_dataset.column_names}). Add the column or set {field_name}=None."
            )
    if prior_pass_rate_column is not None:
        check_prior_values(train_dataset[prior_pass_rate_column], prior_pass_rate_column)


def check_prior_values(values, column: str) -> None:
    """Every offline prior must be a pass rate in [0, 1], or None / NaN for unknown."""
    bad = [(row, value) for row, value in enumerate(values) if not _is_pass_rate_or_unknown(value)]
    if bad:
        row, value = bad[0]
        raise ValueError(
            f"prior_pass_rate_column {column!r} must hold pass rates in [0, 1], or None / NaN where unknown; "
            f"{len(bad)} row(s) do not, the first is row {row} with {value!r}. If the column holds percentages, divide "
            f"it by 100 (`dataset.map(lambda row: {{{column!r}: row[{column!r}] / 100}})`)."
        )


def _is_pass_rate_or_unknown(value) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isnan(value) or 0.0 <= value <= 1.0


# Keyword arguments TRL's GRPOTrainer passes to every reward function itself (not from dataset columns).
TRL_REWARD_ARGUMENTS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


def check_reward_columns(reward_funcs, column_names: list[str]) -> None:
    """Each reward function's dataset columns must be in train_dataset, so a missing one fails before training.

    A function needs the columns named by its parameters without a default (other than what TRL passes itself) and
    those listed in its `required_columns` attribute (the packaged math rewards declare `("solution",)`).
    Reward models (names or modules) need only the prompt and completion.
    """
    for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
        if isinstance(func, str) or not callable(func) or hasattr(func, "forward"):
            continue
        declared = func.func if isinstance(func, functools.partial) else func
        needed = set(getattr(declared, "required_columns", ()))
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):  # builtins and C callables have no inspectable signature
            parameters = []
        for parameter in parameters:
            named = parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            if named and parameter.default is parameter.empty and parameter.name not in TRL_REWARD_ARGUMENTS:
                needed.add(parameter.name)
        missing = sorted(needed - set(column_names))
        if missing:
            name = getattr(func, "__name__", type(func).__name__)
            raise ValueError(
                f"The reward function {name!r} needs the dataset column(s) {missing}, which train_dataset lacks "
                f"(columns: {column_names}). Add them, e.g. `dataset.rename_column('answer', {missing[0]!r})`, or "
                "pass a reward function that does not need them."
            )


def check_generation_kwargs(generation_kwargs: dict | None, use_vllm: bool) -> None:
    """Refuse a fixed vLLM sampling seed: under CoBA every completion is its own request, so they would all be equal."""
    if use_vllm and generation_kwargs and generation_kwargs.get("seed") is not None:
        raise ValueError(
            f"generation_kwargs sets seed={generation_kwargs['seed']!r}. CoBAGRPOTrainer asks vLLM for each "
            "completion of a prompt as its own request (n = 1), so one fixed sampling seed would make every "
            "completion of a group identical and every advantage 0. Remove 'seed' from generation_kwargs: without a "
            "per-request seed vLLM draws distinct completions, and TRL already seeds each process's colocated engine."
        )


def check_features(rollout_func, environment_factory) -> None:
    """Reject the GRPOTrainer features whose contract assumes a fixed number of completions per prompt."""
    if environment_factory is not None:
        raise ValueError(
            "environment_factory is not supported by CoBAGRPOTrainer: an environment owns and resets the prompt "
            "itself, so dataset rows do not identify problems and per-prompt pass rates are meaningless. Use "
            "GRPOTrainer, or pass a train_dataset of prompts with reward_funcs (and `tools` for multi-turn calls)."
        )
    if rollout_func is not None:
        raise ValueError(
            "rollout_func is not supported by CoBAGRPOTrainer: its contract returns num_generations completions per "
            "prompt, while CoBA varies the count per prompt. Use the built-in generation (transformers or vLLM "
            "colocate / server) or GRPOTrainer."
        )


def check_success_reward(success_reward_func: str | None, reward_func_names: list[str]) -> int:
    """Index of the reward function that defines a success (the first one when `success_reward_func` is None)."""
    if success_reward_func is None:
        return 0
    if success_reward_func not in reward_func_names:
        raise ValueError(
            f"success_reward_func is {success_reward_func!r}, which is not one of the reward functions "
            f"{reward_func_names}. Set it to one of these names."
        )
    return reward_func_names.index(success_reward_func)
