"""A `rollout_func` written for GRPOTrainer, run unchanged under CoBA's groups of different sizes (docs/setups.md).

GRPOTrainer calls `rollout_func(prompts, trainer)` with this process's rows, each prompt repeated
`trainer.num_generations` times in a row, and takes back one completion per row. Such a function may answer row by
row, or sample `trainer.num_generations` completions for every distinct prompt (`prompts[::trainer.num_generations]`,
or the distinct values). Under CoBA a process holds k_i rows of prompt i, a different k_i per prompt, so
`grouped_rollout` calls the function once per distinct k, with the prompts that have k rows here, each repeated k
times in a row, and `trainer.num_generations` set to k for the call: every one of these forms then returns k
completions per prompt, and they are put back in row order. Every process makes the same calls, one per group size
that any process holds (with no prompts where it holds none), so a function that gathers over processes stays in
step. `trainer.rollout_groups` (`RolloutGroups`) tells a function that wants the whole round which group each row is
in and how large each group is.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from accelerate.utils import gather_object


@dataclass(frozen=True)
class RolloutGroups:
    """The generation phase in progress, as `trainer.rollout_groups` (None outside a training phase).

    `group_ids[r]`: the group (index into the round's distinct prompts, in sampler order) of this process's row r;
    `group_sizes[g]`: the rows group g has in this phase over all processes (a group may span processes);
    `rows[j]`: during a `rollout_func` call, the row (index into `group_ids`) of the call's j-th prompt.
    """

    group_ids: list[int]
    group_sizes: list[int]
    rows: list[int] | None = None


def local_groups(group_ids: list[int]) -> dict[int, list[int]]:
    """The rows of each group on this process, groups in order of first appearance."""
    rows: dict[int, list[int]] = {}
    for row, group in enumerate(group_ids):
        rows.setdefault(group, []).append(row)
    return rows


def grouped_rollout(rollout_func):
    """`rollout_func` called once per local group size k with `trainer.num_generations = k` (module docstring)."""

    @functools.wraps(rollout_func)
    def call(prompts, trainer):
        groups = getattr(trainer, "rollout_groups", None)
        if groups is None:  # evaluation: TRL's fixed groups of num_generations_eval
            return rollout_func(prompts, trainer)
        rows_of = local_groups(groups.group_ids)
        local_sizes = sorted({len(rows) for rows in rows_of.values()})
        sizes = local_sizes
        if trainer.accelerator.num_processes > 1:
            sizes = sorted(set().union(*gather_object([local_sizes])))
        merged: dict[str, list] = {}
        for size in sizes:
            rows = [row for group_rows in rows_of.values() if len(group_rows) == size for row in group_rows]
            mean_group_size, trainer.num_generations = trainer.num_generations, size
            trainer.rollout_groups = dataclasses.replace(groups, rows=rows)
            try:
                output = rollout_func([prompts[row] for row in rows], trainer)
            finally:
                trainer.num_generations, trainer.rollout_groups = mean_group_size, groups
            for key, values in output.items():
                if not isinstance(values, list) or len(values) != len(rows):
                    raise ValueError(
                        f"rollout_func returned {key!r} with {len(values) if isinstance(values, list) else values!r} "
                        f"entries for {len(rows)} prompts of {size} rows each ({len(rows) // size} distinct): "
                        "every field must be a list with one entry per prompt it received, num_generations "
                        "completions for each distinct prompt, in the order of the prompts."
                    )
                placed = merged.setdefault(key, [None] * len(prompts))
                for row, value in zip(rows, values, strict=True):
                    placed[row] = value
        return merged

    return call
