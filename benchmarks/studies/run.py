"""One unit of a study: the warm start of a warm-start seed, and one arm's RL run from it at one RL seed.

`runner.py` schedules these; each writes its raw result as JSON (`paths`). A pilot run does all the same work
(so its wall time counts the evaluations) but keeps only timing and the per-round training series `PILOT_SERIES`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time

PILOT_SERIES = (
    "coba/failure_rate",
    "coba/alpha",
    "frac_reward_zero_std",
    "reward",
    "coba/rollouts_generated",  # None in rounds (or code) that do not log them
    "coba/rows_with_spread",
    "coba/refill_bound_reached",
)


def machine_record() -> dict:
    """CPU model, core count, torch threads and load average: the same seed gives other digits on other CPUs."""
    import torch

    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line), "")
    except OSError:
        model = ""
    return {
        "cpu_model": model or platform.processor(),
        "nproc": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def provenance() -> dict:
    """The code's commit (and whether its tracked files differ from it) and the CPU numerics settings in force."""
    import coba_trl
    from coba_trl.numerics import numerics_setting

    package = os.path.dirname(os.path.abspath(coba_trl.__file__))

    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", package, *args], capture_output=True, text=True, check=False)
        return result.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "tracked_files_modified": bool(git("status", "--porcelain", "--untracked-files=no")),
        "coba_trl": package,
        "numerics": numerics_setting(),
    }


def warm_start_dir(output_dir: str, warm_seed: int, legacy: bool) -> str:
    """Checkpoint and before-RL record of one warm start (studies 1 and 2: the single `warm_start/`)."""
    return os.path.join(output_dir, "warm_start") if legacy else os.path.join(output_dir, "warm_start", str(warm_seed))


def run_name(arm: str, warm_seed: int, seed: int, legacy: bool) -> str:
    return f"{arm}_seed{seed}" if legacy else f"{arm}_warm{warm_seed}_seed{seed}"


def run_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    return os.path.join(output_dir, "runs", run_name(arm, warm_seed, seed, legacy) + ".json")


def pilot_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    return os.path.join(output_dir, "pilots", run_name(arm, warm_seed, seed, legacy) + ".json")


def problem_sets(protocol: dict):
    """Training prompts, held-out problems and warm-start stream; `protocol["operands"]` sets the digits summed at each
    level, `protocol["levels"]` keeps only those levels of the demo's.

    A level subset is drawn from the demo's sets scaled up by 5 / len(levels) and filtered, so held-out and training
    questions stay disjoint and the kept levels stay evenly mixed.
    """
    from coba_trl.demo.task import DIFFICULTY_LEVELS, demo_problem_sets

    levels = protocol.get("levels")
    sizes = [protocol[key] for key in ("num_train_prompts", "num_heldout", "num_warm_start_problems")]
    if levels is None:  # `protocol["operands"]`: the digits summed at each level (a regime's mix; the demo's default)
        operands = tuple(protocol.get("operands", DIFFICULTY_LEVELS))
        return demo_problem_sets(*sizes, seed=protocol["data_seed"], operands_per_level=operands)
    scale = -(-len(DIFFICULTY_LEVELS) // len(levels))
    sets = demo_problem_sets(*(size * scale for size in sizes), seed=protocol["data_seed"])
    return tuple([p for p in problems if p.level in levels][:size] for problems, size in zip(sets, sizes, strict=True))


def sampled_pass_rates(model, tokenizer, problems, samples: int, max_new_tokens: int, seed: int = 1234) -> list:
    """Per-problem share of `samples` completions whose ``Answer:`` is right (avg@samples, conversion analysis).

    `samples` completions at temperature 1.0, or one greedy completion when `samples` is 0.
    """
    import torch

    from coba_trl.demo.accuracy import extract_integer_answer

    model.eval()
    rates = []
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        for start in range(0, len(problems), 64):
            chunk = problems[start : start + 64]
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": p.question}], add_generation_prompt=True, tokenize=False
                )
                for p in chunk
            ]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if samples else {}
            output = model.generate(
                **batch, max_new_tokens=max_new_tokens, num_return_sequences=max(samples, 1), **sampling
            )
            decoded = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            for index, problem in enumerate(chunk):
                answers = decoded[index * max(samples, 1) : (index + 1) * max(samples, 1)]
                rates.append(sum(extract_integer_answer(a) == problem.answer for a in answers) / len(answers))
    model.train()
    return rates


def prepare_warm_start(protocol: dict, output_dir: str, warm_seed: int, legacy: bool, pilot: bool = False) -> dict:
    """Warm-start the tiny model once per warm-start seed, save it and its before-RL record (reused when there).

    The demo's warm start (`coba_trl.demo.run.run_demo`) with its seed replaced by `warm_seed`: the model's
    initialisation and the order of the warm-start batches. A pilot's record keeps no accuracy; a later study run
    from the same folder measures the saved checkpoint then.
    """
    import torch
    from transformers import Qwen2ForCausalLM

    from coba_trl.demo.accuracy import heldout_accuracy
    from coba_trl.demo.warm_start import warm_start
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    directory = warm_start_dir(output_dir, warm_seed, legacy)
    info_path = os.path.join(directory, "before_rl.json")
    if protocol.get("warm_start_threads"):
        torch.set_num_threads(protocol["warm_start_threads"])
    start, cpu_start = time.perf_counter(), time.process_time()
    train, heldout, sft = problem_sets(protocol)
    tokenizer = build_byte_tokenizer()
    if os.path.exists(os.path.join(directory, "model.safetensors")) and os.path.exists(info_path):
        with open(info_path) as handle:
            info = json.load(handle)
        if pilot or "heldout" in info:
            return info
        model = Qwen2ForCausalLM.from_pretrained(directory)  # a pilot's warm start: measure it now
    else:
        torch.manual_seed(warm_seed)
        model = build_tiny_qwen2(
            tokenizer,
            hidden_size=protocol["hidden_size"],
            num_hidden_layers=protocol["num_layers"],
            max_position_embeddings=128,
            seed=warm_seed,
        )
        warm_start(
            model,
            tokenizer,
            sft,
            steps=protocol["warm_start_steps"],
            learning_rate=protocol["warm_start_learning_rate"],
            seed=warm_seed,
            log_every=0,
        )
        model.save_pretrained(directory)
        info = {"warm_start_seed": warm_seed, "train_levels": [p.level for p in train]}
        info["wall_time_s"] = round(time.perf_counter() - start, 1)
        info["cpu_time_s"] = round(time.process_time() - cpu_start, 1)
        info["machine"] = machine_record()
    if not pilot:
        max_new, samples = protocol["max_completion_length"], protocol["conversion_samples"]
        info["heldout"] = heldout_accuracy(model, tokenizer, heldout, max_new)
        info["heldout_sampled"] = sampled_pass_rates(model, tokenizer, heldout, samples, max_new)
        if protocol.get("conversion", True):
            info["train_pass_rates"] = sampled_pass_rates(model, tokenizer, train, samples, max_new)
            info["train_greedy_correct"] = sampled_pass_rates(model, tokenizer, train, 0, max_new)
    return write_json(info_path, info)


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


def write_json(path: str, result: dict) -> dict:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(result, handle)
    os.replace(path + ".tmp", path)
    return result


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
    clock_class, timed_heldout_accuracy = timing_callbacks()
    clock = clock_class()
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=dapo_accuracy_reward,
        args=args,
        train_dataset=to_prompt_dataset(train),
        processing_class=tokenizer,
        callbacks=[clock, timed_heldout_accuracy(clock, model, tokenizer, heldout, protocol["eval_steps"], max_new)],
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
    return write_json(run_path(job["output_dir"], arm, seed, warm_seed, legacy), result)
