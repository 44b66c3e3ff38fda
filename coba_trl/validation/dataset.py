"""Checks of the train set before training: it exists, has prompts that are not empty, and holds the prompt-id and
prior pass-rate columns the config names, with values of the right kind. Every error names the field and the fix.
"""

from __future__ import annotations

import math
import numbers

from datasets import Dataset, IterableDataset

from coba_trl.allocation.neighbours import neighbourhood_key
from coba_trl.rounds.source import as_prompt_id

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


def check_dataset(
    train_dataset,
    prompt_id_column: str | None,
    prior_pass_rate_column: str | None,
    needs_prompt: bool = True,
    pass_rate_neighbour_column: str | None = None,
) -> None:
    """The train set must be a `Dataset`, or an `IterableDataset` with prompt ids, with non-empty prompts (unless its
    environments write them: `needs_prompt=False`), holding the configured id, prior and neighbourhood columns."""
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
        prompts = [row["prompt"] for row in first_rows] if needs_prompt else None
        if needs_prompt:
            check_prompts(prompts, f" among its first {ROWS_PEEKED}")
    elif needs_prompt:
        prompts = train_dataset["prompt"]
        if prompt_id_column is not None:  # read once for both checks (datasets reads a column at each pass)
            prompts = list(prompts)
        check_prompts(prompts)
    else:
        prompts = None
    columns = dataset_columns(train_dataset) or []
    for field_name, column in (
        ("prompt_id_column", prompt_id_column),
        ("prior_pass_rate_column", prior_pass_rate_column),
        ("pass_rate_neighbour_column", pass_rate_neighbour_column),
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
        check_prompt_ids(ids, prompt_id_column, prompts)
    if pass_rate_neighbour_column is not None:
        column = pass_rate_neighbour_column
        keys = train_dataset[column] if first_rows is None else [row[column] for row in first_rows]
        check_neighbourhoods(keys, column)


def check_prompt_ids(values, column: str, prompts=None) -> None:
    """Prompt ids key the pass-rate history: each must be hashable, or a list of such values (kept as a tuple), and
    rows that share an id must share their prompt (`prompts`, when given), or their pass rates would be mixed. One
    pass over both columns."""
    first_seen = {}  # id -> (row, prompt) of its first row
    pairs = zip(values, prompts, strict=True) if prompts is not None else ((value, None) for value in values)
    for row, (value, prompt) in enumerate(pairs):
        key = as_prompt_id(value, column, where=f"at row {row}")
        first, first_prompt = first_seen.setdefault(key, (row, prompt))
        if first_prompt != prompt:
            raise ValueError(
                f"prompt_id_column {column!r} gives rows {first} and {row} the same id {value!r}, but different "
                f"prompts ({_shown(first_prompt)} and {_shown(prompt)}): their pass rates would be mixed in one history. "
                f"Give each distinct prompt its own id, e.g. `dataset.map(lambda row, i: {{{column!r}: i}}, "
                "with_indices=True)`, or drop the repeated rows."
            )


def _shown(prompt, width: int = 40) -> str:
    text = " ".join(str(prompt).split())
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def check_neighbourhoods(values, column: str) -> None:
    """Neighbourhood keys group prompts: each must be a str, int, float or bool, or None / NaN for none."""
    for row, value in enumerate(values):
        neighbourhood_key(value, column, f" at row {row}")


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
