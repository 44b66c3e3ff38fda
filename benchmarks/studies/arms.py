"""Allocators that exist only as study arms (controls and ablations), built around the shipped ones; not options.

- `explore_first` (study 1): CoBA with the capability mapping reversed, alpha_t, beta_t from 1 - F_bar.
- `shuffled_group_sizes` (study 4): each round's CoBA group sizes handed to a random permutation of that round's
  prompts: the same unequal group sizes, without targeting the prompts the allocator chose them for.
"""

from __future__ import annotations

import numpy as np

STUDY_ONLY_SETTINGS = ("explore_first", "shuffled_group_sizes", "budget_multiplier")


def explore_first_allocator(args):
    """CoBA allocator with the capability mapping reversed: alpha_t, beta_t from 1 - F_bar (explore-first ablation)."""
    from coba_trl.allocation import CapabilityTracker, beta_parameters

    class ReversedCapability(CapabilityTracker):
        @property
        def alpha_beta(self) -> tuple[float, float]:
            if not self._history:
                return 2.0, self.kappa - 2.0
            return beta_parameters(1.0 - self.smoothed, self.kappa, self.gamma)

    allocator = args.build_allocator()
    allocator.tracker = ReversedCapability(kappa=args.coba_kappa, window=args.coba_window, gamma=args.coba_gamma)
    return allocator


class ShuffledGroupSizes:
    """Wraps an allocator: its group sizes for a round, permuted uniformly at random over the round's prompts.

    Everything else (observing F_t, metrics, checkpoint state) is the wrapped allocator's. The permutation stream is
    seeded once per run (`seed`), so a rerun hands the same sizes to the same prompts.
    """

    def __init__(self, allocator, seed: int):
        self.allocator = allocator
        self.rng = np.random.default_rng(seed)

    def allocate(self, pass_rates, total_budget: int) -> np.ndarray:
        sizes = np.asarray(self.allocator.allocate(pass_rates, total_budget))
        return sizes[self.rng.permutation(sizes.size)]

    def __getattr__(self, name):
        return getattr(self.allocator, name)


def study_allocator(arm_settings: dict, args, warm_seed: int, seed: int):
    """The allocator a study-only arm replaces the trainer's with, or None for a shipped configuration."""
    if arm_settings.get("explore_first"):
        return explore_first_allocator(args)
    if arm_settings.get("shuffled_group_sizes"):
        return ShuffledGroupSizes(args.build_allocator(), seed=[warm_seed, seed])
    return None
