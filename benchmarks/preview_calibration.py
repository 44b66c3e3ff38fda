"""The preview checked against measurement: its first-epoch figures against those of real runs, from one warm start.

    python benchmarks/preview_calibration.py --regime hard --output-dir outputs/calibration_hard
    python benchmarks/preview_calibration.py --regime demo --output-dir outputs/calibration_demo
    python benchmarks/preview_calibration.py --regime frontier --output-dir outputs/calibration_frontier
    python benchmarks/preview_calibration.py --regime frontier --seed 1 --output-dir outputs/calibration_frontier_1

From the regime's warm-started model (`coba_trl.demo.config.REGIMES`; the one `rollout_savings.py` uses, `--seed`,
default 0, which also sets the run's prompts):
1. `examples/evaluate.py --train_dataset arithmetic --regime R --demo_seed S --k 8` scores the training set (8
   samples a prompt at the training temperature, graded as in training) into `D/pass_rates.parquet`;
2. `python -m coba_trl.preview D/pass_rates.parquet --recipe <the regime's recipe> --pass_rate_samples 8` previews
   the run into `D/allocation_preview.json`;
3. the first epoch of `grpo` (uniform, keep), `dapo` (uniform, refill) and `greso` (uniform, refill and GRESO's
   skipping) trains from the same warm start, each with its allocation log in `D/<arm>/coba_rounds.jsonl` (a run stops
   at the end of the round in which its prompt visits reach the training set's size);
4. it prints, per arm, the preview's completions generated per trained row with spread (uniform allocator: `keep`,
   `refill`, `refill + skipping (first epoch)`) against the measured one: over the groups of the epoch's first N
   prompt visits in the allocation log (N prompts), the completions of every group over those of the groups with a
   spread of successes (`epoch_figures`), and the share of flat groups under keep (over the epoch, and in its first
   round, whose completions the warm-started model generated before any update). `D/calibration.json` holds both;
5. the model `grpo` ends its epoch with is scored and previewed the same way (`D/epoch_end/`): the preview of the
   epoch's last model beside that of its first, so that what the model learnt inside the epoch shows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the demo's pinned CPU numerics (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

ARMS = {"grpo": "keep", "dapo": "refill", "greso": "refill + skipping (first epoch)"}  # arm -> the preview's mode
SAMPLES = 8


def epoch_figures(records: list[dict], prompts: int) -> dict:
    """Over the groups of a run's first `prompts` prompt visits (allocation-log records, refill batches in order,
    skipped visits counted but not generated): completions generated, those of groups with a spread of successes,
    their ratio, and the share of the groups without spread."""
    from coba_trl.rounds.log import generation_batches

    groups, visits = [], 0
    for batch in generation_batches(records):
        visits += len(batch.get("skipped_prompts", []))
        for size, wins, tries in zip(batch["group_sizes"], batch["successes"], batch["scored_rollouts"], strict=True):
            if visits < prompts:
                groups.append((size, 0 < wins < tries))
            visits += 1
    first = records[0] if records else {"successes": [], "scored_rollouts": []}
    first_flat = [
        not 0 < wins < tries for wins, tries in zip(first["successes"], first["scored_rollouts"], strict=True)
    ]
    generated = sum(size for size, _ in groups)
    with_spread = sum(size for size, spread in groups if spread)
    return {
        "groups": len(groups),
        "generated": generated,
        "rows_with_spread": with_spread,
        "generated_per_row_with_spread": generated / with_spread if with_spread else None,
        "flat_share": 1 - sum(spread for _, spread in groups) / len(groups) if groups else None,
        "first_round_flat_share": sum(first_flat) / len(first_flat) if first_flat else None,
    }


def _figure(value) -> str:
    return "none" if value is None else f"{value:.3f}"


def visits_so_far(output_dir: str) -> int:
    from coba_trl.rounds.log import generation_batches, read_rounds

    if not os.path.exists(os.path.join(output_dir, "coba_rounds.jsonl")):
        return 0
    batches = generation_batches(read_rounds(output_dir))
    return sum(len(batch["prompt_ids"]) + len(batch.get("skipped_prompts", [])) for batch in batches)


def train_first_epoch(
    arm: str, regime: str, output_dir: str, warm_state, tokenizer, train, quick: bool, seed: int = 0
) -> None:
    """`arm` of `rollout_savings.py` from the warm start, until the end of the round that completes the epoch."""
    from types import SimpleNamespace

    from rollout_savings import arm_trainer
    from studies.budget import ends_a_round
    from transformers import TrainerCallback

    class EpochStop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if ends_a_round(args, state.global_step) and visits_so_far(args.output_dir) >= len(train):
                control.should_training_stop = True

    options = SimpleNamespace(
        regime=regime, output_dir=output_dir, max_steps=None, seed=seed, use_vllm=False, quick=quick
    )
    trainer = arm_trainer(arm, options, warm_state, tokenizer, train, callbacks=[EpochStop()])
    trainer.train()
    return trainer


def preview_model(model_dir: str, out: str, regime: str, seed: int) -> dict:
    """Score the training set with the model in `model_dir` (8 samples a prompt) into `out/pass_rates.parquet` and
    preview the regime's recipe from it into `out/allocation_preview.json`; returns the preview."""
    from coba_trl.demo.config import REGIME_RECIPES

    env = {**os.environ, "PYTHONPATH": ROOT}
    score = [sys.executable, os.path.join(ROOT, "examples", "evaluate.py"), "--model_name_or_path", model_dir]
    score += ["--train_dataset", "arithmetic", "--regime", regime, "--demo_seed", str(seed), "--k", str(SAMPLES)]
    score += ["--backend", "transformers", "--max_new_tokens", "12", "--dtype", "float32"]
    subprocess.run([*score, "--output_dir", os.path.join(out, "scoring")], check=True, env=env)
    shutil.copy(os.path.join(out, "scoring", "train_pass_rates.parquet"), os.path.join(out, "pass_rates.parquet"))
    recipe = os.path.join(ROOT, "recipes", REGIME_RECIPES[regime])
    preview = [sys.executable, "-m", "coba_trl.preview", os.path.join(out, "pass_rates.parquet"), "--recipe", recipe]
    subprocess.run([*preview, "--pass_rate_samples", str(SAMPLES), "--preview_dir", out], check=True, env=env)
    with open(os.path.join(out, "allocation_preview.json")) as f:
        return json.load(f)


def uniform_predictions(preview: dict) -> dict:
    """The preview's completions generated per trained row with spread, uniform allocator, by mode."""
    return {
        row["mode"]: row["generated_per_trained_row_with_spread"]
        for row in preview["rollouts_per_trained_row_with_spread"]
        if row["allocator"] == "uniform"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--regime", default="hard", choices=["demo", "hard", "frontier"])
    parser.add_argument("--output-dir", "--output_dir", dest="output_dir", required=True)
    parser.add_argument("--seed", type=int, default=0, help="The warm start's seed, and the run's (its prompts).")
    parser.add_argument("--quick", action="store_true", help="A smoke run: a tiny model, a warm start of 10 steps.")
    options = parser.parse_args(argv)
    import torch
    from machine import machine_line
    from rollout_savings import warm_started

    from coba_trl.rounds.log import read_rounds

    torch.set_num_threads(1)
    out = options.output_dir
    print(machine_line(), flush=True)
    model, tokenizer, train = warm_started(options.seed, out, options.regime, options.quick)
    warm_state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    model.save_pretrained(os.path.join(out, "warm_start_model"))
    tokenizer.save_pretrained(os.path.join(out, "warm_start_model"))
    predicted_rows = preview_model(os.path.join(out, "warm_start_model"), out, options.regime, options.seed)
    predicted = uniform_predictions(predicted_rows)
    results = {"regime": options.regime, "seed": options.seed, "prompts": len(train), "arms": {}}
    for arm, mode in ARMS.items():
        arm_dir = os.path.join(out, arm)
        if os.path.exists(arm_dir):
            shutil.rmtree(arm_dir)
        trainer = train_first_epoch(
            arm, options.regime, out, warm_state, tokenizer, train, options.quick, options.seed
        )
        measured = epoch_figures(read_rounds(arm_dir), len(train))
        results["arms"][arm] = {"preview_mode": mode, "predicted": predicted[mode], **measured}
        if arm == "grpo":  # the model its epoch ends with, previewed as the warm start was
            end_dir = os.path.join(out, "epoch_end")
            trainer.model.save_pretrained(os.path.join(end_dir, "model"))
            tokenizer.save_pretrained(os.path.join(end_dir, "model"))
            end_rows = preview_model(os.path.join(end_dir, "model"), end_dir, options.regime, options.seed)
            results["epoch_end"] = {
                "steps": trainer.state.global_step,
                "predicted": uniform_predictions(end_rows)["keep"],
                "flat_share_keep_predicted": end_rows["flat_groups_under_keep"]["uniform"],
            }
    results["flat_share_keep_predicted"] = predicted_rows["flat_groups_under_keep"]["uniform"]
    results["spending_rule"] = predicted_rows["spending_rule"]
    with open(os.path.join(out, "calibration.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{options.regime} regime, first epoch ({len(train)} prompt visits), uniform allocator:")
    print("| arm | preview mode | predicted per row with spread | measured | measured / predicted |")
    print("|---|---|---|---|---|")
    for arm, row in results["arms"].items():
        predicted, measured = row["predicted"], row["generated_per_row_with_spread"]
        ratio = _figure(measured / predicted if predicted and measured else None)
        print(f"| `{arm}` | {row['preview_mode']} | {_figure(predicted)} | {_figure(measured)} | {ratio} |")
    keep = results["arms"]["grpo"]
    print(
        f"flat groups under keep: predicted {_figure(results['flat_share_keep_predicted'])}, measured "
        f"{_figure(keep['flat_share'])} over the epoch ({_figure(keep['first_round_flat_share'])} in its first round, "
        "before any update)"
    )
    end = results["epoch_end"]
    print(
        f"the model grpo ends the epoch with (step {end['steps']}), previewed: {_figure(end['predicted'])} per row "
        f"with spread under keep, flat groups {_figure(end['flat_share_keep_predicted'])} (the warm start's: "
        f"{_figure(keep['predicted'])}, {_figure(results['flat_share_keep_predicted'])}; measured over the epoch: "
        f"{_figure(keep['generated_per_row_with_spread'])}, {_figure(keep['flat_share'])})"
    )
    print(results["spending_rule"])
    print(f"wrote {os.path.join(out, 'calibration.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
