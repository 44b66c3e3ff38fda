"""Checks of the reward functions against the train set: the columns they read exist and hold no None, and
`success_reward_func` names reward functions of the run. Every error names the field and the fix.
"""

from __future__ import annotations

import functools
import inspect

from datasets import Dataset

# Keyword arguments TRL's GRPOTrainer passes to every reward function itself (not from dataset columns).
TRL_REWARD_ARGUMENTS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


def check_reward_columns(reward_funcs, column_names: list[str]) -> list[str]:
    """Each reward function's dataset columns must be in train_dataset, so a missing one fails before training;
    returns the columns they read.

    A function needs the columns named by its parameters without a default (other than what TRL passes itself) and
    those listed in its `required_columns` attribute (the packaged math rewards declare `("solution",)`).
    Reward models (names or modules) need only the prompt and completion.
    """
    read = set()
    for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
        if isinstance(func, str) or not callable(func) or hasattr(func, "forward"):
            continue
        declared = func.func if isinstance(func, functools.partial) else func
        needed = set(getattr(declared, "required_columns", ()))
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):  # builtins and C callables have no inspectable signature
            parameters = []
        for parameter in parameters:
            named = parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            if named and parameter.default is parameter.empty and parameter.name not in TRL_REWARD_ARGUMENTS:
                needed.add(parameter.name)
        missing = sorted(needed - set(column_names))
        if missing:
            name = getattr(func, "__name__", type(func).__name__)
            raise ValueError(
                f"The reward function {name!r} needs the dataset column(s) {missing}, which train_dataset lacks "
                f"(columns: {column_names}). Add them, e.g. `dataset.rename_column('answer', {missing[0]!r})`, or "
                "pass a reward function that does not need them."
            )
        read |= needed
    return sorted(read)


def check_reward_values(train_dataset: Dataset, columns: list[str]) -> None:
    """The dataset columns the reward functions read may not hold None: a reward would score that prompt's every
    completion a failure (or crash on it) and its pass rate would read 0."""
    if not isinstance(train_dataset, Dataset):
        return
    for column in columns:
        if column not in train_dataset.column_names or train_dataset.data.column(column).null_count == 0:
            continue  # Arrow counts the nulls without reading the rows: the usual case costs nothing
        missing = [row for row, value in enumerate(train_dataset[column]) if value is None]
        if missing:
            raise ValueError(
                f"The reward function(s) read the column {column!r}, which holds None in {len(missing)} row(s) of "
                f"train_dataset, the first at row {missing[0]}. Drop those rows (`dataset = dataset.filter(lambda "
                f"row: row[{column!r}] is not None)`) or fill them in."
            )


def reward_func_names(reward_funcs) -> list[str]:
    """The names TRL's GRPOTrainer gives `reward_funcs` (`reward_func_names`), known before it loads any model: a
    reward model's id (its last path part), else the callable's name."""
    from trl.trainer.utils import get_callable_name, get_config_model_id

    names = []
    for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
        if isinstance(func, str):
            names.append(func.split("/")[-1])
        elif hasattr(func, "config") and hasattr(func, "forward"):
            names.append(get_config_model_id(func.config).split("/")[-1])
        else:
            names.append(get_callable_name(func))
    return names


def check_success_reward(success_reward_func: str | list[str] | None, reward_func_names: list[str]) -> tuple[int, ...]:
    """Indices of the reward functions that define a success, in order (the first one when `success_reward_func` is
    None). A row's success reward is the first of them that scored it (`coba_trl.rounds.scoring.success_scores`)."""
    if success_reward_func is None:
        return (0,)
    names = [success_reward_func] if isinstance(success_reward_func, str) else list(success_reward_func)
    if not names:
        raise ValueError(
            f"success_reward_func is empty: name at least one of the reward functions {reward_func_names}, or set it "
            "to None for the first."
        )
    unknown = [name for name in names if name not in reward_func_names]
    if unknown:
        raise ValueError(
            f"success_reward_func is {success_reward_func!r}; {unknown[0]!r} is not one of the reward functions "
            f"{reward_func_names}. Set it to one of these names, or to several (one per environment whose get_reward "
            "defines its rows' success)."
        )
    return tuple(reward_func_names.index(name) for name in names)


class CheckedReward:
    """A synchronous reward function whose return value is checked before TRL reads it: anything but an iterable of
    rewards (None, a single float) is a `TypeError` naming the function and what it returned, instead of TRL's
    `'NoneType' object is not iterable` from inside `_calculate_rewards`. TRL logs it under the function's name.

    It looks like the function it wraps (`functools.update_wrapper`: its name, docstring and attributes) and keeps it
    as `__wrapped__`, so `inspect.unwrap(trainer.reward_funcs[i])` is the function that was passed."""

    def __init__(self, func):
        from trl.trainer.utils import get_callable_name

        functools.update_wrapper(self, func)
        self.__name__ = get_callable_name(func)  # a partial's function's name, as TRL names it

    def __call__(self, *args, **kwargs):
        rewards = self.__wrapped__(*args, **kwargs)
        try:
            iter(rewards)
        except TypeError:
            raise TypeError(
                f"The reward function {self.__name__!r} returned {rewards!r} ({type(rewards).__name__}), not a list "
                "of rewards. Return one float per completion (None where it does not apply), e.g. `return [1.0 if "
                "is_right(c) else 0.0 for c in completions]`."
            ) from None
        return rewards


def checked_reward_funcs(reward_funcs):
    """`reward_funcs` with each synchronous reward function wrapped in `CheckedReward` (reward models, their names
    and async functions as given). The trainer passes these to TRL, so `trainer.reward_funcs` holds the wrappers; each
    one's `__wrapped__` is the function given."""
    from trl.trainer.utils import is_async_callable

    if reward_funcs is None:
        return None
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    checked = [
        func if isinstance(func, str) or hasattr(func, "forward") or is_async_callable(func) else CheckedReward(func)
        for func in funcs
    ]
    return checked if isinstance(reward_funcs, list) else checked[0]
