"""Colocated vLLM on its CPU build: CoBA against GRPO round time at equal rollouts, and vLLM against transformers
generation time for one demo round.

1. Rounds: `CoBAGRPOTrainer` (CoBA allocator) and TRL's `GRPOTrainer`, both with `use_vllm=True` (colocate) on the
   demo's model shape, task, reward and batch (256 rollouts a round), trained in interleaved pairs on one shared
   engine (built once; each trainer pushes its weights first; TRL's trainer syncs through coba-trl's CPU route, since
   its own fails on the CPU build). Reports seconds per round (a round: generation,
   scoring, and its `steps_per_generation` optimizer steps) and the ratio CoBA / GRPO.
2. Generation: the 256 completions of one demo round (32 prompts x 8, up to 12 tokens, temperature 1) from the vLLM
   engine and from transformers' `generate` on the same model, interleaved; ratio transformers / vLLM.

Prints the machine, the vLLM version and every pair.

    python benchmarks/vllm_round.py [--pairs 3] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4, help="Generation rounds per training run.")
    args = parser.parse_args(argv)

    import torch
    import trl.generation.vllm_generation as vllm_generation
    import vllm
    from machine import machine_line
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from coba_trl import CoBAConfig, CoBAGRPOTrainer
    from coba_trl.demo.config import DEMO_TRAINING_ARGS
    from coba_trl.demo.model import main as write_model
    from coba_trl.demo.task import make_problems, to_prompt_dataset
    from coba_trl.generation.vllm_backend import built_by_trl
    from coba_trl.rewards import dapo_accuracy_reward

    torch.set_num_threads(1)  # as the demo runs
    print(machine_line())
    print(f"vLLM {vllm.__version__} (CPU build), colocated")
    scratch = tempfile.mkdtemp(prefix="vllm-round-")
    model_dir = os.path.join(scratch, "demo-model")
    write_model([model_dir])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = to_prompt_dataset(make_problems(64, seed=0))
    engines, build = {}, vllm_generation.LLM
    vllm_generation.LLM = lambda **kwargs: engines.setdefault(kwargs["model"], build(**kwargs))

    demo = {name: value for name, value in DEMO_TRAINING_ARGS.items() if name != "output_dir"}
    grpo_fields = {name: value for name, value in demo.items() if hasattr(GRPOConfig, name)}
    coba_fields = {name: value for name, value in demo.items() if name not in grpo_fields}
    common = dict(
        grpo_fields,
        max_steps=args.rounds * DEMO_TRAINING_ARGS["steps_per_generation"],
        use_vllm=True,
        vllm_mode="colocate",
        disable_tqdm=True,
        logging_steps=1,
    )

    def round_seconds(arm: str) -> float:
        output_dir = os.path.join(scratch, arm)
        if arm == "coba":
            args_ = CoBAConfig(output_dir=output_dir, **common, **coba_fields)
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
        return (time.perf_counter() - start) / args.rounds

    round_seconds("grpo")  # builds the engine and warms both paths
    round_seconds("coba")
    times = {"coba": [], "grpo": []}
    for pair in range(args.pairs):
        order = ("coba", "grpo") if pair % 2 == 0 else ("grpo", "coba")
        line = []
        for arm in order:
            times[arm].append(round_seconds(arm))
            line.append(f"{arm} {times[arm][-1]:.2f} s/round")
        print(f"rounds, pair {pair + 1}: " + "; ".join(line))
    coba, grpo = statistics.median(times["coba"]), statistics.median(times["grpo"])
    print(
        f"median seconds per round (256 rollouts): CoBA {coba:.2f}, GRPO {grpo:.2f}; ratio CoBA / GRPO {coba / grpo:.2f}"
    )

    engine = engines[model_dir]
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
    for pair in range(args.pairs):
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
