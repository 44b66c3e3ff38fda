"""Time the bookkeeping of one generation round at the paper's scale, without a model.

    python benchmarks/round_speed.py [--repeats 20]

A round of 512 prompts and 8,192 completions (mean group 16, B_low 2, B_up 128), a pass-rate history of 17,398 prompts
(DAPO-Math-17K's size), 8 processes: plan (pass rates, CoBA's allocation, log record), deal the rows over the
processes, score (advantages over whole groups, zero-spread groups, successes, process 0's rows), observe (history
and F_t) and serialise the allocation-log record. One-phase and two-phase rounds (2 screening completions per
prompt first). Prints the machine, then the median and range per round over `--repeats` rounds, against the target
of 50 ms. Torch runs on one thread here (`OMP_NUM_THREADS=1` unless set): the round's tensors are small (8,192 rows), and
on a loaded CPU torch's thread pool makes its index_add calls 50 times slower than one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from machine import machine_line  # noqa: E402

from coba_trl.allocation import PassRateHistory, build_allocator  # noqa: E402
from coba_trl.rounds.grouping import deal_groups, expected_length_weight
from coba_trl.rounds.plan import plan_round
from coba_trl.rounds.scoring import Phase, Scoring, observe_round, score_round, screen_round

PROMPTS, BUDGET, HISTORY, PROCESSES, SCREEN = 512, 8192, 17_398, 8, 2
SETTINGS = Scoring(torch.ones(1), "group", "sum_then_normalize", "row", "keep", 0, 1.0, 0)


def _deal(group_sizes: np.ndarray, pass_rates: np.ndarray | None) -> tuple[list[np.ndarray], float]:
    """The deal of a phase's rows over the processes, as the trainer makes it, and its seconds."""
    start = time.perf_counter()
    dealt = deal_groups(group_sizes, PROCESSES, None if pass_rates is None else expected_length_weight(pass_rates))
    return dealt, time.perf_counter() - start


def _phase(dealt: list[np.ndarray], true_rates: np.ndarray, rng: np.random.Generator) -> Phase:
    """A phase's gathered rewards, drawn from each prompt's true pass rate (not timed: generation's stand-in)."""
    group_ids = np.concatenate(dealt)
    rewards = torch.as_tensor(rng.random(len(group_ids)) < true_rates[group_ids], dtype=torch.float32)
    return Phase({"completion_mask": torch.ones(len(dealt[0]), 4)}, rewards.unsqueeze(1), group_ids)


def one_round(history, allocator, prompt_ids, true_rates, rng, two_phase: bool) -> float:
    """Seconds of bookkeeping for one round: everything but drawing the simulated rewards."""
    phases, screening, clock = [], None, 0.0
    if two_phase:
        dealt, seconds = _deal(np.full(PROMPTS, SCREEN), None)
        phases.append(_phase(dealt, true_rates, rng))
        start = time.perf_counter()
        screening = screen_round(phases[0], SETTINGS, PROMPTS, SCREEN)
        clock += seconds + time.perf_counter() - start
    start = time.perf_counter()
    plan = plan_round(prompt_ids, allocator, history, BUDGET, 128, screening=screening)
    clock += time.perf_counter() - start
    dealt, seconds = _deal(plan.remaining, plan.pass_rates)
    phases.append(_phase(dealt, true_rates, rng))
    start = time.perf_counter()
    scored = score_round(plan, phases, SETTINGS, rank=0, num_processes=PROCESSES)
    observe_round(history, allocator, plan, scored)
    json.dumps({**plan.record, "successes": scored.successes.tolist()})
    return clock + seconds + time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    print(machine_line())
    rng = np.random.default_rng(0)
    for two_phase in (False, True):
        history, allocator = PassRateHistory(), build_allocator("coba", min_budget=2, max_budget=128)
        everyone = [f"q{i}" for i in range(HISTORY)]
        history.update(everyone, rng.integers(0, 9, HISTORY), np.full(HISTORY, 8))
        allocator.observe(np.full(HISTORY, 0.4))
        times = []
        for _ in range(args.repeats):
            prompt_ids = [everyone[i] for i in rng.choice(HISTORY, PROMPTS, replace=False)]
            true_rates = rng.random(PROMPTS)
            times.append(one_round(history, allocator, prompt_ids, true_rates, rng, two_phase))
        name = "two-phase" if two_phase else "one-phase"
        median = statistics.median(times) * 1e3
        print(
            f"{name} round bookkeeping: median {median:.1f} ms [{min(times) * 1e3:.1f}-{max(times) * 1e3:.1f}] over "
            f"{args.repeats} rounds ({PROMPTS} prompts, {BUDGET} rows, {HISTORY} in history, {PROCESSES} processes); "
            f"target 50 ms: {'met' if median < 50 else 'missed'}"
        )


if __name__ == "__main__":
    main()
