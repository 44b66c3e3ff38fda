"""One generation round of `CoBAGRPOTrainer`, as functions of plain values that tests call without a trainer.

A round gives each of its M distinct prompts a group of completions (docs/algorithm.md, "One training step"):

1. `plan_round` (process 0): the pass rates p_i from the history (and the offline prior; with two phases, the fresh
   screening results), the allocator's group sizes, the top-up of units it reports as stranded, the rescue of groups
   the screening found all-equal, the metrics and the allocation-log record. No state changes: the history and the
   allocator are only read.
2. `score_round` (every process, on the rewards gathered from all processes): advantages over each whole group (all
   phases), `group_weighting`, zero-spread groups, successes per group, and this process's rows of the batch. In a
   two-phase round `screen_round` scores the screening phase first: successes and zero spread per prompt.
3. `observe_round` (every process, identically): the one place where the pass-rate history and the capability
   estimate F_t change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from coba_trl.advantages import group_advantages, prompt_weights, zero_spread_groups
from coba_trl.allocation import fill_to_budget
from coba_trl.allocation.history import merge_appearances
from coba_trl.checkpoint import decode_round
from coba_trl.phases import drop_rows, merge_phase_outputs, rescue_counts, round_rows
from coba_trl.round_log import finite, plain
from coba_trl.telemetry import budget_metrics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Screening:
    """Phase 1 of a two-phase round: `rollouts` completions for every prompt, each prompt's successes, and the prompts
    whose completions were all rewarded alike (`zero_spread`, the groups `rescue` gives more rows)."""

    rollouts: int
    successes: np.ndarray
    zero_spread: np.ndarray


@dataclass
class RoundPlan:
    """What a round generates: each prompt's whole group size (all phases) and the pass rates that decided it."""

    prompt_ids: list
    group_sizes: np.ndarray
    pass_rates: np.ndarray  # the estimates the allocation used (NaN = unseen)
    screening: Screening | None = None  # phase 1 of a two-phase round, whose rows count towards each group
    rescued: np.ndarray | None = None  # groups the rescue gave rows to (None without rescue, or when replayed)
    observe: bool = True  # False when a resumed run regenerates a round its checkpoint had already observed
    metrics: dict = field(default_factory=dict)
    record: dict | None = None  # the allocation-log record, without the round's successes (fresh rounds only)

    @property
    def remaining(self) -> np.ndarray:
        """Rows each prompt still needs after the screening."""
        return self.group_sizes - (0 if self.screening is None else self.screening.rollouts)


def plan_round(
    prompt_ids: list,
    allocator,
    history,
    budget: int,
    max_generations: int,
    prior: np.ndarray | None = None,
    screening: Screening | None = None,
    rescue: bool = False,
) -> RoundPlan:
    """The round's group sizes from each prompt's pass rate (history, else prior, else unseen).

    With a `screening`, its results count as each prompt's latest appearance (so the estimate is fresh) and its rows
    count towards each group. The released CoBA fallback can strand a few units at B_up and reports them as
    `unallocated`; only those are topped up, so an allocator that under-spends without saying so is refused by
    `check_plan`. With `rescue`, every group whose screening rows have zero spread gets `screening.rollouts` more rows.
    """
    start = time.perf_counter()
    if screening is None:
        pass_rates = history.pass_rates(prompt_ids, prior=prior)
    else:
        rollouts = np.full(len(prompt_ids), screening.rollouts)
        pass_rates = history.pass_rates_after(prompt_ids, screening.successes, rollouts, prior=prior)
    allocated = np.asarray(allocator.allocate(pass_rates, budget), dtype=np.int64)
    allocator_metrics = finite(allocator.metrics())
    group_sizes = allocated
    stranded = int(allocator_metrics.get("unallocated", 0))
    if stranded:
        group_sizes = fill_to_budget(group_sizes, int(group_sizes.sum()) + stranded, max_generations)
    metrics = {  # budget min / max are logged with the mean by `budget_metrics`
        f"coba/{key}": value for key, value in allocator_metrics.items() if key not in ("budget_min", "budget_max")
    }
    rescued = None
    if rescue:
        funded = group_sizes
        rollouts = screening.rollouts
        group_sizes = rescue_counts(funded, screening.zero_spread, rollouts, max_generations, extra=rollouts)
        rescued = group_sizes > funded
        metrics["coba/rescued_groups"] = float(rescued.sum())
        metrics["coba/rescued_rows"] = float((group_sizes - funded)[rescued].sum())
    metrics.update(budget_metrics(group_sizes, pass_rates))
    metrics["coba/allocation_time"] = time.perf_counter() - start
    metrics["coba/prompts_with_history"] = float(len(history))
    record = {
        "prompt_ids": list(prompt_ids),
        "prior_pass_rates": plain(prior),
        "screen_rollouts": None if screening is None else screening.rollouts,
        "screen_successes": None if screening is None else plain(screening.successes),
        "pass_rates": plain(pass_rates),
        "allocator": allocator_metrics,
        "allocated": plain(allocated),
        "group_sizes": plain(group_sizes),
        "rescued": plain(rescued),
    }
    return RoundPlan(list(prompt_ids), group_sizes, pass_rates, screening, rescued, metrics=metrics, record=record)


def replayed_plan(saved: dict | None, prompt_ids: list, screening: Screening | None = None) -> RoundPlan | None:
    """The saved plan of the round a checkpoint was taken inside of, when `prompt_ids` are its prompts: regenerated
    with the same group sizes and not observed a second time. None without a saved plan or for other prompts."""
    decoded = None if saved is None else decode_round(saved, prompt_ids)
    if saved is not None and decoded is None:
        logger.warning(
            "The round in progress saved in the checkpoint has other prompts than the resumed round (was the "
            "dataset, the seed or the batch layout changed?): allocating the resumed round afresh."
        )
    if decoded is None:
        return None
    group_sizes, pass_rates = decoded
    metrics = budget_metrics(group_sizes, pass_rates)
    return RoundPlan(list(prompt_ids), group_sizes, pass_rates, screening, observe=False, metrics=metrics)


def check_plan(plan: RoundPlan, allocator_name: str, num_prompts: int, budget: int) -> None:
    """Refuse group sizes that cannot be generated: one per prompt, each >= 1 and >= the screening's rows, summing to
    the budget."""
    sizes = np.asarray(plan.group_sizes)
    floor = 1 if plan.screening is None else max(plan.screening.rollouts, 1)
    if sizes.shape != (num_prompts,) or sizes.sum() != budget or sizes.min() < floor:
        raise ValueError(
            f"The allocator {allocator_name} returned group sizes {sizes.tolist()}; expected {num_prompts} sizes "
            f">= {floor} summing to generation_batch_size ({budget})."
        )


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


def prior_pass_rates(prompts: list[dict], column: str | None) -> np.ndarray | None:
    """The offline prior pass rate of each prompt row from `column` (None -> NaN, unknown); None without a column."""
    if column is None:
        return None
    return np.array([np.nan if row[column] is None else float(row[column]) for row in prompts])


def group_successes(
    rewards: torch.Tensor, group_ids, num_groups: int, success_index: int, threshold: float
) -> np.ndarray:
    """Successes per group: the success reward >= `threshold` (a NaN reward is a failure)."""
    scores = rewards[:, success_index].float().cpu().numpy()
    success = np.nan_to_num(scores, nan=-np.inf) >= threshold
    return np.bincount(np.asarray(group_ids), weights=success, minlength=num_groups).astype(np.int64)


def success_signal_warning(phases: list[Phase], settings: Scoring, reward_name: str, field_value) -> str | None:
    """A warning when the success reward is not right-or-wrong and `success_threshold` separates none of the round's
    completions: its values are not all 0 and 1 (NaN left out), and no completion reaches the threshold, or every one
    does. Every pass rate is then 0 (or 1) and the allocator has no success signal. None when the round is fine."""
    rewards, _ = round_rows(phases)
    scores = rewards[:, settings.success_index].float().cpu().numpy()
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
    zero_spread: torch.Tensor  # per group: every completion rewarded alike (`zero_spread_groups`)
    successes: np.ndarray  # per group, all phases
    batch: dict  # this process's rows: TRL's output (merged over phases) with the round's advantages
    group_weights: torch.Tensor | None = None  # per group, with group_weighting="prompt"
    dropped_groups: int | None = None  # with zero_variance_groups="drop": groups out of the loss, and their tokens
    dropped_tokens: float = 0.0


@dataclass(frozen=True)
class Scoring:
    """The trainer settings `score_round` applies (TRL's advantage options and the CoBA ones)."""

    reward_weights: torch.Tensor
    scale_rewards: str
    multi_objective_aggregation: str
    group_weighting: str
    zero_variance_groups: str
    success_index: int
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
            trainer._success_index,
            args.success_threshold,
            trainer._tokenizer.pad_token_id,
        )


def screen_round(phase: Phase, settings: Scoring, num_groups: int, rollouts: int) -> Screening:
    """The screening phase of a two-phase round scored per prompt: its successes and its zero-spread groups."""
    rewards, group_ids = round_rows([phase])
    index, threshold = settings.success_index, settings.success_threshold
    successes = group_successes(rewards, group_ids.cpu(), num_groups, index, threshold)
    aggregation = settings.multi_objective_aggregation
    zero_spread = zero_spread_groups(rewards, group_ids, num_groups, settings.reward_weights, aggregation)
    return Screening(rollouts, successes, zero_spread.cpu().numpy())


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
    weights = None
    if settings.group_weighting == "prompt":  # every prompt's rows together weigh one group of the mean size
        weights = prompt_weights(plan.group_sizes, float(plan.group_sizes.sum()) / num_groups, rewards.device)
        advantages = advantages * weights[group_ids]
    local, offset = [], 0
    for phase in phases:  # this process's rows: its slice of each phase's gathered rows
        rows = len(phase.group_ids) // num_processes
        local.append(torch.arange(offset + rank * rows, offset + (rank + 1) * rows, device=rewards.device))
        offset += len(phase.group_ids)
    local = torch.cat(local)
    if len(phases) == 1:
        batch = phases[0].output
    else:
        batch = merge_phase_outputs([phase.output for phase in phases], settings.pad_token_id)
    batch["advantages"] = advantages[local]
    zero_spread = zero_spread_groups(rewards, group_ids, num_groups, settings.reward_weights, aggregation)
    dropped_groups, dropped_tokens = None, 0.0
    if settings.zero_variance_groups == "drop":
        dropped_groups = int(zero_spread.sum().item())
        dropped_tokens = float(drop_rows(batch, zero_spread[group_ids[local]], gather_sum))
    index, threshold = settings.success_index, settings.success_threshold
    successes = group_successes(rewards, group_ids.cpu(), num_groups, index, threshold)
    return ScoredRound(advantages, zero_spread, successes, batch, weights, dropped_groups, dropped_tokens)


def observe_round(history, allocator, plan: RoundPlan, scored: ScoredRound) -> None:
    """Record the round in the pass-rate history and the capability estimate F_t (identically on every process).

    The history records each whole group. A prompt listed twice in a round is one appearance with the summed counts.
    In a two-phase round F_t comes from the screening alone: a group's size depends on its own screening results, so
    whole-group rates are biased upwards (a prompt that went 2/2 stops at 1.0, one that went 0/2 gets more rows and
    regresses towards its true rate), while the screening has the same size for every prompt.
    """
    history.update(plan.prompt_ids, scored.successes, plan.group_sizes)
    screening = plan.screening
    if screening is None:
        observed, rollouts = scored.successes, plan.group_sizes
    else:
        observed, rollouts = screening.successes, np.full(len(plan.prompt_ids), screening.rollouts)
    merged, _ = merge_appearances(plan.prompt_ids, observed, rollouts)
    wins, tries = np.array(list(merged.values()), dtype=np.int64).reshape(-1, 2).T
    allocator.observe(wins / tries)
