"""The statistics behind a study's verdict words: paired differences over units, 95% t-intervals, p-values, Holm's
correction across the comparisons reported, and the words themselves (docs/results.md, "How to read the verdicts").

For one comparison on one metric the units' paired differences d_1..d_n give the mean, its 95% t-interval
mean +- t(0.975, n - 1) sd / sqrt(n), and two p-values from the same t statistic with n - 1 degrees of freedom:

- `p_difference`: the two-sided test of a zero difference, below 0.05 exactly when the interval excludes 0;
- `p_equivalence`: the two one-sided tests (TOST) of a difference at or beyond -margin and at or beyond +margin,
  twice the larger of the two p-values, below 0.05 exactly when the 95% interval lies inside +-margin.

Holm's step-down correction is applied to `p_difference` across every comparison a study reports (the family the
report declares): the i-th smallest of m p-values is multiplied by m - i + 1, and an adjusted p-value is never below
the one before it. Verdicts: "ahead" / "behind" when `p_difference` < 0.05 (the sign of the mean says which), checked
first; "equivalent" when `p_equivalence` < 0.05; "not detected" otherwise. Unadjusted, these are the interval rule
that studies 3 and 4 pre-registered (`interval_verdict`). After Holm, "ahead" / "behind" need the adjusted
`p_difference` below 0.05, so the family of difference claims has at most a 5% chance of holding a false one;
"equivalent" stays the pre-registered equivalence rule (the 95% interval inside the stated margin), not adjusted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

LEVEL = 0.05


def _central(statistic: float, df: int) -> float:
    """P(|T| <= statistic) for Student's t with an integer `df` >= 1 and `statistic` >= 0: the closed form in
    theta = atan(statistic / sqrt(df)) (Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan(statistic / math.sqrt(df))
    sine, cosine = math.sin(theta), math.cos(theta)
    if df == 1:
        return 2 * theta / math.pi
    term = total = 1.0 if df % 2 == 0 else cosine
    for k in range(2 if df % 2 == 0 else 3, df - 1, 2):
        term *= (k - 1) / k * cosine**2
        total += term
    return sine * total if df % 2 == 0 else 2 / math.pi * (theta + sine * total)


def t_upper_tail(statistic: float, df: int) -> float:
    """P(T >= statistic) for Student's t with an integer `df` >= 1."""
    return 0.5 * (1 - math.copysign(_central(abs(statistic), df), statistic))


def t_quantile(probability: float, df: int) -> float:
    """Student's t quantile for `probability` in (0.5, 1), by bisection on the exact distribution function."""
    low, high = 0.0, 1.0
    while 1 - t_upper_tail(high, df) < probability:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if 1 - t_upper_tail(middle, df) < probability else (low, middle)
    return (low + high) / 2


def interval(differences) -> tuple[float, float, float]:
    """Mean and the two-sided 95% t-interval over the units."""
    values = np.asarray(differences, dtype=float)
    mean = float(values.mean())
    half = t_quantile(1 - LEVEL / 2, values.size - 1) * float(values.std(ddof=1)) / math.sqrt(values.size)
    return mean, mean - half, mean + half


def interval_verdict(low: float, high: float, margin: float) -> str:
    """The pre-registered word of studies 3 and 4 for an interval [low, high]: excluding 0 first, then the margin."""
    if low > 0:
        return "ahead"
    if high < 0:
        return "behind"
    if -margin <= low and high <= margin:
        return "equivalent"
    return "not detected"


@dataclass(frozen=True)
class PairedTest:
    """One comparison on one metric: the units' differences, their mean and 95% t-interval, and both p-values."""

    differences: tuple[float, ...]
    margin: float
    mean: float
    low: float
    high: float
    p_difference: float
    p_equivalence: float


def paired_test(differences, margin: float) -> PairedTest:
    """The interval and the two p-values (module docstring) of at least two units' paired differences."""
    values = np.asarray(differences, dtype=float)
    if values.size < 2:
        raise ValueError(f"A paired test needs at least 2 units, got {values.size}.")
    mean, low, high = interval(values)
    df, error = values.size - 1, float(values.std(ddof=1)) / math.sqrt(values.size)

    def statistic(offset: float) -> float:
        if error > 0:
            return (mean - offset) / error
        return 0.0 if mean == offset else math.copysign(math.inf, mean - offset)

    p_difference = 1 - _central(abs(statistic(0.0)), df)
    p_equivalence = 2 * max(t_upper_tail(statistic(-margin), df), t_upper_tail(-statistic(margin), df))
    return PairedTest(tuple(values.tolist()), margin, mean, low, high, p_difference, min(1.0, p_equivalence))


def holm(p_values) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (ties keep their order)."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def verdict(mean: float, p_difference: float, p_equivalence: float) -> str:
    """The verdict word from a comparison's p-value of a difference (unadjusted or Holm-adjusted) and its
    equivalence p-value (module docstring)."""
    if p_difference < LEVEL:
        return "ahead" if mean > 0 else "behind"
    if p_equivalence < LEVEL:
        return "equivalent"
    return "not detected"


@dataclass(frozen=True)
class Cell:
    """One reported comparison (arm - baseline, one metric, one regime) with its test and its Holm-adjusted p-value of
    a difference."""

    regime: str
    arm: str
    baseline: str
    metric: str
    units: tuple
    test: PairedTest
    holm_difference: float = 1.0

    @property
    def word(self) -> str:
        return verdict(self.test.mean, self.test.p_difference, self.test.p_equivalence)

    @property
    def holm_word(self) -> str:
        return verdict(self.test.mean, self.holm_difference, self.test.p_equivalence)


def with_holm(cells: list[Cell]) -> list[Cell]:
    """The cells with Holm's correction of the p-values of a difference applied across all of them."""
    adjusted = holm([cell.test.p_difference for cell in cells])
    return [replace(cell, holm_difference=p) for cell, p in zip(cells, adjusted, strict=True)]
