"""Per-round allocation metrics for the trainer's logs (wandb / trackio / tensorboard through TRL's `_metrics`)."""

from __future__ import annotations

import numpy as np

# Pass-rate bins for "mean budget per bin": unseen prompts, five half-open bins over [0, 1), and exactly 1.0.
PASS_RATE_BINS = (
    ("0.0-0.2", 0.0, 0.2),
    ("0.2-0.4", 0.2, 0.4),
    ("0.4-0.6", 0.4, 0.6),
    ("0.6-0.8", 0.6, 0.8),
    ("0.8-1.0", 0.8, 1.0),
)


def budget_metrics(group_sizes: np.ndarray, pass_rates: np.ndarray) -> dict[str, float]:
    """Budget min / mean / max and the mean budget of the prompts in each pass-rate bin (empty bins are left out)."""
    sizes = np.asarray(group_sizes, dtype=np.float64)
    rates = np.asarray(pass_rates, dtype=np.float64)
    metrics = {"budget/min": sizes.min(), "budget/mean": sizes.mean(), "budget/max": sizes.max()}
    masks = {"unseen": np.isnan(rates), "1.0": rates == 1.0}
    for name, low, high in PASS_RATE_BINS:
        masks[name] = (rates >= low) & (rates < high)
    for name, mask in masks.items():
        if mask.any():
            metrics[f"budget/mean_by_pass_rate/{name}"] = sizes[mask].mean()
    return {key: float(value) for key, value in metrics.items()}


def round_metrics(plan, scored, phases: list, reward_weights, reward_func_names: list[str]) -> tuple[dict, dict]:
    """A round's metrics as `(replaced, added)`: values for keys TRL logged once per phase over groups of one, and
    CoBA's own keys (`coba/...`).

    TRL's `frac_reward_zero_std` saw groups of one: it becomes the fraction of the round's groups with zero spread
    (`coba_trl.rounds.advantages.zero_spread_groups`, as `drop` judges them). With two phases its `reward`,
    `reward_std` and `rewards/<name>/mean|std` saw each phase alone: all are recomputed over the whole round (unscorable rows, NaN for
    every reward function, left out as TRL leaves them out). TRL's `reward` averages over completion rows, so under
    CoBA a prompt weighs as much as its group is large; `coba/reward_per_prompt` and
    `coba/rewards/<name>/mean_per_prompt` average each group's mean over prompts instead: the quantity GRPO's
    `reward` measures (all its groups are equal), for comparing curves. `coba/success_rate` is the round's share of
    successful completions (success reward >= `success_threshold`) among those with a success reward.
    """
    import torch
    from trl.trainer.utils import nanstd

    from coba_trl.rounds.advantages import segment_nanmean, weighted_rewards
    from coba_trl.rounds.phases import round_rows

    (rewards, group_ids), num_groups, num_phases = round_rows(phases), len(plan.group_sizes), len(phases)
    weighted = weighted_rewards(rewards, reward_weights)
    replaced = {"frac_reward_zero_std": scored.zero_spread.float().mean().item()}
    if num_phases > 1:
        replaced.update(reward=torch.nanmean(weighted).item(), reward_std=nanstd(weighted).item())
        for column, name in enumerate(reward_func_names):
            replaced[f"rewards/{name}/mean"] = torch.nanmean(rewards[:, column]).item()
            replaced[f"rewards/{name}/std"] = nanstd(rewards[:, column]).item()
    added = {"coba/reward_per_prompt": torch.nanmean(segment_nanmean(weighted, group_ids, num_groups)).item()}
    scored_rows = np.sum(scored.scored)  # completions with a success reward (NaN: neither success nor failure)
    added["coba/success_rate"] = float(np.sum(scored.successes) / scored_rows) if scored_rows else float("nan")
    for column, name in enumerate(reward_func_names):
        per_prompt = segment_nanmean(rewards[:, column], group_ids, num_groups)
        added[f"coba/rewards/{name}/mean_per_prompt"] = torch.nanmean(per_prompt).item()
    if plan.rescued is not None:  # groups the rescue gave rows to that now have a spread
        added["coba/rescued_with_spread"] = float((plan.rescued & ~scored.zero_spread.cpu().numpy()).sum())
    if scored.dropped_groups is not None:
        added["coba/dropped_groups"] = float(scored.dropped_groups)
        added["coba/dropped_tokens"] = scored.dropped_tokens
    if scored.group_weights is not None:
        added["coba/group_weight_min"] = scored.group_weights.min().item()
        added["coba/group_weight_max"] = scored.group_weights.max().item()
    return replaced, added


def merge_phase_metrics(logged: dict, rows: list[int]) -> dict[str, float]:
    """TRL's `completions/*` and `sampling/*` values of a two-phase round's phases (the last `len(rows)` of each list
    in `logged`), combined into the round's: minima and maxima over phases, means weighted by each phase's rows
    (terminated lengths by its terminated rows; a phase without any, which TRL logs as 0, left out)."""
    num_phases = len(rows)
    rows = np.asarray(rows, dtype=np.float64)
    clipped = np.asarray(logged.get("completions/clipped_ratio", [0.0] * num_phases)[-num_phases:], dtype=np.float64)
    terminated = rows * (1.0 - clipped)
    merged = {}
    for key, values in logged.items():
        if not key.startswith(("completions/", "sampling/")) or len(values) < num_phases:
            continue
        values = np.asarray(values[-num_phases:], dtype=np.float64)
        weights = rows
        if key.endswith("terminated_length"):
            weights, values = terminated[terminated > 0], values[terminated > 0]
            if values.size == 0:
                merged[key] = 0.0
                continue
        if "/min" in key:
            merged[key] = float(values.min())
        elif "/max" in key:
            merged[key] = float(values.max())
        else:
            merged[key] = float(np.average(values, weights=weights))
    return merged


def log_round(trainer_metrics: dict, logged_advantages, plan, scored, phases: list, weights, names) -> None:
    """Replace, in TRL's `_metrics["train"]` and `_logs["advantages"]`, what TRL logged per phase over groups of one
    by the round's values (`round_metrics`, `merge_phase_metrics`), and add CoBA's metrics."""
    num_phases = len(phases)
    replaced, added = round_metrics(plan, scored, phases, weights, names)
    if num_phases > 1:
        replaced.update(merge_phase_metrics(trainer_metrics, [len(phase.group_ids) for phase in phases]))
    for key, value in replaced.items():
        del trainer_metrics[key][-num_phases:]
        trainer_metrics[key].append(value)
    for key, value in {**plan.metrics, **added}.items():
        trainer_metrics[key].append(value)
    for _ in range(min(len(scored.advantages), len(logged_advantages))):  # each phase's zeros out, the round's in
        logged_advantages.pop()
    logged_advantages.extend(scored.advantages.tolist())
