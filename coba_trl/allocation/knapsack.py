"""Knapsack-RL baseline (ByteDance, arXiv 2509.25849), as docs/algorithm.md, "Knapsack-RL",
describes it."""

import math

import numpy as np

from .base import BudgetAllocator, uniform_split
from .capability import FailureRateTracker
from .sharing import round_robin
from .solver import greedy_counts
from .values import KnapsackGains


def knapsack_need(pass_rates: np.ndarray, max_budget: int) -> np.ndarray:
    """Released need estimate min(B_up, log(0.1) / log(max(p, 1 - p))), rounded up, for 0 < p < 1."""
    log_high = np.log(np.maximum(pass_rates, 1.0 - pass_rates))
    safe = np.where(log_high < 0.0, log_high, -1.0)
    return np.where(log_high < 0.0, np.minimum(np.ceil(np.log(0.1) / safe), max_budget), max_budget)


class KnapsackAllocator(BudgetAllocator):
    """Maximises sum_i V(N_i, p_i), V(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2, exactly, with B_low <= N_i <= B_up.

    - All unseen, or B_total < M * B_low: the uniform split (as CoBA).
    - Unseen prompts (NaN) get their share of the uniform split, floor(B_total / M) plus 1 for the first
      B_total mod M positions of the batch, clipped to [B_low, B_up].
    - Prompts at p = 0 or 1 have zero value and stay at B_low; the effective ones (0 < p < 1) share the rest by
      the exact greedy (the marginal gains shrink with N). What they cannot take goes evenly (round-robin in
      batch order) to the p = 0 prompts, and anything left after that round-robin to every prompt below B_up;
      when everyone is at B_up the counts sum to less than B_total.
    - `need_based=True` (off by default) is the released surplus rule: an effective prompt takes at most its
      need min(B_up, log(0.1) / log(max(p, 1 - p))) (rounded up), so the surplus reaches the p = 0 prompts.
    """

    name = "knapsack"

    def __init__(self, min_budget: int = 2, max_budget: int = 128, window: int = 1, need_based: bool = False):
        super().__init__(min_budget, max_budget, FailureRateTracker(window))
        if not isinstance(need_based, bool):
            raise ValueError(f"need_based must be a bool, got {need_based!r}.")
        self.need_based = need_based

    def _allocate(self, pass_rates: np.ndarray, total_budget: int) -> np.ndarray:
        n_prompts = pass_rates.size
        unseen = np.isnan(pass_rates)
        if unseen.all() or total_budget < n_prompts * self.min_budget:
            counts = uniform_split(total_budget, n_prompts)
            return self._record(
                counts,
                n_unseen=float(unseen.sum()),
                uniform_split=1.0,
                n_effective=math.nan,
                n_unsolved=math.nan,
                unallocated=0.0,
            )
        counts = np.full(n_prompts, self.min_budget, dtype=np.int64)
        counts[unseen] = np.clip(uniform_split(total_budget, n_prompts)[unseen], self.min_budget, self.max_budget)
        effective = np.flatnonzero((pass_rates > 0.0) & (pass_rates < 1.0))
        left = total_budget - int(counts.sum())
        if effective.size:
            levels, group = np.unique(pass_rates[effective], return_inverse=True)
            units = self.max_budget - self.min_budget
            if self.need_based:
                units = np.maximum(knapsack_need(levels, self.max_budget).astype(np.int64) - self.min_budget, 0)
            extra = greedy_counts(KnapsackGains(levels), group, self.min_budget, units, left)
            counts[effective] += extra
            left -= int(extra.sum())
        unsolved = np.flatnonzero(pass_rates == 0.0)
        extra = round_robin(self.max_budget - counts[unsolved], left)
        counts[unsolved] += extra
        left -= int(extra.sum())
        extra = round_robin(self.max_budget - counts, left)
        counts += extra
        return self._record(
            counts,
            n_unseen=float(unseen.sum()),
            uniform_split=0.0,
            n_effective=float(effective.size),
            n_unsolved=float(unsolved.size),
            unallocated=float(left - int(extra.sum())),
        )
