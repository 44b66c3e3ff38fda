"""Global capability: failure rate F_t, its moving average F_bar and the Beta parameters (docs/algorithm.md,
"Capability")."""

import math
from collections import deque

import numpy as np

from .validation import check_float, check_int, check_pass_rates


def psi(failure_rate: float, gamma: float) -> float:
    """Psi transform: F_tilde = sigmoid(gamma * (F_bar - 0.5)) if F_bar <= 0.5, else F_bar (continuous at 0.5)."""
    if failure_rate <= 0.5:
        return 1.0 / (1.0 + math.exp(-gamma * (failure_rate - 0.5)))
    return failure_rate


def beta_parameters(failure_rate: float, kappa: float, gamma: float) -> tuple[float, float]:
    """alpha_t = clip(1 + (kappa - 2) * F_tilde, 1, kappa - 1) and beta_t = kappa - alpha_t.

    The mode of Beta(alpha_t, beta_t) is F_tilde: the value density peaks at prompts whose pass rate equals the
    transformed failure rate (easy prompts when the model fails a lot, hard ones as it improves).
    """
    alpha = min(max(1.0 + (kappa - 2.0) * psi(failure_rate, gamma), 1.0), kappa - 1.0)
    return alpha, kappa - alpha


class FailureRateTracker:
    """Per-round failure rate F_t = 1 - mean_i(p_hat_i,t) (unweighted over prompts) and F_bar over `window` rounds."""

    def __init__(self, window: int = 1):
        self.window = check_int("window", window, minimum=1)
        self._history: deque[float] = deque(maxlen=self.window)

    def observe(self, step_pass_rates) -> float:
        """Record one round's per-prompt success rates (no NaN) and return F_t."""
        rates = check_pass_rates("step_pass_rates", step_pass_rates, allow_nan=False)
        if rates.size == 0:
            raise ValueError("step_pass_rates is empty: pass the success rate of every prompt of the round.")
        failure = 1.0 - float(np.mean(rates))
        self._history.append(failure)
        return failure

    @property
    def last(self) -> float:
        """F_t of the latest observed round (NaN before any)."""
        return self._history[-1] if self._history else math.nan

    @property
    def smoothed(self) -> float:
        """F_bar: mean of the last `window` values of F_t (NaN before any)."""
        return sum(self._history) / len(self._history) if self._history else math.nan

    def state_dict(self) -> dict:
        return {"failure_rates": list(self._history)}

    def load_state_dict(self, state: dict) -> None:
        values = [check_float("failure_rates", value, 0.0, 1.0) for value in state.get("failure_rates", [])]
        self._history = deque(values, maxlen=self.window)


class CapabilityTracker(FailureRateTracker):
    """F_bar -> Psi -> (alpha_t, beta_t); before any round alpha = kappa - 2 and beta = 2 (docs/algorithm.md, "Capability")."""

    def __init__(self, kappa: float = 11.0, window: int = 1, gamma: float = 10.0):
        super().__init__(window)
        self.kappa = check_float("kappa", kappa, low=2.0, low_open=True)
        self.gamma = check_float("gamma", gamma, low=0.0, low_open=True)

    @property
    def alpha_beta(self) -> tuple[float, float]:
        if not self._history:
            return self.kappa - 2.0, 2.0
        return beta_parameters(self.smoothed, self.kappa, self.gamma)
