"""Value functions and their marginal gains, vectorised over prompts (docs/algorithm.md,
"Value function" and "Knapsack-RL").

The greedy solvers compare *keys*: the natural log of the marginal gain D(B) = V(B + 1) - V(B). The log is
monotone, so the greedy order is the gain order, and a closed-form log key decreases in B exactly in floating
point, which is what lets the fast solver reproduce the one-unit-at-a-time heap bit for bit. Both solvers call
the same `key` method, so their float expressions are identical.
"""

import math

import numpy as np

DENSITY_FALLBACK = 1e-10  # the released code replaces a non-finite Beta density by this value


def clip_pass_rate(pass_rates: np.ndarray) -> np.ndarray:
    """p~ = clip(p, 0.01, 0.99)."""
    return np.clip(pass_rates, 0.01, 0.99)


def canonical_pass_rate(pass_rates: np.ndarray) -> np.ndarray:
    """p~, with min(p~, 1 - p~) rounded to 12 decimals, so that p and 1 - p are exact float complements.

    1 - 0.8 is 0.19999999999999996, not 0.2; without this, float noise would break the exact tie between
    p and 1 - p when alpha == beta instead of the lower prompt index (section 5, step 5). The shift is below
    1e-12, far under anything a pass rate can resolve.
    """
    p_tilde = clip_pass_rate(pass_rates)
    low = np.round(np.minimum(p_tilde, 1.0 - p_tilde), 12)
    return np.where(p_tilde <= 0.5, low, 1.0 - low)


def _complement(p_tilde: np.ndarray) -> np.ndarray:
    """1 - p~ for canonical p~ (see `canonical_pass_rate`)."""
    return np.where(p_tilde <= 0.5, 1.0 - p_tilde, np.round(1.0 - p_tilde, 12))


def adaptive_tau(pass_rates: np.ndarray) -> float:
    """tau = 3 + 9 * clip(Var(p~) / 0.1667, 0, 1), population variance over the prompts that enter the heap."""
    variance = float(np.var(clip_pass_rate(np.asarray(pass_rates, dtype=np.float64))))
    return 3.0 + 9.0 * min(max(variance / 0.1667, 0.0), 1.0)


def coba_log_density(p_tilde: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """log w(p) = log of the Beta(alpha, beta) density at canonical p~, a non-finite density replaced by 1e-10.

    Written as ((alpha - 1) log p~ + (beta - 1) log(1 - p~)) - log B(alpha, beta), so that p and 1 - p give
    bitwise equal values when alpha == beta (a mathematical tie stays a float tie and goes to the lower index).
    """
    log_norm = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    log_pdf = ((alpha - 1.0) * np.log(p_tilde) + (beta - 1.0) * np.log(_complement(p_tilde))) - log_norm
    with np.errstate(over="ignore"):
        density = np.exp(log_pdf)
    log_density = np.where(density > 0.0, log_pdf, -np.inf)
    return np.where(np.isfinite(density), log_density, math.log(DENSITY_FALLBACK))


def coba_value(budget, pass_rates, alpha: float, beta: float, tau: float) -> np.ndarray:
    """V(B, p) = (1 - exp(-(B / tau) * p~ (1 - p~))) * w(p) (saturation times capability density)."""
    p_tilde = canonical_pass_rate(np.asarray(pass_rates, dtype=np.float64))
    saturation = 1.0 - np.exp(-(np.asarray(budget, dtype=np.float64) / tau) * (p_tilde * _complement(p_tilde)))
    return saturation * np.exp(coba_log_density(p_tilde, alpha, beta))


def knapsack_value(budget, pass_rates) -> np.ndarray:
    """Knapsack-RL: V(N, p) = (1 - p^N - (1 - p)^N) * p (1 - p)^2 for 0 < p < 1, else 0."""
    p = np.asarray(pass_rates, dtype=np.float64)
    n = np.asarray(budget, dtype=np.float64)
    value = (1.0 - p**n - (1.0 - p) ** n) * p * (1.0 - p) ** 2
    return np.where((p > 0.0) & (p < 1.0), value, 0.0)


class CoBAGains:
    """log D(B) = log w + log(1 - e^(-c)) - c B with c = p~ (1 - p~) / tau: a line in B (geometric gains).

    `p_tilde` must be canonical (`canonical_pass_rate`). Entries with w = 0 (density underflow) have key -inf:
    they only receive budget nobody else can take.
    """

    def __init__(self, p_tilde: np.ndarray, alpha: float, beta: float, tau: float):
        self.rate = p_tilde * _complement(p_tilde) / tau
        self.log_scale = coba_log_density(p_tilde, alpha, beta) + np.log(-np.expm1(-self.rate))

    def __len__(self) -> int:
        return len(self.rate)

    def key(self, index: np.ndarray, budget: np.ndarray) -> np.ndarray:
        return self.log_scale[index] - self.rate[index] * budget

    def envelope(self, floor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(intercept, slope, spread) with intercept - slope B <= key(B) <= that + spread for B >= floor."""
        return self.log_scale, self.rate, np.zeros_like(self.rate)


class KnapsackGains:
    """log D(N) for Knapsack-RL, 0 < p < 1: D(N) = p (1 - p)^2 (lo h^N + h lo^N), h = max(p, 1 - p), lo = min.

    Computed as log(p (1 - p)^2) + N log h + log(lo + h r^N) with r = lo / h: a line in N plus a term that
    shrinks from log(lo + h r^floor) to log(lo), so the key decreases in N and lies within log1p(r^(floor - 1))
    of the line log(p (1 - p)^2 lo) + N log h.
    """

    def __init__(self, pass_rates: np.ndarray):
        p = np.asarray(pass_rates, dtype=np.float64)
        self.high = np.maximum(p, 1.0 - p)
        self.low = np.minimum(p, 1.0 - p)
        self.ratio = self.low / self.high
        self.log_high = np.log(self.high)
        self.log_scale = np.log(p) + 2.0 * np.log(1.0 - p)

    def __len__(self) -> int:
        return len(self.high)

    def key(self, index: np.ndarray, budget: np.ndarray) -> np.ndarray:
        tail = np.log(self.low[index] + self.high[index] * self.ratio[index] ** budget)
        return self.log_scale[index] + budget * self.log_high[index] + tail

    def envelope(self, floor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.log_scale + np.log(self.low), -self.log_high, np.log1p(self.ratio ** max(floor - 1, 0))
