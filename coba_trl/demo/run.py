"""The offline CPU demo end to end: tiny model, warm start, CoBA-RL on arithmetic, summary and plots.

1. Build the byte tokenizer and a small Qwen2 model locally (no network).
2. Warm-start it with a short supervised phase (``warm_start.py``), so it starts RL mediocre.
3. Train with `CoBAGRPOTrainer` and the DAPO accuracy reward on a revisited set of prompts of graded difficulty,
   measuring held-out accuracy every `demo_eval_steps` steps.
4. Write ``demo_summary.json``, the trainer state (log history), the model with its card (``coba_trl.model_card``:
   the CoBA settings and the accuracy before and after RL) and the plots of ``coba_trl.plot``.
Resumed from a checkpoint (`resume_from_checkpoint`), steps 1 and 2 are skipped: TRL's `train` loads the model,
the optimizer, the random state and the CoBA state, and the accuracy before RL comes from the checkpoint.
Only the main process prints; the console shows one line per logging step (``console.py``).
"""

from __future__ import annotations

import json
import os
import time

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from coba_trl.checkpoint import latest_complete_checkpoint
from coba_trl.config import CoBAConfig
from coba_trl.demo.accuracy import heldout_accuracy
from coba_trl.demo.config import WARM_START_PROBLEMS, DemoArguments
from coba_trl.demo.console import use_compact_console
from coba_trl.demo.flags import BEFORE_RL_FILE, SUMMARY_FILE, check_checkpoint, resumes_latest
from coba_trl.demo.model import build_demo_model
from coba_trl.demo.task import Problem, demo_problem_sets, to_prompt_dataset
from coba_trl.demo.warm_start import demo_warm_start
from coba_trl.model_card import complete_model_card
from coba_trl.plot import plot_run
from coba_trl.rewards import dapo_accuracy_reward
from coba_trl.trainer import CoBAGRPOTrainer

DATASET_NAME = "coba-trl built-in arithmetic (generated)"
BASE_MODEL = "a tiny Qwen2 model built in memory (`coba_trl.tiny`) after a short supervised warm start"
ENGINE_MODEL_DIR = "warm_start_model"  # what a colocated vLLM engine loads, and TRL's reference model with beta > 0
# A resumed run whose first run saved no warm start: a model of its shape for the engine only (the checkpoint's weights
# reach the engine at the first round), kept apart so that no later run takes it for the warm start.
RESUMED_ENGINE_MODEL_DIR = "engine_model"


class HeldoutAccuracyCallback(TrainerCallback):
    """Adds held-out greedy accuracy to the log (at step 0, every `eval_steps` steps and at the last step)."""

    def __init__(self, model, tokenizer, problems: list[Problem], eval_steps: int, max_new_tokens: int):
        self.model, self.tokenizer, self.problems = model, tokenizer, problems
        self.eval_steps, self.max_new_tokens = eval_steps, max_new_tokens

    def _accuracy(self) -> float:
        accuracy = heldout_accuracy(self.model, self.tokenizer, self.problems, self.max_new_tokens)["accuracy"]
        self.model.train()
        return accuracy

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # a resumed run's log history already holds the step-0 accuracy
            state.log_history.append({"heldout_accuracy": self._accuracy(), "step": state.global_step})

    def on_log(self, args, state, control, logs=None, **kwargs):
        record = state.log_history[-1] if state.log_history else {}
        step = state.global_step
        if "loss" in record and self.eval_steps and (step % self.eval_steps == 0 or step >= state.max_steps):
            record["heldout_accuracy"] = self._accuracy()
            if logs is not None:  # for the console line, which comes after this callback
                logs["heldout_accuracy"] = record["heldout_accuracy"]


class BeforeRLRecord(TrainerCallback):
    """Writes the held-out accuracy before RL into every checkpoint, so a resumed run needs no second warm start.

    Written when the Trainer is about to save (it saves right after these hooks), so the file is in the checkpoint
    before the checkpoint is marked complete (`coba_trl.checkpoint`)."""

    def __init__(self, before: dict):
        self.before = before

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save and state.is_world_process_zero:
            checkpoint = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            os.makedirs(checkpoint, exist_ok=True)
            with open(os.path.join(checkpoint, BEFORE_RL_FILE), "w") as handle:
                json.dump(self.before, handle, indent=2)

    on_epoch_end = on_step_end


def generation_rounds(args: CoBAConfig, global_steps: int) -> int:
    """Generation rounds behind `global_steps` optimizer steps (one round every `steps_per_generation` micro-steps)."""
    micro_steps = global_steps * args.gradient_accumulation_steps
    return -(-micro_steps // (args.steps_per_generation * args.num_iterations))


def engine_model_dir(model, tokenizer, training_args: CoBAConfig, checkpoint: str | None = None) -> None:
    """The warm-started model in a folder, from which TRL builds what it loads by `model.name_or_path`: a colocated
    vLLM engine, and the reference model of the KL term when beta > 0 (the model RL starts from); on vLLM's CPU build,
    1 GiB of KV cache unless `VLLM_CPU_KVCACHE_SPACE` says otherwise. A run resumed from `checkpoint` uses the folder
    its first run wrote beside the checkpoint (the model in memory is not the warm start then)."""
    folder = os.path.join(training_args.output_dir, ENGINE_MODEL_DIR)
    saved = None
    if checkpoint:
        first_run = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), ENGINE_MODEL_DIR)
        saved = next((f for f in (first_run, folder) if os.path.exists(os.path.join(f, "config.json"))), None)
        if saved is None and training_args.beta != 0.0:
            raise ValueError(
                f"beta ({training_args.beta}): the KL term's reference is the warm-started model, which the run that "
                f"wrote {checkpoint} did not save beside it in {ENGINE_MODEL_DIR}/ (it ran with beta 0 and without a "
                "colocated vLLM engine). Resume with --beta 0, or start a new run with this beta."
            )
        if saved is None:
            folder = os.path.join(training_args.output_dir, RESUMED_ENGINE_MODEL_DIR)
    if saved is not None:
        folder = saved
    elif training_args.process_index == 0:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    model.config._name_or_path = model.name_or_path = folder
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; read by vLLM's CPU build only


def _silent(*args, **kwargs) -> None:
    """`print` on the processes other than the main one."""


def operand_range(operands: list[int]) -> str:
    """`3 to 7` for consecutive levels, else the levels listed."""
    if list(operands) == list(range(min(operands), max(operands) + 1)) and len(operands) > 1:
        return f"{min(operands)} to {max(operands)}"
    return ", ".join(map(str, operands))


def card_results(summary: dict, temperature: float) -> dict[str, str]:
    """The demo's results for the model card."""
    return {
        f"Held-out accuracy, greedy ({summary['heldout_problems']} problems)": (
            f"{summary['accuracy_before']:.3f} before RL -> {summary['accuracy_after']:.3f} after"
        ),
        "RL": f"{summary['steps']} steps, {summary['rollouts']} completions generated at temperature {temperature}",
        "Warm start": f"{summary['warm_start_steps']} supervised steps"
        + (
            f" ({summary['warm_start_lr_scheduler_type']} learning-rate decay)"
            if summary.get("warm_start_lr_scheduler_type", "constant") != "constant"
            else ""
        )
        + " on sums of "
        f"{operand_range(summary['operands'][: summary.get('warm_start_levels')])} "
        + (
            "single digits"
            if summary.get("operand_digits", 1) == 1
            else f"numbers of up to {summary['operand_digits']} digits"
        )
        + (
            f" ({summary['warm_start_upper_share']:.0%} of its problems from "
            f"{operand_range(summary['operands'][summary['warm_start_levels'] :])})"
            if summary.get("warm_start_upper_share")
            else ""
        ),
    }


def run_demo(
    training_args: CoBAConfig,
    demo_args: DemoArguments,
    reward_funcs: list | None = None,
    peft_config=None,
    callbacks: list | None = None,
) -> dict:
    """Run the demo; returns the summary it also writes to ``<output_dir>/demo_summary.json``.

    `reward_funcs` defaults to `[dapo_accuracy_reward]`; the first one defines success for the pass rates.
    `peft_config` (`--use_peft` and TRL's `lora_*` flags) trains an adapter on the warm-started model in RL.
    `callbacks` are added to the trainer's (a benchmark's own measurements during RL).
    """
    start = time.perf_counter()
    say = print if training_args.process_index == 0 else _silent
    if "OMP_NUM_THREADS" not in os.environ:
        # The model's matrices are tiny: extra threads only add overhead (2x slower on a busy 2-core machine), and
        # one thread makes `python` and `accelerate launch` (which sets OMP_NUM_THREADS=1) give identical runs.
        torch.set_num_threads(1)
    torch.manual_seed(training_args.seed)
    model, tokenizer = build_demo_model(demo_args, training_args.seed)
    train_problems, heldout, sft_problems = demo_problem_sets(
        demo_args.demo_num_train_prompts,
        demo_args.demo_num_heldout,
        WARM_START_PROBLEMS,
        seed=training_args.seed,
        operands_per_level=tuple(demo_args.demo_operands),
        digits=demo_args.demo_operand_digits,
        warm_start_levels=demo_args.demo_warm_start_levels,
        warm_start_upper_share=demo_args.demo_warm_start_upper_share,
    )
    max_new_tokens = training_args.max_completion_length
    checkpoint = training_args.resume_from_checkpoint
    if resumes_latest(checkpoint):
        checkpoint = latest_complete_checkpoint(training_args.output_dir, warn=say)
    if checkpoint:
        check_checkpoint(checkpoint)
        with open(os.path.join(checkpoint, BEFORE_RL_FILE)) as handle:
            before = json.load(handle)
        say(f"[resume] from {checkpoint}: no warm start; held-out accuracy before RL was {before['accuracy']:.3f}")
    else:
        say(
            f"[warm-start] {demo_args.demo_warm_start_steps} supervised steps on {len(sft_problems)} problems",
            flush=True,
        )
        demo_warm_start(
            model,
            tokenizer,
            sft_problems,
            demo_args,
            training_args.seed,
            log_every=50 if training_args.process_index == 0 else 0,
        )
        before = heldout_accuracy(model, tokenizer, heldout, max_new_tokens)
        say(f"[warm-start] held-out accuracy before RL: {before['accuracy']:.3f}", flush=True)
    # TRL loads these from model.name_or_path, which the built-in model has not: the warm start goes to a folder.
    colocated = training_args.use_vllm and training_args.vllm_mode == "colocate"
    if colocated or (training_args.beta != 0.0 and peft_config is None):
        engine_model_dir(model, tokenizer, training_args, checkpoint)
    rl_start = time.perf_counter()

    trainer = CoBAGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs or [dapo_accuracy_reward],
        args=training_args,
        train_dataset=to_prompt_dataset(train_problems),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[
            HeldoutAccuracyCallback(model, tokenizer, heldout, demo_args.demo_eval_steps, max_new_tokens),
            BeforeRLRecord(before),
            *(callbacks or []),
        ],
    )
    use_compact_console(trainer)
    trainer.train(resume_from_checkpoint=checkpoint)
    after = heldout_accuracy(model, tokenizer, heldout, max_new_tokens)
    if not trainer.is_world_process_zero():
        return {}
    output_dir = training_args.output_dir
    trainer.save_model(output_dir)
    trainer.create_model_card(dataset_name=DATASET_NAME)
    trainer.state.save_to_json(os.path.join(output_dir, "trainer_state.json"))
    summary = {
        "accuracy_before": before["accuracy"],
        "accuracy_after": after["accuracy"],
        "accuracy_before_by_level": {k: v for k, v in before.items() if k.startswith("level_")},
        "accuracy_after_by_level": {k: v for k, v in after.items() if k.startswith("level_")},
        "steps": trainer.state.global_step,
        "rollouts": trainer.rollouts_generated,  # completions generated, every phase and refill included
        "rows_trained": trainer.round_runner.spending.rows_trained,
        "rows_with_spread": trainer.round_runner.spending.rows_with_spread,
        "prompt_visits_skipped": trainer.round_runner.spending.prompts_skipped,
        "budget_allocator": training_args.budget_allocator,
        "operands": list(demo_args.demo_operands),
        "operand_digits": demo_args.demo_operand_digits,
        "warm_start_levels": demo_args.demo_warm_start_levels,  # None: every level
        "warm_start_upper_share": demo_args.demo_warm_start_upper_share,
        "warm_start_steps": demo_args.demo_warm_start_steps,
        "warm_start_lr_scheduler_type": demo_args.demo_warm_start_lr_scheduler_type,
        "train_prompts": len(train_problems),
        "heldout_problems": len(heldout),
        "rl_wall_time_s": round(time.perf_counter() - rl_start, 1),
        "wall_time_s": round(time.perf_counter() - start, 1),
    }
    with open(os.path.join(output_dir, SUMMARY_FILE), "w") as handle:
        json.dump(summary, handle, indent=2)
    results = card_results(summary, training_args.temperature)
    complete_model_card(trainer, DATASET_NAME, results, BASE_MODEL, device_map="cpu")
    plots = plot_run(output_dir)
    print(
        f"[demo] held-out accuracy {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} after "
        f"{summary['steps']} RL steps ({summary['rollouts']} completions generated) in {summary['wall_time_s']:.0f} s.\n"
        f"[demo] wrote {SUMMARY_FILE}, trainer_state.json and {len(plots)} plots to {output_dir}",
        flush=True,
    )
    return summary
