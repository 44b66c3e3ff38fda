"""Sharing what the heap left of R by weight (1 - p) (algorithm.md section 5, step 6)."""

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

    Within a group: floor(left * w_i / sum w) each with w_i = 1 - clip(p_i, 1e-6, 1 - 1e-6), capped at B_up,
    then +1 round-robin over the prompts still below B_up; the rest passes to the next group. (The clipped
    weights are never all zero, so the released code's uniform fallback for that case cannot trigger.)
    """
    for members in groups:
        if left <= 0:
            break
        if members.size == 0:
            continue
        weights = 1.0 - np.clip(pass_rates[members], 1e-6, 1.0 - 1e-6)
        room = cap - counts[members]
        extra = np.minimum(np.floor(left * weights / weights.sum()).astype(np.int64), room)
        cycled = round_robin(room - extra, left - int(extra.sum()))
        counts[members] += extra + cycled
        left -= int(extra.sum()) + int(cycled.sum())
    return left
