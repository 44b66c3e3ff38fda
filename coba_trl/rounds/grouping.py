"""Expansion of a round's allocation into completion rows, and their deal over processes.

A generation round makes `total = sum(group_sizes)` completions: prompt i is repeated `group_sizes[i]` times (its
*group*). TRL's hard constraint is that every process holds the same number of rows; on top of that,
large groups are spread over processes and the expected completion tokens per process are balanced, so no process
generates far longer than the others (`deal_groups`). `expand_rows` then makes each process's rows: one fresh copy of
the prompt's row per completion. Plain numpy; the trainer only wires it in.
"""

from __future__ import annotations

import copy

import numpy as np


def expected_length_weight(pass_rates: np.ndarray) -> np.ndarray:
    """Relative expected completion length of a prompt: harder prompts (low pass rate) tend to write longer answers.

    A heuristic `2 - p` in [1, 2]; an unseen prompt (NaN) counts as p = 0.5, as in the allocation
    (docs/algorithm.md, "Pass rate of a prompt").
    """
    p = np.nan_to_num(np.asarray(pass_rates, dtype=np.float64), nan=0.5)
    return 2.0 - np.clip(p, 0.0, 1.0)


def deal_groups(
    group_sizes: np.ndarray, num_ranks: int, weights: np.ndarray | None = None, tolerance: float = 0.03
) -> list[np.ndarray]:
    """Deal the rows of every group over `num_ranks` processes; returns, per rank, the group id of each of its rows.

    Every rank gets exactly `sum(group_sizes) / num_ranks` rows. Groups are placed heaviest first (by `weights`, the
    expected tokens of one completion of each group; all equal when `None`), larger groups first among equals, each on
    the least-loaded rank that still has room. That rank keeps taking the group's rows while its expected tokens stay
    within `tolerance` of the mean per rank above the next least-loaded rank; the rest of the group moves on to the
    next rank. So a group spans as few ranks as the token balance allows (each rank prefills fewer distinct prompts),
    and the expected tokens per rank stay within about `tolerance` of each other: the heaviest rows are placed first,
    and the rows that a full rank forces elsewhere at the end are the lightest. Within a rank the rows are ordered by
    group id, so on one process the rows are the groups in prompt order, exactly like GRPO's batch. Deterministic:
    the same inputs give the same deal on every process.
    """
    sizes = np.asarray(group_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total % num_ranks != 0:
        raise ValueError(f"The round's {total} completions cannot be dealt evenly over {num_ranks} processes.")
    if num_ranks == 1:
        return [np.repeat(np.arange(len(sizes)), sizes)]
    unit_weight = np.ones(len(sizes)) if weights is None else np.asarray(weights, dtype=np.float64)
    slack = tolerance * float(np.dot(sizes, unit_weight)) / num_ranks
    # Plain Python lists: a handful of ranks, where numpy's per-call overhead would dominate.
    room, load = [total // num_ranks] * num_ranks, [0.0] * num_ranks
    taken = np.zeros((num_ranks, len(sizes)), dtype=np.int64)
    for group in np.lexsort((np.arange(len(sizes)), -sizes, -unit_weight)).tolist():
        left, weight = int(sizes[group]), float(unit_weight[group])
        while left:
            open_ranks = [r for r in range(num_ranks) if room[r] > 0]
            rank = min(open_ranks, key=load.__getitem__)  # ties: the lowest rank
            others = [load[r] for r in open_ranks if r != rank]
            fits = left if not others else int((min(others) + slack - load[rank]) // weight) + 1
            rows = min(left, room[rank], max(fits, 1))
            taken[rank, group] += rows
            room[rank] -= rows
            load[rank] += rows * weight
            left -= rows
    return [np.repeat(np.arange(len(sizes)), counts) for counts in taken]


def distinct_groups(per_rank: list[np.ndarray]) -> list[int]:
    """Distinct groups (prompts) each rank holds rows of: the prompts its generation backend must prefill."""
    return [int(np.unique(rows).size) for rows in per_rank]


def imbalance(per_rank: list[np.ndarray], weights: np.ndarray | None = None) -> float:
    """max / mean over ranks of the rows (or, with per-group `weights`, the expected tokens) each rank holds."""
    loads = np.array([len(rows) if weights is None else float(np.sum(weights[rows])) for rows in per_rank])
    return float(loads.max() / loads.mean())


def expand_rows(prompts: list[dict], group_ids) -> list[dict]:
    """One row per completion: `prompts[g]` for each group id `g`, each a fresh deep copy, as GRPOTrainer's dataloader
    gives each rollout its own row (a list or dict column is never one object shared by a group's rollouts)."""
    return [fresh_row(prompts[group]) for group in group_ids]


IMMUTABLE = (str, int, float, bool, bytes, type(None))


def fresh_row(row: dict) -> dict:
    """A deep copy of `row`; its immutable values (the usual text and number columns) are shared, not copied."""
    return {key: value if isinstance(value, IMMUTABLE) else copy.deepcopy(value) for key, value in row.items()}
