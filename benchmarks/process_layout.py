"""How a round's rows lie over the processes: the distinct prompts each process prefills, and the balance of the
expected completion tokens, for the README's 8-GPU layout and for CoBA's typical unequal rounds.

    python benchmarks/process_layout.py [--json FILE]

Deterministic (no timing, no model): each layout is dealt by `coba_trl.rounds.grouping.deal_groups`, the deal every
process computes, and compared with GRPO's own per-process slices (the groups in prompt order, cut into equal
contiguous slices). Per layout it prints the distinct prompts each process holds (its vLLM engine prefills each once)
against its share M / P, the groups split over two or more processes, and max / mean over processes of the expected
completion tokens: by the deal's own weight (2 - p) and by a steeper length model (512 + 3584 (1 - p)^1.5 tokens,
hard prompts writing far longer answers). Run it with another coba-trl on `PYTHONPATH` to compare two deals.

Layouts:
- `readme_8gpu_uniform`: the README's 8-GPU recipe, 128 prompts x 16 completions, uniform allocation (GRPO's groups);
- `coba_skewed_8`: 256 prompts x 16 on 8 processes, CoBA's allocation of a failure-heavy mix (groups of 2 to 123);
- `coba_mixed_<P>`: 64 prompts x 8 on 2 and 4 processes, CoBA's allocation of pass rates drawn from Beta(0.5, 0.5),
  the U-shaped mix of math RL, median over 20 draws.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from coba_trl.allocation import build_allocator
from coba_trl.rounds.grouping import deal_groups, distinct_groups, expected_length_weight, imbalance


def grpo_slices(sizes: np.ndarray, num_ranks: int) -> list[np.ndarray]:
    """GRPO's per-process slices: the groups in prompt order, cut into equal contiguous slices."""
    return np.split(np.repeat(np.arange(len(sizes)), sizes), num_ranks)


def coba_allocation(pass_rates: np.ndarray, budget: int, max_budget: int = 128) -> np.ndarray:
    allocator = build_allocator("coba", min_budget=2, max_budget=max_budget, kappa=11.0)
    allocator.observe(pass_rates)
    return np.asarray(allocator.allocate(pass_rates, budget))


def figures(sizes: np.ndarray, pass_rates: np.ndarray, num_ranks: int) -> dict:
    """The layout figures of the deal and of GRPO's slices for one round."""
    weights = expected_length_weight(pass_rates)
    steep = 512 + 3584 * (1 - np.nan_to_num(pass_rates, nan=0.5)) ** 1.5
    result = {}
    for name, dealt in (
        ("deal", deal_groups(sizes, num_ranks, weights)),
        ("grpo_slices", grpo_slices(sizes, num_ranks)),
    ):
        prompts = distinct_groups(dealt)
        spans = [sum(bool(np.any(rows == g)) for rows in dealt) for g in range(len(sizes))]
        result[name] = {
            "distinct_prompts": prompts,
            "max_prompts": max(prompts),
            "groups_split": int(sum(span > 1 for span in spans)),
            "token_imbalance": round(imbalance(dealt, weights), 4),
            "steep_token_imbalance": round(imbalance(dealt, steep), 4),
        }
    return result


def layouts() -> dict:
    rng = np.random.default_rng(0)
    skewed = np.concatenate([np.zeros(8), rng.beta(2.0, 2.0, 216), np.ones(32)])
    rng.shuffle(skewed)
    out = {
        "readme_8gpu_uniform": {
            "processes": 8,
            "prompts": 128,
            **figures(np.full(128, 16), np.random.default_rng(1).uniform(size=128), 8),
        },
        "coba_skewed_8": {"processes": 8, "prompts": 256, **figures(coba_allocation(skewed, 256 * 16), skewed, 8)},
    }
    for processes in (2, 4):
        draws = []
        for seed in range(20):
            pass_rates = np.random.default_rng(100 + seed).beta(0.5, 0.5, 64)
            draws.append(figures(coba_allocation(pass_rates, 64 * 8, 32), pass_rates, processes))
        out[f"coba_mixed_{processes}"] = {
            "processes": processes,
            "prompts": 64,
            **{
                deal: {
                    key: statistics.median(d[deal][key] for d in draws)
                    for key in ("max_prompts", "groups_split", "token_imbalance", "steep_token_imbalance")
                }
                for deal in ("deal", "grpo_slices")
            },
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    results = layouts()
    for name, layout in results.items():
        share = layout["prompts"] / layout["processes"]
        print(f"{name}: {layout['prompts']} prompts on {layout['processes']} processes (share {share:g} each)")
        for deal in ("deal", "grpo_slices"):
            f = layout[deal]
            print(
                f"  {deal:12s} most prompts on a process {f['max_prompts']:g}, groups split {f['groups_split']:g}, "
                f"expected tokens max/mean {f['token_imbalance']:.4f} (steep model {f['steep_token_imbalance']:.4f})"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
