"""Colocated vLLM on its CPU build: CoBA against GRPO round time at equal rollouts on rounds whose groups differ, and
vLLM against transformers generation time for one demo round.

1. Rounds: the demo's model is warm-started as the demo does (`--warm_start_steps`, the demo's 300 by default), so that
   it solves some prompts and not others; each prompt carries a prior pass rate, the warm-started model's held-out
   greedy accuracy at the prompt's difficulty level, so CoBA's groups differ from the first round on (later rounds
   also use the pass-rate history). `CoBAGRPOTrainer` (CoBA allocator) and TRL's `GRPOTrainer`, both with
   `use_vllm=True` (colocate), the demo's task, reward and batch (256 rollouts a round over all processes), are
   trained in interleaved pairs on one engine per process (built once; each trainer pushes its weights first; TRL's
   trainer syncs through coba-trl's CPU route, since its own fails on the CPU build). Reports seconds per round (a
   round: generation, scoring, and its `steps_per_generation` optimizer steps), the ratio CoBA / GRPO, and each CoBA
   round's group sizes (min / mean / max and standard deviation, from the allocation log).
2. Generation (one process only): the 256 completions of one demo round (32 prompts x 8, up to 12 tokens,
   temperature 1) from the vLLM engine and from transformers' `generate` on the same model, interleaved; ratio
   transformers / vLLM.

Prints the machine, the vLLM version and every pair. `--num_processes 2` warm-starts the model here, then runs the
rounds on 2 processes (torchrun, gloo), one engine each; process 0 prints.

    python benchmarks/vllm_round.py [--pairs 3] [--rounds 4] [--num_processes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PRIORS_FILE = "priors.json"


def prepare(model_dir: str, warm_start_steps: int, train_prompts: int) -> None:
    """The demo's model after its warm start, in `model_dir`, with each training prompt's prior pass rate."""
    import torch

    from coba_trl.demo.accuracy import heldout_accuracy
    from coba_trl.demo.config import DEMO_TRAINING_ARGS, DemoArguments
    from coba_trl.demo.model import build_demo_model
    from coba_trl.demo.run import WARM_START_PROBLEMS
    from coba_trl.demo.task import demo_problem_sets
    from coba_trl.demo.warm_start import warm_start

    torch.set_num_threads(1)  # as the demo runs
    torch.manual_seed(0)
    model, tokenizer = build_demo_model(DemoArguments(), seed=0)
    train, heldout, sft = demo_problem_sets(train_prompts, 300, WARM_START_PROBLEMS, seed=0)
    warm_start(model, tokenizer, sft, steps=warm_start_steps, seed=0, log_every=0)
    accuracy = heldout_accuracy(model, tokenizer, heldout, DEMO_TRAINING_ARGS["max_completion_length"])
    print(f"warm start: {warm_start_steps} steps; held-out greedy accuracy {accuracy}", flush=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    with open(os.path.join(model_dir, PRIORS_FILE), "w") as handle:
        json.dump([accuracy[f"level_{problem.level}"] for problem in train], handle)


def spread(group_sizes: list[int]) -> str:
    """min/mean/max (std) of one round's group sizes."""
    return (
        f"{min(group_sizes)}/{statistics.mean(group_sizes):.1f}/{max(group_sizes)} "
        f"({statistics.pstdev(group_sizes):.1f})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4, help="Generation rounds per training run.")
    parser.add_argument("--warm_start_steps", type=int, default=300, help="The demo's warm start (its default).")
    parser.add_argument(
        "--train_prompts", type=int, default=64, help="Distinct prompts (32 a round: later rounds revisit them)."
    )
    parser.add_argument("--num_processes", type=int, default=1, help="Processes to run the rounds on (torchrun).")
    parser.add_argument("--model_dir", help="A folder `prepare` wrote (then no warm start): how processes get it.")
    args = parser.parse_args(argv)
    if args.model_dir is None:
        args.model_dir = os.path.join(tempfile.mkdtemp(prefix="vllm-round-"), "demo-model")
        prepare(args.model_dir, args.warm_start_steps, args.train_prompts)
        if args.num_processes > 1:
            launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
            flags = [*(sys.argv[1:] if argv is None else argv), "--model_dir", args.model_dir]
            subprocess.run([*launch, str(args.num_processes), os.path.abspath(__file__), *flags], check=True)
            return
    measure(args)


def measure(args: argparse.Namespace) -> None:
    import torch
    import trl.generation.vllm_generation as vllm_generation
    import vllm
    from machine import machine_line
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from coba_trl import CoBAConfig, CoBAGRPOTrainer
    from coba_trl.demo.config import DEMO_TRAINING_ARGS
    from coba_trl.demo.run import WARM_START_PROBLEMS
    from coba_trl.demo.task import demo_problem_sets, to_prompt_dataset
    from coba_trl.generation.vllm_backend import built_by_trl
    from coba_trl.rewards import dapo_accuracy_reward
    from coba_trl.rounds.log import read_rounds

    torch.set_num_threads(1)  # as the demo runs
    rank = int(os.environ.get("RANK", "0"))
    say = print if rank == 0 else lambda *_, **__: None
    say(machine_line())
    say(f"vLLM {vllm.__version__} (CPU build), colocated, {args.num_processes} process(es), one engine each")
    model_dir, scratch = args.model_dir, os.path.dirname(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with open(os.path.join(model_dir, PRIORS_FILE)) as handle:
        priors = json.load(handle)
    train, _, _ = demo_problem_sets(args.train_prompts, 300, WARM_START_PROBLEMS, seed=0)
    dataset = to_prompt_dataset(train).add_column("prior", priors)
    engines, build = {}, vllm_generation.LLM

    def shared_llm(**kwargs):
        if kwargs["model"] not in engines:
            engines[kwargs["model"]] = build(**kwargs)
        return engines[kwargs["model"]]

    vllm_generation.LLM = shared_llm

    demo = {name: value for name, value in DEMO_TRAINING_ARGS.items() if name != "output_dir"}
    grpo_fields = {name: value for name, value in demo.items() if hasattr(GRPOConfig, name)}
    coba_fields = {name: value for name, value in demo.items() if name not in grpo_fields}
    common = dict(
        grpo_fields,
        per_device_train_batch_size=DEMO_TRAINING_ARGS["per_device_train_batch_size"] // args.num_processes,
        max_steps=args.rounds * DEMO_TRAINING_ARGS["steps_per_generation"],
        use_vllm=True,
        vllm_mode="colocate",
        disable_tqdm=True,
        logging_steps=1,
    )
    spreads = []  # per measured CoBA run, each round's group sizes

    def round_seconds(arm: str) -> float:
        output_dir = os.path.join(scratch, arm)
        if arm == "coba":
            args_ = CoBAConfig(output_dir=output_dir, prior_pass_rate_column="prior", **common, **coba_fields)
            trainer = CoBAGRPOTrainer(
                model_dir, dapo_accuracy_reward, args=args_, train_dataset=dataset, processing_class=tokenizer
            )
        else:  # TRL's trainer, with coba-trl's weight sync into vLLM's CPU build (TRL's own fails there)
            args_ = GRPOConfig(output_dir=output_dir, **common)
            with built_by_trl():
                trainer = GRPOTrainer(
                    model_dir, dapo_accuracy_reward, args=args_, train_dataset=dataset, processing_class=tokenizer
                )
        start = time.perf_counter()
        trainer.train()
        seconds = (time.perf_counter() - start) / args.rounds
        if arm == "coba" and rank == 0:
            spreads.append([record["group_sizes"] for record in read_rounds(output_dir)])
        return seconds

    round_seconds("grpo")  # builds the engine and warms both paths
    round_seconds("coba")
    spreads.clear()
    times = {"coba": [], "grpo": []}
    for pair in range(args.pairs):
        order = ("coba", "grpo") if pair % 2 == 0 else ("grpo", "coba")
        line = []
        for arm in order:
            times[arm].append(round_seconds(arm))
            line.append(f"{arm} {times[arm][-1]:.2f} s/round")
        say(f"rounds, pair {pair + 1}: " + "; ".join(line))
        if rank == 0:
            say("  CoBA's group sizes per round, min/mean/max (std): " + ", ".join(map(spread, spreads[-1])))
    coba, grpo = statistics.median(times["coba"]), statistics.median(times["grpo"])
    rollouts = common["per_device_train_batch_size"] * args.num_processes * DEMO_TRAINING_ARGS["steps_per_generation"]
    say(
        f"median seconds per round ({rollouts} rollouts): CoBA {coba:.2f}, GRPO {grpo:.2f}; "
        f"ratio CoBA / GRPO {coba / grpo:.2f}"
    )
    if rank == 0:
        stds = [statistics.pstdev(sizes) for run in spreads for sizes in run]
        say(
            f"CoBA's group-size std over the measured rounds: median {statistics.median(stds):.1f}, "
            f"min {min(stds):.1f}, max {max(stds):.1f} (GRPO: 0)"
        )
    if args.num_processes > 1:
        from coba_trl.distributed import leave_multiprocess_cpu_run

        leave_multiprocess_cpu_run()  # a gloo teardown bug: docs/training.md, "Teardown"
    compare_generation(engines[model_dir], model_dir, tokenizer, dataset, args.pairs)


def compare_generation(engine, model_dir: str, tokenizer, dataset, pairs: int) -> None:
    """Part 2 of the module docstring: one demo round's 256 completions, vLLM against transformers."""
    import torch
    import vllm
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [
        tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
        for row in dataset.select(range(32))
    ]
    rows = [ids for ids in prompts for _ in range(8)]
    width = max(map(len, rows))
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(ids)) + list(ids) for ids in rows])
    attention = (input_ids != tokenizer.pad_token_id).long()
    params = vllm.SamplingParams(n=1, max_tokens=12, temperature=1.0)

    def vllm_seconds() -> float:
        start = time.perf_counter()
        engine.generate([{"prompt_token_ids": list(ids)} for ids in rows], params, use_tqdm=False)
        return time.perf_counter() - start

    def transformers_seconds() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                do_sample=True,
                max_new_tokens=12,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        return time.perf_counter() - start

    vllm_seconds(), transformers_seconds()
    generation = {"vllm": [], "transformers": []}
    for pair in range(pairs):
        for name, measure in (("vllm", vllm_seconds), ("transformers", transformers_seconds))[:: 1 - 2 * (pair % 2)]:
            generation[name].append(measure())
        print(
            f"generation, pair {pair + 1}: vLLM {generation['vllm'][-1]:.2f} s, "
            f"transformers {generation['transformers'][-1]:.2f} s"
        )
    fast, slow = statistics.median(generation["vllm"]), statistics.median(generation["transformers"])
    print(
        f"median seconds for one demo round's 256 completions: vLLM {fast:.2f}, transformers {slow:.2f}; "
        f"ratio transformers / vLLM {slow / fast:.2f}"
    )


if __name__ == "__main__":
    main()
