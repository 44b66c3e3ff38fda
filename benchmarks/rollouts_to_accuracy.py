"""Rollouts (and seconds) to a held-out accuracy: per arm, when held-out avg@16 first reaches each threshold.

    python benchmarks/rollouts_to_accuracy.py --arms grpo dapo --json outputs/rta.json   # the frontier regime
    python benchmarks/rollouts_to_accuracy.py --arms grpo knapsack_skip --absolute 0.3 0.4
    python benchmarks/rollouts_to_accuracy.py --quick --arms grpo dapo                  # a smoke run

Every arm (`rollout_savings.py`'s arms) trains the regime's warm-started model (`--regime`, default `frontier`:
`recipes/cpu_demo_frontier.yaml`) until it has generated `--rollouts` completions (default: GRPO's whole run, the
regime's steps x 128, 256 a round of 2 steps), stopping at the end of the round that reaches them: arms run to the same generated rollouts,
not the same steps. Held-out avg@16 (16 completions a problem at temperature 1.0, the mean share right; overall and
per level) is measured before RL, every `--eval-every` optimizer steps and when the arm stops, with the completions
generated and the training seconds (evaluations left out) by then. An arm that has not generated them by the
regime's last step (its learning-rate schedule is the regime's) stops there, and its generated count says so. The thresholds are fixed before any arm runs:
the warm start's avg@16 plus 50% and 90% of `grpo`'s gain, and `grpo`'s final avg@16 (with `grpo` among the arms),
and any `--absolute` values. Per arm and threshold it reports the generated rollouts and seconds at the first
evaluation at or above it (none: not reached), and each arm's avg@16 at 25%, 50%, 75% and 100% of the budget (its
last evaluation at or below that many generated rollouts). `--json FILE` writes all of it,
every arm's curve included, so the crossings can be recomputed from the curves. Counts are deterministic on a
machine; seconds depend on its load (printed before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the demo's pinned CPU numerics (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RELATIVE = (("grpo_gain_50", 0.5), ("grpo_gain_90", 0.9), ("grpo_final", 1.0))  # shares of grpo's gain
SHARES = (0.25, 0.5, 0.75, 1.0)  # of the rollout budget, where each arm's avg@16 is read side by side


def thresholds(curves: dict[str, list[dict]], absolute: list[float]) -> dict[str, float]:
    """The pre-registered thresholds: warm start + 50% and 90% of `grpo`'s gain and `grpo`'s final avg@16 (with a
    `grpo` curve), then each absolute value."""
    found = {}
    if "grpo" in curves:
        start, final = curves["grpo"][0]["avg"], curves["grpo"][-1]["avg"]
        found = {name: start + share * (final - start) for name, share in RELATIVE}
    return {**found, **{f"absolute_{value:g}": value for value in absolute}}


def crossing(curve: list[dict], threshold: float) -> dict | None:
    """The first evaluation at or above `threshold`: its step, generated rollouts and seconds (None: never)."""
    for point in curve:
        if point["avg"] >= threshold:
            return {key: point[key] for key in ("step", "generated", "seconds")}
    return None


def at_equal_rollouts(curve: list[dict], budget: int, shares=SHARES) -> dict[str, float]:
    """avg@16 at each share of the rollout budget: the last evaluation at or below that many generated rollouts (at
    the whole budget, the arm's last evaluation, where it stopped)."""
    held = {}
    for share in shares:
        points = curve if share == 1.0 else [p for p in curve if p["generated"] <= share * budget]
        held[f"{share:g}"] = points[-1]["avg"]
    return held


def train_arm(arm: str, options, warm_state: dict, tokenizer, train, heldout) -> list[dict]:
    """One arm from the warm start to the rollout budget; its avg@16 curve."""
    from rollout_savings import arm_trainer
    from studies.budget import GeneratedRolloutBudget
    from studies.task import level_means, sampled_pass_rates
    from transformers import TrainerCallback

    curve, clock = [], {"eval": 0.0, "start": 0.0}

    def measure(step: int, generated: int, model) -> None:
        start = time.perf_counter()
        rates = sampled_pass_rates(model, tokenizer, heldout, options.samples, options.max_completion_length, 1234)
        by_level = level_means(rates, heldout)
        seconds = start - clock["start"] - clock["eval"]
        curve.append({"step": step, "generated": generated, "seconds": round(seconds, 2), "avg": sum(rates) / len(rates),
                      "by_level": by_level})  # fmt: skip
        clock["eval"] += time.perf_counter() - start

    class Evaluate(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            clock["start"] = time.perf_counter()
            measure(0, 0, model)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % options.eval_every == 0 or control.should_training_stop:
                measure(state.global_step, int(trainer.rollouts_generated), model)

    trainer = arm_trainer(arm, options, warm_state, tokenizer, train)
    trainer.add_callback(GeneratedRolloutBudget(options.rollouts, lambda: trainer.rollouts_generated))
    trainer.add_callback(Evaluate())  # after the budget: it sees the step the budget stops at
    trainer.train()
    if curve[-1]["step"] != trainer.state.global_step:  # stopped by max_steps between evaluations
        measure(trainer.state.global_step, int(trainer.rollouts_generated), trainer.model)
    return curve


def main(argv: list[str] | None = None) -> int:
    from coba_trl.demo.config import REGIMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--arms", nargs="+", default=["grpo", "dapo"])
    parser.add_argument("--regime", default="frontier", choices=list(REGIMES))
    parser.add_argument("--rollouts", type=int, default=None, help="Generated completions every arm runs to.")
    parser.add_argument("--eval-every", dest="eval_every", type=int, default=5, help="Optimizer steps.")
    parser.add_argument("--samples", type=int, default=16, help="Completions a held-out problem (avg@samples).")
    parser.add_argument("--absolute", type=float, nargs="*", default=[], help="Thresholds of avg@16 besides grpo's.")
    parser.add_argument("--seed", type=int, default=0, help="Warm start and RL seed.")
    parser.add_argument(
        "--quick", action="store_true", help="A smoke run: a tiny model, 10 warm-start steps, 4 steps, avg@2."
    )
    parser.add_argument("--output-dir", dest="output_dir", default=None, help="Default: outputs/rta_<regime>.")
    parser.add_argument("--json", default=None, help="Write thresholds, crossings and curves here.")
    options = parser.parse_args(argv)
    from rollout_savings import ARMS, regime_demo

    unknown = [arm for arm in options.arms if arm not in ARMS]
    if unknown:
        parser.error(f"--arms {' '.join(unknown)}: not an arm of benchmarks/rollout_savings.py ({', '.join(ARMS)})")
    import torch
    from machine import machine_line

    from coba_trl.demo.config import regime_arguments
    from coba_trl.demo.warm_start import warm_started_demo

    training, _ = regime_arguments(options.regime)
    steps = 4 if options.quick else training["max_steps"]
    options.rollouts = options.rollouts or steps * training["per_device_train_batch_size"]  # grpo's whole run
    options.eval_every = 2 if options.quick else options.eval_every
    options.samples = 2 if options.quick else options.samples
    # The regime's schedule: an arm that has not generated the budget by the regime's last step stops there.
    options = SimpleNamespace(**vars(options), max_steps=steps, use_vllm=False,
                              max_completion_length=training["max_completion_length"])  # fmt: skip
    options.output_dir = options.output_dir or f"outputs/rta_{options.regime}"
    torch.set_num_threads(1)
    print(machine_line(), flush=True)
    torch.manual_seed(options.seed)
    model, tokenizer, train, heldout = warm_started_demo(options.seed, regime_demo(options.regime, options.quick))
    warm_state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    curves = {}
    for arm in options.arms:
        curves[arm] = train_arm(arm, options, warm_state, tokenizer, train, heldout)
        last = curves[arm][-1]
        print(f"[{arm}] stopped at step {last['step']}, {last['generated']:,} generated, avg@16 {last['avg']:.3f}")
    marks = thresholds(curves, options.absolute)
    crossings = {arm: {name: crossing(curve, value) for name, value in marks.items()} for arm, curve in curves.items()}
    print("| arm | final avg@16 | generated | " + " | ".join(f"{n} ({v:.3f}): rollouts / s" for n, v in marks.items()))
    for arm, curve in curves.items():
        cells = [f"{c['generated']:,} / {c['seconds']:.0f}" if c else "not reached" for c in crossings[arm].values()]
        print(f"| {arm} | {curve[-1]['avg']:.3f} | {curve[-1]['generated']:,} | " + " | ".join(cells) + " |")
    held = {arm: at_equal_rollouts(curve, options.rollouts) for arm, curve in curves.items()}
    print("| arm | " + " | ".join(f"avg@16 at {float(share):.0%} of {options.rollouts:,}" for share in SHARES) + " |")
    for arm, values in held.items():
        print(f"| {arm} | " + " | ".join(f"{value:.3f}" for value in values.values()) + " |")
    print(f"load {', '.join(f'{value:.2f}' for value in os.getloadavg())} at the end", flush=True)
    if options.json:
        os.makedirs(os.path.dirname(os.path.abspath(options.json)), exist_ok=True)
        record = {"regime": options.regime, "seed": options.seed, "rollouts": options.rollouts, "thresholds": marks,
                  "crossings": crossings, "at_equal_rollouts": held, "curves": curves, "machine": machine_line()}  # fmt: skip
        with open(options.json, "w") as handle:
            json.dump(record, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
