"""Argument checks shared by the allocators. Every failure is a `ValueError` naming the argument and the fix."""

import math
import numbers

import numpy as np


def check_int(name: str, value, minimum: int = 0) -> int:
    """Return `value` as an `int`, rejecting bools, non-integers and values below `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def check_float(name: str, value, low: float = -math.inf, high: float = math.inf, low_open: bool = False) -> float:
    """Return `value` as a finite `float` in [low, high] (or (low, high] when `low_open`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    value = float(value)
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must lie in {bracket}{low}, {high}], got {value}.")
    return value


def check_budget_bounds(min_budget, max_budget) -> tuple[int, int]:
    """Validate the per-prompt floor B_low and cap B_up."""
    min_budget = check_int("min_budget", min_budget, minimum=1)
    max_budget = check_int("max_budget", max_budget, minimum=1)
    if min_budget > max_budget:
        raise ValueError(f"min_budget ({min_budget}) must not exceed max_budget ({max_budget}).")
    return min_budget, max_budget


def check_pass_rates(name: str, rates, allow_nan: bool) -> np.ndarray:
    """Return `rates` as a 1-D float64 array with values in [0, 1] (NaN = unseen only when `allow_nan`)."""
    try:
        rates = np.asarray(rates, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a 1-D array of numbers in [0, 1]: {error}") from None
    if rates.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {rates.shape}.")
    nan = np.isnan(rates)
    if nan.any() and not allow_nan:
        raise ValueError(f"{name} must not contain NaN: pass the success rates of prompts observed this round.")
    valid = rates[~nan]
    if valid.size and not (np.all(valid >= 0.0) and np.all(valid <= 1.0)):
        bad = valid[(valid < 0.0) | (valid > 1.0) | ~np.isfinite(valid)][0]
        raise ValueError(f"{name} must lie in [0, 1]{' or be NaN (unseen)' if allow_nan else ''}, got {bad}.")
    return rates
