"""One arm's RL run of a study unit, from the unit's warm start at one RL seed.

`runner.py` schedules these; each writes its raw result as JSON (`paths.py`). A pilot run does all the same work
(so its wall time counts the evaluations) but keeps only timing and the per-round training series `PILOT_SERIES`.
"""

from __future__ import annotations

import os
import time

from studies.paths import pilot_path, rounds_log_path, run_name, run_path, warm_start_dir, write_gzip_copy, write_json
from studies.provenance import machine_record, provenance
from studies.task import problem_sets, sampled_pass_rates

PILOT_SERIES = (
    "coba/failure_rate",
    "coba/alpha",
    "frac_reward_zero_std",
    "reward",
    "coba/rollouts_generated",  # None in rounds (or code) that do not log them
    "coba/rows_with_spread",
    "coba/refill_bound_reached",
)


def training_args(protocol: dict, arms: dict, arm: str, seed: int, output_dir: str):
    """The arm's `CoBAConfig`: the protocol's schedule, the arm's settings, `protocol["trainer"]` on top."""
    from coba_trl import CoBAConfig
    from studies.arms import STUDY_ONLY_SETTINGS

    settings = {key: value for key, value in arms[arm].items() if key not in STUDY_ONLY_SETTINGS}
    generations = protocol["num_generations"] * arms[arm].get("budget_multiplier", 1)
    config = {
        "output_dir": output_dir,
        "num_generations": generations,
        "min_generations": protocol["min_generations"],
        "max_generations": max(protocol["max_generations"], generations),
        "per_device_train_batch_size": protocol["prompts_per_round"] * generations // protocol["steps_per_generation"],
        "steps_per_generation": protocol["steps_per_generation"],
        "max_steps": protocol["max_steps"],
        "learning_rate": protocol["learning_rate"],
        "warmup_steps": 0,
        "lr_scheduler_type": protocol["lr_scheduler_type"],
        "max_completion_length": protocol["max_completion_length"],
        "temperature": protocol["temperature"],
        "loss_type": "dapo",
        "beta": 0.0,
        "prompt_id_column": "prompt_id",
        "use_cpu": True,
        "bf16": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "seed": seed,
        **protocol.get("trainer", {}),
        **settings,
    }
    return CoBAConfig(**config)


PASS_RATE_BINS = ("unseen", "0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1)", "1")


def _pass_rate_bin(rate) -> str:
    if rate is None:
        return PASS_RATE_BINS[0]
    if rate in (0.0, 1.0):
        return PASS_RATE_BINS[1] if rate == 0.0 else PASS_RATE_BINS[6]
    return PASS_RATE_BINS[2 + min(int((rate - 1e-12) // 0.25), 3)]


def level_rounds(rounds: list, levels: list[int]) -> list[dict]:
    """Where each round's generated rollouts went: per level, and per bin of the pooled pass rate the prompt had
    before the round (`PASS_RATE_BINS`; every phase of the round counted, screening and refills included)."""
    records = []
    for step, prompt_ids, sizes, _, pooled in rounds:
        by_level, by_rate = {}, {}
        for prompt_id, size, rate in zip(prompt_ids, sizes, pooled, strict=True):
            level = str(levels[int(prompt_id)])
            by_level[level] = by_level.get(level, 0) + int(size)
            kind = _pass_rate_bin(rate)
            by_rate[kind] = by_rate.get(kind, 0) + int(size)
        records.append({"step": step, "by_level": dict(sorted(by_level.items())), "by_pass_rate": by_rate})
    return records


def run_arm(job: dict) -> dict:
    """One RL run from its unit's warm-start checkpoint; writes and returns its raw result.

    `job`: protocol, arms, arm, warm_seed, seed, output_dir (records), scratch_dir (checkpoints, trainer folder),
    legacy (studies 1 and 2's file names), record ("full" or "compact") and pilot.
    """
    import torch
    from transformers import Qwen2ForCausalLM
    from transformers.trainer_callback import PrinterCallback

    from coba_trl.demo.accuracy import heldout_accuracy
    from coba_trl.demo.run import generation_rounds
    from coba_trl.demo.task import to_prompt_dataset
    from coba_trl.rewards import dapo_accuracy_reward
    from coba_trl.rounds.log import ROUNDS_FILE
    from coba_trl.tiny import build_byte_tokenizer
    from studies.arms import study_allocator
    from studies.budget import GeneratedRolloutBudget, generated_rollout_budget
    from studies.records import RecordingTrainer, compact_rounds, timing_callbacks

    protocol, arm, warm_seed, seed, legacy = (job[key] for key in ("protocol", "arm", "warm_seed", "seed", "legacy"))
    name = run_name(arm, warm_seed, seed, legacy)
    start, cpu_start = time.perf_counter(), time.process_time()
    torch.manual_seed(seed)
    train, heldout, _ = problem_sets(protocol)
    tokenizer = build_byte_tokenizer()
    model = Qwen2ForCausalLM.from_pretrained(warm_start_dir(job["scratch_dir"], warm_seed, legacy))
    output_dir = os.path.join(job["scratch_dir"], "trainer", name)
    # Before this run's config: building another one (the budget's arm) resets accelerate's state under a trainer.
    budget = generated_rollout_budget(
        protocol, lambda other: training_args(protocol, job["arms"], other, seed, output_dir)
    )
    args = training_args(protocol, job["arms"], arm, seed, output_dir)
    max_new, samples = protocol["max_completion_length"], protocol["conversion_samples"]
    clock_class, timed_heldout_accuracy = timing_callbacks(protocol.get("curve_samples", 0))
    clock = clock_class()
    curve = timed_heldout_accuracy(clock, model, tokenizer, heldout, protocol["eval_steps"], max_new)
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=dapo_accuracy_reward,
        args=args,
        train_dataset=to_prompt_dataset(train),
        processing_class=tokenizer,
        callbacks=[clock, curve],
    )
    trainer.remove_callback(PrinterCallback)
    allocator = study_allocator(job["arms"][arm], args, warm_seed, seed)
    if allocator is not None:
        trainer.allocator = allocator
    stopper = None if budget is None else GeneratedRolloutBudget(budget, lambda: trainer.rollouts_generated)
    if stopper is not None:
        trainer.add_callback(stopper)
    machine = machine_record()
    trainer.train()
    history = trainer.state.log_history
    result = {"arm": arm, "seed": seed} if legacy else {"arm": arm, "warm_start_seed": warm_seed, "seed": seed}
    if job["pilot"]:
        rounds = [record for record in history if "budget/mean" in record]
        result.update(machine=machine, wall_time_s=round(time.perf_counter() - start, 1))
        result["cpu_time_s"] = round(time.process_time() - cpu_start, 1)
        result["train_time_s"] = clock.steps[-1][1] if clock.steps else None  # without the held-out evaluations
        result["optimizer_steps"] = trainer.state.global_step  # fewer than max_steps: stopped by the rollout budget
        result["generation_time_s"] = round(sum(sum(phases) for _, phases in trainer.generation_times), 1)
        result.update({key: [record.get(key) for record in rounds] for key in PILOT_SERIES})
        return write_json(pilot_path(job["output_dir"], arm, seed, warm_seed, legacy), result)
    final = heldout_accuracy(model, tokenizer, heldout, max_new)
    heldout_sampled = sampled_pass_rates(model, tokenizer, heldout, samples, max_new)
    result.update(
        rollouts_per_round=args.generation_batch_size,
        rollouts=generation_rounds(args, trainer.state.global_step) * args.generation_batch_size,
        final_accuracy=final["accuracy"],
        final_by_level={k: v for k, v in final.items() if k.startswith("level_")},
        accuracy_curve=[
            [r["step"], generation_rounds(args, r["step"]) * args.generation_batch_size, r["heldout_accuracy"]]
            for r in history
            if "heldout_accuracy" in r
        ],
    )
    if stopper is not None:  # rollouts generated, not rounds x rollouts per round: arms that refill or skip differ
        result.update(
            rollout_budget=budget,
            rollouts_generated=trainer.rollouts_generated,
            stopped_by_budget_at=stopper.stopped_at,
            generated_curve=stopper.curve,  # [optimizer step, completions generated so far] after every step
        )
    if job["record"] == "compact":
        result.update(
            optimizer_steps=trainer.state.global_step,
            tokens=int(trainer.state.num_input_tokens_seen),  # prompt + completion tokens of every rollout
            train_time_s=clock.steps[-1][1],  # seconds in train() without the held-out evaluations
            heldout_sampled_accuracy=sum(heldout_sampled) / len(heldout_sampled),
            rounds=compact_rounds(history, trainer.rounds, trainer.generation_times),
            settings={key: value for key, value in args.to_dict().items() if not key.endswith(("_dir", "_token"))},
            provenance=provenance(),
        )
        if protocol.get("curve_samples"):  # the curve is avg@k: per level too, and where the rollouts went
            result.update(
                curve_by_level=curve.by_level,  # one dict per entry of accuracy_curve: level -> avg@k
                step_seconds=[[step, seconds] for step, seconds, _ in clock.steps],  # without evaluations
                level_rounds=level_rounds(trainer.rounds, [p.level for p in train]),
            )
    else:
        result.update(
            log_history=[r for r in history if "loss" in r],
            rounds=trainer.rounds,
            # [step, seconds in train() without the held-out evaluations, their seconds so far] after every step
            step_times=clock.steps,
            generation_times=trainer.generation_times,  # [step, seconds of each generation phase] per round
            train_pass_rates_after=sampled_pass_rates(model, tokenizer, train, samples, max_new),
            train_greedy_correct_after=sampled_pass_rates(model, tokenizer, train, 0, max_new),
            heldout_sampled_after=heldout_sampled,
        )
    result.update(machine=machine, wall_time_s=round(time.perf_counter() - start, 1))
    result["cpu_time_s"] = round(time.process_time() - cpu_start, 1)  # this process only (not the reward workers)
    if protocol.get("keep_allocation_logs"):  # every group's prompt, size and successes, beside the raw result
        target = rounds_log_path(job["output_dir"], arm, seed, warm_seed, legacy)
        write_gzip_copy(os.path.join(output_dir, ROUNDS_FILE), target)
    return write_json(run_path(job["output_dir"], arm, seed, warm_seed, legacy), result)
