"""Settings of the offline CPU demo: the tiny model, the task, the warm start, and the RL run's `CoBAConfig` values.

`DEMO_TRAINING_ARGS` are the defaults of `python examples/train_qwen.py` when no `model_name_or_path` is given
(every flag adjusts them); `recipes/cpu_demo.yaml` holds the same values (a test keeps them equal). They were chosen
by experiment so that a two-core CPU finishes in a few minutes and held-out accuracy visibly rises during RL: a lr
far above the paper's 1e-6, because the model is tiny, and a short warm start that leaves the model mediocre.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from coba_trl.demo.task import level_shortfall

WARM_START_PROBLEMS = 20_000  # size of the pool the warm start samples its batches from

DEMO_OUTPUT_DIR = "outputs/cpu_demo"

DEMO_TRAINING_ARGS: dict = {
    "output_dir": DEMO_OUTPUT_DIR,
    "budget_allocator": "coba",
    "num_generations": 8,
    "min_generations": 2,
    "max_generations": 32,
    "per_device_train_batch_size": 128,
    "steps_per_generation": 2,
    "max_steps": 100,
    "learning_rate": 3e-4,
    "warmup_steps": 0,
    "lr_scheduler_type": "cosine",
    "max_completion_length": 12,
    "temperature": 1.0,
    "loss_type": "dapo",
    "beta": 0.0,
    "use_cpu": True,
    "bf16": False,
    "activation_checkpointing": False,
    "ddp_find_unused_parameters": False,  # every parameter gets a gradient: skip DDP's extra graph traversal
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "disable_tqdm": False,
    "seed": 0,
}

# Regimes of the CPU task: each one's values beside the demo's (`DemoArguments` and `DEMO_TRAINING_ARGS` fields),
# the same as its recipe's (`recipes/<recipe>.yaml`; a test keeps them equal). `hard`: the regime most groups teach
# nothing in, as in math RL at scale (docs/benchmarks.md, "The hard regime"): sums of 2 digits (soon all solved)
# beside sums of 20 to 32 (mostly all failed), 128 prompts revisited every 4 rounds, and its own output folder.
# `frontier`: the regime meant for the frontier to move (docs/benchmarks.md, "The frontier regime", with what its
# calibration met and missed): a ladder of longer sums, a longer warm start on its two easiest rungs with 1% of its
# problems from the three above, 150 steps evaluated every 5.
REGIMES: dict[str, dict] = {
    "demo": {},
    "hard": {
        "demo_operands": [2, 20, 24, 28, 32],
        "demo_num_train_prompts": 128,
        "output_dir": "outputs/cpu_demo_hard",
    },
    "frontier": {
        "demo_operands": [4, 6, 8, 10, 12],
        "demo_warm_start_steps": 400,
        "demo_warm_start_levels": 2,
        "demo_warm_start_upper_share": 0.01,
        "demo_eval_steps": 5,
        "max_steps": 150,
        "output_dir": "outputs/cpu_demo_frontier",
    },
}
REGIME_RECIPES = {"demo": "cpu_demo.yaml", "hard": "cpu_demo_hard.yaml", "frontier": "cpu_demo_frontier.yaml"}


def regime_arguments(name: str) -> tuple[dict, DemoArguments]:
    """The training arguments (`DEMO_TRAINING_ARGS` with the regime's values) and `DemoArguments` of a regime."""
    if name not in REGIMES:
        raise ValueError(f"regime {name!r} is not one of {list(REGIMES)}.")
    demo_fields = {f.name for f in dataclasses.fields(DemoArguments)}
    values = REGIMES[name]
    training = {**DEMO_TRAINING_ARGS, **{k: v for k, v in values.items() if k not in demo_fields}}
    return training, DemoArguments(**{k: v for k, v in values.items() if k in demo_fields})


# TRL's `ModelConfig` values the demo changes: with `--use_peft`, no LoRA dropout by default. Dropout makes the trainer's
# log-probs of a completion differ from those it was sampled with (vLLM, or generation in eval mode), so TRL's
# importance-sampling ratio would wander far from 1 on this tiny model; `--lora_dropout` sets it.
DEMO_MODEL_ARGS: dict = {"lora_dropout": 0.0}
# The demo model's size: each DemoArguments field and the Qwen2 config key it sets (`coba_trl.demo.model`).
MODEL_SIZE = {
    "demo_hidden_size": "hidden_size",
    "demo_num_layers": "num_hidden_layers",
    "demo_num_heads": "num_attention_heads",
}


# The least value of each count in DemoArguments (the warm start may be skipped, and 0 evaluates before and after RL
# only).
DEMO_COUNT_FLOORS = {
    "demo_hidden_size": 1,
    "demo_num_layers": 1,
    "demo_num_heads": 1,
    "demo_num_train_prompts": 1,
    "demo_num_heldout": 1,
    "demo_warm_start_steps": 0,
    "demo_eval_steps": 0,
}
# The warm start's learning-rate schedules: the demo's constant rate, or transformers' decays of these names; each
# rises over the first WARM_START_WARMUP_STEPS steps.
WARM_START_SCHEDULES = ("constant", "linear", "cosine")
WARM_START_WARMUP_STEPS = 20


@dataclass
class DemoArguments:
    """
    Arguments of the built-in arithmetic task and its tiny model (used when `dataset_name` is `arithmetic`).

    Parameters:
        demo_hidden_size (`int`, *optional*, defaults to `64`):
            Hidden size of the tiny Qwen2 model built locally.
        demo_num_layers (`int`, *optional*, defaults to `2`):
            Number of transformer layers of the tiny model.
        demo_num_heads (`int`, *optional*, defaults to `2`):
            Attention heads of the tiny model (head size `demo_hidden_size / demo_num_heads`, a whole, even number;
            vLLM's CPU attention needs 32 or more).
        demo_operands (`list[int]`, *optional*, defaults to `[3, 4, 5, 6, 7]`):
            Difficulty levels of the arithmetic task: level i sums this many single digits. The prompts of the RL
            training set, the held-out problems and the warm start cycle through the levels evenly.
        demo_operand_digits (`int`, *optional*, defaults to `1`):
            Digits of each number summed: 1 sums single digits; 2 sums numbers from 0 to 99 (with carries, and
            answers from a wider range, so a guess is rarely right).
        demo_warm_start_levels (`int`, *optional*):
            The warm start sees only the first this many levels of `demo_operands` (the easiest ones); all of them
            by default. RL and the held-out problems always cover every level.
        demo_warm_start_upper_share (`float`, *optional*, defaults to `0.0`):
            With `demo_warm_start_levels`, the share of the warm start's problems drawn from the levels above those
            (e.g. `0.1`): a little of the upper rungs, so that RL starts from a foothold there rather than from none.
        demo_num_train_prompts (`int`, *optional*, defaults to `512`):
            Distinct prompts of the RL training set (revisited every epoch, so pass-rate history builds up).
        demo_num_heldout (`int`, *optional*, defaults to `300`):
            Held-out problems (disjoint from training) on which accuracy is measured before, during and after RL.
        demo_warm_start_steps (`int`, *optional*, defaults to `300`):
            Supervised warm-start steps before RL; deliberately short so the model starts mediocre.
        demo_warm_start_learning_rate (`float`, *optional*, defaults to `3e-3`):
            Learning rate of the warm start.
        demo_warm_start_lr_scheduler_type (`str`, *optional*, defaults to `"constant"`):
            Learning-rate schedule of the warm start after its 20 steps of warm-up: `"constant"`, or `"linear"` /
            `"cosine"` to decay it to 0 at the last step (transformers' schedules; more than 20 warm-start steps).
        demo_eval_steps (`int`, *optional*, defaults to `10`):
            Measure held-out accuracy every this many RL steps (0: before and after RL only).
        overwrite_output_dir (`bool`, *optional*, defaults to `False`):
            Replace the results of a finished demo run in `output_dir`; without it such a run is refused.
    """

    demo_hidden_size: int = field(default=64, metadata={"help": "Hidden size of the tiny Qwen2 model."})
    demo_num_layers: int = field(default=2, metadata={"help": "Number of layers of the tiny Qwen2 model."})
    demo_num_heads: int = field(
        default=2,
        metadata={"help": "Attention heads of the tiny Qwen2 model (vLLM's CPU attention needs a head size of 32+)."},
    )
    demo_operands: list[int] = field(
        default_factory=lambda: [3, 4, 5, 6, 7],
        metadata={"help": "Digits summed at each difficulty level of the arithmetic task (levels cycle evenly)."},
    )
    demo_operand_digits: int = field(
        default=1, metadata={"help": "Digits of each number summed (1: single digits; 2: numbers 0 to 99)."}
    )
    demo_warm_start_levels: int | None = field(
        default=None,
        metadata={"help": "The warm start sees only the first this many levels (the easiest); default: all of them."},
    )
    demo_warm_start_upper_share: float = field(
        default=0.0,
        metadata={
            "help": "With demo_warm_start_levels: the share of the warm start's problems drawn from the levels above "
            "those (0: none)."
        },
    )
    demo_num_train_prompts: int = field(
        default=512, metadata={"help": "Distinct prompts in the arithmetic RL training set."}
    )
    demo_num_heldout: int = field(default=300, metadata={"help": "Held-out problems used to measure accuracy."})
    demo_warm_start_steps: int = field(
        default=300, metadata={"help": "Supervised warm-start steps before RL (0 skips the warm start)."}
    )
    demo_warm_start_learning_rate: float = field(default=3e-3, metadata={"help": "Learning rate of the warm start."})
    demo_warm_start_lr_scheduler_type: str = field(
        default="constant",
        metadata={
            "help": "Learning-rate schedule of the warm start after 20 steps of warm-up: constant, or linear or cosine "
            "(decayed to 0 at its last step).",
            "choices": list(WARM_START_SCHEDULES),
        },
    )
    demo_eval_steps: int = field(
        default=10,
        metadata={"help": "Measure held-out accuracy every this many RL steps (0: before and after RL only)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Replace the results of a finished demo run in output_dir (refused without this flag)."},
    )

    def __post_init__(self):
        if not self.demo_operands or any(not isinstance(n, int) or n < 2 for n in self.demo_operands):
            raise ValueError(
                f"demo_operands ({self.demo_operands}) must list at least one level, each a number of digits to sum "
                "of 2 or more, e.g. --demo_operands 3 4 5 6 7 (the default)."
            )
        if not isinstance(self.demo_operand_digits, int) or not 1 <= self.demo_operand_digits <= 4:
            raise ValueError(
                f"demo_operand_digits ({self.demo_operand_digits}) must be 1 to 4 (the digits of each number summed), "
                "e.g. --demo_operand_digits 1 (the default)."
            )
        for name, least in DEMO_COUNT_FLOORS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                default = getattr(DemoArguments, name)
                raise ValueError(
                    f"{name} ({value}) must be a whole number of at least {least}, e.g. --{name} {default} (the "
                    "default)."
                )
        head_size, left = divmod(self.demo_hidden_size, self.demo_num_heads)
        if left or head_size % 2:
            raise ValueError(
                f"demo_hidden_size ({self.demo_hidden_size}) / demo_num_heads ({self.demo_num_heads}) must be a whole, "
                "even head size (rotary position embeddings rotate pairs of dimensions), e.g. --demo_hidden_size 64 "
                "--demo_num_heads 2 (the defaults; vLLM's CPU attention needs a head size of 32 or more)."
            )
        short = level_shortfall(
            self.demo_num_train_prompts, self.demo_num_heldout, tuple(self.demo_operands), self.demo_operand_digits
        )
        if short is not None:
            operands, needed, available = short
            raise ValueError(
                f"demo_operands ({self.demo_operands}): the level of {operands} numbers of up to "
                f"{self.demo_operand_digits} digit(s) has {available} distinct questions, fewer than the {needed} its "
                f"share of demo_num_train_prompts ({self.demo_num_train_prompts}) and demo_num_heldout "
                f"({self.demo_num_heldout}) needs (training and held-out problems are distinct and disjoint). Drop "
                "that level, or lower --demo_num_train_prompts / --demo_num_heldout."
            )
        levels = self.demo_warm_start_levels
        if levels is not None and not 1 <= levels <= len(self.demo_operands):
            raise ValueError(
                f"demo_warm_start_levels ({levels}) must be between 1 and the number of levels in demo_operands "
                f"({len(self.demo_operands)}), or left unset for all of them."
            )
        share = self.demo_warm_start_upper_share
        if not (isinstance(share, (int, float)) and 0 <= share < 1):
            raise ValueError(
                f"demo_warm_start_upper_share ({share}) must be at least 0 and below 1 (the share of the warm start's "
                "problems drawn from the levels above demo_warm_start_levels), e.g. --demo_warm_start_upper_share 0.1."
            )
        if share and (levels is None or levels == len(self.demo_operands)):
            raise ValueError(
                f"demo_warm_start_upper_share ({share}) draws warm-start problems from the levels above "
                f"demo_warm_start_levels ({levels}), and there are none: pass --demo_warm_start_levels below the "
                f"number of levels in demo_operands ({len(self.demo_operands)}), or --demo_warm_start_upper_share 0."
            )
        schedule = self.demo_warm_start_lr_scheduler_type
        if schedule not in WARM_START_SCHEDULES:
            raise ValueError(
                f"demo_warm_start_lr_scheduler_type ({schedule}) must be one of {', '.join(WARM_START_SCHEDULES)}, "
                "e.g. --demo_warm_start_lr_scheduler_type constant (the default)."
            )
        if schedule != "constant" and 0 < self.demo_warm_start_steps <= WARM_START_WARMUP_STEPS:
            raise ValueError(
                f"demo_warm_start_lr_scheduler_type ({schedule}) decays the learning rate after "
                f"{WARM_START_WARMUP_STEPS} steps of warm-up, so it needs more than {WARM_START_WARMUP_STEPS} "
                f"warm-start steps (demo_warm_start_steps is {self.demo_warm_start_steps}): pass more "
                "--demo_warm_start_steps, or --demo_warm_start_lr_scheduler_type constant."
            )
        if not (math.isfinite(self.demo_warm_start_learning_rate) and self.demo_warm_start_learning_rate > 0):
            raise ValueError(
                f"demo_warm_start_learning_rate ({self.demo_warm_start_learning_rate}) must be a positive, finite "
                "number, or the warm start's optimizer refuses it. Pass --demo_warm_start_learning_rate 3e-3 (the "
                "default)."
            )
