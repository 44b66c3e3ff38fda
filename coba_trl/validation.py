"""Construction-time checks of a CoBA run: the round layout over processes, the dataset, and GRPO features.

Config-only checks (min / max generations, allocator parameters) live in `CoBAConfig.__post_init__`; these need the
dataset, the number of processes or the trainer's arguments. Every error names the field and the fix.
"""

from __future__ import annotations

from datasets import Dataset, IterableDataset


def check_round_layout(
    generation_batch_size: int, num_generations: int, num_processes: int, steps_per_generation: int
) -> int:
    """Check that a round's distinct prompts and completion rows divide evenly; returns the prompts per round."""
    prompts_per_round = generation_batch_size // num_generations
    if prompts_per_round % num_processes != 0:
        raise ValueError(
            f"The prompts per generation round, generation_batch_size / num_generations = {generation_batch_size} / "
            f"{num_generations} = {prompts_per_round}, must be divisible by the number of processes ({num_processes}), "
            "because each process loads the same number of distinct prompts. Change per_device_train_batch_size, "
            "steps_per_generation or num_generations so that it is."
        )
    rows_per_process = generation_batch_size // num_processes
    if generation_batch_size % num_processes != 0 or rows_per_process % steps_per_generation != 0:
        raise ValueError(
            f"Each process holds generation_batch_size / num_processes = {generation_batch_size} / {num_processes} "
            f"completions per round, which must be a whole number divisible by steps_per_generation "
            f"({steps_per_generation}). Set generation_batch_size to a multiple of "
            f"num_processes * steps_per_generation."
        )
    return prompts_per_round


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
