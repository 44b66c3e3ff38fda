"""Does the frontier move? One GRPO run of a CPU-task regime, measured as its calibration needs, from its own logs.

    python benchmarks/frontier_pilot.py --seed 0 --json R.json -- --config recipes/cpu_demo_frontier.yaml
    python benchmarks/frontier_pilot.py --summarize R0.json R1.json R2.json   # the criteria over warm starts
    python benchmarks/frontier_pilot.py --table benchmarks/results/frontier_pilots/p*_seed*.json   # run by run

Everything after `--` goes to `examples/train_qwen.py` (a recipe and flags); `--budget_allocator uniform` (GRPO) and
the seed are added. The run is the demo's own (`coba_trl.demo.run.run_demo`), with one more callback: held-out avg@16
(16 completions a problem at temperature 1.0, mean share right) overall and per level, before RL and every
`--eval-every` steps; its seconds are kept apart, so the run's own time is reported without them. From the run's
allocation log it reads, by quarter of the rounds, the share of groups all failed and all solved, overall and per
level, and each level's mean pass rate; and where prompts went between their first and last visit (`first_to_last`:
of those all failed at the first, how many had a success at the last, and the reverse). It also gives each level's
chance of a right guess: the probability of the likeliest answer at that level (a model that ignores the operands
and always says it). It looks at GRPO's own accuracy only: it runs no other arm. `--summarize` gives the regime's
criteria (docs/benchmarks.md, "The frontier regime") over the runs given, one warm start each; `--table` one row a
run, sorted by the flat share of its first quarter.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the demo's pinned CPU numerics (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def guess_chance(operands: int, digits: int) -> float:
    """Probability of the likeliest sum of `operands` numbers drawn uniformly from 0 to 10**digits - 1."""
    counts = [1]
    for _ in range(operands):
        widened = [0] * (len(counts) + 10**digits - 1)
        for total, count in enumerate(counts):
            for value in range(10**digits):
                widened[total + value] += count
        counts = widened
    return max(counts) / sum(counts)


def group_rates(records: list[dict]):
    """(prompt id, share of its group's scored completions that succeeded) of every scored group in `records`
    (allocation-log records, refill batches included), in order."""
    from coba_trl.rounds.log import generation_batches

    for batch in generation_batches(records):
        for prompt, wins, tries in zip(batch["prompt_ids"], batch["successes"], batch["scored_rollouts"], strict=True):
            if tries:
                yield prompt, wins / tries


def quarter_shares(records: list[dict], levels: list[int]) -> list[dict]:
    """Per quarter of the rounds: groups all failed / all solved, overall and per level, and per-level pass rates.
    `levels[i]` is the level of prompt (dataset row) i."""
    quarters = []
    bounds = [round(len(records) * q / 4) for q in range(5)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        groups = [(levels[int(prompt)], rate) for prompt, rate in group_rates(records[start:end])]  # (level, rate)
        quarter = {"rounds": end - start, **_shares([rate for _, rate in groups]), "by_level": {}}
        for level in sorted(set(levels)):
            rates = [rate for lvl, rate in groups if lvl == level]
            pass_rate = sum(rates) / len(rates) if rates else None
            quarter["by_level"][str(level)] = {**_shares(rates), "pass_rate": pass_rate}
        quarters.append(quarter)
    return quarters


def first_to_last(records: list[dict]) -> dict:
    """Where prompts went between their first and their last visit: of those all failed at the first, the share with
    a success at the last; of those with a spread at the first, the share all failed at the last. Both high means
    that an all-failed group of this size is often bad luck rather than a prompt the model cannot do yet."""
    visits: dict[str, list[float]] = {}
    for prompt, rate in group_rates(records):
        visits.setdefault(str(prompt), []).append(rate)
    revisited = [rates for rates in visits.values() if len(rates) > 1]
    failed = [rates[-1] for rates in revisited if rates[0] == 0.0]
    spread = [rates[-1] for rates in revisited if 0.0 < rates[0] < 1.0]
    return {
        "prompts_revisited": len(revisited),
        "failed_first": len(failed),
        "failed_first_success_last": sum(rate > 0 for rate in failed) / len(failed) if failed else None,
        "spread_first": len(spread),
        "spread_first_failed_last": sum(rate == 0 for rate in spread) / len(spread) if spread else None,
    }


def greedy_curve(output_dir: str) -> list[list]:
    """[step, held-out greedy accuracy] of the demo's own evaluations (`demo_eval_steps`), from its trainer state."""
    with open(os.path.join(output_dir, "trainer_state.json")) as handle:
        history = json.load(handle)["log_history"]
    return [[record["step"], record["heldout_accuracy"]] for record in history if "heldout_accuracy" in record]


def _shares(rates: list[float]) -> dict:
    if not rates:  # no group of this level in these rounds
        return {"groups": 0, "failed": None, "solved": None, "flat": None}
    failed = sum(rate == 0.0 for rate in rates) / len(rates)
    solved = sum(rate == 1.0 for rate in rates) / len(rates)
    return {"groups": len(rates), "failed": failed, "solved": solved, "flat": failed + solved}


def run(seed: int, flags: list[str], eval_every: int, samples: int) -> dict:
    """One GRPO run of the regime `flags` give, at `seed`, with its avg@`samples` curve."""
    import torch
    from studies.provenance import machine_record
    from studies.task import sampled_pass_rates
    from transformers import TrainerCallback

    from coba_trl.demo.config import WARM_START_PROBLEMS
    from coba_trl.demo.run import run_demo
    from coba_trl.demo.task import demo_problem_sets
    from coba_trl.rounds.log import read_rounds

    spec = importlib.util.spec_from_file_location("train_qwen", os.path.join(ROOT, "examples", "train_qwen.py"))
    script = sys.modules["train_qwen"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    _, args, _, demo = script.parse([*flags, "--budget_allocator", "uniform", "--seed", str(seed)])
    if args.max_steps // args.steps_per_generation < 4:
        raise SystemExit(
            f"--max_steps {args.max_steps} gives {args.max_steps // args.steps_per_generation} rounds of "
            f"{args.steps_per_generation} steps; the pilot reads the run by quarter of its rounds: give --max_steps "
            f"at least {4 * args.steps_per_generation}."
        )
    args.overwrite_output_dir = demo.overwrite_output_dir = True
    train, heldout, _ = demo_problem_sets(
        demo.demo_num_train_prompts,
        demo.demo_num_heldout,
        WARM_START_PROBLEMS,
        seed=seed,
        operands_per_level=tuple(demo.demo_operands),
        digits=demo.demo_operand_digits,
    )
    curve, eval_seconds, eval_cpu = [], [0.0], [0.0]

    class Avg16(TrainerCallback):
        def _measure(self, step: int, model, tokenizer) -> None:
            start, cpu = time.perf_counter(), time.process_time()
            rates = sampled_pass_rates(model, tokenizer, heldout, samples, args.max_completion_length, seed=1234)
            point = {"step": step, "avg": sum(rates) / len(rates), "by_level": {}}
            for level in sorted({p.level for p in heldout}):
                hits = [r for r, p in zip(rates, heldout, strict=True) if p.level == level]
                point["by_level"][str(level)] = sum(hits) / len(hits)
            curve.append(point)
            eval_seconds[0] += time.perf_counter() - start
            eval_cpu[0] += time.process_time() - cpu

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
            self._measure(0, model, processing_class)

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if state.global_step % eval_every == 0 or state.global_step >= state.max_steps:
                self._measure(state.global_step, model, processing_class)

    torch.manual_seed(seed)
    cpu_start = time.process_time()
    summary = run_demo(args, demo, callbacks=[Avg16()])
    cpu_seconds = time.process_time() - cpu_start - eval_cpu[0]
    levels = [p.level for p in train]
    rounds = read_rounds(args.output_dir)
    return {
        "seed": seed,
        "flags": flags,
        "operands": list(demo.demo_operands),
        "operand_digits": demo.demo_operand_digits,
        "train_prompts": len(train),
        "distinct_train_prompts": len({p.question for p in train}),
        "heldout_per_level": {str(k): sum(p.level == k for p in heldout) for k in sorted(set(levels))},
        "heldout_disjoint": not ({p.question for p in train} & {p.question for p in heldout}),
        "guess_chance": {str(n): guess_chance(n, demo.demo_operand_digits) for n in demo.demo_operands},
        "quarters": quarter_shares(rounds, levels),
        "first_to_last": first_to_last(rounds),
        "avg16_curve": curve,
        "greedy_curve": greedy_curve(args.output_dir),
        "greedy": {k: summary[k] for k in ("accuracy_before", "accuracy_after")},
        "greedy_by_level": {k: summary[k] for k in ("accuracy_before_by_level", "accuracy_after_by_level")},
        "run_seconds": round(summary["wall_time_s"] - eval_seconds[0], 1),  # the demo's greedy evaluations in
        "avg16_eval_seconds": round(eval_seconds[0], 1),
        "run_cpu_seconds": round(cpu_seconds, 1),  # on a loaded machine, closer to an idle run's wall time
        "machine": machine_record(),
    }


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))


def criteria(runs: list[dict]) -> dict:
    """The regime's criteria over `runs` (one a warm start), each with its figure and whether it holds."""
    first = [r["quarters"][0] for r in runs]
    last = [r["quarters"][-1] for r in runs]
    levels = list(runs[0]["quarters"][0]["by_level"])
    moved = []  # levels whose groups go from mostly all failed to mostly with spread or solved (mean over runs)
    for level in levels:
        before = sum(q["by_level"][level]["failed"] for q in first) / len(runs)
        after = sum(q["by_level"][level]["failed"] for q in last) / len(runs)
        if before > 0.5 and after < 0.5:
            moved.append(level)
    gains = [r["avg16_curve"][-1]["avg"] - r["avg16_curve"][0]["avg"] for r in runs]
    gain, gain_se = _mean_se(gains)
    level_gains = {}
    for level in levels:
        values = [r["avg16_curve"][-1]["by_level"][level] - r["avg16_curve"][0]["by_level"][level] for r in runs]
        level_gains[level] = _mean_se(values)
    second_half = []
    for r in runs:
        steps = [p["step"] for p in r["avg16_curve"]]
        middle = min(range(len(steps)), key=lambda i: abs(steps[i] - steps[-1] / 2))
        second_half.append(r["avg16_curve"][-1]["avg"] - r["avg16_curve"][middle]["avg"])
    rise, rise_se = _mean_se(second_half)
    flat_first = sum(q["flat"] for q in first) / len(runs)
    failed_first = sum(q["failed"] for q in first) / len(runs)
    failed_last = sum(q["failed"] for q in last) / len(runs)
    guess = max(max(r["guess_chance"].values()) for r in runs)
    gaining = [level for level, (mean, se) in level_gains.items() if mean > 0 and mean >= 2 * se]
    return {
        "warm_starts": len(runs),
        "flat_first_quarter": {"value": flat_first, "failed": failed_first, "holds": flat_first >= 0.5},
        "most_flat_all_failed": {"holds": failed_first > flat_first / 2},
        "largest_guess_chance": guess,
        "failed_share_fall": {"value": failed_first - failed_last, "holds": failed_first - failed_last >= 0.15},
        "levels_moved": {"levels": moved, "holds": len(moved) >= 2},
        "distinct_prompts": {"value": min(r["distinct_train_prompts"] for r in runs)},
        "heldout_disjoint": all(r["heldout_disjoint"] for r in runs),
        "gain": {
            "mean": gain,
            "se": gain_se,
            "in_se": gain / gain_se if gain_se else float("nan"),
            # over at least 3 warm starts: two that happen to agree give a standard error near 0
            "holds": len(runs) >= 3 and gain_se > 0 and gain >= 5 * gain_se,
        },
        "gain_by_level": {level: {"mean": m, "se": s} for level, (m, s) in level_gains.items()},
        "levels_gaining": {"levels": gaining, "holds": len(gaining) >= 2},
        "second_half_rise": {"mean": rise, "se": rise_se, "holds": rise > 0},
        "run_seconds": {  # wall seconds depend on the load; CPU seconds (one thread) stand in for an idle machine
            "max_wall": max(r["run_seconds"] for r in runs),
            "max_cpu": max(r.get("run_cpu_seconds", float("nan")) for r in runs),
            "holds": max(r.get("run_cpu_seconds", r["run_seconds"]) for r in runs) <= 300,
        },
    }


def run_rows(runs: dict[str, dict]) -> list[dict]:
    """One row a run (`runs`: name -> the run's JSON), sorted by the flat share of its first quarter: that share, the
    all-failed share in the first and the last quarter, its fall, greedy accuracy before RL and the avg@16 gain. Where
    the criteria average over warm starts, these show each warm start on its own, across pilots."""
    rows = []
    for name, r in runs.items():
        first, last, curve = r["quarters"][0], r["quarters"][-1], r["avg16_curve"]
        rows.append(
            {
                "run": name,
                "flat_first": first["flat"],
                "failed_first": first["failed"],
                "failed_last": last["failed"],
                "fall": first["failed"] - last["failed"],
                "greedy_before": r["greedy"]["accuracy_before"],
                "gain": curve[-1]["avg"] - curve[0]["avg"],
            }
        )
    return sorted(rows, key=lambda row: (row["flat_first"], row["run"]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--seed", type=int, default=0, help="The run's seed: its warm start, data and RL.")
    parser.add_argument("--eval-every", dest="eval_every", type=int, default=5)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--json", default=None, help="Write the run's figures here.")
    readers = parser.add_mutually_exclusive_group()
    readers.add_argument("--summarize", nargs="+", default=None, help="Runs' JSON: the criteria over them.")
    readers.add_argument("--table", nargs="+", default=None, help="Runs' JSON: one row a run, by first-quarter flat.")
    options = parser.parse_args(own)
    if options.table:
        runs = {}
        for path in options.table:
            with open(path) as handle:
                run_json = json.load(handle)
            name = os.path.splitext(os.path.basename(path))[0]
            if "stopped" in run_json or not run_json.get("avg16_curve"):  # a pilot stopped before its end
                print(f"{name}: left out, stopped before its end ({run_json.get('stopped', 'no avg@16 curve')})")
                continue
            runs[name] = run_json
        print("run            flat Q1  all failed Q1 -> Q4   fall  greedy before  avg@16 gain")
        for row in run_rows(runs):
            print(
                f"{row['run']:<14} {row['flat_first']:7.2f}  {row['failed_first']:13.2f} -> {row['failed_last']:.2f}"
                f"  {row['fall']:+.2f}  {row['greedy_before']:13.3f}  {row['gain']:+11.3f}"
            )
        return 0
    if options.summarize:
        runs = []
        for path in options.summarize:
            with open(path) as handle:
                runs.append(json.load(handle))
        print(json.dumps(criteria(runs), indent=1))
        return 0
    import torch

    torch.set_num_threads(1)
    result = run(options.seed, flags, options.eval_every, options.samples)
    seconds = f"{result['run_seconds']} s (+{result['avg16_eval_seconds']} s of avg@{options.samples})"
    lines = [f"seed {result['seed']}: run {seconds}"]
    for number, q in enumerate(result["quarters"], start=1):
        per_level = " ".join(
            f"{k}:{v['failed']:.2f}/{v['pass_rate']:.2f}" if v["groups"] else f"{k}:none"
            for k, v in q["by_level"].items()
        )
        lines.append(
            f"Q{number} flat {q['flat']:.3f} (failed {q['failed']:.3f}, solved {q['solved']:.3f}) "
            f"level:failed/pass {per_level}"
        )
    for point in result["avg16_curve"]:
        per_level = " ".join(f"{v:.2f}" for v in point["by_level"].values())
        lines.append(f"step {point['step']:>4} avg@{options.samples} {point['avg']:.3f} [{per_level}]")
    print("\n".join(lines))
    if options.json:
        os.makedirs(os.path.dirname(os.path.abspath(options.json)), exist_ok=True)
        with open(options.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
