"""Speed of the exact fast allocation against the plain heap greedy and the dynamic program, in one process.

    python benchmarks/allocation_speed.py [--repeats 5]

For each (M, B_total) it draws history-like pass rates (successes out of 16 rollouts, window 1), times the whole
`CoBAAllocator.allocate` call, the same allocation with the one-unit-at-a-time heap (`reference.heap_greedy`)
and the exact DP on the heap step (where it finishes in reasonable time), checks that the counts are
identical and that the greedy reaches the DP optimum; then the same for the Knapsack-RL solver. Last, the estimate a
two-phase round makes from its screening (`PassRateHistory.pass_rates_after`, touching the round's prompts only)
against updating a deep copy of the whole history, at DAPO-Math-17K's size: 17,398 prompts of history, 512 in the round.

Timing is paired A/B: each of `--repeats` repeats times the fast solver (the median of as many separately timed
calls as fill about 20 ms) and the heap right after each other, alternating which goes first, and the speed-up is
taken within each repeat. Every figure is the median over repeats with the range [min-max], so a burst of load
from another process cannot flip a ratio. Targets (checked on the medians at the end): M = 512, B = 8192 in
<= 0.5 ms and >= 50x the heap; M = 65,536, B = 1,048,576 in <= 100 ms; the two-phase estimate in <= 5 ms.
"""

import argparse
import copy
import math
import os
import time
from dataclasses import dataclass

import numpy as np
from machine import machine_line

from coba_trl.allocation import CoBAAllocator, KnapsackAllocator, PassRateHistory, coba_allocate
from coba_trl.allocation.coba import heap_share
from coba_trl.allocation.reference import dp_allocation, heap_greedy
from coba_trl.allocation.solver import greedy_counts
from coba_trl.allocation.values import CoBAGains, KnapsackGains, canonical_pass_rate, coba_value, knapsack_value

SIZES = [(256, 4096), (512, 8192), (4096, 65536), (65536, 1048576)]
HISTORY_PROMPTS, ROUND_PROMPTS, SCREEN_ROLLOUTS = 17_398, 512, 2
DP_MAX_PROMPTS = 512
B_LOW, B_UP = 2, 128


def seconds_per_call(function, calls: int) -> float:
    """Median seconds of `calls` separately timed calls (a call preempted by another process does not count)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def calls_to_fill(function, seconds: float = 0.02) -> int:
    """How many calls of `function` take about `seconds` (so a fast call is timed many times)."""
    start = time.perf_counter()
    function()
    once = time.perf_counter() - start
    return max(1, min(1000, int(seconds / max(once, 1e-7))))


@dataclass
class Paired:
    """Seconds per call of A and B in each repeat, and B / A within each repeat."""

    fast: np.ndarray
    slow: np.ndarray

    @property
    def ratio(self) -> np.ndarray:
        return self.slow / self.fast


def paired_times(fast, slow, repeats: int) -> Paired:
    """Interleaved repeats of A (many calls) and B (one call); the order alternates between repeats."""
    calls = calls_to_fill(fast)
    times = {fast: [], slow: []}
    for repeat in range(repeats):
        for function in (fast, slow) if repeat % 2 == 0 else (slow, fast):
            times[function].append(seconds_per_call(function, calls if function is fast else 1))
    return Paired(np.array(times[fast]), np.array(times[slow]))


def spread(values: np.ndarray, scale: float = 1e3, digits: int = 3, unit: str = " ms") -> str:
    """Median [min-max] of `values` times `scale`."""
    low, mid, high = (float(np.min(values)), float(np.median(values)), float(np.max(values)))
    return f"{mid * scale:.{digits}f}{unit} [{low * scale:.{digits}f}-{high * scale:.{digits}f}]"


def ratio_text(values: np.ndarray) -> str:
    return f"{np.median(values):.0f}x [{np.min(values):.0f}-{np.max(values):.0f}]"


def history_like(rng, n_prompts: int) -> np.ndarray:
    return rng.binomial(16, rng.beta(0.6, 0.6, n_prompts)) / 16


def dp_seconds(values_at, rates: np.ndarray, units: int, budget: int, counts: np.ndarray) -> str:
    """Time the DP on the greedy step and check that the greedy counts reach its optimum."""
    if rates.size > DP_MAX_PROMPTS:
        return "not run"
    table = values_at(B_LOW + np.arange(units + 1)[None, :], rates[:, None])
    table -= table[:, :1]
    start = time.perf_counter()
    best, _ = dp_allocation(table, budget)
    elapsed = time.perf_counter() - start
    greedy = float(table[np.arange(rates.size), counts].sum())
    assert math.isclose(greedy, best, rel_tol=1e-9), (greedy, best)
    return f"{elapsed * 1e3:10.1f} ms"


def coba_row(rng, n_prompts: int, total: int, repeats: int) -> Paired:
    allocator = CoBAAllocator(B_LOW, B_UP)
    allocator.observe(history_like(rng, n_prompts))
    rates = history_like(rng, n_prompts)
    counts = allocator.allocate(rates, total)
    options = dict(alpha=allocator.alpha, beta=allocator.beta, min_budget=B_LOW, max_budget=B_UP)
    times = paired_times(
        lambda: allocator.allocate(rates, total),
        lambda: coba_allocate(rates, total, solver=heap_greedy, **options),
        repeats,
    )
    same = np.array_equal(coba_allocate(rates, total, solver=heap_greedy, **options)[0], counts)
    explore = rates[(rates >= 0.05) & (rates <= 0.99)]
    heap_budget = math.floor((total - n_prompts * B_LOW) * heap_share(explore.size, n_prompts))
    tau = allocator.metrics()["tau"]
    levels, group = np.unique(canonical_pass_rate(explore), return_inverse=True)
    step = greedy_counts(
        CoBAGains(levels, allocator.alpha, allocator.beta, tau), group, B_LOW, B_UP - B_LOW, heap_budget
    )
    dp = dp_seconds(
        lambda b, p: coba_value(b, p, allocator.alpha, allocator.beta, tau), explore, B_UP - B_LOW, heap_budget, step
    )
    print(
        f"CoBA      M={n_prompts:6d} B={total:8d}  fast {spread(times.fast)}  heap {spread(times.slow, digits=1)}  "
        f"speed-up {ratio_text(times.ratio)}  DP {dp}  identical counts: {same}",
        flush=True,
    )
    return times


def knapsack_row(rng, n_prompts: int, total: int, repeats: int) -> None:
    rates = history_like(rng, n_prompts)
    allocator = KnapsackAllocator(B_LOW, B_UP)
    whole = np.array([seconds_per_call(lambda: allocator.allocate(rates, total), 20) for _ in range(repeats)])
    effective = rates[(rates > 0) & (rates < 1)]
    levels, group = np.unique(effective, return_inverse=True)
    gains, budget = KnapsackGains(levels), total - n_prompts * B_LOW
    times = paired_times(
        lambda: greedy_counts(gains, group, B_LOW, B_UP - B_LOW, budget),
        lambda: heap_greedy(gains, group, B_LOW, B_UP - B_LOW, budget),
        repeats,
    )
    counts = greedy_counts(gains, group, B_LOW, B_UP - B_LOW, budget)
    same = np.array_equal(heap_greedy(gains, group, B_LOW, B_UP - B_LOW, budget), counts)
    dp = dp_seconds(knapsack_value, effective, B_UP - B_LOW, budget, counts)
    print(
        f"Knapsack  M={n_prompts:6d} B={total:8d}  fast {spread(times.fast)}  heap {spread(times.slow, digits=1)}  "
        f"speed-up {ratio_text(times.ratio)}  DP {dp}  identical counts: {same}  (whole allocate {spread(whole)})",
        flush=True,
    )


def history_row(rng, repeats: int) -> Paired:
    """A two-phase round's estimate from its screening: `pass_rates_after` against update-a-deep-copy."""
    history = PassRateHistory(window=1)
    history.update(np.arange(HISTORY_PROMPTS), rng.binomial(16, 0.5, HISTORY_PROMPTS), np.full(HISTORY_PROMPTS, 16))
    prompt_ids = rng.choice(HISTORY_PROMPTS + ROUND_PROMPTS, ROUND_PROMPTS, replace=False)  # some unseen
    screened = rng.binomial(SCREEN_ROLLOUTS, 0.5, ROUND_PROMPTS)
    rollouts = np.full(ROUND_PROMPTS, SCREEN_ROLLOUTS)

    def copied():
        updated = copy.deepcopy(history)
        updated.update(prompt_ids, screened, rollouts)
        return updated.pass_rates(prompt_ids)

    times = paired_times(lambda: history.pass_rates_after(prompt_ids, screened, rollouts), copied, repeats)
    same = np.array_equal(history.pass_rates_after(prompt_ids, screened, rollouts), copied(), equal_nan=True)
    print(
        f"two-phase history overlay  history {HISTORY_PROMPTS} round {ROUND_PROMPTS}  "
        f"pass_rates_after {spread(times.fast)}  deep copy {spread(times.slow, digits=1)}  "
        f"speed-up {ratio_text(times.ratio)}  identical rates: {same}",
        flush=True,
    )
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="paired repeats per size (median and range)")
    args = parser.parse_args(argv)
    print(machine_line())
    print(f"medians over {args.repeats} paired repeats, [min-max] across repeats")
    rng = np.random.default_rng(0)
    results = {size: coba_row(rng, *size, args.repeats) for size in SIZES}
    for size in SIZES:
        knapsack_row(rng, *size, args.repeats)
    overlay = history_row(rng, args.repeats)
    small, large = results[(512, 8192)], results[(65536, 1048576)]
    fast, ratio = np.median(small.fast), np.median(small.ratio)
    print(f"target M=512, B=8192: {fast * 1e3:.3f} ms <= 0.5 ms: {fast <= 5e-4}; {ratio:.0f}x >= 50x: {ratio >= 50}")
    fast = np.median(large.fast)
    print(f"target M=65536, B=1048576: {fast * 1e3:.1f} ms <= 100 ms: {fast <= 0.1}")
    fast = np.median(overlay.fast)
    print(
        f"target two-phase history overlay: {fast * 1e3:.2f} ms <= 5 ms: {fast <= 5e-3}; load after {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
