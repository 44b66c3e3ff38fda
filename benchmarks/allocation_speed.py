"""Speed of the exact fast allocation against the plain heap greedy and the dynamic program, in one process.

    python benchmarks/allocation_speed.py

For each (M, B_total) it draws history-like pass rates (successes out of 16 rollouts, window 1), times the whole
`CoBAAllocator.allocate` call, the same allocation with the one-unit-at-a-time heap (`reference.heap_greedy`)
and the exact DP on the heap step (where it finishes in reasonable time), checks that the counts are
identical and that the greedy reaches the DP optimum; then the same for the Knapsack-RL solver. Targets
(checked at the end): M = 512, B = 8192 in <= 0.5 ms and >= 50x the heap; M = 65,536, B = 1,048,576 in <= 100 ms.
"""

import math
import time

import numpy as np

from coba_trl.allocation import CoBAAllocator, KnapsackAllocator, coba_allocate
from coba_trl.allocation.coba import heap_share
from coba_trl.allocation.reference import dp_allocation, heap_greedy
from coba_trl.allocation.solver import greedy_counts
from coba_trl.allocation.values import CoBAGains, KnapsackGains, canonical_pass_rate, coba_value, knapsack_value

SIZES = [(256, 4096), (512, 8192), (4096, 65536), (65536, 1048576)]
DP_MAX_PROMPTS = 512
B_LOW, B_UP = 2, 128


def median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


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


def coba_row(rng, n_prompts: int, total: int) -> tuple[float, float]:
    allocator = CoBAAllocator(B_LOW, B_UP)
    allocator.observe(history_like(rng, n_prompts))
    rates = history_like(rng, n_prompts)
    small = n_prompts <= 4096
    fast = median_seconds(lambda: allocator.allocate(rates, total), 200 if small else 20)
    counts = allocator.allocate(rates, total)
    options = dict(alpha=allocator.alpha, beta=allocator.beta, min_budget=B_LOW, max_budget=B_UP)
    heap = median_seconds(lambda: coba_allocate(rates, total, solver=heap_greedy, **options), 3 if small else 1)
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
        f"CoBA      M={n_prompts:6d} B={total:8d}  fast {fast * 1e3:8.3f} ms  heap {heap * 1e3:10.1f} ms "
        f"({heap / fast:8.0f}x)  DP {dp}  identical counts: {same}"
    )
    return fast, heap / fast


def knapsack_row(rng, n_prompts: int, total: int) -> None:
    rates = history_like(rng, n_prompts)
    allocator = KnapsackAllocator(B_LOW, B_UP)
    small = n_prompts <= 4096
    whole = median_seconds(lambda: allocator.allocate(rates, total), 200 if small else 20)
    effective = rates[(rates > 0) & (rates < 1)]
    levels, group = np.unique(effective, return_inverse=True)
    gains, budget = KnapsackGains(levels), total - n_prompts * B_LOW
    fast = median_seconds(lambda: greedy_counts(gains, group, B_LOW, B_UP - B_LOW, budget), 200 if small else 20)
    heap = median_seconds(lambda: heap_greedy(gains, group, B_LOW, B_UP - B_LOW, budget), 3 if small else 1)
    counts = greedy_counts(gains, group, B_LOW, B_UP - B_LOW, budget)
    same = np.array_equal(heap_greedy(gains, group, B_LOW, B_UP - B_LOW, budget), counts)
    dp = dp_seconds(knapsack_value, effective, B_UP - B_LOW, budget, counts)
    print(
        f"Knapsack  M={n_prompts:6d} B={total:8d}  fast {fast * 1e3:8.3f} ms  heap {heap * 1e3:10.1f} ms "
        f"({heap / fast:8.0f}x)  DP {dp}  identical counts: {same}  (whole allocate {whole * 1e3:.3f} ms)"
    )


def main() -> None:
    rng = np.random.default_rng(0)
    results = {size: coba_row(rng, *size) for size in SIZES}
    for size in SIZES:
        knapsack_row(rng, *size)
    fast, ratio = results[(512, 8192)]
    print(f"target M=512, B=8192: {fast * 1e3:.3f} ms <= 0.5 ms: {fast <= 5e-4}; {ratio:.0f}x >= 50x: {ratio >= 50}")
    fast, _ = results[(65536, 1048576)]
    print(f"target M=65536, B=1048576: {fast * 1e3:.1f} ms <= 100 ms: {fast <= 0.1}")


if __name__ == "__main__":
    main()
