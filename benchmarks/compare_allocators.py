"""CoBA-RL vs Knapsack-RL vs GRPO at an equal rollout budget on the offline CPU arithmetic task (docs/results.md).

    python benchmarks/compare_allocators.py                 # warm start once, every arm x seed, then docs
    python benchmarks/compare_allocators.py --report_only   # regenerate docs/results tables and plots from raw JSON
    python benchmarks/compare_allocators.py --quick         # smoke run (CI): tiny sizes, a few steps, no docs

Every arm starts from the same warm-started checkpoint, sees the same prompts in the same order for a given seed and
spends the same rollouts per generation round (except `grpo_2x`, GRPO with twice the rollouts per round for the same
number of rounds: the paper's data-efficiency comparison, docs/algorithm.md, "Published results"). The protocol's numbers are fixed
here, independent of the demo's defaults (`coba_trl.demo.config`). Raw per-run JSON goes to `outputs/compare/`; the
report step (`compare_report.py`) aggregates it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the same digits on every x86-64 CPU with AVX2 (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The protocol (docs/results.md, "Protocol"): fixed before any arm ran.
PROTOCOL: dict = {
    "hidden_size": 64,
    "num_layers": 2,
    "num_train_prompts": 256,
    "num_heldout": 500,
    "num_warm_start_problems": 20_000,
    "data_seed": 0,
    "warm_start_steps": 300,
    "warm_start_learning_rate": 3e-3,
    "warm_start_seed": 0,
    "prompts_per_round": 32,
    "num_generations": 8,  # G: base budget 32 x 8 = 256 rollouts per round
    "min_generations": 2,
    "max_generations": 32,
    "steps_per_generation": 2,
    "max_steps": 80,  # optimizer steps = 40 generation rounds, set from a timing-only pilot
    "learning_rate": 3e-4,
    "lr_scheduler_type": "cosine",
    "max_completion_length": 12,
    "temperature": 1.0,
    "eval_steps": 8,
    "conversion_samples": 16,  # sampled completions per training prompt, before and after RL
    "seeds": [0, 1, 2],
}

ARMS: dict[str, dict] = {
    "grpo": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "coba": {"budget_allocator": "coba"},
    "coba_paper": {
        "budget_allocator": "coba",
        "coba_hard_threshold": 0.0,
        "coba_easy_threshold": 1.0,
        "coba_heap_fraction": 1.0,
    },
    "coba_explore_first": {"budget_allocator": "coba", "explore_first": True},
    "grpo_2x": {"budget_allocator": "uniform", "budget_multiplier": 2},
}

QUICK: dict = {
    "num_train_prompts": 16,
    "num_heldout": 20,
    "num_warm_start_problems": 200,
    "warm_start_steps": 3,
    "prompts_per_round": 4,
    "num_generations": 4,
    "max_generations": 8,
    "max_steps": 4,
    "eval_steps": 2,
    "conversion_samples": 2,
    "seeds": [0],
}

OUTPUT_DIR = "outputs/compare"


@dataclass(frozen=True)
class Study:
    """One pre-registered comparison: its protocol, arms, smoke-test sizes, raw-output folder and report section.

    `name` keys the generated section of docs/results.md (`<!-- {name}:begin -->`) and prefixes its plots.
    """

    name: str
    protocol: dict
    arms: dict
    quick: dict
    output_dir: str
    title: str
    # Extra report sections a study asks for (compare_report.EXTRA_SECTIONS), e.g. ("wall_time", "phases").
    report_extras: tuple = ()


STUDY = Study("results", PROTOCOL, ARMS, QUICK, OUTPUT_DIR, "first study")


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


def warm_start_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "warm_start")


def run_path(output_dir: str, arm: str, seed: int) -> str:
    return os.path.join(output_dir, "runs", f"{arm}_seed{seed}.json")


def problem_sets(protocol: dict):
    """Training prompts, held-out problems and warm-start stream; `protocol["levels"]` keeps only those levels.

    A level subset is drawn from the demo's sets scaled up by 5 / len(levels) and filtered, so held-out and training
    questions stay disjoint and the kept levels stay evenly mixed.
    """
    from coba_trl.demo.task import DIFFICULTY_LEVELS, demo_problem_sets

    levels = protocol.get("levels")
    sizes = [protocol[key] for key in ("num_train_prompts", "num_heldout", "num_warm_start_problems")]
    if levels is None:
        return demo_problem_sets(*sizes, seed=protocol["data_seed"])
    scale = -(-len(DIFFICULTY_LEVELS) // len(levels))
    sets = demo_problem_sets(*(size * scale for size in sizes), seed=protocol["data_seed"])
    return tuple([p for p in problems if p.level in levels][:size] for problems, size in zip(sets, sizes, strict=True))


def sampled_pass_rates(model, tokenizer, problems, samples: int, max_new_tokens: int, seed: int = 1234) -> list:
    """Per-problem share of `samples` completions whose ``Answer:`` is right (conversion analysis).

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


def prepare_warm_start(protocol: dict, output_dir: str) -> dict:
    """Warm-start the tiny model once, save it and its before-RL measurements (reused when already there)."""
    import torch

    from coba_trl.demo.accuracy import heldout_accuracy
    from coba_trl.demo.warm_start import warm_start
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    directory = warm_start_dir(output_dir)
    info_path = os.path.join(directory, "before_rl.json")
    if os.path.exists(info_path):
        with open(info_path) as handle:
            return json.load(handle)
    start, cpu_start = time.perf_counter(), time.process_time()
    torch.manual_seed(protocol["warm_start_seed"])
    tokenizer = build_byte_tokenizer()
    model = build_tiny_qwen2(
        tokenizer,
        hidden_size=protocol["hidden_size"],
        num_hidden_layers=protocol["num_layers"],
        max_position_embeddings=128,
        seed=protocol["warm_start_seed"],
    )
    train, heldout, sft = problem_sets(protocol)
    warm_start(
        model,
        tokenizer,
        sft,
        steps=protocol["warm_start_steps"],
        learning_rate=protocol["warm_start_learning_rate"],
        seed=protocol["warm_start_seed"],
    )
    model.save_pretrained(directory)
    max_new = protocol["max_completion_length"]
    info = {
        "heldout": heldout_accuracy(model, tokenizer, heldout, max_new),
        "train_pass_rates": sampled_pass_rates(model, tokenizer, train, protocol["conversion_samples"], max_new),
        "train_greedy_correct": sampled_pass_rates(model, tokenizer, train, 0, max_new),
        "heldout_sampled": sampled_pass_rates(model, tokenizer, heldout, protocol["conversion_samples"], max_new),
        "train_levels": [p.level for p in train],
        "wall_time_s": round(time.perf_counter() - start, 1),
        "cpu_time_s": round(time.process_time() - cpu_start, 1),
        "machine": machine_record(),
    }
    with open(info_path, "w") as handle:
        json.dump(info, handle)
    return info


def explore_first_allocator(args):
    """CoBA allocator with the capability mapping reversed: alpha_t, beta_t from 1 - F_bar (explore-first ablation)."""
    from coba_trl.allocation import CapabilityTracker, beta_parameters

    class ReversedCapability(CapabilityTracker):
        @property
        def alpha_beta(self) -> tuple[float, float]:
            if not self._history:
                return 2.0, self.kappa - 2.0
            return beta_parameters(1.0 - self.smoothed, self.kappa, self.gamma)

    allocator = args.build_allocator()
    allocator.tracker = ReversedCapability(kappa=args.coba_kappa, window=args.coba_window, gamma=args.coba_gamma)
    return allocator


def training_args(protocol: dict, arms: dict, arm: str, seed: int, output_dir: str):
    from coba_trl import CoBAConfig

    settings = dict(arms[arm])
    multiplier = settings.pop("budget_multiplier", 1)
    settings.pop("explore_first", None)
    generations = protocol["num_generations"] * multiplier
    return CoBAConfig(
        output_dir=os.path.join(output_dir, "trainer", f"{arm}_seed{seed}"),
        num_generations=generations,
        min_generations=settings.pop("min_generations", protocol["min_generations"]),
        max_generations=max(protocol["max_generations"], generations),
        per_device_train_batch_size=protocol["prompts_per_round"] * generations // protocol["steps_per_generation"],
        steps_per_generation=protocol["steps_per_generation"],
        max_steps=protocol["max_steps"],
        learning_rate=protocol["learning_rate"],
        warmup_steps=0,
        lr_scheduler_type=protocol["lr_scheduler_type"],
        max_completion_length=protocol["max_completion_length"],
        temperature=protocol["temperature"],
        loss_type="dapo",
        beta=0.0,
        prompt_id_column="prompt_id",
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        **settings,
    )


PILOT_SERIES = ("coba/failure_rate", "coba/alpha", "frac_reward_zero_std", "reward")


def pilot_path(output_dir: str, arm: str, seed: int) -> str:
    return os.path.join(output_dir, "pilots", f"{arm}_seed{seed}.json")


def run_arm(protocol: dict, arms: dict, arm: str, seed: int, output_dir: str, pilot: bool = False) -> dict:
    """One RL run from the warm-start checkpoint; writes and returns its raw result.

    A pilot run does all the same work (so its wall time counts the evaluations) but keeps only its wall time and the
    per-round training series `PILOT_SERIES`: no accuracy is stored or printed.
    """
    import torch
    from transformers import Qwen2ForCausalLM
    from transformers.trainer_callback import PrinterCallback

    from coba_trl.demo.accuracy import heldout_accuracy
    from coba_trl.demo.run import generation_rounds
    from coba_trl.demo.task import to_prompt_dataset
    from coba_trl.rewards import dapo_accuracy_reward
    from coba_trl.tiny import build_byte_tokenizer
    from coba_trl.trainer import CoBAGRPOTrainer

    class RecordingTrainer(CoBAGRPOTrainer):
        """Keeps every round's prompt ids, group sizes and historical pass rates (budget by difficulty over time).

        It also times each generation pass (`generation_times`: [global step, seconds of each phase]); timing only.
        """

        rounds: list
        generation_times: list

        def _generate_phase(self, *args, **kwargs):
            phase_start = time.perf_counter()
            phase = super()._generate_phase(*args, **kwargs)
            seconds = round(time.perf_counter() - phase_start, 4)
            if self.generation_times and self.generation_times[-1][0] == self.state.global_step:
                self.generation_times[-1][1].append(seconds)  # the second phase of the same round
            else:
                self.generation_times.append([self.state.global_step, [seconds]])
            return phase

        def _plan_round(self, *args, **kwargs):
            plan = super()._plan_round(*args, **kwargs)
            # The p_i this round was allocated from, and the plain pooled rate (they differ with a prior strength).
            successes, rollouts = self.pass_rate_history.counts(plan.prompt_ids)
            pooled = [None if n == 0 else s / n for s, n in zip(successes.tolist(), rollouts.tolist(), strict=True)]
            rates = [None if rate != rate else float(rate) for rate in plan.pass_rates]
            self.rounds.append(
                [self.state.global_step, list(plan.prompt_ids), plan.group_sizes.tolist(), rates, pooled]
            )
            return plan

    start, cpu_start = time.perf_counter(), time.process_time()
    torch.manual_seed(seed)
    train, heldout, _ = problem_sets(protocol)
    tokenizer = build_byte_tokenizer()
    model = Qwen2ForCausalLM.from_pretrained(warm_start_dir(output_dir))
    args = training_args(protocol, arms, arm, seed, output_dir)
    max_new = protocol["max_completion_length"]
    training_clock, timed_heldout_accuracy = _timing_callbacks()
    clock = training_clock()
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=dapo_accuracy_reward,
        args=args,
        train_dataset=to_prompt_dataset(train),
        processing_class=tokenizer,
        callbacks=[clock, timed_heldout_accuracy(clock, model, tokenizer, heldout, protocol["eval_steps"], max_new)],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.rounds = []
    trainer.generation_times = []
    if arms[arm].get("explore_first"):
        trainer.allocator = explore_first_allocator(args)
    machine = machine_record()
    trainer.train()
    history = trainer.state.log_history
    if pilot:
        rounds = [record for record in history if "budget/mean" in record]
        result = {"arm": arm, "seed": seed, "machine": machine, "wall_time_s": round(time.perf_counter() - start, 1)}
        result["cpu_time_s"] = round(time.process_time() - cpu_start, 1)
        result["train_time_s"] = clock.steps[-1][1] if clock.steps else None  # without the held-out evaluations
        result["generation_time_s"] = round(sum(sum(phases) for _, phases in trainer.generation_times), 1)
        result.update({key: [record.get(key) for record in rounds] for key in PILOT_SERIES})
        return _write(pilot_path(output_dir, arm, seed), result)
    final = heldout_accuracy(model, tokenizer, heldout, max_new)
    accuracy_curve = [
        [
            record["step"],
            generation_rounds(args, record["step"]) * args.generation_batch_size,
            record["heldout_accuracy"],
        ]
        for record in history
        if "heldout_accuracy" in record
    ]
    result = {
        "arm": arm,
        "seed": seed,
        "rollouts_per_round": args.generation_batch_size,
        "rollouts": generation_rounds(args, trainer.state.global_step) * args.generation_batch_size,
        "final_accuracy": final["accuracy"],
        "final_by_level": {k: v for k, v in final.items() if k.startswith("level_")},
        "accuracy_curve": accuracy_curve,
        "log_history": [r for r in history if "loss" in r],
        "rounds": trainer.rounds,
        # [step, seconds in train() without the held-out evaluations, their seconds so far] after every step
        "step_times": clock.steps,
        "generation_times": trainer.generation_times,  # [step, seconds of each generation phase] per round
        "train_pass_rates_after": sampled_pass_rates(model, tokenizer, train, protocol["conversion_samples"], max_new),
        "train_greedy_correct_after": sampled_pass_rates(model, tokenizer, train, 0, max_new),
        "heldout_sampled_after": sampled_pass_rates(
            model, tokenizer, heldout, protocol["conversion_samples"], max_new
        ),
        "machine": machine,
        "wall_time_s": round(time.perf_counter() - start, 1),
        "cpu_time_s": round(time.process_time() - cpu_start, 1),  # this process only (not the reward workers)
    }
    return _write(run_path(output_dir, arm, seed), result)


def _timing_callbacks():
    """A clock of `trainer.train()` that leaves out the held-out evaluations, and the evaluation callback it times.

    Classes built on demand, so importing this module does not import transformers.
    """
    from transformers import TrainerCallback

    from coba_trl.demo.run import HeldoutAccuracyCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.start, self.eval_seconds, self.steps = None, 0.0, []

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()  # fires before the step-0 evaluation (this callback comes first)

        def on_step_end(self, args, state, control, **kwargs):
            # The evaluation of this step comes later (at its log), so it is not in eval_seconds yet.
            elapsed = time.perf_counter() - self.start - self.eval_seconds
            self.steps.append([state.global_step, round(elapsed, 3), round(self.eval_seconds, 3)])

    class Timed(HeldoutAccuracyCallback):
        def __init__(self, clock, *args):
            super().__init__(*args)
            self.clock = clock

        def _accuracy(self) -> float:
            eval_start = time.perf_counter()
            try:
                return super()._accuracy()
            finally:
                self.clock.eval_seconds += time.perf_counter() - eval_start

    return Clock, Timed


def _write(path: str, result: dict) -> dict:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(result, handle)
    os.replace(path + ".tmp", path)
    return result


def _worker(job: tuple) -> str:
    protocol, arms, arm, seed, output_dir, pilot = job
    import torch

    torch.set_num_threads(1)
    if pilot:
        result = run_arm(protocol, arms, arm, seed, output_dir, pilot=True)
        failure = [f"{value:.2f}" for value in result["coba/failure_rate"] if value is not None]
        print(
            f"[pilot] {arm} seed {seed}: {result['wall_time_s']} s wall, {result['cpu_time_s']} s CPU, "
            f"{result.get('train_time_s')} s training without evaluations, {result.get('generation_time_s')} s "
            "generating; "
            f"F_t by round {' '.join(failure)}",
            flush=True,
        )
    elif not os.path.exists(run_path(output_dir, arm, seed)):
        result = run_arm(protocol, arms, arm, seed, output_dir)
        print(f"[compare] {arm} seed {seed}: accuracy {result['final_accuracy']:.3f} in {result['wall_time_s']} s")
    return f"{arm}_seed{seed}"


def main(argv: list[str] | None = None, study: Study = STUDY) -> None:
    parser = argparse.ArgumentParser(description=f"{study.title}: " + __doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Tiny sizes and a few steps (smoke test, no docs).")
    parser.add_argument("--output_dir", default=None, help=f"Raw results folder (default {study.output_dir}).")
    parser.add_argument("--arms", nargs="+", default=list(study.arms), choices=list(study.arms))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="Override the protocol's seeds.")
    parser.add_argument("--max_steps", type=int, default=None, help="Override max_steps (pilots only).")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=JSON", help="Override protocol entries (pilots only)."
    )
    parser.add_argument(
        "--pilot", action="store_true", help="Keep only wall time and training series (F_t...), no accuracy."
    )
    parser.add_argument("--workers", type=int, default=2, help="RL runs in parallel (one CPU thread each).")
    parser.add_argument("--report_only", action="store_true", help="Only aggregate the raw JSON into docs/.")
    parser.add_argument("--docs_dir", default="docs", help="Where the report writes its tables and plots.")
    options = parser.parse_args(argv)
    protocol = {**study.protocol, **(study.quick if options.quick else {})}
    if options.seeds is not None:
        protocol["seeds"] = options.seeds
    if options.max_steps is not None:
        protocol["max_steps"] = options.max_steps
    for item in options.set:
        key, value = item.split("=", 1)
        protocol[key] = json.loads(value)
    output_dir = options.output_dir or (study.output_dir + ("_quick" if options.quick else ""))
    if not options.report_only:
        os.makedirs(output_dir, exist_ok=True)
        if not options.pilot:
            with open(os.path.join(output_dir, "protocol.json"), "w") as handle:
                json.dump({"protocol": protocol, "arms": study.arms, "machine": machine_record()}, handle, indent=2)
        start = time.perf_counter()
        if protocol.get("warm_start_threads"):
            import torch

            torch.set_num_threads(protocol["warm_start_threads"])
        info = prepare_warm_start(protocol, output_dir)
        print(
            f"[compare] warm start: held-out greedy accuracy {info['heldout']['accuracy']:.3f}, mean sampled pass "
            f"rate of the training prompts {sum(info['train_pass_rates']) / len(info['train_pass_rates']):.3f}",
            flush=True,
        )
        # Seed by seed (an interrupted study leaves whole seeds), longest runs first within that order.
        jobs = [
            (protocol, study.arms, arm, seed, output_dir, options.pilot)
            for seed in protocol["seeds"]
            for arm in options.arms
        ]
        jobs.sort(key=lambda job: -study.arms[job[2]].get("budget_multiplier", 1))
        if options.workers > 1:
            # Not multiprocessing.Pool: its daemonic workers cannot start the reward's grading processes.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(options.workers, mp_context=context, max_tasks_per_child=1) as pool:
                for future in as_completed([pool.submit(_worker, job) for job in jobs]):
                    print(f"[compare] done {future.result()} at {time.perf_counter() - start:.0f} s", flush=True)
        else:
            for job in jobs:
                _worker(job)
        print(f"[compare] all runs done in {time.perf_counter() - start:.0f} s", flush=True)
    if (not options.quick and not options.pilot) or options.report_only:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from compare_report import write_report

        for path in write_report(output_dir, options.docs_dir, study.name, extras=study.report_extras):
            print(path)


if __name__ == "__main__":
    main()
