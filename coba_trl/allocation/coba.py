"""CoBA-RL: capability-oriented budget allocation, released-code behaviour (docs/algorithm.md,
"Capability" to "Allocating one round")."""

import math
from collections.abc import Callable

import numpy as np

from .base import BudgetAllocator, uniform_split
from .capability import CapabilityTracker
from .sharing import share_remainder
from .solver import greedy_counts
from .validation import check_float
from .values import CoBAGains, adaptive_tau, canonical_pass_rate


def heap_share(n_explore: int, n_prompts: int) -> float:
    """Released rule: 0.8 if more than M/2 prompts are in the exploration band, else 0.6 + 0.2 * (2 n / M).

    Computed float for float as the released code writes it, 0.6 + (0.8 - 0.6) * ((n / M) * 2): 0.8 - 0.6 is
    0.20000000000000007 in floating point, which can move int(R * share) by one unit against 0.2.
    """
    return 0.8 if n_explore > n_prompts / 2 else 0.6 + (0.8 - 0.6) * ((n_explore / n_prompts) * 2)


def coba_allocate(
    pass_rates: np.ndarray,
    total_budget: int,
    alpha: float,
    beta: float,
    min_budget: int,
    max_budget: int,
    tau: float | None = None,
    heap_fraction: float | None = None,
    hard_threshold: float = 0.05,
    easy_threshold: float = 0.99,
    solver: Callable = greedy_counts,
) -> tuple[np.ndarray, dict[str, float]]:
    """One round of section 5, step by step; returns (counts, telemetry). Inputs are assumed validated.

    `solver` is `solver.greedy_counts` (default) or `reference.heap_greedy`: they return identical counts.
    When B_total > M * B_up every prompt ends at B_up and the counts sum to M * B_up (step 7). Like the released
    code, the single even pass of step 6 can strand a few units when it meets B_up although other prompts have room:
    `unallocated` reports them and `base.fill_to_budget` tops them up where a fixed total is needed. The uniform
    paths (all unseen, or B_total < M * B_low) are the plain GRPO split and do not apply B_up.
    """
    n_prompts = pass_rates.size
    unseen = np.isnan(pass_rates)
    info = {"tau": math.nan, "n_unseen": float(unseen.sum()), "uniform_split": 1.0, "heap_budget": 0.0}
    info.update(n_very_hard=math.nan, n_explore=math.nan, n_very_easy=math.nan, unallocated=0.0)
    if unseen.all() or total_budget < n_prompts * min_budget:
        return uniform_split(total_budget, n_prompts), info
    p = np.where(unseen, 0.5, pass_rates)
    counts = np.full(n_prompts, min_budget, dtype=np.int64)
    remainder = total_budget - n_prompts * min_budget
    hard = np.flatnonzero(p < hard_threshold)
    easy = np.flatnonzero(p > easy_threshold)
    explore = np.flatnonzero((p >= hard_threshold) & (p <= easy_threshold))
    share = heap_share(explore.size, n_prompts) if heap_fraction is None else heap_fraction
    heap_budget = int(remainder * share)
    given = 0
    if explore.size:
        info["tau"] = adaptive_tau(p[explore]) if tau is None else tau
        levels, group = np.unique(canonical_pass_rate(p[explore]), return_inverse=True)
        gains = CoBAGains(levels, alpha, beta, info["tau"])
        extra = solver(gains, group, min_budget, max_budget - min_budget, heap_budget)
        counts[explore] += extra
        given = int(extra.sum())
    unplaced = share_remainder(counts, p, [hard, explore, easy], remainder - given, max_budget)
    info.update(
        uniform_split=0.0,
        n_very_hard=float(hard.size),
        n_explore=float(explore.size),
        n_very_easy=float(easy.size),
        heap_budget=float(heap_budget),
        unallocated=float(unplaced),
    )
    return counts, info


class CoBAAllocator(BudgetAllocator):
    """CoBA-RL allocator: `observe` updates F_t -> (alpha_t, beta_t), `allocate` runs section 5.

    Defaults follow the released run script: kappa 11, B_low 2, B_up 128, window 1, gamma 10, adaptive tau,
    the 0.6-to-0.8 heap share and bands (0.05, 0.99). Paper mode: hard_threshold=0.0, easy_threshold=1.0,
    heap_fraction=1.0 (everything through the heap).

    Budget limits: B_total < M * B_low is not an error (uniform split); when B_total > M * B_up every prompt
    gets B_up and the counts sum to M * B_up; the all-unseen uniform split (epoch 1) does not apply B_up, so
    keep max_budget >= ceil(B_total / M).
    """

    name = "coba"

    def __init__(
        self,
        min_budget: int = 2,
        max_budget: int = 128,
        kappa: float = 11.0,
        window: int = 1,
        gamma: float = 10.0,
        tau: float | None = None,
        heap_fraction: float | None = None,
        hard_threshold: float = 0.05,
        easy_threshold: float = 0.99,
    ):
        super().__init__(min_budget, max_budget, CapabilityTracker(kappa=kappa, window=window, gamma=gamma))
        self.tau = None if tau is None else check_float("tau", tau, low=0.0, low_open=True)
        self.heap_fraction = None if heap_fraction is None else check_float("heap_fraction", heap_fraction, 0.0, 1.0)
        self.hard_threshold = check_float("hard_threshold", hard_threshold, 0.0, 1.0)
        self.easy_threshold = check_float("easy_threshold", easy_threshold, 0.0, 1.0)
        if self.hard_threshold > self.easy_threshold:
            raise ValueError(f"hard_threshold ({hard_threshold}) must not exceed easy_threshold ({easy_threshold}).")

    @property
    def alpha(self) -> float:
        return self.tracker.alpha_beta[0]

    @property
    def beta(self) -> float:
        return self.tracker.alpha_beta[1]

    def _allocate(self, pass_rates: np.ndarray, total_budget: int) -> np.ndarray:
        alpha, beta = self.tracker.alpha_beta
        counts, info = coba_allocate(
            pass_rates,
            total_budget,
            alpha,
            beta,
            self.min_budget,
            self.max_budget,
            tau=self.tau,
            heap_fraction=self.heap_fraction,
            hard_threshold=self.hard_threshold,
            easy_threshold=self.easy_threshold,
        )
        return self._record(counts, **info)

    def metrics(self) -> dict[str, float]:
        alpha, beta = self.tracker.alpha_beta
        return {"alpha": alpha, "beta": beta, "tau": math.nan, **super().metrics()}
