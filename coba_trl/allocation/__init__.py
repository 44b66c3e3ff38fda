"""Rollout-budget allocation in plain numpy (no torch, no TRL): docs/algorithm.md, "Pass rate of a prompt"
to "Knapsack-RL".

from coba_trl.allocation import build_allocator, PassRateHistory

allocator = build_allocator("coba", min_budget=2, max_budget=128, kappa=11.0)
counts = allocator.allocate(history.pass_rates(prompt_ids), total_budget=4096)
...  # generate counts[i] rollouts for prompt i, score them
history.update(prompt_ids, successes, counts)
allocator.observe(successes / counts)
"""

from .base import BudgetAllocator, fill_to_budget, uniform_split
from .capability import CapabilityTracker, FailureRateTracker, beta_parameters, psi
from .coba import CoBAAllocator, coba_allocate
from .factory import ALLOCATORS, build_allocator
from .history import PassRateHistory
from .knapsack import KnapsackAllocator
from .neighbours import NeighbourhoodPrior
from .solver import greedy_counts
from .uniform import UniformAllocator
from .values import CoBAGains, KnapsackGains, adaptive_tau, coba_value, knapsack_value

__all__ = [
    "ALLOCATORS",
    "BudgetAllocator",
    "CapabilityTracker",
    "CoBAAllocator",
    "CoBAGains",
    "FailureRateTracker",
    "KnapsackAllocator",
    "KnapsackGains",
    "NeighbourhoodPrior",
    "PassRateHistory",
    "UniformAllocator",
    "adaptive_tau",
    "beta_parameters",
    "build_allocator",
    "coba_allocate",
    "coba_value",
    "fill_to_budget",
    "greedy_counts",
    "knapsack_value",
    "psi",
    "uniform_split",
]
