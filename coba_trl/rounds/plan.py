"""A round's plan: which group size each of its M distinct prompts gets, as functions of plain values.

`plan_round` (process 0) reads the pass rates p_i from the history (and the offline prior; with two phases, the fresh
screening results), asks the allocator for the group sizes, tops up the units it reports as stranded, rescues the
groups the screening found all-equal, and builds the metrics and the allocation-log record (docs/algorithm.md, "One
training step"). No state changes: the history and the allocator are only read. `replayed_plan` gives back the plan of
a round a checkpoint was saved inside of (saved as JSON by `encode_round`); `check_plan` refuses sizes that cannot be
generated.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from coba_trl.allocation import fill_to_budget
from coba_trl.allocation.history import prompt_id_from_json
from coba_trl.rounds.log import finite, plain
from coba_trl.rounds.metrics import budget_metrics
from coba_trl.rounds.phases import rescue_counts

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Screening:
    """Phase 1 of a two-phase round: `rollouts` completions for every prompt, each prompt's successes out of its
    `scored` rows (those with a success reward), and the prompts whose completions were all rewarded alike
    (`zero_spread`, the groups `rescue` gives more rows)."""

    rollouts: int
    successes: np.ndarray
    zero_spread: np.ndarray
    scored: np.ndarray | None = None  # None: every row scored

    @property
    def outcomes(self) -> tuple[np.ndarray, np.ndarray]:
        """(successes, scored rollouts) per prompt, as the pass-rate history records them."""
        scored = np.full(len(self.successes), self.rollouts) if self.scored is None else self.scored
        return self.successes, scored


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
        pass_rates = history.pass_rates_after(prompt_ids, *screening.outcomes, prior=prior)
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


def encode_round(prompt_ids: list, group_sizes, pass_rates) -> dict:
    """A round plan as plain JSON (NaN pass rates, i.e. unseen prompts, as null)."""
    return {
        "prompt_ids": list(prompt_ids),
        "group_sizes": [int(size) for size in group_sizes],
        "pass_rates": [None if math.isnan(rate) else float(rate) for rate in pass_rates],
    }


def decode_round(saved: dict, prompt_ids: list) -> tuple[np.ndarray, np.ndarray] | None:
    """The (group sizes, pass rates) of a saved round plan when it is the plan for `prompt_ids`, else None."""
    if [prompt_id_from_json(i) for i in saved["prompt_ids"]] != list(prompt_ids):
        return None
    pass_rates = np.array([np.nan if rate is None else rate for rate in saved["pass_rates"]], dtype=np.float64)
    return np.asarray(saved["group_sizes"], dtype=np.int64), pass_rates


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


def prior_pass_rates(prompts: list[dict], column: str | None) -> np.ndarray | None:
    """The offline prior pass rate of each prompt row from `column` (None -> NaN, unknown); None without a column."""
    if column is None:
        return None
    return np.array([np.nan if row[column] is None else float(row[column]) for row in prompts])
