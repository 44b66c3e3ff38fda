"""Construction-time checks of a CoBA run, one kind per module: the train set (`dataset.py`), the reward functions
(`rewards.py`), the model's context (`context.py`), access to the Hub (`hub.py`), and what `CoBAGRPOTrainer` runs
before TRL builds the trainer (`construction.py`). Every error names the field and the fix.
"""

from coba_trl.validation.construction import (
    check_construction,
    check_features,
    check_generation_kwargs,
    check_two_phase_inputs,
    check_two_phase_layout,
)
from coba_trl.validation.context import check_context_length, longest_prompt_tokens
from coba_trl.validation.dataset import (
    check_dataset,
    check_prior_values,
    check_prompt_column,
    check_prompt_ids,
    check_prompts,
    dataset_columns,
    invalid_pass_rates,
)
from coba_trl.validation.hub import check_hub_access
from coba_trl.validation.rewards import (
    check_reward_columns,
    check_reward_values,
    check_success_reward,
    checked_reward_funcs,
)

__all__ = [
    "check_construction",
    "check_context_length",
    "check_dataset",
    "check_features",
    "check_generation_kwargs",
    "check_hub_access",
    "check_prior_values",
    "check_prompt_column",
    "check_prompt_ids",
    "check_prompts",
    "check_reward_columns",
    "check_reward_values",
    "check_success_reward",
    "checked_reward_funcs",
    "check_two_phase_inputs",
    "check_two_phase_layout",
    "dataset_columns",
    "invalid_pass_rates",
    "longest_prompt_tokens",
]
