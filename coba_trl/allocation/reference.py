"""Slow reference solvers for tests and benchmarks: the plain max-heap greedy and an exact dynamic program.

`heap_greedy` has the signature of `solver.greedy_counts` and calls the same `gains.key`, so the two return
bitwise identical counts; `dp_allocation` maximises the summed value over all allocations (tiny instances).
"""

import heapq

import numpy as np


def heap_greedy(gains, group: np.ndarray, floor: int, units, total: int) -> np.ndarray:
    """One unit at a time to the largest marginal gain, ties to the lower prompt index (the released heap)."""
    group = np.asarray(group, dtype=np.intp)
    units = np.broadcast_to(np.asarray(units, dtype=np.int64), (len(gains),))
    counts = np.zeros(len(group), dtype=np.int64)

    def key(prompt: int) -> float:
        return float(gains.key(group[prompt : prompt + 1], np.array([floor + counts[prompt]]))[0])

    heap = [(-key(i), i) for i in range(len(group)) if units[group[i]] > 0]
    heapq.heapify(heap)
    for _ in range(max(total, 0)):
        if not heap:
            break
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < units[group[i]]:
            heapq.heappush(heap, (-key(i), i))
    return counts


def dp_allocation(values: np.ndarray, total: int) -> tuple[float, np.ndarray]:
    """Exact maximum of sum_i values[i, n_i] subject to sum_i n_i = min(total, capacity), 0 <= n_i < width.

    values[i, k] is prompt i's value with k units on top of its floor. O(M * total * width) time.
    """
    n_prompts, width = values.shape
    total = min(total, n_prompts * (width - 1))
    best = np.full(total + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros((n_prompts, total + 1), dtype=np.int64)
    for i in range(n_prompts):
        new = np.full(total + 1, -np.inf)
        for k in range(min(width, total + 1)):
            candidate = best[: total + 1 - k] + values[i, k]
            better = candidate > new[k:]
            new[k:][better] = candidate[better]
            choice[i, k:][better] = k
        best = new
    counts = np.zeros(n_prompts, dtype=np.int64)
    remaining = total
    for i in range(n_prompts - 1, -1, -1):
        counts[i] = choice[i, remaining]
        remaining -= counts[i]
    return float(best[total]), counts
