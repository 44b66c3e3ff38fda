"""What `CoBAGRPOTrainer` checks before TRL builds the trainer: the dataset and rewards (`dataset.py`,
`rewards.py`), the two-phase layout over processes, GRPO features and generation settings.

Config-only checks (min / max generations, allocator parameters) live in `CoBAConfig.__post_init__`; these need the
dataset, the number of processes or the trainer's arguments. Every error names the field and the fix.
"""

from __future__ import annotations

from coba_trl.validation.dataset import check_dataset, dataset_columns
from coba_trl.validation.rewards import (
    check_reward_columns,
    check_reward_values,
    check_success_reward,
    reward_func_names,
)


def check_construction(args, train_dataset, reward_funcs, trainer_kwargs: dict) -> None:
    """Everything `CoBAGRPOTrainer` checks before TRL builds the trainer (`args` is its `CoBAConfig`)."""
    environment_factory = trainer_kwargs.get("environment_factory")
    check_features(environment_factory, train_dataset)
    check_dataset(
        train_dataset,
        args.prompt_id_column,
        args.prior_pass_rate_column,
        environment_factory is None,
        args.pass_rate_neighbour_column,
    )
    if trainer_kwargs.get("rollout_func") is None:  # a rollout_func's extra fields reach the rewards as columns too
        check_reward_values(train_dataset, check_reward_columns(reward_funcs, dataset_columns(train_dataset) or []))
    if environment_factory is None and reward_funcs is not None:  # environments add their rewards when built
        check_success_reward(args.success_reward_func, reward_func_names(reward_funcs))
    check_generation_kwargs(args.generation_kwargs, args.use_vllm)
    if args.two_phase_rounds:
        prompts_per_round = args.prompts_per_round
        check_two_phase_layout(prompts_per_round, args.min_generations, args.world_size)
        check_two_phase_inputs(dataset_columns(train_dataset) or [])
    if args.zero_variance_groups == "refill":
        fix = "zero_variance_groups='keep' or 'drop'"
        check_two_phase_inputs(dataset_columns(train_dataset) or [], "zero_variance_groups='refill'", fix)


def check_two_phase_layout(prompts_per_round: int, min_generations: int, num_processes: int) -> None:
    """The screening phase's rows (M x min_generations) must divide evenly over the processes."""
    if prompts_per_round * min_generations % num_processes != 0:
        raise ValueError(
            f"two_phase_rounds screens each of the round's {prompts_per_round} prompts with min_generations "
            f"({min_generations}) completions: {prompts_per_round * min_generations} rows, which must divide evenly "
            f"over the {num_processes} processes. Change min_generations or the batch layout so that it does."
        )


IMAGE_COLUMNS = ("image", "images")  # the columns TRL's GRPOTrainer reads images from


def check_two_phase_inputs(columns: list[str], setting: str = "two_phase_rounds", fix: str = "two_phase_rounds=False"):
    """Several generation phases (two phases, refill) cannot merge TRL's image inputs
    (`coba_trl.rounds.phases.MULTIMODAL`): refuse a dataset with images."""
    images = [column for column in IMAGE_COLUMNS if column in columns]
    if images:
        raise ValueError(
            f"{setting} is set and train_dataset has the image column {images[0]!r}: the image inputs "
            f"(pixel_values, ...) of several generation phases cannot be merged into one batch. Set {fix} for this "
            "dataset."
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


def check_features(environment_factory, train_dataset) -> None:
    """Refuse environments without a train_dataset: pass rates are kept per dataset prompt (docs/setups.md)."""
    if environment_factory is not None and train_dataset is None:
        raise ValueError(
            "environment_factory without a train_dataset is not supported by CoBAGRPOTrainer: the prompts then come "
            "from each environment's reset(), so no prompt is seen twice and there is nothing to keep a pass rate "
            "for, which is what CoBA allocates by. Pass a train_dataset of tasks, one row per task (each rollout's "
            "environment is reset with its row's columns as keyword arguments), or train with GRPOTrainer."
        )
