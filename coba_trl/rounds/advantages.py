"""GRPO advantages over groups of different sizes (docs/algorithm.md,
"Training settings of the released run": (r - mean) / (std + eps) per group).

TRL computes advantages with `rewards.view(-1, num_generations)`, which needs equal groups. These functions take a
group id per row instead and reproduce TRL 1.16's formulas for any group sizes: nan-aware group mean, Bessel-corrected
nan-aware std (NaN when a group has fewer than two scored rows), eps 1e-4, `scale_rewards` "group" / "batch" / "none",
`multi_objective_aggregation` "sum_then_normalize" / "normalize_then_sum", and advantage 0 for rows every reward
function left unscored (NaN) and for a group of one. The batch statistics (the std of `scale_rewards="batch"`, the
mean and std of "normalize_then_sum") are TRL's over the generation batch; a refill round, which trains rows chosen
from several generation batches, takes them over the rows it trains (`batch_rows`), so one step has one scale.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd

EPS = 1e-4


def segment_nanmean(values: torch.Tensor, group_ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per-group mean of `values` (N,), ignoring NaN; NaN for a group without a finite value."""
    valid = ~torch.isnan(values)
    sums = values.new_zeros(num_groups).index_add_(0, group_ids, torch.where(valid, values, 0.0))
    counts = values.new_zeros(num_groups).index_add_(0, group_ids, valid.to(values.dtype))
    return sums / counts


def segment_nanstd(values: torch.Tensor, group_ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per-group Bessel-corrected std of `values` (N,), ignoring NaN, like `trl.trainer.utils.nanstd` on each group."""
    valid = ~torch.isnan(values)
    counts = values.new_zeros(num_groups).index_add_(0, group_ids, valid.to(values.dtype))
    mean = segment_nanmean(values, group_ids, num_groups)
    squared = torch.where(valid, (values - mean[group_ids]) ** 2, 0.0)
    variance = values.new_zeros(num_groups).index_add_(0, group_ids, squared) / (counts - 1)
    return torch.sqrt(torch.where(counts > 1, variance, torch.full_like(variance, float("nan"))))


def weighted_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """Each row's reward (N,): the reward functions' values (N, num_funcs) weighted and summed ignoring NaN, as TRL
    does; NaN for a row every reward function left unscored, so nan-aware means and stds leave it out."""
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)
    rewards = (rewards_per_func * weights).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


def _batch_std(rewards: torch.Tensor) -> torch.Tensor:
    return nanstd(rewards) if rewards.numel() > 1 else torch.zeros((), device=rewards.device)


ZERO_ADVANTAGE = 1e-6  # |advantage| at or below this is no policy gradient: rounding, or rewards that cancel


def group_advantages(
    rewards_per_func: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    reward_weights: torch.Tensor,
    scale_rewards: str = "group",
    multi_objective_aggregation: str = "sum_then_normalize",
    batch_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages (N,) from the gathered rewards (N, num_funcs) and each row's group id in [0, num_groups); the batch
    statistics are taken over the rows `batch_rows` (bool, N) selects, over every row when None."""
    batch = slice(None) if batch_rows is None else batch_rows.to(rewards_per_func.device)
    if multi_objective_aggregation == "sum_then_normalize":
        rewards = weighted_rewards(rewards_per_func, reward_weights)
        advantages = rewards - segment_nanmean(rewards, group_ids, num_groups)[group_ids]
        if scale_rewards == "group":
            advantages = advantages / (segment_nanstd(rewards, group_ids, num_groups)[group_ids] + EPS)
        elif scale_rewards == "batch":
            advantages = advantages / (_batch_std(rewards[batch]) + EPS)
        elif scale_rewards != "none":
            raise ValueError(f"scale_rewards ({scale_rewards!r}) must be one of 'group', 'batch' or 'none'.")
    elif multi_objective_aggregation == "normalize_then_sum":
        normalized = torch.stack(
            [
                (column - segment_nanmean(column, group_ids, num_groups)[group_ids])
                / (segment_nanstd(column, group_ids, num_groups)[group_ids] + EPS)
                for column in rewards_per_func.unbind(dim=1)
            ],
            dim=1,
        )
        # A row stays scorable when only its normalisation is NaN (a one-row group): weighted_rewards would drop it.
        rewards = (normalized * reward_weights.to(normalized.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        advantages = (rewards - torch.nanmean(rewards[batch])) / (_batch_std(rewards[batch]) + EPS)
    else:
        raise ValueError(
            f"multi_objective_aggregation ({multi_objective_aggregation!r}) must be 'sum_then_normalize' or "
            "'normalize_then_sum'."
        )
    return torch.nan_to_num(advantages, nan=0.0)


def zero_spread_groups(
    rewards_per_func: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    reward_weights: torch.Tensor,
    multi_objective_aggregation: str = "sum_then_normalize",
    advantages: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per group: True when it carries no policy gradient: its rewards have zero spread, judged the way
    `group_advantages` normalises them, or its final `advantages` (when given) are all 0.

    With "sum_then_normalize" the spread is that of the weighted reward. With "normalize_then_sum" each reward
    function is normalised on its own: a group is flat when every function with a non-zero weight is flat in it, and
    also when functions that vary inside it cancel, so that every row's advantage is 0 (`ZERO_ADVANTAGE`). NaN
    (unscored) values are left out, as TRL leaves them out; fewer than two scored values (a group of one, or a group
    whose other rows are unscored) count as zero spread, since their advantage is 0 too.
    """
    if multi_objective_aggregation == "normalize_then_sum":
        columns = rewards_per_func[:, reward_weights.to(rewards_per_func.device) != 0].unbind(dim=1)
    else:
        columns = [weighted_rewards(rewards_per_func, reward_weights)]
    flat = torch.ones(num_groups, dtype=torch.bool, device=rewards_per_func.device)
    for column in columns:
        std = torch.nan_to_num(segment_nanstd(column, group_ids, num_groups), nan=0.0)
        flat &= torch.isclose(std, torch.zeros_like(std))
    if advantages is not None:
        moving = (advantages.abs() > ZERO_ADVANTAGE).to(advantages.dtype)  # rows with a policy gradient
        count = advantages.new_zeros(num_groups).index_add_(0, group_ids.to(advantages.device), moving)
        flat |= (count == 0).to(flat.device)
    return flat


def prompt_weights(group_sizes, mean_group_size: float, device=None) -> torch.Tensor:
    """Per-group factor n_bar / n_i of `group_weighting="prompt"`: the rows of a group of n_i completions, each scaled
    by it, together weigh n_bar rows (one GRPO group of the mean size). Exactly 1.0 for every group of the mean size,
    so a uniform round is unchanged bit for bit."""
    sizes = torch.as_tensor(group_sizes, dtype=torch.float32, device=device)
    return mean_group_size / sizes
