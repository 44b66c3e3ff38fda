# Copyright 2026 The coba-trl contributors. Licensed under the Apache License, Version 2.0.
"""Train a model with CoBA-RL (GRPO with capability-oriented rollout budgets) through TRL.

With no arguments this runs the offline CPU demo: a tiny Qwen2 model built locally, warm-started on arithmetic,
then trained with `CoBAGRPOTrainer` (a few minutes on two cores, no network). Otherwise every field of
`ScriptArguments`, `CoBAConfig` (all of TRL's `GRPOConfig` plus the CoBA fields), `ModelConfig` and `DemoArguments`
is a command-line flag, and `--config recipes/<name>.yaml` sets them from a file (flags override the file):

    python examples/train_qwen.py                                        # the CPU demo
    accelerate launch examples/train_qwen.py --config recipes/cpu_demo.yaml --max_steps 10
    accelerate launch --config_file recipes/accelerate/zero3_8gpu.yaml examples/train_qwen.py \
        --config recipes/qwen2.5-7b-instruct_coba.yaml
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser, get_peft_config, get_quantization_config

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.data import DAPO_HUB_ID, load_dapo_math
from coba_trl.demo.config import DEMO_TRAINING_ARGS, DemoArguments
from coba_trl.demo.run import run_demo
from coba_trl.demo.task import make_problems, to_prompt_dataset
from coba_trl.rewards import boxed_accuracy_reward, dapo_accuracy_reward

ARITHMETIC = "arithmetic"
REWARD_FUNCS = {"dapo_accuracy_reward": dapo_accuracy_reward, "boxed_accuracy_reward": boxed_accuracy_reward}


@dataclass
class ScriptArguments:
    """
    What to train on and how to score it.

    Parameters:
        dataset_name (`str`, *optional*, defaults to `"arithmetic"`):
            Training prompts: `"arithmetic"` (the built-in generated task), a DAPO-Math Hub id
            (`BytedTsinghua-SIA/DAPO-Math-17k`, `open-r1/DAPO-Math-17k-Processed`) or a local parquet / jsonl / json
            file in either DAPO schema.
        dataset_config (`str` or `None`, *optional*, defaults to `None`):
            Hub config, e.g. `all`, `en` or `cn` for `open-r1/DAPO-Math-17k-Processed`.
        dataset_train_split (`str`, *optional*, defaults to `"train"`):
            Split to train on.
        instruction (`str`, *optional*, defaults to `"answer"`):
            Answer format the prompt asks for: `answer` (DAPO's `Answer: ...` last line), `boxed` or `none`.
        deduplicate (`str`, *optional*, defaults to `"id"`):
            DAPO de-duplication key: `id` (`extra_info.index`, else problem text), `text` or `none`.
        max_train_samples (`int` or `None`, *optional*, defaults to `None`):
            Keep only the first this many prompts (quick experiments).
        reward_funcs (`list[str]`, *optional*, defaults to `["dapo_accuracy_reward"]`):
            Reward functions: `dapo_accuracy_reward`, `boxed_accuracy_reward` or a dotted import path
            (`my_pkg.rewards.my_reward`). The first one defines success for the pass rates unless
            `success_reward_func` says otherwise.
    """

    dataset_name: str = field(
        default=ARITHMETIC,
        metadata={
            "help": f"'{ARITHMETIC}' (built-in generated task), a DAPO-Math Hub id (e.g. {DAPO_HUB_ID}) or a local "
            "parquet/jsonl/json file in either DAPO schema."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub config, e.g. 'all', 'en' or 'cn'."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    instruction: str = field(
        default="answer",
        metadata={"help": "Answer format asked for in the prompt.", "choices": ["answer", "boxed", "none"]},
    )
    deduplicate: str = field(
        default="id",
        metadata={"help": "DAPO de-duplication key.", "choices": ["id", "text", "none"]},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N prompts."})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["dapo_accuracy_reward"],
        metadata={
            "help": "Reward functions: 'dapo_accuracy_reward', 'boxed_accuracy_reward' or dotted import paths. The "
            "first defines success for the pass rates unless success_reward_func is set."
        },
    )


def load_reward_funcs(names: list[str]) -> list:
    """Reward callables from registry names or dotted import paths."""
    funcs = []
    for name in names:
        if name in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[name])
        elif "." in name:
            module, attribute = name.rsplit(".", 1)
            sys.path.insert(0, os.getcwd())
            funcs.append(getattr(importlib.import_module(module), attribute))
        else:
            raise ValueError(
                f"reward_funcs: unknown {name!r}; use one of {list(REWARD_FUNCS)} or a dotted import path."
            )
    return funcs


def load_train_dataset(script_args: ScriptArguments, demo_args: DemoArguments, seed: int):
    if script_args.dataset_name == ARITHMETIC:
        dataset = to_prompt_dataset(make_problems(demo_args.demo_num_train_prompts, seed=seed))
    else:
        dataset = load_dapo_math(
            script_args.dataset_name,
            config=script_args.dataset_config,
            split=script_args.dataset_train_split,
            instruction=script_args.instruction,
            deduplicate=False if script_args.deduplicate == "none" else script_args.deduplicate,
        )
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return dataset


def train(script_args: ScriptArguments, training_args: CoBAConfig, model_args: ModelConfig, demo_args: DemoArguments):
    """Train `model_args.model_name_or_path` with `CoBAGRPOTrainer`, save it with a model card, push if asked."""
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    trainer = CoBAGRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=load_reward_funcs(script_args.reward_funcs),
        args=training_args,
        train_dataset=load_train_dataset(script_args, demo_args, training_args.seed),
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.create_model_card(dataset_name=script_args.dataset_name)
    trainer.accelerator.print(f"Model and model card saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
        trainer.accelerator.print(f"Pushed to https://huggingface.co/{trainer.hub_model_id}.")


def make_parser() -> TrlParser:
    return TrlParser((ScriptArguments, CoBAConfig, ModelConfig, DemoArguments))


def parse(argv: list[str]) -> tuple[ScriptArguments, CoBAConfig, ModelConfig, DemoArguments]:
    """Parse `argv` (`--config file.yaml` plus flags); an empty `argv` gives the CPU demo's settings."""
    parser = make_parser()
    if not argv:
        parser.set_defaults_with_config(**DEMO_TRAINING_ARGS)
    return parser.parse_args_and_config(args=argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(
            "coba-trl: no arguments given, running the offline CPU demo (tiny Qwen2 model, arithmetic task, "
            f"CoBA-RL; the settings of recipes/cpu_demo.yaml). Output: {DEMO_TRAINING_ARGS['output_dir']}.\n"
            "Pass --config recipes/<name>.yaml (and flags) to train a real model; --help lists every option.",
            flush=True,
        )
    script_args, training_args, model_args, demo_args = parse(argv)
    if model_args.model_name_or_path is None:
        if script_args.dataset_name != ARITHMETIC:
            raise ValueError(
                f"model_name_or_path is not set: the built-in tiny model only runs the '{ARITHMETIC}' demo task. "
                f"Pass --model_name_or_path (e.g. Qwen/Qwen2.5-7B-Instruct) to train on {script_args.dataset_name}."
            )
        run_demo(training_args, demo_args, load_reward_funcs(script_args.reward_funcs))
    else:
        train(script_args, training_args, model_args, demo_args)


if __name__ == "__main__":
    main()
