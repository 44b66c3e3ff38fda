"""The small interface every budget allocator implements, and the uniform split they fall back on."""

from abc import ABC, abstractmethod

import numpy as np

from .capability import FailureRateTracker
from .sharing import round_robin
from .validation import check_budget_bounds, check_int, check_pass_rates


def uniform_split(total_budget: int, n_prompts: int) -> np.ndarray:
    """floor(B_total / M) each, the remainder +1 to the first prompts in batch order (plain GRPO, section 2)."""
    counts = np.full(n_prompts, total_budget // n_prompts, dtype=np.int64)
    counts[: total_budget % n_prompts] += 1
    return counts


def fill_to_budget(counts: np.ndarray, total_budget: int, max_budget: int) -> np.ndarray:
    """Counts that spend all of `total_budget`: units an allocation left unspent go round-robin, in batch order, to
    the prompts below `max_budget` (B_up).

    The released CoBA fallback (section 5, step 6) makes a single even pass per group, so when that pass meets B_up
    it can strand a few units even though other prompts have room (`metrics()["unallocated"]` counts them). A
    trainer whose rounds hold a fixed number of rows tops them up with this; the allocators themselves stay exactly
    the released code.
    """
    counts = np.asarray(counts, dtype=np.int64)
    missing = total_budget - int(counts.sum())
    if missing <= 0:
        return counts
    room = np.maximum(max_budget - counts, 0)
    return counts + round_robin(room, min(missing, int(room.sum())))


class BudgetAllocator(ABC):
    """Splits one round's rollout budget B_total over its M prompts.

    `observe(step_pass_rates)` after the rewards of a round are known (tracks F_t and F_bar for every
    allocator), `allocate(pass_rates, total_budget)` before generating the next one, `metrics()` for logging,
    `state_dict()` / `load_state_dict()` for checkpoints (plain JSON-serialisable dicts).
    """

    name: str = "base"

    def __init__(self, min_budget: int, max_budget: int, tracker: FailureRateTracker | None = None):
        self.min_budget, self.max_budget = check_budget_bounds(min_budget, max_budget)
        self.tracker = tracker if tracker is not None else FailureRateTracker(window=1)
        self._allocation_metrics: dict[str, float] = {}

    @property
    def failure_rate(self) -> float:
        """F_bar: the smoothed failure rate (NaN before any round was observed)."""
        return self.tracker.smoothed

    def observe(self, step_pass_rates) -> None:
        """Record one round's per-prompt success rates (array in [0, 1], no NaN)."""
        self.tracker.observe(step_pass_rates)

    def allocate(self, pass_rates, total_budget: int) -> np.ndarray:
        """Rollouts per prompt (int64, batch order) for historical pass rates (NaN = unseen)."""
        pass_rates = check_pass_rates("pass_rates", pass_rates, allow_nan=True)
        total_budget = check_int("total_budget", total_budget)
        if pass_rates.size == 0:
            if total_budget:
                raise ValueError(f"pass_rates is empty but total_budget is {total_budget}: pass one rate per prompt.")
            return np.zeros(0, dtype=np.int64)
        return self._allocate(pass_rates, total_budget)

    @abstractmethod
    def _allocate(self, pass_rates: np.ndarray, total_budget: int) -> np.ndarray:
        """Allocate for validated, non-empty pass rates."""

    def metrics(self) -> dict[str, float]:
        """Telemetry of the latest observe/allocate: failure rates plus what the allocator computed."""
        return {
            "failure_rate": self.tracker.last,
            "failure_rate_smoothed": self.tracker.smoothed,
            **self._allocation_metrics,
        }

    def _record(self, counts: np.ndarray, **extra: float) -> np.ndarray:
        self._allocation_metrics = {
            "budget_min": float(counts.min()),
            "budget_max": float(counts.max()),
            "budget_std": float(np.sqrt(np.square(counts - counts.mean()).mean())),
            **{key: float(value) for key, value in extra.items()},
        }
        return counts

    def state_dict(self) -> dict:
        return {"allocator": self.name, **self.tracker.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("allocator", self.name) != self.name:
            raise ValueError(
                f"budget_allocator is {self.name!r}, but the checkpoint's state was saved by the "
                f"{state['allocator']!r} allocator, whose pass-rate state only it reads. Resume with "
                f"budget_allocator={state['allocator']!r}, or train from the start."
            )
        self.tracker.load_state_dict(state)
