"""Rounds of several generation batches: dynamic sampling that refills (`zero_variance_groups="refill"`).

A round's first batch is its M prompts with the round's whole budget, screened first with `two_phase_rounds`. With
`refill`, every group without spread (as `drop` judges it) is discarded, and further batches of the epoch's next
prompts (`replacement_count` of them, sized by the allocator) are generated until the round has
`generation_batch_size` rows from groups with spread, or `max_refill_phases` batches were added (docs/spending.md).

Each batch is planned, generated and scored on its own (whole groups, TRL's advantage formulas). The rows the loss
trains on are chosen from all batches on every process alike (`choose_rows`): the rows of groups with spread, in
batch and group order, the first `generation_batch_size` of them (the last group can be cut); when the bound was
reached first, rows of discarded groups fill the batch with their loss mask zeroed, as `drop` leaves them out. The
chosen rows are then dealt evenly over the processes (`deal_chosen_rows`), so each trains `generation_batch_size / P`
rows, as TRL's batching expects, whichever process generated them.

The metrics, the pass-rate history and the capability estimate observe every generated group, kept or discarded
(`coba_trl.rounds.batches.combined`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from coba_trl.rounds.advantages import group_advantages
from coba_trl.rounds.batches import GenerationBatch
from coba_trl.rounds.phases import (
    by_kind,
    local_positions,
    loss_mask,
    merge_phase_outputs,
    round_rows,
    zero_completion_mask,
)


def replacement_count(missing_rows: int, num_generations: int, num_processes: int, screen_rows: int = 0) -> int:
    """How many prompts a refill batch draws: enough for `missing_rows` rows at `num_generations` each, raised until
    the batch's rows (and, with two phases, its `screen_rows` per prompt) divide evenly over the processes."""
    count = max(math.ceil(missing_rows / num_generations), 1)
    while (count * num_generations) % num_processes or (count * screen_rows) % num_processes:
        count += 1
    return count


def rows_with_spread(batch: GenerationBatch) -> int:
    """Rows of `batch`'s groups that have a reward spread."""
    flat = batch.scored.zero_spread.cpu().numpy()
    return int(batch.plan.group_sizes[~flat].sum())


@dataclass
class ChosenRows:
    """The round's rows for the loss, as positions in the round's rows gathered over processes (`gather_round`)."""

    kept: np.ndarray  # rows of groups with spread, in batch and group order
    filler: np.ndarray  # rows of discarded groups that fill the batch when the bound was reached (loss mask zeroed)
    source_rows: (
        np.ndarray
    )  # of each gathered position, its row in the round's rows (`batches.combined`, `round_rows`)

    @property
    def bound_reached(self) -> bool:
        return self.filler.size > 0

    def round_advantages(self, phases: list, num_groups: int, settings, group_weights=None) -> torch.Tensor:
        """The round's advantages (`batches.combined` order): each group's own statistics, as each batch scored them, and
        the batch statistics of `scale_rewards="batch"` or "normalize_then_sum" over the rows chosen for the loss,
        so that a step's rows share one scale (as GRPO's do: one std per generation batch)."""
        rewards, group_ids = round_rows(phases)
        chosen = torch.zeros(len(group_ids), dtype=torch.bool)
        chosen[torch.as_tensor(self.source_rows[np.concatenate([self.kept, self.filler])], dtype=torch.long)] = True
        advantages = group_advantages(
            rewards,
            group_ids,
            num_groups,
            settings.reward_weights,
            settings.scale_rewards,
            settings.multi_objective_aggregation,
            batch_rows=chosen,
        )
        return advantages if group_weights is None else advantages * group_weights[group_ids]


def choose_rows(batches: list[GenerationBatch], num_processes: int, rows_needed: int) -> ChosenRows:
    """The rows the loss trains on (module docstring); the same on every process. A row's position is
    `rank * local_rows + its position in that process's round batch` (the batches one after the other)."""
    group_of = [np.concatenate([phase.group_ids for phase in batch.phases]) for batch in batches]
    flat_of = [batch.scored.zero_spread.cpu().numpy() for batch in batches]
    starts = np.cumsum([0] + [len(groups) for groups in group_of[:-1]])  # each batch's first row in the round's
    batch_index, groups, flat, source = [], [], [], []
    for rank in range(num_processes):
        for index, batch in enumerate(batches):
            rows = local_positions(batch.phases, rank, num_processes)
            local = group_of[index][rows]
            batch_index.append(np.full(len(local), index))
            groups.append(local)
            flat.append(flat_of[index][local])
            source.append(starts[index] + rows)
    batch_index, groups, flat, source = (np.concatenate(a) for a in (batch_index, groups, flat, source))
    positions = np.arange(len(groups))
    kept = [row for row in np.lexsort((positions, groups, batch_index)) if not flat[row]][:rows_needed]
    filler = [row for row in np.lexsort((positions, groups, -batch_index)) if flat[row]]
    filler = filler[: rows_needed - len(kept)]
    return ChosenRows(np.asarray(kept, dtype=np.int64), np.asarray(filler, dtype=np.int64), source.astype(np.int64))


def gather_round(batches: list[GenerationBatch], pad_token_id: int, accelerator) -> dict:
    """Every process's rows of every batch, on every process: each process's batches merged (padded to the widest),
    then padded across processes and gathered, process 0's rows first. `num_items_in_batch` already counts every
    process's tokens."""
    local = merge_phase_outputs([batch.scored.batch for batch in batches], pad_token_id)
    if accelerator is None or accelerator.num_processes == 1:
        return local

    def padded(key, value, side, fill):
        value = accelerator.pad_across_processes(value, dim=1, pad_index=fill, pad_first=side == "left")
        return accelerator.gather(value)

    return by_kind(
        local,
        pad_token_id,
        padded=padded,
        rows=lambda key, value: accelerator.gather(value),
        summed=lambda key, value: value,
        unknown=_cannot_deal,
    )


def deal_chosen_rows(gathered: dict, chosen: ChosenRows, rank: int, num_processes: int) -> dict:
    """Process `rank`'s share of the chosen rows, with the filler rows out of the loss and TRL's token normaliser
    `num_items_in_batch` recounted over the rows every process trains. The kept rows are cut into `num_processes`
    slices in order (their sizes differ by at most one) and each process fills its share up with filler rows, so
    every process trains as many rows with spread as the others, whatever its share of loss tokens weighs."""
    share = (len(chosen.kept) + len(chosen.filler)) // num_processes
    kept = np.array_split(chosen.kept, num_processes)
    start = sum(share - len(part) for part in kept[:rank])
    filler = chosen.filler[start : start + share - len(kept[rank])]
    mine = torch.as_tensor(np.concatenate([kept[rank], filler]), dtype=torch.long)
    every = torch.as_tensor(chosen.kept, dtype=torch.long)
    device = gathered["completion_mask"].device
    trained_tokens = loss_mask(gathered)[every.to(device)].sum()
    batch = by_kind(
        gathered,
        0,  # rows are taken, never padded
        padded=lambda key, value, side, fill: value[mine.to(value.device)],
        rows=lambda key, value: value[mine.to(value.device)],
        summed=lambda key, value: trained_tokens,
        unknown=_cannot_deal,
    )
    zero_completion_mask(batch, torch.arange(len(mine), device=device) >= len(kept[rank]))
    return batch


def _cannot_deal(key: str) -> ValueError:
    return ValueError(f"zero_variance_groups='refill' cannot deal the generation output {key!r} over processes.")
