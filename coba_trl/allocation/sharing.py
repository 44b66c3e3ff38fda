"""Sharing what the heap left of R by weight (1 - p) (docs/algorithm.md, "What the heap leaves:
the fallback")."""

import math

import numpy as np

from .solver import fill_in_order


def round_robin(room: np.ndarray, amount: int) -> np.ndarray:
    """Units given by cycling +1 over the entries (in order) that still have room, until `amount` is spent.

    After k full cycles entry i holds min(room_i, k); the largest k that fits is read off the sorted rooms, and
    the last partial cycle serves the first entries with room left.
    """
    if amount >= room.sum():
        return room.copy()
    ordered = np.sort(room)
    prefix = np.concatenate([[0], np.cumsum(ordered)])
    n = room.size
    at_sorted = prefix[:-1] + ordered * (n - np.arange(n))
    j = int(np.searchsorted(at_sorted, amount, side="right")) - 1
    if j < 0:
        cycles = amount // n
    else:
        cycles = min(int(ordered[j]) + (amount - int(at_sorted[j])) // (n - j - 1), int(ordered[j + 1]))
    given = np.minimum(room, cycles)
    return fill_in_order(given, (room > cycles).astype(np.int64), amount - int(given.sum()))


def share_remainder(counts: np.ndarray, pass_rates: np.ndarray, groups: list[np.ndarray], left: int, cap: int) -> int:
    """Hand `left` units to the prompt groups in order (in place); return what no prompt below `cap` could take.

    Released-code behaviour, float for float (docs/algorithm.md, "What the heap leaves: the fallback"). Within a group only the prompts still
    below B_up = `cap` take part, with weights w_i = 1 - clip(p_i, 1e-6, 1 - 1e-6) and W = sum of their weights,
    computed once. In batch order each takes min(floor(R_run * w_i / W), B_up - n_i), where R_run is the *running*
    remainder, reduced after every prompt (so earlier prompts get slightly more). Then one even pass over those still
    below B_up: R_run // k each and +1 for the first R_run % k, each capped at B_up. What is left passes to the next
    group. (The clipped weights are never all zero, so the released code's even-only fallback for that case cannot
    trigger.) A plain loop: the groups outside the heap are small and this runs once per round.
    """
    for members in groups:
        if left <= 0:
            break
        below = [int(i) for i in members if counts[i] < cap]
        if not below:
            continue
        weights = [1.0 - min(max(float(pass_rates[i]), 1e-6), 1.0 - 1e-6) for i in below]
        total_weight = sum(weights)
        for i, weight in zip(below, weights, strict=True):
            take = min(math.floor(left * weight / total_weight), cap - int(counts[i]))
            counts[i] += take
            left -= take
        still_below = [i for i in below if counts[i] < cap]
        if still_below:
            base, extra = divmod(left, len(still_below))
            for rank, i in enumerate(still_below):
                take = min(base + (rank < extra), cap - int(counts[i]))
                counts[i] += take
                left -= take
    return left
