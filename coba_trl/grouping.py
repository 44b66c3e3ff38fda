"""Expansion of a round's allocation into completion rows, and their deal over processes.

A generation round makes `total = sum(group_sizes)` completions: prompt i is repeated `group_sizes[i]` times (its
*group*). TRL's hard constraint (trl-seams.md) is that every process holds the same number of rows; on top of that,
large groups are spread over processes and the expected completion tokens per process are balanced, so no process
generates far longer than the others. Plain numpy; the trainer only wires it in.
"""

from __future__ import annotations

import heapq

import numpy as np


def expected_length_weight(pass_rates: np.ndarray) -> np.ndarray:
    """Relative expected completion length of a prompt: harder prompts (low pass rate) tend to write longer answers.

    A heuristic `2 - p` in [1, 2]; an unseen prompt (NaN) counts as p = 0.5, as in the allocation (algorithm.md 2).
    """
    p = np.nan_to_num(np.asarray(pass_rates, dtype=np.float64), nan=0.5)
    return 2.0 - np.clip(p, 0.0, 1.0)


def deal_groups(group_sizes: np.ndarray, num_ranks: int, weights: np.ndarray | None = None) -> list[np.ndarray]:
    """Deal the rows of every group over `num_ranks` processes; returns, per rank, the group id of each of its rows.

    Every rank gets exactly `sum(group_sizes) / num_ranks` rows. Rows are dealt heaviest first (by `weights`, the
    expected tokens of one completion of each group; all equal when `None`), each to the rank with the least expected
    tokens that still has room, ties to the lowest rank. The rows of one group have the same weight and are dealt one
    after another, so a group of k rows lands about k / num_ranks times on each rank. Within a rank the rows are
    ordered by group id, so on one process the rows are the groups in prompt order, exactly like GRPO's batch.
    Deterministic: the same inputs give the same deal on every process.
    """
    sizes = np.asarray(group_sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total % num_ranks != 0:
        raise ValueError(f"The round's {total} completions cannot be dealt evenly over {num_ranks} processes.")
    group_ids = np.repeat(np.arange(len(sizes)), sizes)
    if num_ranks == 1:
        return [group_ids]
    unit_weight = np.ones(len(sizes)) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(-unit_weight[group_ids], kind="stable")
    capacity = total // num_ranks
    loads = [(0.0, rank) for rank in range(num_ranks)]
    filled = [0] * num_ranks
    dealt: list[list[int]] = [[] for _ in range(num_ranks)]
    for row in order:
        load, rank = heapq.heappop(loads)
        group = int(group_ids[row])
        dealt[rank].append(group)
        filled[rank] += 1
        if filled[rank] < capacity:
            heapq.heappush(loads, (load + unit_weight[group], rank))
    return [np.sort(np.asarray(rows, dtype=np.int64)) for rows in dealt]


def imbalance(per_rank: list[np.ndarray], weights: np.ndarray | None = None) -> float:
    """max / mean over ranks of the rows (or, with per-group `weights`, the expected tokens) each rank holds."""
    loads = np.array([len(rows) if weights is None else float(np.sum(weights[rows])) for rows in per_rank])
    return float(loads.max() / loads.mean())
