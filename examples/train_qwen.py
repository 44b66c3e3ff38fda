# Copyright 2026 The coba-trl contributors. Licensed under the Apache License, Version 2.0.
"""Train a model with CoBA-RL (GRPO with capability-oriented rollout budgets) through TRL's GRPOTrainer.

Without --model_name_or_path this runs the offline CPU demo, and every flag adjusts it: a tiny Qwen2 model built
locally is warm-started on sums of 3 to 7 single digits, then trained with CoBAGRPOTrainer and the DAPO accuracy
reward (about 2 minutes of CPU time, no network). The defaults below are the demo's (recipes/cpu_demo.yaml).
The demo writes to outputs/cpu_demo; with flags and no --output_dir, to a folder named after the flags
(outputs/cpu_demo-budget_allocator_knapsack-max_steps_40 below; flags on a recipe: after the recipe's output_dir).
It never replaces a finished run's results unless --overwrite_output_dir is given. --save_steps N saves a checkpoint every N steps, and --resume_from_checkpoint
continues from one (no second warm start; `true`: the latest complete one in the output folder). With
--model_name_or_path (a Hub id or a local directory) the defaults are TRL's GRPOConfig defaults (bf16, output_dir
trainer_output, ...), as in any TRL script.

Every field of ScriptArguments, CoBAConfig (TRL's GRPOConfig plus the CoBA fields), ModelConfig and DemoArguments
is a flag; --config FILE.yaml sets any of them from a file, and flags override the file.

examples:
  python examples/train_qwen.py --budget_allocator knapsack --max_steps 40
  python examples/train_qwen.py --config recipes/cpu_demo.yaml --max_steps 20 --output_dir outputs/demo_20
  accelerate launch --config_file recipes/accelerate/zero3_8gpu.yaml examples/train_qwen.py \\
      --config recipes/qwen2.5-7b-instruct_coba.yaml
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import os
import sys
import textwrap
import warnings
from dataclasses import dataclass, field

from coba_trl.cli import (
    check_checkpoint_path,
    check_command_line,
    check_model_before_import,
    check_names_before_import,
    config_path,
    fail,
    requested_model,
    settings_from_config,
)
from coba_trl.numerics import pin_cpu_numerics

# The parser's dataclasses (`make_parser`), read from source by `check_names_before_import`.
DATACLASSES = [
    (__name__, "ScriptArguments"),
    ("coba_trl.config", "CoBAConfig"),
    ("trl", "ModelConfig"),
    ("coba_trl.demo.config", "DemoArguments"),
]


if __name__ == "__main__":
    check_names_before_import(sys.argv[1:], DATACLASSES)  # a misspelt flag: refused before torch is imported
    check_model_before_import(sys.argv[1:])  # so is a model path that does not exist
    if requested_model(sys.argv[1:]) is None:  # no model: the CPU demo
        pin_cpu_numerics()  # the CPU demo: torch's CPU code paths pinned (docs/numerics.md)

from trl import ModelConfig, TrlParser, get_peft_config, get_quantization_config  # noqa: E402

from coba_trl import CoBAConfig, CoBAGRPOTrainer  # noqa: E402
from coba_trl.checkpoint import latest_complete_checkpoint  # noqa: E402
from coba_trl.config import coba_field_names  # noqa: E402
from coba_trl.data import DAPO_HUB_ID, load_dapo_math  # noqa: E402
from coba_trl.data.sources import check_model_source  # noqa: E402
from coba_trl.demo.config import DEMO_MODEL_ARGS, DEMO_TRAINING_ARGS, DemoArguments  # noqa: E402
from coba_trl.demo.flags import (  # noqa: E402
    check_max_steps,
    check_output_dir,
    check_resume,
    flagged_output_dir,
    resumes_latest,
)
from coba_trl.demo.run import run_demo  # noqa: E402
from coba_trl.demo.task import make_problems, to_prompt_dataset  # noqa: E402
from coba_trl.distributed import leave_multiprocess_cpu_run  # noqa: E402
from coba_trl.generation.vllm_backend import check_vllm_installed  # noqa: E402
from coba_trl.rewards import boxed_accuracy_reward, dapo_accuracy_reward  # noqa: E402
from coba_trl.validation import check_construction, check_hub_access  # noqa: E402
from coba_trl.validation.resumed import check_resumed_settings  # noqa: E402

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


def load_reward_func(name: str):
    """The reward callable a `--reward_funcs` entry names: a packaged reward or a dotted import path; a `ValueError`
    naming the entry and the fix when there is none."""
    if name in REWARD_FUNCS:
        return REWARD_FUNCS[name]
    choices = f"one of {', '.join(REWARD_FUNCS)} or a dotted import path to a function (my_pkg.rewards.my_reward)"
    if "." not in name:
        raise ValueError(f"reward_funcs: {name!r} is not a known reward function; pass {choices}.")
    module_name, attribute = name.rsplit(".", 1)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"reward_funcs: {name!r} cannot be imported ({error}); pass {choices} of a module importable from the "
            "current folder."
        ) from error
    func = getattr(module, attribute, None)
    if not callable(func):
        what = "has no" if func is None else "holds no callable"
        raise ValueError(f"reward_funcs: {name!r}: module {module_name!r} {what} {attribute!r}; pass {choices}.")
    return func


def load_reward_funcs(names: list[str]) -> list:
    """The reward callables of `--reward_funcs` (`--success_reward_func` is checked against them with the dataset)."""
    return [load_reward_func(name) for name in names]


def load_train_dataset(script_args: ScriptArguments, demo_args: DemoArguments, seed: int):
    if script_args.dataset_name == ARITHMETIC:
        operands = tuple(demo_args.demo_operands)
        dataset = to_prompt_dataset(
            make_problems(
                demo_args.demo_num_train_prompts,
                seed=seed,
                operands_per_level=operands,
                digits=demo_args.demo_operand_digits,
            )
        )
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


def train(
    script_args: ScriptArguments,
    training_args: CoBAConfig,
    model_args: ModelConfig,
    demo_args: DemoArguments,
    reward_funcs: list,
):
    """Train `model_args.model_name_or_path` with `CoBAGRPOTrainer`, save it with a model card, push if asked."""
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    try:  # a dataset that cannot be read or has no prompts: one line, before any model loads
        train_dataset = load_train_dataset(script_args, demo_args, training_args.seed)
    except (ValueError, FileNotFoundError) as error:
        fail(f"--dataset_name {script_args.dataset_name}: {error}")
    try:  # the trainer's checks of the dataset and rewards (columns, prompts, priors)
        check_construction(training_args, train_dataset, reward_funcs, {})
    except ValueError as error:
        fail(one_line(error))
    try:  # what the trainer refuses once the model is known (the context length): one line, before training
        trainer = CoBAGRPOTrainer(
            model=model_args.model_name_or_path,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=train_dataset,
            peft_config=get_peft_config(model_args),
            quantization_config=get_quantization_config(model_args),
        )
    except ValueError as error:
        fail(one_line(error))
    checkpoint = training_args.resume_from_checkpoint
    trainer.train(resume_from_checkpoint=True if resumes_latest(checkpoint) else checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json (the log history) for `python -m coba_trl.plot <output_dir>`
    trainer.create_model_card(dataset_name=script_args.dataset_name)  # TRL's card, completed with the CoBA settings
    trainer.accelerator.print(f"Model and model card saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
        trainer.accelerator.print(f"Pushed to https://huggingface.co/{trainer.hub_model_id}.")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written (with its example lines), and every option's default."""


def coba_options() -> str:
    """The CoBA flags (the fields `CoBAConfig` adds to `GRPOConfig`) and the demo's, for the top of `--help`."""
    coba = [f"--{name}" for name in coba_field_names()]
    demo = [f"--{f.name}" for f in dataclasses.fields(DemoArguments)]
    wrap = functools.partial(textwrap.fill, width=116, initial_indent="  ", subsequent_indent="  ")
    return (
        "CoBA options (CoBAConfig; each is described in the list below, after TRL's GRPOConfig options):\n"
        f"{wrap(' '.join(coba))}\nCPU demo options:\n{wrap(' '.join(demo))}\n"
    )


def make_parser() -> TrlParser:
    parser = TrlParser(
        (ScriptArguments, CoBAConfig, ModelConfig, DemoArguments),
        usage="python examples/train_qwen.py [--config FILE.yaml] [--FIELD VALUE ...]",
        description=f"{__doc__}\n{coba_options()}",
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # --max_generation is no --max_generations: a prefix is refused, with the fields meant
    )
    parser.error = functools.partial(fail, prog=parser.prog)  # argparse's (an invalid choice) in one line too
    return parser


def flag_fields(argv: list[str]) -> list[str]:
    """Names of the fields `argv`'s flags set, in order (not its `--config` file's keys)."""
    names = [token[2:].split("=", 1)[0].replace("-", "_") for token in argv if token.startswith("--")]
    return list(dict.fromkeys(name for name in names if name != "config"))


def given_fields(argv: list[str]) -> list[str]:
    """Names of the fields `argv` sets, in order: its `--config` file's keys, then its flags."""
    return list(dict.fromkeys([*settings_from_config(argv), *flag_fields(argv)]))


def _plain(value):
    """A parsed value in the form its default has (TrainingArguments turns some strings into enums)."""
    return getattr(value, "value", value)


def changed_fields(parsed: tuple, defaults: tuple, names: list[str]) -> dict[str, object]:
    """The fields among `names` whose parsed value differs from the demo's default, with their values."""
    changed = {}
    for name in names:
        for parsed_args, default_args in zip(parsed, defaults, strict=True):
            if hasattr(parsed_args, name):
                value = _plain(getattr(parsed_args, name))
                if value != _plain(getattr(default_args, name)):
                    changed[name] = value
                break
    return changed


def parse(argv: list[str]) -> tuple[ScriptArguments, CoBAConfig, ModelConfig, DemoArguments]:
    """Parse `argv` (`--config file.yaml` plus flags). Without a model name the CPU demo's settings are the defaults
    (a `--config` file, then the flags, override them) and the demo's flag rules apply (`coba_trl.demo.flags`: its
    output folder, `--save_steps` alone saves checkpoints); with a model name, TRL's defaults are."""
    parser = make_parser()
    check_command_line(parser, argv)  # unknown flags and config keys, a missing config file: one line each
    if requested_model(argv) is not None:
        return parser.parse_args_and_config(args=argv)
    given = given_fields(argv)
    demo_defaults = {**DEMO_TRAINING_ARGS, **DEMO_MODEL_ARGS}
    if "save_steps" in given and "save_strategy" not in given:
        demo_defaults["save_strategy"] = "steps"
    parser.set_defaults_with_config(**demo_defaults)
    parsed = parser.parse_args_and_config(args=argv)
    flags = flag_fields(argv)
    if "output_dir" in flags:
        return parsed
    checkpoint = parsed[1].resume_from_checkpoint
    if checkpoint and not resumes_latest(checkpoint):
        output_dir = os.path.dirname(os.path.normpath(checkpoint))
    else:
        recipe = settings_from_config(argv)
        defaults = make_parser()
        defaults.set_defaults_with_config(**DEMO_TRAINING_ARGS, **DEMO_MODEL_ARGS)
        if "output_dir" in recipe:  # a recipe's folder, named further after the flags that change the recipe
            baseline = defaults.parse_args_and_config(args=["--config", config_path(argv)])
            output_dir = flagged_output_dir(changed_fields(parsed, baseline, flags), recipe["output_dir"])
        else:
            output_dir = flagged_output_dir(changed_fields(parsed, defaults.parse_args_and_config(args=[]), given))
    if output_dir == parsed[1].output_dir:
        return parsed
    return parser.parse_args_and_config(args=[*argv, "--output_dir", output_dir])  # over a recipe's output_dir too


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def check_demo_request(script_args: ScriptArguments, training_args: CoBAConfig, demo_args: DemoArguments, rewards):
    """What the CPU demo refuses, before its model is built or warm-started: another dataset, no RL steps, a
    checkpoint that is missing or no demo checkpoint, a finished run's folder, and what the trainer would refuse of
    its dataset and rewards (a prior or id column the arithmetic task lacks)."""
    if script_args.dataset_name != ARITHMETIC:
        raise ValueError(
            f"dataset_name is {script_args.dataset_name!r} but model_name_or_path is not set: the built-in tiny model "
            f"only runs the '{ARITHMETIC}' demo task. Pass --model_name_or_path (a Hub id or a local model folder) to "
            f"train on {script_args.dataset_name}."
        )
    check_max_steps(training_args.max_steps)
    check_resume(training_args.resume_from_checkpoint, training_args.output_dir, demo_args)
    check_output_dir(training_args.output_dir, demo_args.overwrite_output_dir)
    dataset = load_train_dataset(script_args, demo_args, training_args.seed)
    check_construction(training_args, dataset, rewards, {})


def check_resume_settings(training_args: CoBAConfig) -> str | None:
    """What a resumed run may not change from its checkpoint's (another allocator: a `ValueError`), and the line
    naming the batch-layout fields it changes, if any (`coba_trl.validation.resumed`)."""
    checkpoint = training_args.resume_from_checkpoint
    if not checkpoint:
        return None
    if resumes_latest(checkpoint):
        checkpoint = latest_complete_checkpoint(training_args.output_dir, warn=lambda message: None)
    return check_resumed_settings(checkpoint, training_args, training_args.world_size)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    # TRL 1.16 reads transformers' deprecated `is_gradient_checkpointing` at every generation; nothing to act on.
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    try:  # every value refused (config bounds, rewards, checkpoint, dataset columns): one line, before any work
        script_args, training_args, model_args, demo_args = parse(argv)
        reward_funcs = load_reward_funcs(script_args.reward_funcs)
        checkpoint = training_args.resume_from_checkpoint
        if checkpoint and not resumes_latest(checkpoint):
            check_checkpoint_path(checkpoint)
        check_hub_access(training_args.push_to_hub, training_args.hub_token)
        if model_args.model_name_or_path is None:
            check_demo_request(script_args, training_args, demo_args, reward_funcs)
        else:
            check_model_source(model_args.model_name_or_path)  # a missing folder, a Hub id without the Hub
        layout_change = check_resume_settings(training_args)
    except ValueError as error:
        fail(one_line(error))
    if layout_change is not None and training_args.process_index == 0:
        print(f"{os.path.basename(sys.argv[0])}: warning: {layout_change}", file=sys.stderr, flush=True)
    check_vllm_installed(training_args.use_vllm)  # before the demo's warm start, not after it
    if model_args.model_name_or_path is not None:
        train(script_args, training_args, model_args, demo_args, reward_funcs)
        return
    if training_args.process_index == 0:
        checkpoint = training_args.resume_from_checkpoint
        latest = "its latest complete checkpoint" if resumes_latest(checkpoint) else checkpoint
        start = f"resumed from {latest}, " if checkpoint else ""
        print(
            "coba-trl: no model_name_or_path, so this is the offline CPU demo (tiny Qwen2 model, arithmetic task, "
            f"{training_args.budget_allocator} allocator, {start}{training_args.max_steps} RL steps); output: "
            f"{training_args.output_dir}.\nFlags adjust it; --model_name_or_path trains a real model; --help lists "
            "every option.",
            flush=True,
        )
    run_demo(training_args, demo_args, reward_funcs, get_peft_config(model_args))
    leave_multiprocess_cpu_run()


if __name__ == "__main__":
    main()
