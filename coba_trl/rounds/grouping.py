"""Expansion of a round's allocation into completion rows, and their deal over processes.

A generation round makes `total = sum(group_sizes)` completions: prompt i is repeated `group_sizes[i]` times (its
*group*). TRL's hard constraint is that every process holds the same number of rows. `deal_groups` cuts the round's
rows into P contiguous slices, as GRPO slices its batch, so a group is split only where a slice boundary falls inside
it: at most one group at each boundary. When all groups have one size (GRPO's rounds, a screening phase) the rows are
in prompt order, so every process holds exactly GRPO's rows; otherwise groups of equal size swap places between slices
to balance the expected completion tokens per process. `expand_rows` then makes each process's rows: one fresh copy
of the prompt's row per completion. Plain numpy; the trainer only wires it in.
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


def deal_groups(group_sizes: np.ndarray, num_ranks: int, weights: np.ndarray | None = None) -> list[np.ndarray]:
    """Deal the rows of every group over `num_ranks` processes; returns, per rank, the group id of each of its rows.

    The groups are laid out one after the other and the rows cut into `num_ranks` contiguous slices of
    `sum(group_sizes) / num_ranks` rows, so each group lies on one rank or, where a boundary falls inside it, on
    consecutive ranks: at most one group is split at each boundary, and the distinct prompts summed over the ranks
    are at most M + P - 1. The layout is prompt order (GRPO's per-process slices, row for row) when `weights` is
    None, there is one rank, or every group has the same size. Otherwise `balanced_order` reorders the groups so that
    the expected tokens per rank (`weights`: the expected tokens of one completion of each group) are balanced
    within what the contiguous slices allow. Within a rank the rows are ordered by group id. Deterministic: the same
    inputs give the same deal on every process.
    """
    sizes = np.asarray(group_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total % num_ranks != 0:
        raise ValueError(f"The round's {total} completions cannot be dealt evenly over {num_ranks} processes.")
    order = np.arange(len(sizes))
    if num_ranks > 1 and weights is not None and np.any(sizes != sizes[0]):
        order = balanced_order(sizes, np.asarray(weights, dtype=np.float64), num_ranks)
    rows = np.repeat(order, sizes[order])
    return [np.sort(part) for part in np.split(rows, num_ranks)]


def rank_loads(sizes: np.ndarray, weights: np.ndarray, order: np.ndarray, num_ranks: int) -> np.ndarray:
    """The expected tokens of each rank's slice when the groups are laid out in `order`."""
    return weights[np.repeat(order, sizes[order])].reshape(num_ranks, -1).sum(axis=1)


def balanced_order(sizes: np.ndarray, weights: np.ndarray, num_ranks: int) -> np.ndarray:
    """An order of the groups whose contiguous slices balance the expected tokens per rank.

    Starts from prompt order and, while it helps, swaps a group lying wholly on the heaviest rank with one of the same
    size lying wholly on the lightest: equal sizes keep every slice boundary where it was (so the groups split at the
    boundaries stay the same), and each swap moves `size * (w_a - w_b)` expected tokens, chosen to bring the two ranks
    closest. Stops when no swap narrows the gap between them (at most 4 M swaps, each lowering that gap).
    """
    order = np.arange(len(sizes))
    per_rank = int(sizes.sum()) // num_ranks
    for _ in range(4 * len(sizes)):
        ends = np.cumsum(sizes[order])
        first, last = (ends - sizes[order]) // per_rank, (ends - 1) // per_rank  # each position's first and last rank
        loads = rank_loads(sizes, weights, order, num_ranks)
        heavy, light = int(np.argmax(loads)), int(np.argmin(loads))
        gap = float(loads[heavy] - loads[light])
        on_heavy = order[(first == heavy) & (last == heavy)]  # the groups lying wholly on each of the two ranks
        on_light = order[(first == light) & (last == light)]
        moved = sizes[on_heavy, None] * (weights[on_heavy, None] - weights[None, on_light])  # tokens a swap moves
        after = np.where(sizes[on_heavy, None] == sizes[None, on_light], np.abs(gap - 2 * moved), np.inf)
        if after.size == 0 or after.min() >= gap - 1e-9:
            break
        a, b = np.unravel_index(int(np.argmin(after)), after.shape)
        i, j = np.flatnonzero(order == on_heavy[a])[0], np.flatnonzero(order == on_light[b])[0]
        order[i], order[j] = order[j], order[i]
    return order


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
