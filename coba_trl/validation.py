"""Construction-time checks of a CoBA run: the two-phase layout over processes, the dataset, the model's context, GRPO
features, and access to the Hub before a run that pushes to it.

Config-only checks (min / max generations, allocator parameters) live in `CoBAConfig.__post_init__`; these need the
dataset, the model, the number of processes or the trainer's arguments. Every error names the field and the fix.
"""

from __future__ import annotations

import functools
import heapq
import inspect
import math
import numbers

from datasets import Dataset, IterableDataset

from coba_trl.rounds.source import as_prompt_id

LONGEST_PROMPTS_TOKENIZED = 16  # prompts tokenized to find the longest one: those with the most characters


def check_construction(args, train_dataset, reward_funcs, trainer_kwargs: dict) -> None:
    """Everything `CoBAGRPOTrainer` checks before TRL builds the trainer (`args` is its `CoBAConfig`)."""
    environment_factory = trainer_kwargs.get("environment_factory")
    check_features(environment_factory, train_dataset)
    check_dataset(train_dataset, args.prompt_id_column, args.prior_pass_rate_column, environment_factory is None)
    if trainer_kwargs.get("rollout_func") is None:  # a rollout_func's extra fields reach the rewards as columns too
        check_reward_values(train_dataset, check_reward_columns(reward_funcs, dataset_columns(train_dataset) or []))
    check_generation_kwargs(args.generation_kwargs, args.use_vllm)
    if args.two_phase_rounds:
        prompts_per_round = args.prompts_per_round
        check_two_phase_layout(prompts_per_round, args.min_generations, args.world_size)
        check_two_phase_inputs(dataset_columns(train_dataset) or [])
    if args.zero_variance_groups == "refill":
        fix = "zero_variance_groups='keep' or 'drop'"
        check_two_phase_inputs(dataset_columns(train_dataset) or [], "zero_variance_groups='refill'", fix)


def check_two_phase_layout(prompts_per_round: int, min_generations: int, num_processes: int) -> None:
    """The screening phase's rows (M x min_generations) must divide evenly over the processes."""
    if prompts_per_round * min_generations % num_processes != 0:
        raise ValueError(
            f"two_phase_rounds screens each of the round's {prompts_per_round} prompts with min_generations "
            f"({min_generations}) completions: {prompts_per_round * min_generations} rows, which must divide evenly "
            f"over the {num_processes} processes. Change min_generations or the batch layout so that it does."
        )


IMAGE_COLUMNS = ("image", "images")  # the columns TRL's GRPOTrainer reads images from


def check_two_phase_inputs(columns: list[str], setting: str = "two_phase_rounds", fix: str = "two_phase_rounds=False"):
    """Several generation phases (two phases, refill) cannot merge TRL's image inputs
    (`coba_trl.rounds.phases.MULTIMODAL`): refuse a dataset with images."""
    images = [column for column in IMAGE_COLUMNS if column in columns]
    if images:
        raise ValueError(
            f"{setting} is set and train_dataset has the image column {images[0]!r}: the image inputs "
            f"(pixel_values, ...) of several generation phases cannot be merged into one batch. Set {fix} for this "
            "dataset."
        )


PROMPT_LAYOUTS = (
    "a `prompt` column of text (str) or of chat messages (a list of {'role': ..., 'content': ...} dicts), as TRL's "
    "GRPOTrainer takes it, plus the columns the reward functions read (e.g. `solution`)"
)
LIKELY_PROMPT_COLUMNS = ("question", "problem", "query", "input", "instruction", "messages", "text")
ROWS_PEEKED = 16  # rows of a streamed dataset checked for empty prompts (a stream is never read through)


def dataset_columns(dataset) -> list[str] | None:
    """The column names of a `Dataset` or `IterableDataset`; for a stream without known features, those of its first
    row (only that row is read); None when it has no rows."""
    columns = getattr(dataset, "column_names", None)
    if columns is not None:
        return list(columns)
    first = next(iter(dataset.take(1)), None) if isinstance(dataset, IterableDataset) else None
    return None if first is None else list(first)


def check_prompt_column(train_dataset) -> None:
    """The train set must have a `prompt` column; the error names the columns it has and the layouts accepted."""
    columns = dataset_columns(train_dataset)
    if columns is None or "prompt" in columns:
        return
    likely = next((name for name in LIKELY_PROMPT_COLUMNS if name in columns), "your_prompt_column")
    raise ValueError(
        f"train_dataset has no `prompt` column (columns: {columns}). CoBAGRPOTrainer takes {PROMPT_LAYOUTS}. Rename "
        f"the column of prompts: `dataset = dataset.rename_column({likely!r}, 'prompt')`."
    )


def _is_empty_prompt(prompt) -> bool:
    if prompt is None:
        return True
    if isinstance(prompt, str):
        return not prompt.strip()
    if isinstance(prompt, list):
        contents = [message.get("content") if isinstance(message, dict) else message for message in prompt]
        return all(content is None or (isinstance(content, str) and not content.strip()) for content in contents)
    return False


def check_prompts(prompts, rows_checked: str = "") -> None:
    """No prompt may be missing (None), blank text, or a conversation without any text; generation would fail on it
    (or sample from nothing) in the round that draws it."""
    empty = [row for row, prompt in enumerate(prompts) if _is_empty_prompt(prompt)]
    if empty:
        raise ValueError(
            f"train_dataset has {len(empty)} empty prompt(s){rows_checked} (None, blank text or messages without "
            f"content), the first at row {empty[0]}. Drop them, e.g. `dataset = dataset.filter(lambda row: "
            "bool(row['prompt']))`, or fill them in."
        )


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


def check_dataset(
    train_dataset, prompt_id_column: str | None, prior_pass_rate_column: str | None, needs_prompt: bool = True
) -> None:
    """The train set must be a `Dataset`, or an `IterableDataset` with prompt ids, with non-empty prompts (unless its
    environments write them: `needs_prompt=False`), holding the configured id and prior columns."""
    if train_dataset is None:
        raise ValueError(
            "CoBAGRPOTrainer needs a train_dataset: pass rates are tracked per dataset prompt. Pass a `Dataset` with "
            "a 'prompt' column."
        )
    if not isinstance(train_dataset, (Dataset, IterableDataset)):
        raise ValueError(
            f"train_dataset must be a `datasets.Dataset` or `datasets.IterableDataset`, got "
            f"`{type(train_dataset).__name__}`."
        )
    if needs_prompt:
        check_prompt_column(train_dataset)
    first_rows = None  # a stream's first rows, read once for every check that looks at them
    if isinstance(train_dataset, IterableDataset):
        if prompt_id_column is None:
            raise ValueError(
                "train_dataset is an IterableDataset (a stream) and prompt_id_column is None: a stream has no row "
                "indices, so pass rates need a column of stable prompt ids. Set prompt_id_column to such a column "
                "(e.g. `dataset.map(lambda row: {'prompt_id': row['problem']})` for a text key), or load the dataset "
                "without `streaming=True`."
            )
        first_rows = list(train_dataset.take(ROWS_PEEKED))
        if needs_prompt:
            check_prompts([row["prompt"] for row in first_rows], f" among its first {ROWS_PEEKED}")
    elif needs_prompt:
        check_prompts(train_dataset["prompt"])
    columns = dataset_columns(train_dataset) or []
    for field_name, column in (
        ("prompt_id_column", prompt_id_column),
        ("prior_pass_rate_column", prior_pass_rate_column),
    ):
        if column is not None and column not in columns:
            raise ValueError(
                f"{field_name} is {column!r}, but train_dataset has no such column (columns: {columns}). Add the "
                f"column or set {field_name}=None."
            )
    if prior_pass_rate_column is not None and isinstance(train_dataset, Dataset):  # a stream's are read per round
        check_prior_values(train_dataset[prior_pass_rate_column], prior_pass_rate_column)
    if prompt_id_column is not None:
        ids = train_dataset[prompt_id_column] if first_rows is None else [row[prompt_id_column] for row in first_rows]
        check_prompt_ids(ids, prompt_id_column)


def check_prompt_ids(values, column: str) -> None:
    """Prompt ids key the pass-rate history: each must be hashable, or a list of such values (kept as a tuple)."""
    for row, value in enumerate(values):
        as_prompt_id(value, column, where=f"at row {row}")


def check_prior_values(values, column: str) -> None:
    """Every offline prior must be a pass rate in [0, 1], or None / NaN for unknown."""
    bad = invalid_pass_rates(values)
    if bad:
        row, value = bad[0]
        raise ValueError(
            f"prior_pass_rate_column {column!r} must hold pass rates in [0, 1], or None / NaN where unknown; "
            f"{len(bad)} row(s) do not, the first is row {row} with {value!r}. If the column holds percentages, divide "
            f"it by 100 (`dataset.map(lambda row: {{{column!r}: row[{column!r}] / 100}})`)."
        )


def invalid_pass_rates(values) -> list[tuple[int, object]]:
    """(row, value) of each value that is neither a pass rate in [0, 1] nor None / NaN (unknown)."""
    return [(row, value) for row, value in enumerate(values) if not _is_pass_rate_or_unknown(value)]


def _is_pass_rate_or_unknown(value) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isnan(value) or 0.0 <= value <= 1.0


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


def check_generation_kwargs(generation_kwargs: dict | None, use_vllm: bool) -> None:
    """Refuse a fixed vLLM sampling seed: under CoBA every completion is its own request, so they would all be equal."""
    if use_vllm and generation_kwargs and generation_kwargs.get("seed") is not None:
        raise ValueError(
            f"generation_kwargs sets seed={generation_kwargs['seed']!r}. CoBAGRPOTrainer asks vLLM for each "
            "completion of a prompt as its own request (n = 1), so one fixed sampling seed would make every "
            "completion of a group identical and every advantage 0. Remove 'seed' from generation_kwargs: without a "
            "per-request seed vLLM draws distinct completions, and TRL already seeds each process's colocated engine."
        )


def check_features(environment_factory, train_dataset) -> None:
    """Refuse environments without a train_dataset: pass rates are kept per dataset prompt (docs/setups.md)."""
    if environment_factory is not None and train_dataset is None:
        raise ValueError(
            "environment_factory without a train_dataset is not supported by CoBAGRPOTrainer: the prompts then come "
            "from each environment's reset(), so no prompt is seen twice and there is nothing to keep a pass rate "
            "for, which is what CoBA allocates by. Pass a train_dataset of tasks, one row per task (each rollout's "
            "environment is reset with its row's columns as keyword arguments), or train with GRPOTrainer."
        )


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


def longest_prompt_tokens(train_dataset: Dataset, processing_class) -> int | None:
    """Tokens of the longest prompt of `train_dataset` as generation sees it (chat template and generation prompt
    applied), measured on the prompts with the most characters (of a stream, among its first `ROWS_PEEKED` rows);
    None when the prompts are neither text nor chat messages of text (images, tool schemas), which this check leaves
    alone."""
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    if "prompt" not in (dataset_columns(train_dataset) or []) or not callable(getattr(tokenizer, "encode", None)):
        return None
    if isinstance(train_dataset, Dataset):
        prompts = train_dataset["prompt"]
    else:  # a stream is not read ahead: its first rows
        prompts = [row["prompt"] for row in train_dataset.take(ROWS_PEEKED)]
    if not all(_is_text_prompt(prompt) for prompt in prompts):
        return None
    longest = heapq.nlargest(LONGEST_PROMPTS_TOKENIZED, prompts, key=_prompt_characters)
    if not longest:
        return None
    lengths = []
    for prompt in longest:
        if isinstance(prompt, str):
            lengths.append(len(tokenizer.encode(prompt, add_special_tokens=False)))
        else:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
            lengths.append(len(ids))
    return max(lengths)


def _is_text_prompt(prompt) -> bool:
    if isinstance(prompt, str):
        return True
    return isinstance(prompt, list) and all(
        isinstance(message, dict) and isinstance(message.get("content"), str) for message in prompt
    )


def _prompt_characters(prompt) -> int:
    return len(prompt) if isinstance(prompt, str) else sum(len(message["content"]) for message in prompt)


def check_context_length(model, processing_class, train_dataset: Dataset, args) -> None:
    """The longest prompt plus `max_completion_length` must fit the model's context (`max_position_embeddings`) and,
    with colocated vLLM, `vllm_max_model_length`; otherwise generation would overflow on the GPUs, mid-run.

    `model` is the trainer's model (for a PEFT model, its base model's config is read); `args` its `CoBAConfig`.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    context = getattr(getattr(base, "config", None), "max_position_embeddings", None)
    vllm_context = args.vllm_max_model_length if args.use_vllm and args.vllm_mode == "colocate" else None
    if context is not None and vllm_context is not None and vllm_context > context:
        raise ValueError(
            f"vllm_max_model_length ({vllm_context}) is larger than the model's context, max_position_embeddings "
            f"({context}). Set vllm_max_model_length to at most {context}."
        )
    prompt = longest_prompt_tokens(train_dataset, processing_class)
    if prompt is None:
        return
    needed = prompt + args.max_completion_length
    lengths = (
        f"The longest prompt of train_dataset ({prompt} tokens) plus max_completion_length "
        f"({args.max_completion_length}) is {needed} tokens"
    )
    if context is not None and needed > context:
        raise ValueError(
            f"{lengths}, more than the model's context, max_position_embeddings ({context}). Set "
            f"max_completion_length to at most {context - prompt}, or drop the longest prompts from train_dataset."
        )
    if vllm_context is not None and needed > vllm_context:
        allowed = f" (the model allows up to {context})" if context is not None else ""
        raise ValueError(
            f"{lengths}, more than vllm_max_model_length ({vllm_context}). Raise vllm_max_model_length to at least "
            f"{needed}{allowed}, or set max_completion_length to at most {vllm_context - prompt}."
        )


def check_hub_access(push_to_hub: bool, hub_token: str | None) -> None:
    """Before any training: a run that pushes to the Hub needs a token and a reachable Hub."""
    if not push_to_hub:
        return
    from huggingface_hub import constants, get_token, whoami

    fix = "Log in with `hf auth login` (or set HF_TOKEN) on a machine with network access, or drop --push_to_hub."
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"push_to_hub is set, but HF_HUB_OFFLINE is set too, so nothing can reach the Hub. {fix}")
    token = hub_token or get_token()
    if token is None:
        raise ValueError(f"push_to_hub is set, but no Hugging Face token was found (hub_token, HF_TOKEN). {fix}")
    try:
        whoami(token=token)
    except Exception as error:
        raise ValueError(
            f"push_to_hub is set, but the Hub did not accept the token or could not be reached ({error}). {fix}"
        ) from error
