"""Calibration pilot for a regime of the CPU task: the share of training prompts whose group of k has no spread.

    python benchmarks/regime_pilot.py --warm-start-steps 100 150 200 300 --operands 3 4 5 6 7
    python benchmarks/regime_pilot.py --config recipes/cpu_demo_hard.yaml   # a recipe's task and warm start
    python benchmarks/regime_pilot.py --rounds outputs/cpu_demo_hard --prompts 256   # a run's groups, per epoch

For each warm-start length, the demo's tiny model is warm-started as the demo does (`coba_trl.demo.warm_start`, its
seed and level mix), then k completions of every RL training prompt are sampled at the RL temperature (1.0) and
graded as in training. It prints the shares of groups of k that are all failed, all solved and mixed (what GRPO's
first epoch meets at k completions a prompt), by level and over all prompts, and the seconds each warm start took.
It reads only the training prompts: no held-out problem is scored, so no accuracy is seen (a regime is calibrated
on flat shares and timing alone, docs/benchmarks.md). With `--rounds`, it reads a training run's allocation log
instead and prints the same shares over the groups the run generated, epoch by epoch (every `--prompts` prompt
visits), and the completions generated per group with spread.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the demo's pinned CPU numerics (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def flat_shares(rates: list[float]) -> tuple[float, float, float]:
    """(all failed, all solved, mixed) shares of groups whose success rates are `rates`."""
    failed = sum(rate == 0.0 for rate in rates) / len(rates)
    solved = sum(rate == 1.0 for rate in rates) / len(rates)
    return failed, solved, 1.0 - failed - solved


def epoch_shares(records: list[dict], prompts_per_epoch: int) -> list[dict]:
    """Per epoch of a run's allocation log (`coba_rounds.jsonl` records): its groups (refill batches included) all
    failed, all solved and mixed, and the completions generated."""
    from coba_trl.rounds.log import generation_batches

    groups = []  # (successes, scored rollouts, generated) of every generated group, in order
    for batch in generation_batches(records):
        groups += zip(batch["successes"], batch["scored_rollouts"], batch["group_sizes"], strict=True)
    epochs = []
    for start in range(0, len(groups), prompts_per_epoch):
        chunk = groups[start : start + prompts_per_epoch]
        rates = [wins / tries for wins, tries, _ in chunk if tries]
        failed, solved, mixed = flat_shares(rates)
        generated = sum(size for _, _, size in chunk)
        spread = sum(size for wins, tries, size in chunk if 0 < wins < tries)
        epochs.append(
            {
                "groups": len(chunk),
                "failed": failed,
                "solved": solved,
                "mixed": mixed,
                "generated": generated,
                "per_spread_row": generated / spread if spread else float("nan"),
            }
        )
    return epochs


def pilot(operands: list[int], warm_start_steps: int, train_prompts: int, k: int, seed: int, **task) -> dict:
    """One warm start and its training prompts' groups of `k`; `task`: further `DemoArguments` fields (the digits of
    each number, the levels the warm start sees, its learning rate and schedule)."""
    import torch
    from studies.task import sampled_pass_rates

    from coba_trl.demo.config import DEMO_TRAINING_ARGS, DemoArguments
    from coba_trl.demo.warm_start import warm_started_demo

    torch.set_num_threads(1)
    demo = DemoArguments(
        demo_operands=list(operands),
        demo_warm_start_steps=warm_start_steps,
        demo_num_train_prompts=train_prompts,
        **task,
    )
    start = time.perf_counter()
    model, tokenizer, train, _ = warm_started_demo(seed, demo)
    seconds = time.perf_counter() - start
    rates = sampled_pass_rates(model, tokenizer, train, k, DEMO_TRAINING_ARGS["max_completion_length"], seed=seed)
    by_level = {
        operands[level]: flat_shares([r for r, p in zip(rates, train, strict=True) if p.level == level])
        for level in range(len(operands))
    }
    return {"all": flat_shares(rates), "by_level": by_level, "warm_start_s": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--config", default=None, help="A demo recipe: its operands, warm start and prompts.")
    parser.add_argument("--operands", type=int, nargs="+", default=None)
    parser.add_argument("--warm-start-steps", dest="warm_start_steps", type=int, nargs="+", default=None)
    parser.add_argument("--train-prompts", dest="train_prompts", type=int, default=None)
    parser.add_argument("--operand-digits", dest="operand_digits", type=int, default=None)
    parser.add_argument("--warm-start-levels", dest="warm_start_levels", type=int, default=None)
    parser.add_argument(
        "--warm-start-upper-share",
        dest="warm_start_upper_share",
        type=float,
        default=None,
        help="With --warm-start-levels: the share of the warm start's problems from the levels above them.",
    )
    parser.add_argument("--warm-start-lr", dest="warm_start_lr", type=float, default=None)
    parser.add_argument(
        "--warm-start-schedule",
        dest="warm_start_schedule",
        default=None,
        choices=("constant", "linear", "cosine"),
        help="The warm start's learning-rate schedule (the demo's: constant).",
    )
    parser.add_argument("--k", type=int, default=8, help="Completions a prompt (GRPO's group size).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", default=None, help="A training run's output_dir: its groups, epoch by epoch.")
    parser.add_argument("--prompts", type=int, default=None, help="With --rounds: prompt visits per epoch.")
    options = parser.parse_args(argv)
    if options.rounds is not None:
        from coba_trl.rounds.log import read_rounds

        print("| epoch | groups | all failed | all solved | mixed | generated | generated per row with spread |")
        print("|---|---|---|---|---|---|---|")
        for number, e in enumerate(epoch_shares(read_rounds(options.rounds), options.prompts), start=1):
            print(
                f"| {number} | {e['groups']} | {e['failed']:.3f} | {e['solved']:.3f} | {e['mixed']:.3f} | "
                f"{e['generated']:,} | {e['per_spread_row']:.3f} |"
            )
        return 0
    from coba_trl.cli import read_config
    from coba_trl.demo.config import DemoArguments

    recipe = read_config(options.config, "--config") if options.config else {}
    default = DemoArguments()
    operands = options.operands or recipe.get("demo_operands", default.demo_operands)
    steps = options.warm_start_steps or [recipe.get("demo_warm_start_steps", default.demo_warm_start_steps)]
    prompts = options.train_prompts or recipe.get("demo_num_train_prompts", default.demo_num_train_prompts)
    given = {
        "demo_operand_digits": options.operand_digits,
        "demo_warm_start_levels": options.warm_start_levels,
        "demo_warm_start_upper_share": options.warm_start_upper_share,
        "demo_warm_start_learning_rate": options.warm_start_lr,
        "demo_warm_start_lr_scheduler_type": options.warm_start_schedule,
    }
    task = {
        key: value if value is not None else recipe.get(key, getattr(default, key)) for key, value in given.items()
    }
    from machine import machine_line

    print(machine_line(), flush=True)
    print(f"operands {operands}, {prompts} training prompts, k = {options.k}, seed {options.seed}, {task}")
    print("| warm-start steps | level (operands) | all failed | all solved | mixed | warm start s |")
    print("|---|---|---|---|---|---|")
    for warm_start_steps in steps:
        result = pilot(operands, warm_start_steps, prompts, options.k, options.seed, **task)
        rows = [*result["by_level"].items(), ("all", result["all"])]
        for level, (failed, solved, mixed) in rows:
            seconds = f"{result['warm_start_s']:.1f}" if level == "all" else ""
            print(f"| {warm_start_steps} | {level} | {failed:.3f} | {solved:.3f} | {mixed:.3f} | {seconds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
