"""Plain GRPO: every prompt gets the same number of rollouts."""

import numpy as np

from .base import BudgetAllocator, uniform_split
from .capability import FailureRateTracker


class UniformAllocator(BudgetAllocator):
    """floor(B_total / M) rollouts each, the remainder +1 to the first prompts; `observe` only tracks F_t.

    `min_budget` and `max_budget` are accepted for a uniform constructor signature and not applied.
    """

    name = "uniform"

    def __init__(self, min_budget: int = 1, max_budget: int = 2**31 - 1, window: int = 1):
        super().__init__(min_budget, max_budget, FailureRateTracker(window))

    def _allocate(self, pass_rates: np.ndarray, total_budget: int) -> np.ndarray:
        return self._record(uniform_split(total_budget, pass_rates.size))
