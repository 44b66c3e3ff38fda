"""The math evaluation sets (avg@k), normalised to `prompt` / `solution` / `problem` / `prompt_id` / `benchmark`.

Sources and columns: docs/data.md. "amc23" is the 40-problem
AMC 2023 set (not the 83-problem AMC 2022+2023 set). AIME 2025 from `opencompass/AIME2025` is the union of its two
configs, `AIME2025-I` and `AIME2025-II`. Answers that are lists (OlympiadBench `final_answer`) are joined with
", " and numbers are written without a trailing `.0`.
"""

import logging
import math
from dataclasses import dataclass

import datasets

from coba_trl.data.prompts import apply_instruction, as_messages, text_prompt_id
from coba_trl.data.sources import is_local, load_table

logger = logging.getLogger(__name__)

PROBLEM_COLUMNS = ("problem", "question", "Problem", "Question")
ANSWER_COLUMNS = ("answer", "final_answer", "Answer", "ground_truth")


@dataclass(frozen=True)
class EvalBenchmark:
    """Where a benchmark lives on the Hub and which columns hold the problem and the answer."""

    hub_id: str
    split: str
    problem_column: str
    answer_column: str
    configs: tuple[str | None, ...] = (None,)
    rows: int = 0


EVAL_BENCHMARKS: dict[str, EvalBenchmark] = {
    "aime24": EvalBenchmark("HuggingFaceH4/aime_2024", "train", "problem", "answer", rows=30),
    "aime25": EvalBenchmark("math-ai/aime25", "test", "problem", "answer", rows=30),
    "amc23": EvalBenchmark("math-ai/amc23", "test", "question", "answer", rows=40),
    "math500": EvalBenchmark("HuggingFaceH4/MATH-500", "test", "problem", "answer", rows=500),
    "olympiadbench": EvalBenchmark("math-ai/olympiadbench", "test", "question", "final_answer", rows=675),
    "minerva": EvalBenchmark("math-ai/minervamath", "test", "question", "answer", rows=272),
}
"""Benchmark name -> Hub source. Pass `path=` to `load_eval_benchmark` to read another source or a local file."""

OPENCOMPASS_AIME25 = EvalBenchmark(
    "opencompass/AIME2025", "test", "question", "answer", configs=("AIME2025-I", "AIME2025-II"), rows=30
)


def answer_to_text(answer) -> str:
    """Ground truth as a string: lists joined with ", ", `27.0` -> `27`, `$x$` -> `x`, None -> ""."""
    if answer is None:
        return ""
    if isinstance(answer, list | tuple):
        return ", ".join(t for t in (answer_to_text(a) for a in answer) if t)
    if isinstance(answer, float) and math.isfinite(answer) and answer.is_integer():
        return str(int(answer))
    text = str(answer).strip()
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text


def _pick_column(dataset: datasets.Dataset, preferred: str, candidates: tuple[str, ...], role: str, name: str) -> str:
    for column in (preferred, *candidates):
        if column in dataset.column_names:
            return column
    raise ValueError(
        f"The {name} data has no {role} column: expected '{preferred}' or one of {list(candidates)} "
        f"(columns: {dataset.column_names})."
    )


def _source(name: str, path: str | None) -> tuple[EvalBenchmark, str]:
    if name not in EVAL_BENCHMARKS:
        raise ValueError(f"Unknown benchmark {name!r}: choose one of {sorted(EVAL_BENCHMARKS)}.")
    spec = EVAL_BENCHMARKS[name]
    if path is None:
        return spec, spec.hub_id
    if path == OPENCOMPASS_AIME25.hub_id:
        return OPENCOMPASS_AIME25, path
    return spec, path


def load_eval_benchmark(name: str, path: str | None = None, instruction: str = "boxed") -> datasets.Dataset:
    """Load an evaluation set by name from its Hub source or from `path` (Hub id or local parquet / jsonl / json).

    Args:
        name: One of `EVAL_BENCHMARKS` ("aime24", "aime25", "amc23", "math500", "olympiadbench", "minerva").
        path: Another source with the same content (e.g. `opencompass/AIME2025`, or a local file).
        instruction: `"boxed"` (default), `"answer"` (the DAPO `Answer:` instruction) or `"none"`.

    Returns:
        A `datasets.Dataset` with `prompt` (chat messages), `solution` (string), `problem`, `prompt_id` (hash of the
        problem text) and `benchmark`, plus the original columns.
    """
    apply_instruction("", instruction)
    spec, source = _source(name, path)
    if is_local(source):
        dataset = load_table(source)
    else:
        parts = [load_table(source, config, spec.split) for config in spec.configs]
        dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    problem_column = _pick_column(dataset, spec.problem_column, PROBLEM_COLUMNS, "problem", name)
    answer_column = _pick_column(dataset, spec.answer_column, ANSWER_COLUMNS, "answer", name)

    def normalise(row: dict) -> dict:
        problem = str(row[problem_column] or "").strip()
        return {
            "prompt": as_messages(apply_instruction(problem, instruction)),
            "solution": answer_to_text(row[answer_column]),
            "problem": problem,
            "prompt_id": text_prompt_id(problem),
            "benchmark": name,
        }

    kept = {c: f"source_{c}" for c in ("prompt", "solution") if c in dataset.column_names}
    dataset = dataset.rename_columns({c: new for c, new in kept.items() if new not in dataset.column_names})
    dataset = dataset.map(normalise, desc=f"Normalising {name}")
    logger.info("Loaded %d %s problems from '%s'.", len(dataset), name, source)
    return dataset
