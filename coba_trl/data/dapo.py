"""DAPO-Math-17K in either published schema, de-duplicated and normalised for TRL's GRPOTrainer.

Accepted schemas (docs/data.md):

* verl (`BytedTsinghua-SIA/DAPO-Math-17k`): `prompt` is a list of chat messages, the answer is
  `reward_model.ground_truth`, the id is `extra_info.index` (a UUID). Each prompt appears about 100 times.
* processed (`open-r1/DAPO-Math-17k-Processed`, configs all / en / cn): `prompt` is a plain string and `solution` the
  answer; `source_prompt`, `reward_model` and `extra_info` are kept from the original.

Every row comes out with `prompt` (chat messages), `solution` (ground-truth string), `problem` (bare problem text)
and `prompt_id` (`extra_info.index` when present, else `text_prompt_id(problem)`), plus the original columns. The
prompt id is the stable key CoBA's pass-rate history needs (``docs/algorithm.md``,
"Pass rate of a prompt").
"""

import logging

import datasets
import pyarrow.compute as pc

from coba_trl.data.prompts import INSTRUCTIONS, apply_instruction, as_messages, strip_instruction, text_prompt_id
from coba_trl.data.sources import load_table

logger = logging.getLogger(__name__)

DAPO_HUB_ID = "BytedTsinghua-SIA/DAPO-Math-17k"
SCHEMAS = {
    "verl": "`prompt` (chat messages) and `reward_model.ground_truth`, optional `extra_info.index` "
    "(BytedTsinghua-SIA/DAPO-Math-17k)",
    "processed": "`prompt` (string) and `solution`, optional `extra_info.index` (open-r1/DAPO-Math-17k-Processed)",
}


def detect_schema(dataset: datasets.Dataset, source: str = "the dataset") -> str:
    """`"verl"` or `"processed"`; a `ValueError` naming the missing column and the accepted schemas otherwise."""
    features = dataset.features
    accepted = "; ".join(f"{name}: {text}" for name, text in SCHEMAS.items())
    if "prompt" not in features:
        raise ValueError(f"{source} has no `prompt` column (columns: {dataset.column_names}). Accepted: {accepted}.")
    prompt = features["prompt"]
    if isinstance(prompt, datasets.Value) and prompt.dtype in ("string", "large_string"):
        if "solution" not in features:
            raise ValueError(f"{source} has a string `prompt` but no `solution` column. Accepted: {accepted}.")
        return "processed"
    reward_model = features.get("reward_model")
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise ValueError(
            f"{source} has a chat `prompt` but no `reward_model.ground_truth` column. Accepted: {accepted}."
        )
    return "verl"


def _ids(dataset: datasets.Dataset) -> list | None:
    extra = dataset.features.get("extra_info")
    if not isinstance(extra, dict) or "index" not in extra:
        return None
    return pc.struct_field(dataset.data.column("extra_info"), "index").to_pylist()


def _last_user_content(messages: list | None) -> str:
    users = [m.get("content") or "" for m in messages or [] if m.get("role") == "user"]
    return users[-1] if users else ""


def _raw_contents(dataset: datasets.Dataset, schema: str) -> list[str]:
    """The user text of every row (fast path in Arrow for the usual single-message prompts)."""
    column = dataset.data.column("prompt")
    if schema == "verl" and pc.max(pc.list_value_length(column)).as_py() == 1:
        column = pc.struct_field(pc.list_element(column, 0), "content")
    elif schema == "verl":
        return [_last_user_content(messages) for messages in column.to_pylist()]
    return [content or "" for content in column.to_pylist()]


def _dedup_keys(dataset: datasets.Dataset, schema: str, deduplicate) -> list:
    if deduplicate in (True, "id"):
        ids = _ids(dataset)
        if ids is not None and all(i not in (None, "") for i in ids):
            return ids
    elif deduplicate != "text":
        raise ValueError(f"deduplicate ({deduplicate!r}) must be True / 'id', 'text' or False.")
    problems: dict[str, str] = {}
    return [problems.get(c) or problems.setdefault(c, strip_instruction(c)) for c in _raw_contents(dataset, schema)]


def _first_occurrences(keys: list) -> list[int]:
    seen: set = set()
    keep = []
    for index, key in enumerate(keys):
        if key not in seen:
            seen.add(key)
            keep.append(index)
    return keep


def _normalise_row(row: dict, schema: str, instruction: str, prompt_column: str) -> dict:
    if schema == "verl":
        content = _last_user_content(row[prompt_column])
        solution = (row.get("reward_model") or {}).get("ground_truth")
    else:
        content, solution = row["prompt"] or "", row["solution"]
    problem = strip_instruction(content)
    index = (row.get("extra_info") or {}).get("index")
    return {
        "prompt": as_messages(apply_instruction(problem, instruction)),
        "solution": "" if solution is None else str(solution).strip(),
        "problem": problem,
        "prompt_id": str(index) if index not in (None, "") else text_prompt_id(problem),
    }


def load_dapo_math(
    path_or_id: str = DAPO_HUB_ID,
    config: str | None = None,
    split: str = "train",
    instruction: str = "answer",
    deduplicate: bool | str = True,
) -> datasets.Dataset:
    """Load DAPO-Math-17K (Hub id or local parquet / jsonl / json, either schema) ready for GRPO.

    Args:
        path_or_id: Hub id (`BytedTsinghua-SIA/DAPO-Math-17k`, `open-r1/DAPO-Math-17k-Processed`) or local path.
        config: Hub config, e.g. `"all"`, `"en"` or `"cn"` for the processed dataset.
        split: Hub split.
        instruction: `"answer"` keeps the DAPO `Answer:` instruction, `"boxed"` asks for `\\boxed{}`, `"none"` gives
            the bare problem.
        deduplicate: `True` / `"id"` keeps the first row per `extra_info.index` (problem text when there is no
            id; 17,917 prompts for the verl release), `"text"` keeps the first row per problem text (17,398), `False`
            keeps every row.

    Returns:
        The normalised `datasets.Dataset`; its `duplicates_dropped` attribute (also logged) counts removed rows.
    """
    if instruction not in INSTRUCTIONS:
        raise ValueError(f"instruction ({instruction!r}) must be one of {INSTRUCTIONS}.")
    dataset = load_table(path_or_id, config, split)
    schema = detect_schema(dataset, f"'{path_or_id}'")
    rows_in = len(dataset)
    if deduplicate:
        keep = _first_occurrences(_dedup_keys(dataset, schema, deduplicate))
        if len(keep) < rows_in:
            dataset = dataset.select(keep)
    prompt_column = "prompt"
    if schema == "verl" and "source_prompt" not in dataset.column_names:
        dataset, prompt_column = dataset.rename_column("prompt", "source_prompt"), "source_prompt"
    normalised = dataset.map(
        _normalise_row,
        fn_kwargs={"schema": schema, "instruction": instruction, "prompt_column": prompt_column},
        desc="Normalising DAPO-Math prompts",
    )
    normalised.duplicates_dropped = rows_in - len(dataset)
    logger.info(
        "Loaded %d DAPO-Math prompts from '%s' (%s schema); dropped %d duplicate rows of %d.",
        len(normalised),
        path_or_id,
        schema,
        normalised.duplicates_dropped,
        rows_in,
    )
    return normalised
