"""Exact greedy allocation without a loop per budget unit (docs/algorithm.md, "Heap greedy").

The one-unit-at-a-time heap gives the next unit to the largest marginal gain, ties to the lower prompt index.
When every prompt's gains are non-increasing in its budget, the heap hands out units in the order of the key
(gain desc, prompt index asc, unit asc), so its result is the top-K units under that key. This module finds
that top-K set directly:

1. Prompts with identical parameters are grouped (history-like pass rates such as k/16 repeat a lot).
2. Each group's log gain lies between two lines in the budget (`envelope`); solving the continuous relaxation
   of "how many units lie above lambda" gives two thresholds that bracket the K-th largest key T.
3. Only the units between the brackets (about one per prompt) are evaluated with the exact `key`; T is read
   off them, every bracket is verified with exact keys (and widened if float slop ever breaks it).
4. Units with key > T are taken; the units tied at T go to prompts in batch order, exactly as the heap does.

The cost is O(M log M) in the number of prompts M and independent of the budget K.
"""

import numpy as np

MIN_SLOPE = 1e-12  # per unit, in log-gain; flatter envelopes are tilted to this (the upper line keeps its bound)


def fill_in_order(counts: np.ndarray, room: np.ndarray, amount: int) -> np.ndarray:
    """Give each entry, in order, up to `room` more units until `amount` is spent (first come, first served)."""
    cumulative = np.cumsum(room)
    return counts + np.clip(amount - (cumulative - room), 0, room)


def greedy_counts(gains, group: np.ndarray, floor: int, units, total: int) -> np.ndarray:
    """Units (on top of `floor`) the max-heap greedy gives each prompt, computed without a per-unit loop.

    Args:
        gains: a gains model (`CoBAGains`, `KnapsackGains`) over G groups, with `key(group, budget)`, the log
            marginal gain of going from `budget` to `budget + 1`, non-increasing in `budget`, and `envelope`.
        group: (M,) group of each prompt, in batch order (ties go to the earlier prompt).
        floor: budget every prompt already holds (B_low); unit b of a prompt takes it from floor + b to + b + 1.
        units: units each prompt may take (B_up - B_low), a scalar or one value per group.
        total: units to hand out; at most the total room is used.
    """
    group = np.asarray(group, dtype=np.intp)
    multiplicity = np.bincount(group, minlength=len(gains))
    units = np.broadcast_to(np.asarray(units, dtype=np.int64), multiplicity.shape)
    intercept, slope, spread = gains.envelope(floor)
    live_units = np.where(np.isfinite(intercept), units, 0)
    live_capacity = int(multiplicity @ live_units)
    if total >= live_capacity:  # every finite gain is taken; -inf keys tie, so the rest goes in batch order
        counts = live_units[group]
        return fill_in_order(counts, units[group] - counts, total - live_capacity)
    if total <= 0:
        return np.zeros(len(group), dtype=np.int64)
    start = np.where(live_units > 0, intercept - slope * floor, 0.0)
    steep = np.maximum(slope, MIN_SLOPE)  # a flat line (gains that no longer shrink) tilted just enough to count
    margin = 1e-9 * (1.0 + np.abs(start))
    lower, upper = start - margin, start + spread + margin + (steep - slope) * live_units
    slope = steep
    lam_low = _relaxed_threshold(lower, slope, live_units, multiplicity, min(total + 1, live_capacity))
    lam_high = _relaxed_threshold(upper, slope, live_units, multiplicity, total - 1 - len(group))
    low = _line_count(lower, slope, live_units, lam_high)
    high = np.maximum(_line_count(upper, slope, live_units, lam_low), low)
    widen = 1
    while (split := _split_window(gains, multiplicity, floor, live_units, low, high, total)) is None:
        low, high = np.maximum(low - widen, 0), np.minimum(high + widen, live_units)
        widen *= 4
    above, ties = split
    counts = above[group]
    return fill_in_order(counts, ties[group], total - int(counts.sum()))


def _line_count(start: np.ndarray, slope: np.ndarray, units: np.ndarray, lam: float) -> np.ndarray:
    """Units b in [0, units) whose line value start - slope * b is >= lam."""
    return np.clip(np.floor((start - lam) / slope) + 1.0, 0, units).astype(np.int64)


def _relaxed_threshold(start, slope, units, weight, target: float) -> float:
    """Largest lam with sum_g weight_g * clip((start_g - lam) / slope_g, 0, units_g) >= target.

    The left side is piecewise linear and continuous in lam, with breakpoints where a group starts (lam =
    start) and where it saturates (lam = start - slope * units); cumulative sums over the sorted breakpoints
    evaluate it everywhere at once.
    """
    if target <= 0:
        return np.inf
    keep = (units > 0) & (weight > 0)
    start, slope, units, weight = start[keep], slope[keep], units[keep], weight[keep]
    values = np.concatenate([start, start - slope * units])
    order = np.argsort(values)[::-1]
    values = values[order]
    per_slope = weight / slope
    intercepts = np.cumsum(np.concatenate([per_slope * start, -per_slope * start])[order])
    slopes = np.cumsum(np.concatenate([per_slope, -per_slope])[order])
    saturated = np.cumsum(np.concatenate([np.zeros_like(start), weight * units])[order])
    reached = np.flatnonzero(saturated + intercepts - values * slopes >= target)
    if reached.size == 0:
        return float(values[-1])
    j = int(reached[0])
    if j == 0 or slopes[j - 1] <= 0:
        return float(values[j])
    lam = (saturated[j - 1] + intercepts[j - 1] - target) / slopes[j - 1]
    return float(min(max(lam, values[j]), values[j - 1]))


def _split_window(gains, multiplicity, floor, units, low, high, total):
    """Find T among the units in [low, high) of each group; None if the bracket does not hold in exact keys.

    Returns (above, ties) per group: the units with key > T, and those with key == T.
    """
    width = high - low
    needed = total - int(multiplicity @ low)
    if needed <= 0 or needed > int(multiplicity @ width):
        return None
    n_groups = len(multiplicity)
    group_ids = np.repeat(np.arange(n_groups), width)
    offsets = np.arange(group_ids.size) - np.repeat(np.cumsum(width) - width, width)
    keys = gains.key(group_ids, floor + low[group_ids] + offsets)
    order = np.argsort(keys)[::-1]
    threshold = keys[order[np.searchsorted(np.cumsum(multiplicity[group_ids[order]]), needed)]]
    inner = np.flatnonzero(low > 0)
    if np.any(gains.key(inner, floor + low[inner] - 1) <= threshold):
        return None
    outer = np.flatnonzero(high < units)
    if np.any(gains.key(outer, floor + high[outer]) >= threshold):
        return None
    above = low + np.bincount(group_ids[keys > threshold], minlength=n_groups)
    return above, np.bincount(group_ids[keys == threshold], minlength=n_groups)
