"""A `rollout_func` written for GRPOTrainer, run unchanged under CoBA's groups of different sizes (docs/setups.md).

GRPOTrainer calls `rollout_func(prompts, trainer)` with this process's rows, each prompt repeated
`trainer.num_generations` times in a row, and takes back one completion per row. Such a function may answer row by
row, or sample `trainer.num_generations` completions for every distinct prompt (`prompts[::trainer.num_generations]`,
or the distinct values). Under CoBA a process holds k_i rows of prompt i, a different k_i per prompt, so
`grouped_rollout` calls the function once per distinct k, with the prompts that have k rows here, each repeated k
times in a row, and `trainer.num_generations` set to k for the call (and `trainer.environments`, with
`environment_factory`, set to those rows' environments in the same order): every one of these forms then returns k
completions per prompt, and they are put back in row order. The output is read as GRPOTrainer reads it: a list per
field, one entry per prompt; a field that is not a list is one value for every row; `logprobs=None` means no sampling
logprobs.

Every process makes the same calls, one per group size that any process holds, so that a function that gathers over
processes (a vLLM server generation) stays in step. A process that holds no group of some size k makes that call
with padding, never with an empty list: one of its own prompts repeated k times, each with a new environment reset
with that prompt's row (as TRL resets one), and the output is discarded. `trainer.rollout_groups` (`RolloutGroups`) tells a function that wants the whole round which
group each row is in and how large each group is.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass

from accelerate.utils import gather_object

from coba_trl.distributed import checked_everywhere


@dataclass(frozen=True)
class RolloutGroups:
    """The generation phase in progress, as `trainer.rollout_groups` (None outside a training phase).

    `group_ids[r]`: the group (index into the round's distinct prompts, in sampler order) of this process's row r;
    `group_sizes[g]`: the rows group g has in this phase over all processes (a group may span processes);
    `rows[j]`: during a `rollout_func` call, the row (index into `group_ids`) of the call's j-th prompt; None during
    a padding call (module docstring);
    `inputs[r]`: this process's dataset row r (one per completion, as TRL resets an environment with it).
    """

    group_ids: list[int]
    group_sizes: list[int]
    rows: list[int] | None = None
    inputs: list[dict] | None = None


def local_groups(group_ids: list[int]) -> dict[int, list[int]]:
    """The rows of each group on this process, groups in order of first appearance."""
    rows: dict[int, list[int]] = {}
    for row, group in enumerate(group_ids):
        rows.setdefault(group, []).append(row)
    return rows


def grouped_rollout(rollout_func):
    """`rollout_func` called once per group size k with `trainer.num_generations = k` (module docstring)."""

    @functools.wraps(rollout_func)
    def call(prompts, trainer):
        groups = getattr(trainer, "rollout_groups", None)
        if groups is None:  # evaluation: TRL's fixed groups of num_generations_eval
            return rollout_func(prompts, trainer)
        rows_of = local_groups(groups.group_ids)
        sizes = sorted({len(rows) for rows in rows_of.values()})
        if trainer.accelerator.num_processes > 1:
            sizes = sorted(set().union(*gather_object([sizes])))
        environments = trainer.environments
        merged: dict[str, list] = {}
        for size in sizes:
            rows = [row for group_rows in rows_of.values() if len(group_rows) == size for row in group_rows]
            padding = not rows
            if padding:  # no group of this size here: keep in step with the processes that have one
                rows = [0] * size
            call_prompts = [copy.deepcopy(prompts[row]) if padding else prompts[row] for row in rows]
            mean_group_size, trainer.num_generations = trainer.num_generations, size
            trainer.rollout_groups = dataclasses.replace(groups, rows=None if padding else rows)
            if environments is not None:
                trainer.environments = (
                    new_environments(trainer, groups.inputs[0], size) if padding else [environments[r] for r in rows]
                )
            try:
                output = rollout_func(call_prompts, trainer)
            finally:
                trainer.num_generations, trainer.rollout_groups = mean_group_size, groups
                trainer.environments = environments
            # the output is checked on every process: one whose function answered wrongly stops them all at once
            place = functools.partial(place_rows, merged, output, None if padding else rows, size, len(prompts))
            checked_everywhere(place, trainer.accelerator)
        return merged

    return call


def place_rows(merged: dict, output: dict, rows: list[int] | None, size: int, num_prompts: int) -> None:
    """Check a call's `output` for its `size`-row groups (`per_row`) and put each field's entries at the call's
    `rows` of `merged` (`num_prompts` entries a field); a padding call (`rows` None) is checked and discarded."""
    placed = per_row(output, size if rows is None else len(rows), size)
    if rows is None:
        return
    for key, values in placed.items():
        if key in merged and (merged[key] is None) != (values is None):
            raise ValueError(
                f"rollout_func returned {key!r} as None for some group sizes and as a list for others: "
                "return None (no sampling logprobs) or a list in every call."
            )
        column = merged.setdefault(key, None if values is None else [None] * num_prompts)
        for row, value in zip(rows, values or [], strict=False):
            column[row] = value


def new_environments(trainer, row: dict, count: int) -> list:
    """`count` new environments for `row`, each reset with it as TRL resets one (the `environment` column, which picks
    the factory of a dict of them, is not passed on)."""
    multi = getattr(trainer, "_multi_environment", False)
    factory = trainer.environment_factories[row.get("environment") if multi else None]
    kwargs = {key: value for key, value in row.items() if not (multi and key == "environment")}
    environments = [factory() for _ in range(count)]
    for environment in environments:
        environment.reset(**copy.deepcopy(kwargs))
    return environments


def per_row(output: dict, num_rows: int, size: int) -> dict[str, list | None]:
    """A call's output as one entry per row, as GRPOTrainer reads it: a list has one entry per prompt; a field that
    is not a list is that value for every row; a field that is None stays None (`logprobs=None`: no sampling
    logprobs; `env_mask=None`: no mask)."""
    placed = {}
    for key, values in output.items():
        if values is None and key not in ("prompt_ids", "completion_ids"):
            placed[key] = None
        elif not isinstance(values, list):
            if key in REQUIRED:
                raise ValueError(
                    f"rollout_func returned {key!r} as {type(values).__name__}; it must be a list with one entry per "
                    "prompt it received."
                )
            placed[key] = [values] * num_rows
        elif len(values) != num_rows:
            raise ValueError(
                f"rollout_func returned {key!r} with {len(values)} entries for {num_rows} prompts of {size} rows each "
                f"({num_rows // size} distinct): every list must have one entry per prompt it received, "
                "num_generations completions for each distinct prompt, in the order of the prompts."
            )
        else:
            placed[key] = values
    return placed


REQUIRED = ("prompt_ids", "completion_ids", "logprobs")  # the fields GRPOTrainer requires of a rollout_func
