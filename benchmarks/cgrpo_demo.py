"""C-GRPO (trl-cgrpo 0.2.0) on coba-trl's CPU demo task, with the figures of `benchmarks/rollout_savings.py`.

trl-cgrpo 0.2 requires TRL < 1.15 and coba-trl's trainer TRL 1.16, so this runs in an environment of its own, with
this repository on the path (only `coba_trl.demo.{config,model,task,warm_start,accuracy}`, `coba_trl.tiny`,
`coba_trl.rewards` and `coba_trl.numerics` are imported, which TRL 1.14 accepts):

    python3.11 -m venv .venv-cgrpo && source .venv-cgrpo/bin/activate
    pip install torch==2.13.0 && pip install trl-cgrpo==0.2.0 "trl==1.14.*" "math-verify>=0.5.2"
    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/cgrpo_demo.py --max-steps 100 --num-calibration 100

Measured in docs/benchmarks.md ("Rollouts saved").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from coba_trl.numerics import pin_cpu_numerics

pin_cpu_numerics()  # as benchmarks/rollout_savings.py, before torch loads
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import trl  # noqa: E402
import trl_cgrpo  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.trainer_callback import PrinterCallback, TrainerCallback  # noqa: E402
from trl_cgrpo import CGRPOConfig, CGRPOTrainer  # noqa: E402

from coba_trl.demo.accuracy import heldout_accuracy  # noqa: E402
from coba_trl.demo.config import DEMO_TRAINING_ARGS  # noqa: E402
from coba_trl.demo.task import to_prompt_dataset  # noqa: E402
from coba_trl.demo.warm_start import warm_started_demo  # noqa: E402
from coba_trl.rewards import dapo_accuracy_reward, extract_dapo_answer, normalize_answer  # noqa: E402


def answer_extractor_factory(counter):
    def answer_extractor(text: str) -> str | None:
        counter["extracted"] += 1  # every completion C-GRPO generates (calibration and training) passes here once
        answer = extract_dapo_answer(text)
        return None if answer is None else normalize_answer(answer)

    return answer_extractor


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--num-calibration", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="outputs/cgrpo_demo/results.json")
    p.add_argument("--output-dir", default="outputs/cgrpo_demo")
    o = p.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    torch.manual_seed(o.seed)
    model, tokenizer, train, heldout = warm_started_demo(o.seed)
    print(f"[warm-start] done in {time.perf_counter() - t0:.1f}s", flush=True)
    before = heldout_accuracy(model, tokenizer, heldout, DEMO_TRAINING_ARGS["max_completion_length"])
    print(f"[heldout] before RL {before['accuracy']:.3f}", flush=True)

    calib_problems = heldout[: o.num_calibration]
    calib = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": q.question}] for q in calib_problems],
            "answer": [str(q.answer) for q in calib_problems],
        }
    )

    # The demo's training arguments, minus CoBA-only keys; group width = max(budget_grid) = 32, and
    # 32 prompts per round as in the demo: 32 x 32 = 1024 rows a round, 2 optimizer steps a round -> 512 rows a step.
    coba_only = {
        "budget_allocator",
        "min_generations",
        "max_generations",
        "num_generations",
        "per_device_train_batch_size",
        "output_dir",
    }
    settings = {k: v for k, v in DEMO_TRAINING_ARGS.items() if k not in coba_only}
    settings.update(
        output_dir=o.output_dir,
        max_steps=o.max_steps,
        seed=o.seed,
        disable_tqdm=True,
        logging_steps=1,
        per_device_train_batch_size=32 * 32 // DEMO_TRAINING_ARGS["steps_per_generation"],
    )
    args = CGRPOConfig(**settings)  # default budget_grid [2, 4, 8, 16, 32], recalibrate_every 50, score "aps"

    counter = {
        "reward_rows": 0,
        "reward_padded": 0,
        "reward_real": 0,
        "extracted": 0,
        "groups": 0,
        "groups_with_spread": 0,
        "rows_with_spread": 0,
        "rounds": 0,
    }
    trainer_ref = {}

    def reward(completions, solution, **kwargs):
        scores = dapo_accuracy_reward(completions, solution)
        tr = trainer_ref["t"]
        padded = tr._padded_rows or [False] * len(completions)
        g = tr.num_generations
        counter["rounds"] += 1
        counter["reward_rows"] += len(completions)
        counter["reward_padded"] += sum(padded)
        counter["reward_real"] += len(completions) - sum(padded)
        for start in range(0, len(completions), g):
            real = [s for s, pad in zip(scores[start : start + g], padded[start : start + g], strict=True) if not pad]
            counter["groups"] += 1
            if len(set(real)) > 1:
                counter["groups_with_spread"] += 1
                counter["rows_with_spread"] += len(real)
        return scores

    reward.__name__ = "dapo_accuracy_reward"

    trainer = CGRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=to_prompt_dataset(train),
        processing_class=tokenizer,
        calibration_dataset=calib,
        answer_extractor=answer_extractor_factory(counter),
    )
    trainer_ref["t"] = trainer
    trainer.remove_callback(PrinterCallback)

    class Progress(TrainerCallback):
        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                keep = {k: v for k, v in logs.items() if k.startswith("cgrpo/") or k in ("loss", "reward")}
                print(
                    f"step {state.global_step} {time.perf_counter() - start:.0f}s "
                    + " ".join(f"{k}={v:.3g}" for k, v in keep.items()),
                    flush=True,
                )

    trainer.add_callback(Progress())
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    after = heldout_accuracy(model, tokenizer, heldout, DEMO_TRAINING_ARGS["max_completion_length"])
    after_rest = heldout_accuracy(
        model, tokenizer, heldout[o.num_calibration :], DEMO_TRAINING_ARGS["max_completion_length"]
    )

    history = trainer.state.log_history

    def series(key):
        return [r[key] for r in history if key in r]

    calibration_rollouts = sum(series("cgrpo/calibration_rollouts"))
    generated_total = counter["reward_real"] + calibration_rollouts
    rows = counter["rows_with_spread"]
    result = {
        "versions": {"trl": trl.__version__, "trl_cgrpo": trl_cgrpo.__version__, "torch": torch.__version__},
        "config": {
            "budget_grid": args.budget_grid,
            "num_generations(group width)": args.num_generations,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "steps_per_generation": args.steps_per_generation,
            "prompts_per_round": 32,
            "max_steps": args.max_steps,
            "learning_rate": args.learning_rate,
            "loss_type": args.loss_type,
            "beta": args.beta,
            "temperature": args.temperature,
            "max_completion_length": args.max_completion_length,
            "score": args.score,
            "delta": args.delta,
            "recalibrate_every": args.recalibrate_every,
            "calibration_set": f"first {len(calib)} of the demo's {len(heldout)} held-out problems "
            f"(demo_problem_sets seed={o.seed}: make_problems(300, seed=1)), levels cycling evenly",
        },
        "optimizer_steps": trainer.state.global_step,
        "generation_rounds": counter["rounds"],
        "completions_generated_total": generated_total,
        "completions_generated_training": counter["reward_real"],
        "completions_generated_calibration": calibration_rollouts,
        "answer_extractor_calls": counter["extracted"],
        "reward_calls_rows_incl_padded": counter["reward_rows"],
        "padded_rows": counter["reward_padded"],
        "rows_trained": counter["reward_real"],
        "rows_trained_incl_padded_masked_rows": counter["reward_rows"],
        "groups": counter["groups"],
        "groups_with_spread": counter["groups_with_spread"],
        "rows_with_spread": rows,
        "generated_per_row_with_spread": generated_total / rows if rows else None,
        "generated_per_row_with_spread_excluding_calibration": counter["reward_real"] / rows if rows else None,
        "train_seconds": seconds,
        "ms_per_row_with_spread": 1e3 * seconds / rows if rows else None,
        "heldout_accuracy_before": before,
        "heldout_accuracy_after": after,
        "heldout_accuracy_after_on_200_not_used_for_calibration": after_rest,
        "cgrpo_logged": {
            k: series(k)
            for k in (
                "cgrpo/mean_k",
                "cgrpo/rollout_savings",
                "cgrpo/delta",
                "cgrpo/calibration_solve_rate",
                "cgrpo/qhat_2",
                "cgrpo/qhat_4",
                "cgrpo/qhat_8",
                "cgrpo/qhat_16",
                "cgrpo/qhat_32",
            )
        },
        "load_average_end": os.getloadavg(),
        "total_wall_seconds": time.perf_counter() - t0,
    }
    os.makedirs(os.path.dirname(o.out) or ".", exist_ok=True)
    with open(o.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "cgrpo_logged"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
