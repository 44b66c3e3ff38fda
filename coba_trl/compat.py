"""Upgrade safety: the TRL versions `CoBAGRPOTrainer` was tested with, and the signatures of the methods it wraps.

`CoBAGRPOTrainer` overrides or calls a handful of GRPOTrainer / Trainer methods (trl-seams.md). When TRL changes one
of them, failing loudly at import beats training on silently wrong groups.
"""

from __future__ import annotations

import inspect

from packaging.version import Version

TESTED_TRL_RANGE = (Version("1.16"), Version("1.17"))

# Methods of GRPOTrainer (and of transformers.Trainer reached through it) that CoBAGRPOTrainer overrides or calls,
# with the parameter names it relies on.
WRAPPED_SIGNATURES = {
    "__init__": (
        "self",
        "model",
        "reward_funcs",
        "args",
        "train_dataset",
        "eval_dataset",
        "processing_class",
        "reward_processing_classes",
        "callbacks",
        "optimizers",
        "quantization_config",
        "peft_config",
        "tools",
        "rollout_func",
        "environment_factory",
    ),
    "_generate_and_score_completions": ("self", "inputs"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_tool_call_loop": (
        "self",
        "prompts",
        "prompt_ids",
        "completion_ids",
        "completions",
        "logprobs",
        "images",
        "multimodal_fields",
    ),
    "_get_train_sampler": ("self", "dataset"),
    "get_train_dataloader": ("self",),
    "_get_dataloader": ("self", "dataset", "description", "batch_size", "sampler_fn", "is_training", "dataloader_key"),
    "_set_signature_columns_if_needed": ("self",),
    "_save_checkpoint": ("self", "model", "trial"),
    "_load_optimizer_and_scheduler": ("self", "checkpoint"),
}
REPEAT_SAMPLER_SIGNATURE = ("data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed")


def check_trl_version(version: str) -> None:
    """Raise `ImportError` unless `version` lies in the tested range (>=1.16, <1.17)."""
    low, high = TESTED_TRL_RANGE
    if not low <= Version(version) < high:
        raise ImportError(
            f"coba-trl was tested with trl>={low},<{high}, but trl {version} is installed. Install a tested version "
            f'with `pip install "trl>={low},<{high}"`, or upgrade coba-trl.'
        )


def check_signatures(trainer_cls: type, sampler_cls: type) -> None:
    """Raise `ImportError` when a method CoBAGRPOTrainer wraps no longer has the parameters it relies on."""
    found = {name: tuple(inspect.signature(getattr(trainer_cls, name)).parameters) for name in WRAPPED_SIGNATURES}
    found["RepeatSampler"] = tuple(inspect.signature(sampler_cls).parameters)
    expected = {**WRAPPED_SIGNATURES, "RepeatSampler": REPEAT_SAMPLER_SIGNATURE}
    changed = [name for name in expected if found[name] != expected[name]]
    if changed:
        details = "; ".join(f"{name}{found[name]} (expected {expected[name]})" for name in changed)
        raise ImportError(
            f"The installed TRL changed methods that CoBAGRPOTrainer wraps: {details}. Install a tested version "
            f'with `pip install "trl>={TESTED_TRL_RANGE[0]},<{TESTED_TRL_RANGE[1]}"`.'
        )


def check_trl_compatibility() -> None:
    """Both checks against the installed TRL."""
    import trl
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    check_trl_version(trl.__version__)
    check_signatures(GRPOTrainer, RepeatSampler)
