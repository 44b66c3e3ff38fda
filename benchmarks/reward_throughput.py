"""Throughput of `dapo_accuracy_reward`'s grading: sequential (in-process) vs the time-limited worker pool.

Grades 4,096 realistic completions (groups of 16 per prompt: right and wrong integers, symbolic forms that need
math-verify, long rambling completions, malformed ones) in batches of 512, as a GRPO step would, with every symbolic
check in this process (the baseline) and with the worker pool. Timing is paired A/B: each of `--repeats` repeats
runs one sequential and one pooled pass right after each other, alternating which goes first, and the speed-up is
taken within each repeat; every figure is the median over repeats with the range [min-max], so one noisy pass cannot
flip the ratio. The raw CPU scaling of the same number of processes, measured right after, is the ceiling for the
speed-up on a shared machine. Prints completions per second for both, the speed-up (target: pooled >= 1.7x
sequential on 2 cores), p50 / p99 / max per-item grading seconds (of the median pass), and time-outs. A second, pooled-only
pass adds sympy bombs and checks that no item runs over its limit plus 1 s (a bomb could hang the in-process
baseline, so it gets none). The machine's load average is printed: other processes sharing the CPUs lower the ratio.

    python benchmarks/reward_throughput.py [--n 4096] [--batch 512] [--time-limit 5] [--repeats 5]
"""

import argparse
import multiprocessing
import os
import random
import statistics
import time

from machine import machine_line

from coba_trl.rewards import get_pool, grade
from coba_trl.rewards.extraction import extract_dapo_answer

FILLER = (
    "Let us set up the problem carefully. We denote the unknown by $x$ and note that $x^2 - 5x + 6 = 0$ factors as "
    "$(x-2)(x-3) = 0$. Checking each case against the constraints, only one survives. "
)
BOMBS = ["10^{10^{10}}", "9^{9^{9^{9}}}", "(10^{100})!", "2^{2^{2^{2^{2^{2}}}}}"]


def _symbolic(gold: int, rng: random.Random, equal: bool) -> str:
    """A form of `gold` (or of a wrong value) that only the symbolic check can decide."""
    value = gold if equal else gold + rng.choice([-2, -1, 1, 3])
    a = rng.randint(1, 50)
    forms = [
        f"{value - a} + {a}",
        f"\\sqrt{{{value * value}}}" if value >= 0 else f"-\\sqrt{{{value * value}}}",
        f"{value + a} - {a}",
        f"\\frac{{{value * 6}}}{{3}} - {value}",
        f"({value}) \\cdot 1",
    ]
    return rng.choice(forms)


def make_completions(n: int, group: int = 16, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """`n` completions in GRPO groups of `group` completions that share a prompt (and its ground truth)."""
    rng = random.Random(seed)
    completions, golds, kinds = [], [], []
    for index in range(n):
        if index % group == 0:
            gold = rng.randint(-1000, 100_000)
        reasoning = FILLER * rng.randint(3, 25)
        kind = rng.choices(
            ["right", "wrong", "right_symbolic", "wrong_symbolic", "long", "malformed"],
            weights=[35, 20, 15, 10, 10, 10],
        )[0]
        if kind == "right":
            text = f"{reasoning}\nAnswer: {gold}"
        elif kind == "wrong":
            text = f"{reasoning}\nAnswer: {gold + rng.randint(1, 9)}"
        elif kind in ("right_symbolic", "wrong_symbolic"):
            answer = _symbolic(gold, rng, kind == "right_symbolic")
            text = f"{reasoning}\nAnswer: ${answer}$" if rng.random() < 0.5 else f"{reasoning}\n\\boxed{{{answer}}}"
        elif kind == "long":
            text = FILLER * rng.randint(100, 250) + f"\nAnswer: {gold if rng.random() < 0.5 else gold + 1}"
        else:
            text = rng.choice(
                [
                    reasoning,
                    reasoning + "\\boxed{" + str(gold),
                    "",
                    reasoning + "\nAnswer:",
                    "\x00\ufffd" * 200 + reasoning[:500],
                    reasoning + "\nAnswer: \\frac{1}{",
                ]
            )
        completions.append(text)
        golds.append(str(gold))
        kinds.append(kind)
    return completions, golds, kinds


def run(completions, golds, batch, time_limit, in_process):
    """One pass over all completions: rewards, per-item seconds, time-outs, wall-clock seconds."""
    rewards, seconds, timeouts = [], [], 0
    start = time.perf_counter()
    for i in range(0, len(completions), batch):
        result = grade(completions[i : i + batch], golds[i : i + batch], extract_dapo_answer, time_limit, in_process)
        rewards += result.rewards
        seconds += result.seconds
        timeouts += result.timeouts
    return rewards, seconds, timeouts, time.perf_counter() - start


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def parallel_scaling(workers: int, n: int = 3_000_000) -> float:
    """How much faster `workers` processes finish `workers` equal CPU-bound units than one process does, right now.

    2.0 on two idle cores; about 1.0 when other processes already occupy one of them.
    """
    start = time.perf_counter()
    for _ in range(workers):
        _spin(n)
    alone = time.perf_counter() - start
    with multiprocessing.get_context("forkserver").Pool(workers) as pool:
        pool.map(_spin, [10] * workers)
        start = time.perf_counter()
        pool.map(_spin, [n] * workers)
        together = time.perf_counter() - start
    return alone / together


def workers_cpu_seconds() -> float:
    """CPU seconds used so far by the pool's live workers (Linux /proc)."""
    total = 0.0
    for pid in get_pool().worker_pids():
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def median_pass(passes: list[tuple]) -> tuple:
    """The pass with the median wall time (the lower middle one for an even count)."""
    ordered = sorted(passes, key=lambda p: p[3])
    return ordered[(len(ordered) - 1) // 2]


def describe(name, n, seconds, elapsed, timeouts):
    """Throughput (median [min-max] over the passes in `elapsed`, a list) and per-item quantiles of `seconds`."""
    rates = [n / e for e in elapsed]
    middle = statistics.median(rates)
    q = statistics.quantiles(seconds, n=100)
    print(
        f"{name:>10}: {middle:8.1f} completions/s [{min(rates):.1f}-{max(rates):.1f}]  "
        f"({statistics.median(elapsed):.2f} s)  per item p50 {q[49] * 1e3:.2f} ms  "
        f"p99 {q[98] * 1e3:.1f} ms  max {max(seconds) * 1e3:.1f} ms  time-outs {timeouts}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=5, help="paired passes (one per mode, alternating order)")
    args = parser.parse_args()

    completions, golds, kinds = make_completions(args.n)
    print(f"{machine_line()}; pool workers {get_pool().max_workers}")
    print("mix:", {k: kinds.count(k) for k in sorted(set(kinds))})
    start = time.perf_counter()
    grade(completions[:64], golds[:64], extract_dapo_answer, args.time_limit)
    print(f"pool warm-up (worker start-up): {time.perf_counter() - start:.2f} s")

    passes = {True: [], False: []}
    cpu = {True: [], False: []}
    for repeat in range(args.repeats):
        for in_process in (True, False) if repeat % 2 == 0 else (False, True):
            parent, workers = time.process_time(), workers_cpu_seconds()
            passes[in_process].append(run(completions, golds, args.batch, args.time_limit, in_process))
            cpu[in_process].append((time.process_time() - parent, workers_cpu_seconds() - workers))
    seq, pooled = (median_pass(passes[mode]) for mode in (True, False))
    seq_cpu = statistics.median(p for p, _ in cpu[True])
    parent_cpu, worker_cpu = (statistics.median(c[i] for c in cpu[False]) for i in (0, 1))
    print(f"medians over {args.repeats} paired passes, [min-max] across passes")
    describe("sequential", args.n, seq[1], [p[3] for p in passes[True]], seq[2])
    describe("pooled", args.n, pooled[1], [p[3] for p in passes[False]], pooled[2])
    assert all(p[0] == seq[0] for p in passes[True] + passes[False]), "sequential and pooled grading disagree"
    ratios = [s[3] / p[3] for s, p in zip(passes[True], passes[False], strict=True)]
    print(
        f"speed-up pooled / sequential, paired: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
        " (target >= 1.7x on 2 cores)"
    )
    ideal = max(parent_cpu, worker_cpu / get_pool().max_workers)
    print(
        f"CPU seconds per pass (median): sequential {seq_cpu:.2f}; pooled: trainer process {parent_cpu:.2f} + "
        f"workers {worker_cpu:.2f}. On {get_pool().max_workers} otherwise idle cores the pooled pass would take "
        f"about {ideal:.2f} s: {seq_cpu / ideal:.2f}x the sequential CPU time"
    )
    print(f"accuracy of the mix: {sum(pooled[0]) / args.n:.3f}; load after: {os.getloadavg()}")
    print(
        f"raw CPU scaling of {get_pool().max_workers} processes right now (the ceiling for the speed-up): "
        f"{parallel_scaling(get_pool().max_workers):.2f}x"
    )

    adversarial = completions[:252] + [f"Answer: {b}" for b in BOMBS]
    adv_golds = golds[:252] + ["5"] * len(BOMBS)
    limit = 2.0
    rewards, seconds, timeouts, elapsed = run(adversarial, adv_golds, len(adversarial), limit, in_process=False)
    describe("bombs", len(adversarial), seconds, [elapsed], timeouts)
    over = [s for s in seconds if s > limit + 1.0]
    print(f"items over limit + 1 s ({limit + 1:.0f} s): {len(over)}; workers replaced: {get_pool().workers_replaced}")


if __name__ == "__main__":
    main()
