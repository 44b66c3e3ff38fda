"""Rollouts generated per trained row with spread: GRPO, DAPO's refill, prompt skipping, CoBA and Knapsack-RL with and
without them, side by side, in a regime of the CPU task.

    python benchmarks/rollout_savings.py --regime hard           # every arm, the hard regime's 100 steps each
    python benchmarks/rollout_savings.py --regime demo --json outputs/savings_demo.json
    python benchmarks/rollout_savings.py --max-steps 20 --arms grpo dapo greso
    python benchmarks/rollout_savings.py --stop-at-generated-rollouts 6400   # every arm stops at 6,400 generated
    python benchmarks/rollout_savings.py --list-arms             # the arms and their settings; trains nothing
    python benchmarks/rollout_savings.py --dry-run               # builds and checks every arm's CoBAConfig only

Each arm trains the regime's warm-started model (`--regime`: `demo`, the CPU demo, or `hard`,
`recipes/cpu_demo_hard.yaml`; both declared in `coba_trl.demo.config.REGIMES`: the tiny Qwen2, its warm start of 300
supervised steps, the regime's prompts and DEMO_TRAINING_ARGS: 32 prompts x 8 = 256 rows a round, 2 optimizer steps
a round) with its arm's settings (study 5's arms, `benchmarks/studies/protocols/rollout_savings.py`, and the others below).
The warm start runs once; every arm starts from a copy of it, with the same seed. Prints the machine, then per arm:
optimizer steps, completions generated (every phase, every process: the trainer's `rollouts_generated`), rows
trained and rows from groups with a spread of rewards (the sums of `coba/rows_trained` and `coba/rows_with_spread`
over the log, one record per round), completions generated per trained row with spread, the training wall time per
such row, the share of the training prompts that gave at least one group with spread (how widely the trained rows
reach), and both against the `dapo` arm measured in the same process (ratio below 1: fewer completions, or less
time, per row that teaches). Then the limit (`limit_lines`): with `grpo` among the arms, epoch by epoch on the pass
rates `grpo` observed. `--json FILE` writes the arms' counts and the limit as a list of objects. The arms run one
after another on a shared machine: the load average is printed before and after.

Two processes (gloo on the CPU; each process warm-starts the same model from the same seed, as the demo does):

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \\
        benchmarks/rollout_savings.py --regime hard
    torchrun --nproc_per_node 2 benchmarks/rollout_savings.py --regime hard

Generation in a colocated vLLM engine (vLLM's CPU build; each arm's engine loads the warm-started model from
`<output-dir>/<arm>/warm_start_model`, as the demo's does): add `--use-vllm`, with one process or with either launcher.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the demo's pinned CPU numerics (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from studies.protocols.frontier_selection import ARMS as STUDY_9_ARMS  # noqa: E402
from studies.protocols.rollout_savings import ARMS as STUDY_ARMS  # noqa: E402
from studies.protocols.rollout_savings_hard import ARMS as STUDY_6_ARMS  # noqa: E402

# Beside study 5's six: study 6's (the allocators with and without refill and skipping, skipping by the chance of
# a group with spread), then exploratory ones: GRESO's skipping tuned towards 1% of groups without spread (GRESO's
# default target, 25%, lies above the demo's zero-spread share, about 9% of GRPO's groups, so there its tuning makes
# skipping rarer), refill without skipping, and a pilot phase with Knapsack-RL or with skipping by chance of spread.
EXTRA_ARMS: dict[str, dict] = {
    **{arm: settings for arm, settings in STUDY_6_ARMS.items() if arm not in STUDY_ARMS},
    "greso_eager": {**STUDY_ARMS["greso"], "skip_target_zero_spread": 0.01},
    "knapsack_refill": {"budget_allocator": "knapsack", "zero_variance_groups": "refill"},
    "coba_refill": {"budget_allocator": "coba", "zero_variance_groups": "refill"},
    "knapsack_pilot": {"budget_allocator": "knapsack", "two_phase_rounds": True, "zero_variance_groups": "refill"},
    "knapsack_pilot_spread": {
        "budget_allocator": "knapsack",
        "two_phase_rounds": True,
        "zero_variance_groups": "refill",
        "skip_settled_prompts": True,
        "skip_rule": "spread_chance",
    },
    "coba_pilot_spread": {**STUDY_ARMS["coba_pilot"], "skip_rule": "spread_chance"},
    # study 9's (the frontier recipe): two optimizer passes a batch, skipping by a level's chance of spread, CoBA as
    # the paper describes it and capped at 16, Knapsack-RL with the level as prior
    **{arm: settings for arm, settings in STUDY_9_ARMS.items() if arm not in STUDY_ARMS},
}
ARMS = {**STUDY_ARMS, **EXTRA_ARMS}

# `--quick` (the smoke runs of the test suite): a tiny model and a warm start of a few steps, the regime otherwise.
QUICK_DEMO = {"demo_hidden_size": 32, "demo_warm_start_steps": 10}


def regime_demo(regime: str, quick: bool = False):
    """The regime's `DemoArguments`, with `QUICK_DEMO` for a smoke run."""
    import dataclasses

    from coba_trl.demo.config import regime_arguments

    demo = regime_arguments(regime)[1]
    return dataclasses.replace(demo, **QUICK_DEMO) if quick else demo


REFERENCE = "dapo"  # the arm every ratio is taken against
NEEDED = ("zero_variance_groups='refill'", "skip_settled_prompts", "rollouts_generated")


def arm_config(arm: str, output_dir: str, max_steps: int | None, seed: int, use_vllm: bool, regime: str = "demo"):
    """The arm's `CoBAConfig`: the regime's training arguments, then the arm's settings."""
    from coba_trl import CoBAConfig
    from coba_trl.demo.config import regime_arguments

    training, _ = regime_arguments(regime)
    settings = {**training, "output_dir": os.path.join(output_dir, arm), "seed": seed}
    settings.update(disable_tqdm=True, logging_steps=1)  # one log record per step: one round record per round
    if max_steps is not None:
        settings["max_steps"] = max_steps
    if use_vllm:
        settings.update(use_vllm=True, vllm_mode="colocate")
    return CoBAConfig(**{**settings, **ARMS[arm]})


def check_arms(
    arms: list[str], output_dir: str, max_steps: int | None, seed: int, use_vllm: bool, regime: str = "demo"
) -> dict[str, str]:
    """Each arm's configuration problem, if any (an empty dict: every arm can train here)."""
    import dataclasses

    from coba_trl import CoBAConfig

    if "skip_settled_prompts" not in {field.name for field in dataclasses.fields(CoBAConfig)}:
        # Even the arms that need neither would train here without the counts this benchmark reports.
        return {arm: "this coba_trl logs no rollouts generated or rows with spread" for arm in arms}
    problems = {}
    for arm in arms:
        try:
            arm_config(arm, output_dir, max_steps, seed, use_vllm, regime)
        except (TypeError, ValueError) as error:
            problems[arm] = str(error).splitlines()[0]
    return problems


def warm_started(seed: int, output_dir: str | None = None, regime: str = "demo", quick: bool = False):
    """The regime's model after its warm start (`coba_trl.demo.warm_start.warm_started_demo`), its tokenizer and
    training prompts. With `output_dir`, the warm-started weights are saved there once and loaded by later runs."""
    import dataclasses
    import hashlib

    import torch

    from coba_trl.demo.config import WARM_START_PROBLEMS
    from coba_trl.demo.model import build_demo_model
    from coba_trl.demo.task import demo_problem_sets
    from coba_trl.demo.warm_start import warm_started_demo

    demo = regime_demo(regime, quick)
    # Named by the settings that make it, so a regime whose warm start changed never loads one saved before.
    settings = hashlib.sha256(json.dumps(dataclasses.asdict(demo), sort_keys=True).encode()).hexdigest()[:10]
    name = f"warm_start_{regime}_seed{seed}_{settings}.pt"
    saved = None if output_dir is None else os.path.join(output_dir, name)
    if saved is not None and os.path.exists(saved):
        model, tokenizer = build_demo_model(demo, seed)
        model.load_state_dict(torch.load(saved, weights_only=True))
        sizes = (demo.demo_num_train_prompts, demo.demo_num_heldout, WARM_START_PROBLEMS)
        operands, digits = tuple(demo.demo_operands), demo.demo_operand_digits
        train = demo_problem_sets(*sizes, seed, operands_per_level=operands, digits=digits)[0]
        return model, tokenizer, train
    model, tokenizer, train, _ = warm_started_demo(seed, demo)
    if saved is not None and int(os.environ.get("RANK", "0")) == 0:
        os.makedirs(output_dir, exist_ok=True)
        torch.save(model.state_dict(), saved)
    return model, tokenizer, train


def distinct_prompts_with_spread(output_dir: str) -> int:
    """Distinct prompts that gave at least one group with a spread of successes, over every batch of every round
    of the run's allocation log (refills included): how widely an arm's trained rows with spread reach."""
    from coba_trl.rounds.log import generation_batches, read_rounds

    found = set()
    for batch in generation_batches(read_rounds(output_dir)):
        for prompt, wins, tries in zip(batch["prompt_ids"], batch["successes"], batch["scored_rollouts"], strict=True):
            if 0 < wins < tries:
                found.add(prompt)
    return len(found)


def logged_sum(log_history: list[dict], key: str) -> float | None:
    """The sum of a per-round metric over the log records that carry it (None: never logged)."""
    values = [record[key] for record in log_history if key in record]
    return sum(values) if values else None


def arm_trainer(arm: str, options, warm_state: dict, tokenizer, train, callbacks=()):
    """The arm's trainer on the regime's prompts, from the warm start (`options`: regime, output_dir, max_steps, seed,
    use_vllm, quick), with the log printer removed and `callbacks` added."""
    import torch
    from transformers.trainer_callback import PrinterCallback

    from coba_trl import CoBAGRPOTrainer
    from coba_trl.demo.model import build_demo_model
    from coba_trl.demo.run import engine_model_dir
    from coba_trl.demo.task import to_prompt_dataset
    from coba_trl.rewards import dapo_accuracy_reward

    args = arm_config(arm, options.output_dir, options.max_steps, options.seed, options.use_vllm, options.regime)
    model, _ = build_demo_model(regime_demo(options.regime, options.quick), options.seed)
    model.load_state_dict(warm_state)
    if options.use_vllm:
        engine_model_dir(model, tokenizer, args)
    torch.manual_seed(options.seed)
    trainer = CoBAGRPOTrainer(
        model=model,
        reward_funcs=[dapo_accuracy_reward],
        args=args,
        train_dataset=to_prompt_dataset(train),
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def train_arm(arm: str, options, warm_state: dict, tokenizer, train) -> dict:
    """One arm from the warm start; its counts and wall time."""
    from studies.budget import GeneratedRolloutBudget

    trainer = arm_trainer(arm, options, warm_state, tokenizer, train)
    if options.stop_at_generated_rollouts:
        trainer.add_callback(
            GeneratedRolloutBudget(options.stop_at_generated_rollouts, lambda: trainer.rollouts_generated)
        )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    history = trainer.state.log_history
    generated = getattr(trainer, "rollouts_generated", None)
    if generated is None:
        generated = logged_sum(history, "coba/rollouts_generated")
    return {
        "arm": arm,
        "steps": trainer.state.global_step,
        "generated": generated,
        "rows_trained": logged_sum(history, "coba/rows_trained"),
        "rows_with_spread": logged_sum(history, "coba/rows_with_spread"),
        "prompts_with_spread": distinct_prompts_with_spread(trainer.args.output_dir),
        "prompts": len(train),
        "seconds": seconds,
    }


def _ratio(value: float | None, reference: float | None) -> str:
    return "" if value is None or not reference else f"{value / reference:.3f}"


def per_row(result: dict) -> tuple[float | None, float | None]:
    """Completions generated, and training seconds, per trained row with spread."""
    rows = result["rows_with_spread"]
    if not rows or result["generated"] is None:
        return None, None
    return result["generated"] / rows, result["seconds"] / rows


def table(results: list[dict]) -> list[str]:
    """The printed table: one row per arm, ratios to `REFERENCE` where it ran."""
    reference = next((per_row(r) for r in results if r["arm"] == REFERENCE), (None, None))
    lines = [
        "| arm | optimizer steps | rollouts generated | rows trained | rows with spread | generated per row with "
        f"spread | ms per row with spread | generated per row, / `{REFERENCE}` | ms per row, / `{REFERENCE}` | "
        "share of distinct prompts with a group with spread |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        generated_per_row, seconds_per_row = per_row(result)
        cells = [
            f"`{result['arm']}`",
            str(result["steps"]),
            "" if result["generated"] is None else f"{int(round(result['generated'])):,}",
            "" if result["rows_trained"] is None else f"{int(round(result['rows_trained'])):,}",
            "" if result["rows_with_spread"] is None else f"{int(round(result['rows_with_spread'])):,}",
            "" if generated_per_row is None else f"{generated_per_row:.3f}",
            "" if seconds_per_row is None else f"{seconds_per_row * 1e3:.2f}",
            _ratio(generated_per_row, reference[0]),
            _ratio(seconds_per_row, reference[1]),
            _ratio(result.get("prompts_with_spread"), result.get("prompts")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def history_rule(visits: list[tuple[object, int, int]], prompts_per_epoch: int) -> list[tuple[int, int]]:
    """Per epoch, (completions generated, rows from groups with spread) of a refill that skips a prompt whenever its
    last generated group had no spread, never to come back, on outcomes already observed (`visits`: (prompt id,
    successes, completions) in visiting order, each prompt once an epoch): skipping on history alone at its most
    eager, without exploration. The first epoch has no history and skips nothing."""
    previous: dict = {}
    totals = []
    for start in range(0, len(visits), prompts_per_epoch):
        generated = with_spread = 0
        epoch = visits[start : start + prompts_per_epoch]
        for prompt, wins, tries in epoch:
            if previous.get(prompt, False) or not tries:
                continue  # skipped: its last generated group was flat (or nothing was scored)
            generated += tries
            with_spread += tries if 0 < wins < tries else 0
            previous[prompt] = not 0 < wins < tries  # a skipped prompt is not seen: its record stays flat
        totals.append((generated, with_spread))
    return totals


def limit_rows(grpo_dir: str, group_size: int, prompts_per_epoch: int) -> list[dict]:
    """The limit beside the arms, in the preview's independence model (`coba_trl.preview`), on the pass rates the
    `grpo` arm observed, epoch by epoch (each prompt's success rate in its group of that epoch) and over all of them
    (`label` "all"): `limit`, an oracle that knows every prompt's pass rate p_i and generates only the prompt likeliest
    to have spread, 1 / max_i q_i with q_i = 1 - p_i^n - (1 - p_i)^n the chance that a group of n has spread (no arm
    can spend fewer completions per row with spread); DAPO's refill in expectation (sum n / sum n q_i); a refill
    that skips exactly the prompts at pass rate 0 or 1; then, on `grpo`'s observed groups rather than the model, a
    refill that skips nothing and one that skips a prompt for good once its group was flat (`history_rule`; every
    visit its own prompt for the first)."""
    import numpy as np

    from coba_trl.preview import generated_per_spread_row, oracle_per_spread_row
    from coba_trl.rounds.log import read_rounds

    visits = []
    for record in read_rounds(grpo_dir):
        visits += zip(record["prompt_ids"], record["successes"], record["scored_rollouts"], strict=True)
    rates = np.array([wins / tries if tries else np.nan for _, wins, tries in visits], dtype=float)
    history = history_rule(visits, prompts_per_epoch)
    every = history_rule([(index, wins, tries) for index, (_, wins, tries) in enumerate(visits)], prompts_per_epoch)
    epochs = [
        (str(e + 1), rates[start : start + prompts_per_epoch])
        for e, start in enumerate(range(0, len(rates), prompts_per_epoch))
    ]

    def ratios(totals: list[tuple[int, int]]) -> list[float]:
        totals = [*totals, (sum(g for g, _ in totals), sum(w for _, w in totals))]  # and over all epochs
        return [generated / with_spread if with_spread else np.nan for generated, with_spread in totals]

    rows = []
    observed = zip(ratios(every), ratios(history), strict=True)
    for (label, p), (replayed, history_replayed) in zip([*epochs, ("all", rates)], observed, strict=True):
        p = p[~np.isnan(p)]
        n = np.full(len(p), group_size)
        unsettled = ((p > 0) & (p < 1)).astype(float)
        rows.append(
            {
                "label": label,
                "prompts": len(p),
                "limit": oracle_per_spread_row(p, group_size),
                "refill_expected": generated_per_spread_row(p, n),
                "refill_skipping_settled": generated_per_spread_row(p, n, unsettled),
                "refill_observed": replayed,
                "history_rule_observed": history_replayed,
            }
        )
    return rows


def limit_lines(rows: list[dict]) -> list[str]:
    """`limit_rows` as the printed table."""
    lines = [
        "| `grpo`'s epoch | prompts | limit (oracle) | refill, expected | refill skipping exactly p = 0 or 1 | refill, "
        "observed | refill skipping for good a prompt once its group was flat, observed |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = ("limit", "refill_expected", "refill_skipping_settled", "refill_observed", "history_rule_observed")
    for row in rows:
        figures = " | ".join(f"{row[key]:.3f}" for key in keys)
        lines.append(f"| {row['label']} | {row['prompts']} | {figures} |")
    return lines


def waste_breakdown(arm_dir: str) -> dict[str, int]:
    """Where an arm's completions without gradient went: the rows of its groups without a spread of successes, by
    the pass rate the allocator saw for the prompt (`unseen`, `0`, `mid` in (0, 1), `1`; with two phases, the rate
    after the pilot), from its allocation log."""
    from coba_trl.rounds.log import generation_batches, read_rounds

    waste = dict.fromkeys(("unseen", "0", "mid", "1"), 0)
    for batch in generation_batches(read_rounds(arm_dir)):
        rows = zip(
            batch["group_sizes"], batch["successes"], batch["scored_rollouts"], batch["pass_rates"], strict=True
        )
        for size, wins, tries, rate in rows:
            if not 0 < wins < tries:
                kind = "unseen" if rate is None else "0" if rate == 0 else "1" if rate == 1 else "mid"
                waste[kind] += size
    return waste


def waste_lines(results: list[dict], output_dir: str) -> list[str]:
    """`waste_breakdown` of each arm, as the printed table (rows without spread per trained row with spread)."""
    lines = [
        "| arm | rows without spread | unseen prompt | pass rate 0 | pass rate in (0, 1) | pass rate 1 | without spread per "
        "row with spread |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        waste = waste_breakdown(os.path.join(output_dir, result["arm"]))
        total = sum(waste.values())
        rows = result["rows_with_spread"] or 0
        shares = " | ".join(f"{waste[kind]:,}" for kind in ("unseen", "0", "mid", "1"))
        per_row = f"{total / rows:.3f}" if rows else "none"
        lines.append(f"| `{result['arm']}` | {total:,} | {shares} | {per_row} |")
    return lines


def json_records(results: list[dict], limit: float | None) -> list[dict]:
    """What `--json` writes: one object per arm with its counts and generated per trained row with spread, and one
    whose `arm` is "limit" (`limit_rows`' oracle over every epoch; None without a `grpo` arm to read it from)."""
    records = [
        {
            "arm": result["arm"],
            "generated": result["generated"],
            "rows_trained": result["rows_trained"],
            "rows_with_spread": result["rows_with_spread"],
            "generated_per_row_with_spread": per_row(result)[0],
            "prompts_with_spread": result["prompts_with_spread"],
            "prompts": result["prompts"],
        }
        for result in results
    ]
    none = dict.fromkeys(("generated", "rows_trained", "rows_with_spread", "prompts_with_spread", "prompts"))
    return [*records, {"arm": "limit", **none, "generated_per_row_with_spread": limit}]


def report(results: list[dict], options, prompts_per_epoch: int) -> None:
    """Print the arms' table and, with `grpo` among them, the limit; write `--json`."""
    from coba_trl.demo.config import regime_arguments

    print("\n".join(table(results)))
    print("\n".join(waste_lines(results, options.output_dir)))
    limit = None
    if any(result["arm"] == "grpo" for result in results):
        group_size = regime_arguments(options.regime)[0]["num_generations"]
        rows = limit_rows(os.path.join(options.output_dir, "grpo"), group_size, prompts_per_epoch)
        print("\n".join(limit_lines(rows)))
        limit = rows[-1]["limit"]
    if options.json:
        os.makedirs(os.path.dirname(os.path.abspath(options.json)), exist_ok=True)
        with open(options.json, "w") as f:
            json.dump(json_records(results, limit), f, indent=1)
        print(f"wrote {options.json}")


def arms_in_subprocesses(options, argv: list[str]) -> int:
    """With `--use-vllm` on one process, each arm runs in a process of its own, one after another (a process holds
    one colocated engine), from the same saved warm start; the table is printed from their results."""
    import subprocess

    from coba_trl.demo.config import regime_arguments

    results = []
    os.makedirs(options.output_dir, exist_ok=True)
    others = [a for a in argv if a not in options.arms and a not in ("--arms",)]
    if options.json:  # the arms' subprocesses write their results, not the report
        index = others.index("--json")
        others = others[:index] + others[index + 2 :]
    for arm in options.arms:
        result_file = os.path.join(options.output_dir, f"{arm}_result.json")
        command = [sys.executable, os.path.abspath(__file__), *others, "--arms", arm, "--result-json", result_file]
        subprocess.run(command, check=True)
        with open(result_file) as f:
            results.extend(json.load(f))
    report(results, options, regime_arguments(options.regime)[1].demo_num_train_prompts)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), help="Default: every arm.")
    parser.add_argument("--regime", default="demo", choices=["demo", "hard"], help="The CPU task's regime.")
    parser.add_argument("--json", default=None, help="Write the arms' counts and the limit to this JSON file.")
    parser.add_argument("--max-steps", "--max_steps", dest="max_steps", type=int, default=None)
    parser.add_argument(
        "--stop-at-generated-rollouts",
        "--stop_at_generated_rollouts",
        dest="stop_at_generated_rollouts",
        type=int,
        default=None,
        help="Stop each arm at the end of the round that brings its generated completions to this many.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Warm start and RL seed (the demo's: 0).")
    parser.add_argument("--use-vllm", "--use_vllm", dest="use_vllm", action="store_true")
    parser.add_argument("--quick", action="store_true", help="A smoke run: a tiny model, a warm start of 10 steps.")
    parser.add_argument(
        "--output-dir",
        "--output_dir",
        dest="output_dir",
        default=None,
        help="Default: outputs/rollout_savings_<regime>.",
    )
    parser.add_argument("--list-arms", "--list_arms", dest="list_arms", action="store_true")
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true")
    parser.add_argument("--result-json", "--result_json", dest="result_json", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    options.output_dir = options.output_dir or f"outputs/rollout_savings_{options.regime}"
    if options.list_arms:
        for arm in ARMS:
            settings = ", ".join(f"{key}={value!r}" for key, value in ARMS[arm].items())
            print(f"{arm}: {settings}" + (" (not a study 5 arm)" if arm in EXTRA_ARMS else ""))
        return 0
    problems = check_arms(
        options.arms, options.output_dir, options.max_steps, options.seed, options.use_vllm, options.regime
    )
    if options.dry_run:
        for arm in options.arms:
            print(f"{arm}: {'refused: ' + problems[arm] if arm in problems else 'ok'}")
    if problems:
        print(
            f"{len(problems)} of {len(options.arms)} arms cannot train with this coba_trl; the benchmark needs "
            f"a trainer with {', '.join(NEEDED)}.",
            file=sys.stderr,
        )
        return 1
    if options.dry_run:
        return 0
    if options.use_vllm and len(options.arms) > 1 and "RANK" not in os.environ:
        return arms_in_subprocesses(options, argv if argv is not None else sys.argv[1:])

    import torch

    from coba_trl.distributed import leave_multiprocess_cpu_run
    from coba_trl.generation.vllm_backend import check_vllm_installed

    check_vllm_installed(options.use_vllm)
    from machine import machine_line

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # as the demo: one thread, so one and several processes give the same runs
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        print(machine_line(), flush=True)
    torch.manual_seed(options.seed)
    model, tokenizer, train = warm_started(options.seed, options.output_dir, options.regime, options.quick)
    warm_state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    results = []
    for arm in options.arms:
        results.append(train_arm(arm, options, warm_state, tokenizer, train))
        if rank == 0:
            result = results[-1]
            print(f"[{arm}] {result['steps']} steps in {result['seconds']:.1f} s", flush=True)
    if rank == 0 and options.result_json:
        with open(options.result_json, "w") as f:
            json.dump(results, f)
    if rank == 0:
        report(results, options, len(train))
        print(f"load {', '.join(f'{value:.2f}' for value in os.getloadavg())} at the end", flush=True)
    leave_multiprocess_cpu_run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
