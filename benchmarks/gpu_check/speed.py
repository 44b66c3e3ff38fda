"""The GPU check's speed section (`check.py`): the arms interleaved round by round, each ratio the median of paired
per-round ratios with a distribution-free 95% interval.

The three arms' trainers are built once and stay resident (`gpu_check_turns`); each cycle trains one round of every
arm, in the first order on even cycles and the reverse on odd ones (c g u, u g c, c g u, ...), so that a drift of the
machine over the run reaches every arm alike and no arm always runs first. Cycle 0 is the warm-up. In every later
cycle the two rounds of a ratio (CoBA / GRPO, uniform / GRPO, CoBA / uniform) are a pair, run seconds apart; a ratio
is the median of its pairs' ratios, and its interval is the order-statistic interval for a median, which holds for
any distribution of the pairs' ratios (`median_interval`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from gpu_check.sections import Parts, Put
from gpu_check.trainers import Sizes, make_trainer
from gpu_check.turns import Resident

ARMS = ("coba", "grpo", "uniform")
PAIRS = {"coba/grpo": ("coba", "grpo"), "uniform/grpo": ("uniform", "grpo"), "coba/uniform": ("coba", "uniform")}
MEASURES = ("round_s", "generation_s", "peak_above_round_start_gib")  # the last on CUDA only
CONFIDENCE = 0.95


def median_interval(values, confidence: float = CONFIDENCE) -> dict:
    """The median of `values` and the distribution-free interval [x_(k), x_(n+1-k)] for the median of the population
    they are drawn from, with k the largest rank whose interval still covers it with at least `confidence` (for n
    values, the number below the median is Binomial(n, 1/2)); `confidence` is the interval's exact coverage, lower
    than asked only when n is too small for any k (n < 6 at 95%: then [min, max])."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0:
        return {"median": None, "low": None, "high": None, "confidence": None, "pairs": 0}
    below = [math.comb(n, i) / 2**n for i in range(n + 1)]  # P(exactly i of the n values lie below the median)
    k, tail = 1, below[0]  # the interval [x_(k), x_(n+1-k)] misses the median with probability 2 * P(B <= k - 1)
    while k < (n + 1) // 2 and 2 * (tail + below[k]) <= 1 - confidence:
        tail += below[k]
        k += 1
    return {
        "median": float(np.median(x)),
        "low": float(x[k - 1]),
        "high": float(x[n - k]),
        "confidence": 1 - 2 * tail,
        "pairs": n,
    }


def cycle_order(first: tuple[str, ...], cycle: int) -> tuple[str, ...]:
    """The arms' order in `cycle`: `first` on even cycles, reversed on odd ones."""
    return first if cycle % 2 == 0 else first[::-1]


def paired_ratios(rounds: dict[str, list[dict]], measures=MEASURES) -> dict:
    """For every pair of arms and measure: the median of the per-cycle ratios with its interval, and the ratios."""
    ratios = {}
    for name, (top, bottom) in PAIRS.items():
        if top not in rounds or bottom not in rounds:
            continue
        by_cycle = {r["cycle"]: r for r in rounds[bottom] if r["cycle"] > 0}
        pairs = [(r, by_cycle[r["cycle"]]) for r in rounds[top] if r["cycle"] in by_cycle]
        for measure in measures:
            values = [a[measure] / b[measure] for a, b in pairs if measure in a and measure in b and b[measure] > 0]
            if values:
                ratios.setdefault(name, {})[measure] = {**median_interval(values), "per_pair": values}
    return ratios


def arm_summary(rounds: list[dict], trainer, reward) -> dict:
    """Means over an arm's measured rounds (after the warm-up), with every round kept."""
    measured = [r for r in rounds if r["cycle"] > 0]
    keys = [key for key in rounds[0] if key.endswith(("_s", "_gib"))]
    means = {key: float(np.mean([r[key] for r in measured])) for key in keys} if measured else {}
    group_sizes = [size for call in reward.calls for size in np.unique(call[0], return_counts=True)[1].tolist()]
    tokens = float(np.mean([r["completion_tokens"] for r in measured])) if measured else 0.0
    return {
        "rounds_measured": len(measured),
        **means,
        "completion_tokens_per_round": tokens,
        "generation_tokens_per_s": tokens / means["generation_s"] if measured else 0.0,
        "group_size_min": min(group_sizes),
        "group_size_max": max(group_sizes),
        "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "per_round": rounds,
    }


def one_round(resident: Resident, reward, cycle: int, position: int) -> dict | None:
    """Train one round of `resident` and split its time as in `run_arm`: generation (TRL's `_generate`), scoring
    (the rest of `_generate_and_score_completions`), training (the rest of the round)."""
    result = resident.round()
    if result is None:
        return None
    probe = resident.trainer.probe
    generation, scored = probe["generation_s"][-1], probe["generate_and_score_s"][-1]
    return {
        "cycle": cycle,
        "position": position,
        **result,
        "generation_s": generation,
        "scoring_s": scored - generation,
        "training_s": result["round_s"] - scored,
        "completion_tokens": reward.calls[-1][2],
    }


def measure_speed(
    sizes: Sizes,
    device: torch.device,
    output_dir: str,
    put: Put,
    log_path: str,
    stop_at: float,
    reverse: bool = False,
) -> None:
    """Up to `sizes.rounds` measured cycles after a warm-up one; no cycle starts that would end past `stop_at`, after
    at least one measured cycle. Each arm's rounds and the ratios are written after every cycle; an arm that raises
    leaves the others to run."""
    parts = Parts(log_path)
    first = ARMS[::-1] if reverse else ARMS
    put("design", {"first_order": list(first), "alternating": True, "confidence": CONFIDENCE})
    built = {
        arm: parts.run(arm, make_trainer, arm, sizes, device, output_dir, steps=1 + sizes.rounds) for arm in first
    }
    built = {arm: trainer_reward for arm, trainer_reward in built.items() if trainer_reward is not None}
    residents = {arm: Resident(arm, trainer, device, parts.run) for arm, (trainer, _) in built.items()}
    rounds = {arm: [] for arm in residents}
    cycle_s = []
    try:
        for cycle in range(1 + sizes.rounds):
            if cycle >= 2 and time.perf_counter() + cycle_s[-1] > stop_at:
                break
            start = time.perf_counter()
            for position, arm in enumerate(cycle_order(first, cycle)):
                if arm in residents:
                    result = one_round(residents[arm], built[arm][1], cycle, position)
                    if result is None:
                        residents.pop(arm).close()
                    else:
                        rounds[arm].append(result)
            cycle_s.append(time.perf_counter() - start)
            record(rounds, built, cycle, put)
    finally:
        for resident in residents.values():
            resident.close()
    parts.raise_if_any()


def record(rounds: dict[str, list[dict]], built: dict, cycle: int, put: Put) -> None:
    """Write every arm's rounds so far and, after a measured cycle, the paired ratios; print them. `built` maps each
    arm to its (trainer, reward)."""
    arms = {arm: arm_summary(r, *built[arm]) for arm, r in rounds.items() if r}
    put("arms", arms)
    times = ", ".join(f"{arm} {r[-1]['round_s']:.2f} s" for arm, r in rounds.items() if r and r[-1]["cycle"] == cycle)
    print(f"[speed] cycle {cycle}{' (warm-up)' if cycle == 0 else ''}: {times}", flush=True)
    if cycle == 0:
        return
    ratios = paired_ratios(rounds)
    put("ratios", ratios)
    for name, measures in ratios.items():
        print(f"[speed]   {name}: " + "; ".join(f"{m} {describe(v)}" for m, v in measures.items()), flush=True)


def describe(ratio: dict) -> str:
    return f"{ratio['median']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}] ({ratio['pairs']} pairs)"
