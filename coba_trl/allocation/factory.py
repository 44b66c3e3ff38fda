"""`build_allocator`: the one place that maps a config name to an allocator."""

import inspect

from .base import BudgetAllocator
from .coba import CoBAAllocator
from .knapsack import KnapsackAllocator
from .uniform import UniformAllocator

ALLOCATORS: dict[str, type[BudgetAllocator]] = {
    "coba": CoBAAllocator,
    "knapsack": KnapsackAllocator,
    "uniform": UniformAllocator,
}


def _parameters(cls: type) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters) - {"self"}


def build_allocator(name: str, min_budget: int, max_budget: int, **kwargs) -> BudgetAllocator:
    """Build the allocator `name` ("coba", "knapsack" or "uniform").

    Every allocator takes the keyword arguments it understands; the CoBA-only ones (kappa, gamma, tau, ...)
    are ignored by the others so that one config can switch allocators. Unknown keywords are an error.
    """
    if name not in ALLOCATORS:
        raise ValueError(f"Unknown allocator {name!r}: choose one of {sorted(ALLOCATORS)}.")
    known = set().union(*(_parameters(cls) for cls in ALLOCATORS.values()))
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"Unknown allocator argument(s) {unknown}: known ones are {sorted(known)}.")
    cls = ALLOCATORS[name]
    accepted = _parameters(cls)
    return cls(min_budget=min_budget, max_budget=max_budget, **{k: v for k, v in kwargs.items() if k in accepted})
