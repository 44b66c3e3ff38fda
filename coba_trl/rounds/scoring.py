"""A round's scoring, on the rewards gathered from all processes, as functions of plain values.

1. `screen_round` (two-phase rounds): the screening phase scored per prompt, its successes and zero-spread groups.
2. `score_round` (every process): advantages over each whole group (all phases, TRL's formulas), `group_weighting`,
   zero-spread groups, successes per group, and this process's rows of the batch for the loss.
3. `observe_round` (every process, identically): the one place where the pass-rate history and the capability
   estimate F_t change.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from coba_trl.allocation.history import merge_appearances
from coba_trl.rounds.advantages import group_advantages, prompt_weights, zero_spread_groups
from coba_trl.rounds.phases import drop_rows, local_positions, merge_phase_outputs, round_rows
from coba_trl.rounds.plan import RoundPlan, Screening


@dataclass
class Phase:
    """One generation pass of a round (two with `two_phase_rounds`)."""

    output: dict  # TRL's batch for this process's rows
    rewards: torch.Tensor  # gathered from all processes, (rows, reward functions)
    group_ids: np.ndarray  # group of each gathered row, in the order TRL gathers rows (process 0's rows first)


def check_phase_rewards(rewards: torch.Tensor | None, rows: int, num_funcs: int) -> None:
    """The rewards TRL gathered for a phase must cover its `rows` completions, one column per reward function."""
    if rewards is None or tuple(rewards.shape) != (rows, num_funcs):
        found = None if rewards is None else tuple(rewards.shape)
        raise RuntimeError(
            f"The round's gathered rewards have shape {found}, but its plan has {rows} completions for {num_funcs} "
            "reward function(s). TRL's reward path no longer matches what CoBAGRPOTrainer expects; install a tested "
            "TRL version (see coba_trl.compat)."
        )


def success_scores(rewards: torch.Tensor, success_indices: tuple[int, ...]) -> np.ndarray:
    """Each row's success reward: the first of the success reward functions (`success_indices`, in order) that scored
    it; NaN where none did (an environment's reward leaves the rows of other environments unscored)."""
    scores = rewards[:, success_indices[0]]
    for index in success_indices[1:]:
        scores = torch.where(torch.isnan(scores), rewards[:, index], scores)
    return scores.float().cpu().numpy()


def group_successes(
    rewards: torch.Tensor, group_ids, num_groups: int, success_indices: tuple[int, ...], threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """(successes, scored rollouts) per group: a row is a success when its success reward is >= `threshold`; a row
    without a success reward (NaN) is neither a success nor a failure, and not counted as a rollout."""
    scores = success_scores(rewards, success_indices)
    scored = ~np.isnan(scores)
    success = scored & (np.nan_to_num(scores, nan=-np.inf) >= threshold)
    group_ids = np.asarray(group_ids)
    count = functools.partial(np.bincount, group_ids, minlength=num_groups)
    return count(weights=success).astype(np.int64), count(weights=scored).astype(np.int64)


def success_signal_warning(phases: list[Phase], settings: Scoring, reward_name: str, field_value) -> str | None:
    """A warning when the success reward is not right-or-wrong and `success_threshold` separates none of the round's
    completions: its values are not all 0 and 1 (NaN left out), and no completion reaches the threshold, or every one
    does. Every pass rate is then 0 (or 1) and the allocator has no success signal. None when the round is fine."""
    rewards, _ = round_rows(phases)
    scores = success_scores(rewards, settings.success_indices)
    scores = scores[~np.isnan(scores)]
    if scores.size == 0 or np.isin(scores, (0.0, 1.0)).all():
        return None
    reached = scores >= settings.success_threshold
    if reached.any() and not reached.all():
        return None
    low, high, threshold = float(scores.min()), float(scores.max()), settings.success_threshold
    outcome = "every completion reached" if reached.all() else "no completion reached"
    rate = "1 (every prompt very easy)" if reached.all() else "0 (every prompt very hard)"
    return (
        f"The success reward {reward_name!r} (success_reward_func={field_value!r}; None means the first reward "
        f"function) took values from {low:g} to {high:g} in this round, not only 0 and 1, and {outcome} "
        f"success_threshold ({threshold:g}): a success is a completion whose success reward is >= success_threshold, "
        f"so every pass rate is {rate} and the allocator has no success signal. Set success_threshold to the reward "
        "value that counts as a success (between those values), or success_reward_func to a right-or-wrong reward "
        "function. This warning is given once."
    )


@dataclass
class ScoredRound:
    """A round's advantages and zero-spread groups, and this process's batch of completion rows for the loss."""

    advantages: torch.Tensor  # of each row (`round_rows` order), as the loss sees them (after `group_weighting`)
    zero_spread: torch.Tensor  # per group: no policy gradient (`zero_spread_groups`: rewards alike, advantages 0)
    successes: np.ndarray  # per group, all phases
    scored: np.ndarray  # rows per group with a success reward (not NaN), all phases: the rollouts the history counts
    batch: dict  # this process's rows: TRL's output (merged over phases) with the round's advantages
    group_weights: torch.Tensor | None = None  # per group, with group_weighting="prompt"
    dropped_groups: int | None = None  # with zero_variance_groups="drop": groups out of the loss, and their tokens
    dropped_tokens: float = 0.0


def unscored_groups_warning(scored: ScoredRound, prompt_ids: list, reward_name: str, field_value) -> str | None:
    """A warning when some prompt of the round had no completion with a success reward (all NaN): it gets no pass
    rate, as with several environments when `success_reward_func` names only one of their rewards. None otherwise."""
    unscored = np.flatnonzero(np.asarray(scored.scored) == 0)
    if unscored.size == 0:
        return None
    return (
        f"{unscored.size} prompt(s) of this round (the first: {prompt_ids[unscored[0]]!r}) had no completion with a "
        f"success reward: {reward_name!r} (success_reward_func={field_value!r}) left them all unscored (NaN), so "
        "these prompts get no pass rate. With several environments, name each one's reward in success_reward_func "
        "(the first that scores a completion defines its success). This warning is given once."
    )


@dataclass(frozen=True)
class Scoring:
    """The trainer settings `score_round` applies (TRL's advantage options and the CoBA ones)."""

    reward_weights: torch.Tensor
    scale_rewards: str
    multi_objective_aggregation: str
    group_weighting: str
    zero_variance_groups: str
    success_indices: tuple[int, ...]
    success_threshold: float
    pad_token_id: int

    @classmethod
    def of(cls, trainer) -> Scoring:
        """The settings of a `CoBAGRPOTrainer` (TRL's attributes and its `CoBAConfig`), read when a round is scored."""
        args = trainer.args
        return cls(
            trainer.reward_weights,
            trainer.scale_rewards,
            trainer.multi_objective_aggregation,
            args.group_weighting,
            args.zero_variance_groups,
            trainer._success_indices,
            args.success_threshold,
            trainer._tokenizer.pad_token_id,
        )


def screen_round(phase: Phase, settings: Scoring, num_groups: int, rollouts: int) -> Screening:
    """The screening phase of a two-phase round scored per prompt: its successes and its zero-spread groups."""
    rewards, group_ids = round_rows([phase])
    indices, threshold = settings.success_indices, settings.success_threshold
    successes, scored = group_successes(rewards, group_ids.cpu(), num_groups, indices, threshold)
    zero_spread = flat_groups(rewards, group_ids, num_groups, settings)
    return Screening(rollouts, successes, zero_spread.cpu().numpy(), scored)


def flat_groups(rewards: torch.Tensor, group_ids: torch.Tensor, num_groups: int, settings: Scoring) -> torch.Tensor:
    """Per group: no policy gradient, as `zero_spread_groups` judges it from the rewards and their advantages."""
    weights, scale, aggregation = settings.reward_weights, settings.scale_rewards, settings.multi_objective_aggregation
    advantages = group_advantages(rewards, group_ids, num_groups, weights, scale, aggregation)
    return zero_spread_groups(rewards, group_ids, num_groups, weights, aggregation, advantages)


def score_round(
    plan: RoundPlan,
    phases: list[Phase],
    settings: Scoring,
    rank: int = 0,
    num_processes: int = 1,
    gather_sum: Callable = lambda n: n,
) -> ScoredRound:
    """Advantages over each whole group (all phases, TRL's formulas), `group_weighting`, zero-spread groups and, with
    `zero_variance_groups="drop"`, their rows out of the loss (`gather_sum` sums a count over processes). Process
    `rank` of `num_processes` holds an equal slice of each phase's gathered rows, as TRL slices them."""
    rewards, group_ids = round_rows(phases)
    num_groups = len(plan.group_sizes)
    aggregation = settings.multi_objective_aggregation
    advantages = group_advantages(
        rewards, group_ids, num_groups, settings.reward_weights, settings.scale_rewards, aggregation
    )
    zero_spread = zero_spread_groups(rewards, group_ids, num_groups, settings.reward_weights, aggregation, advantages)
    weights = None
    if settings.group_weighting == "prompt":  # every prompt's rows together weigh one group of the mean size
        weights = prompt_weights(plan.group_sizes, float(plan.group_sizes.sum()) / num_groups, rewards.device)
        advantages = advantages * weights[group_ids]
    local = torch.as_tensor(local_positions(phases, rank, num_processes), device=rewards.device)
    if len(phases) == 1:
        batch = phases[0].output
    else:
        batch = merge_phase_outputs([phase.output for phase in phases], settings.pad_token_id)
    batch["advantages"] = advantages[local]
    dropped_groups, dropped_tokens = None, 0.0
    if settings.zero_variance_groups == "drop":
        dropped_groups = int(zero_spread.sum().item())
        dropped_tokens = float(drop_rows(batch, zero_spread[group_ids[local]], gather_sum))
    indices, threshold = settings.success_indices, settings.success_threshold
    successes, scored = group_successes(rewards, group_ids.cpu(), num_groups, indices, threshold)
    return ScoredRound(advantages, zero_spread, successes, scored, batch, weights, dropped_groups, dropped_tokens)


def observe_round(history, allocator, plan: RoundPlan, scored: ScoredRound) -> None:
    """Record the round in the pass-rate history and the capability estimate F_t (identically on every process).

    The history records each whole group: its successes out of its rows that have a success reward (a group with none
    is not an appearance). A prompt listed twice in a round is one appearance with the summed counts. In a two-phase
    round F_t comes from the screening alone: a group's size depends on its own screening results, so whole-group
    rates are biased upwards (a prompt that went 2/2 stops at 1.0, one that went 0/2 gets more rows and regresses
    towards its true rate), while the screening has the same size for every prompt.
    """
    history.update(plan.prompt_ids, scored.successes, scored.scored)
    screening = plan.screening
    observed, rollouts = (scored.successes, scored.scored) if screening is None else screening.outcomes
    merged, _ = merge_appearances(plan.prompt_ids, observed, rollouts)
    if merged:  # a round in which no row had a success reward tells nothing about F_t
        wins, tries = np.array(list(merged.values()), dtype=np.int64).reshape(-1, 2).T
        allocator.observe(wins / tries)
