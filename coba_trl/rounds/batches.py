"""A round's generation batches: what every round holds, whatever its mode.

A round generates one batch (its M prompts with the whole budget, screened first with `two_phase_rounds`) and, with
`zero_variance_groups="refill"`, further batches of replacement prompts (`coba_trl.rounds.refill`). `combined` views
all batches as one round (group ids offset batch by batch) for the metrics, the pass-rate history and the capability
estimate; `round_record` is the round's line of the allocation log (`coba_trl.rounds.log`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from coba_trl.rounds.log import plain
from coba_trl.rounds.metrics import budget_metrics
from coba_trl.rounds.phases import local_positions
from coba_trl.rounds.plan import RoundPlan, Screening


@dataclass
class GenerationBatch:
    """One batch of a round: its prompts, plan, generation phases and scoring (`coba_trl.rounds.scoring`)."""

    plan: RoundPlan
    phases: list
    scored: object  # ScoredRound


def combined(batches: list[GenerationBatch]):
    """All batches seen as one round: (plan, scored, phases) with each batch's group ids offset by the groups before
    it, for `log_round` and `observe_round`."""
    if len(batches) == 1:
        return batches[0].plan, batches[0].scored, batches[0].phases
    offsets = np.cumsum([0] + [len(b.plan.group_sizes) for b in batches[:-1]])
    phases = [
        replace(phase, group_ids=np.asarray(phase.group_ids) + offset)
        for batch, offset in zip(batches, offsets, strict=True)
        for phase in batch.phases
    ]
    plans = [batch.plan for batch in batches]
    concat = np.concatenate
    screening = None
    if plans[0].screening is not None:
        screens = [plan.screening for plan in plans]
        scored_screens = [screen.outcomes[1] for screen in screens]
        screening = Screening(
            screens[0].rollouts,
            concat([screen.successes for screen in screens]),
            concat([screen.zero_spread for screen in screens]),
            concat(scored_screens),
        )
    rescued = None if plans[0].rescued is None else concat([plan.rescued for plan in plans])
    group_sizes = concat([plan.group_sizes for plan in plans])
    pass_rates = concat([plan.pass_rates for plan in plans])
    metrics = {**plans[0].metrics, **budget_metrics(group_sizes, pass_rates)}
    plan = RoundPlan(
        [prompt_id for p in plans for prompt_id in p.prompt_ids],
        group_sizes,
        pass_rates,
        screening,
        rescued,
        observe=all(p.observe for p in plans),
        metrics=metrics,
    )
    scores = [batch.scored for batch in batches]
    weights = None if scores[0].group_weights is None else torch.cat([s.group_weights for s in scores])
    scored = replace(
        scores[0],
        advantages=torch.cat([s.advantages for s in scores]),
        zero_spread=torch.cat([s.zero_spread for s in scores]),
        successes=concat([s.successes for s in scores]),
        scored=concat([s.scored for s in scores]),
        group_weights=weights,
    )
    return plan, scored, phases


def process_groups(phase, num_processes: int) -> list[list[list[int]]]:
    """Per process, the [group, rows] it generated in `phase` (its slice of the phase's gathered rows)."""
    group_ids = np.asarray(phase.group_ids)
    per_process = [group_ids[local_positions([phase], rank, num_processes)] for rank in range(num_processes)]
    return [
        [[int(group), int(rows)] for group, rows in zip(*np.unique(part, return_counts=True), strict=True)]
        for part in per_process
    ]


def round_record(
    batches: list[GenerationBatch], group_weighting: str, skipped: list, chosen, draws: bool, num_processes: int = 1
) -> dict:
    """The allocation-log record of a round (`coba_trl.rounds.log`): its first batch as every round records it and,
    when the round draws its prompts (refill, skipping), the prompts skipped while drawing each batch (`skipped`, one
    list per batch), the groups discarded and each refill batch's own record (prompts, pass rates, group sizes,
    successes). Each batch records which groups each of the `num_processes` processes generated, phase by phase."""

    def batch_record(batch: GenerationBatch, skipped_here: list) -> dict:
        record = {**batch.plan.record, "group_weighting": group_weighting}
        record.update(successes=plain(batch.scored.successes), scored_rollouts=plain(batch.scored.scored))
        record["process_groups"] = [process_groups(phase, num_processes) for phase in batch.phases]
        if draws:
            record["skipped_prompts"] = list(skipped_here)
        if chosen is not None:
            record["discarded"] = np.flatnonzero(batch.scored.zero_spread.cpu().numpy()).tolist()
        return record

    record = batch_record(batches[0], skipped[0] if draws else [])
    if draws:
        record["refills"] = [batch_record(b, here) for b, here in zip(batches[1:], skipped[1:], strict=True)]
        if chosen is not None:
            record["rows_trained"] = int(len(chosen.kept))
            record["bound_reached"] = bool(chosen.bound_reached)
    return record
