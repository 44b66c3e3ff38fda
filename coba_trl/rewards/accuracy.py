"""Math correctness rewards for TRL's GRPOTrainer that never raise and never hang.

Grading a batch has two stages:

1. In the trainer process (cheap, bounded): extract the final answer (``extraction.py``), normalise answer and
   ground truth (``normalize.py``), and decide whatever can be decided exactly: equal strings, or two plain numbers.
   A completion without an extractable answer scores 0 and counts as unparsable.
2. In worker processes (``pool.py``): the math-verify equivalence check for the remaining pairs (each distinct pair
   once per batch: a GRPO group often repeats an answer), each under a hard time limit. A pair that runs over
   scores 0 and counts as a time-out; a worker error scores 0 and counts as unparsable. The trainer process keeps
   extracting answers while the workers compute.

Counts are reported per call through TRL's `log_metric` callback as `rewards/<func>/timeouts` and
`rewards/<func>/unparsable`, and the extracted answers through `log_extra` as the `<func>/answer` column. Rewards are
1.0 (correct) or 0.0, so they double as the correctness signal that CoBA's pass rates need (``docs/algorithm.md``,
"Pass rate of a prompt").
"""

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from coba_trl.rewards.equivalence import symbolic_equal
from coba_trl.rewards.extraction import completion_text, extract_boxed_answer, extract_dapo_answer
from coba_trl.rewards.normalize import as_number, normalize_answer
from coba_trl.rewards.pool import ItemResult, get_pool

logger = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT = 5.0
"""Seconds allowed for the symbolic check of one completion."""

_MAX_GOLD_CHARS = 1_000


def _quick_verdict(gold: str, pred: str) -> bool | None:
    """True/False when the normalised strings decide it, None when a symbolic check is needed."""
    if gold == pred:
        return True
    gold_number, pred_number = as_number(gold), as_number(pred)
    if gold_number is not None and pred_number is not None:
        return gold_number == pred_number
    if gold.isalpha() and pred.isalpha():
        return gold.casefold() == pred.casefold()
    return None


@dataclass
class GradeResult:
    """Per-item outcome of `grade`: rewards, extracted answers (None when none was found), grading seconds (trainer-
    side work plus the worker's time, queueing excluded), and counts of time-outs and unparsable items."""

    rewards: list[float]
    answers: list[str | None]
    seconds: list[float]
    timeouts: int = 0
    unparsable: int = 0


def grade(
    completions: Sequence,
    solution: Sequence | None,
    extract: Callable[[str], str | None],
    time_limit: float = DEFAULT_TIME_LIMIT,
    in_process: bool = False,
) -> GradeResult:
    """Score completions against ground truths with the given answer extractor.

    Args:
        completions: Plain strings or chat messages (`[{"role": "assistant", "content": ...}]`), one per item.
        solution: Ground-truth answers (strings; numbers and lists of strings are accepted too).
        extract: `extract_dapo_answer` or `extract_boxed_answer`.
        time_limit: Hard limit in seconds for the symbolic check of one item.
        in_process: Run the symbolic checks in this process instead of the worker pool (the sequential baseline of
            `benchmarks/reward_throughput.py`; only math-verify's alarm-based time-outs, main thread only).
    """
    if solution is None:
        raise ValueError(
            "The math rewards need a `solution` column with the ground-truth answers; load the data with "
            "`coba_trl.data.load_dapo_math` or `load_eval_benchmark`, or add the column to your dataset."
        )
    if len(completions) != len(solution):
        raise ValueError(
            f"Got {len(completions)} completions but {len(solution)} solutions; pass one `solution` per completion."
        )
    n = len(completions)
    result = GradeResult(rewards=[0.0] * n, answers=[None] * n, seconds=[0.0] * n)
    hard: list[int] = []
    first_index: dict[tuple[str, str], int] = {}
    copies: dict[int, int] = {}

    def symbolic_pairs():
        for i, (completion, gold) in enumerate(zip(completions, solution, strict=True)):
            start = time.perf_counter()
            verdict = _first_stage(completion, gold, extract, result, i)
            result.seconds[i] = time.perf_counter() - start
            if isinstance(verdict, tuple) and verdict in first_index:
                copies[i] = first_index[verdict]
            elif isinstance(verdict, tuple):
                first_index[verdict] = i
                hard.append(i)
                yield (*verdict, time_limit)
            elif verdict is not None:
                result.rewards[i] = float(verdict)

    outcomes = _check_symbolically(symbolic_pairs(), n, time_limit, in_process)
    outcomes += [ItemResult("error")] * (len(hard) - len(outcomes))
    by_index = dict(zip(hard, outcomes, strict=True))
    by_index.update({i: by_index[first] for i, first in copies.items()})
    for i, item in by_index.items():
        result.rewards[i] = float(item.status == "ok" and bool(item.value))
        result.seconds[i] += item.seconds
        result.timeouts += item.status == "timeout"
        result.unparsable += item.status == "error"
    return result


def _first_stage(completion, gold, extract, result: GradeResult, i: int) -> bool | tuple[str, str] | None:
    """Trainer-side stage: a verdict, a (gold, pred) pair for the symbolic check, or None (unparsable)."""
    try:
        result.answers[i] = extract(completion_text(completion))
        gold_text = _gold_text(gold)
        if result.answers[i] is not None and gold_text:
            gold_norm, pred_norm = normalize_answer(gold_text), normalize_answer(result.answers[i])
            verdict = _quick_verdict(gold_norm, pred_norm) if pred_norm else False
            return (gold_norm, pred_norm) if verdict is None else verdict
    except Exception:  # noqa: BLE001 - a reward function must never raise on model output
        logger.debug("Answer extraction failed", exc_info=True)
    result.unparsable += 1
    return None


def _gold_text(gold) -> str:
    if isinstance(gold, list | tuple):
        gold = ", ".join(str(g) for g in gold)
    return str(gold).strip()[:_MAX_GOLD_CHARS] if gold is not None else ""


def _check_symbolically(pairs: Iterator[tuple], expected: int, time_limit: float, in_process: bool) -> list:
    """`ItemResult`s of `symbolic_equal` for the pairs, which are produced lazily while the workers compute."""
    if in_process:
        outcomes = []
        for pair in pairs:
            start = time.perf_counter()
            try:
                outcomes.append(ItemResult("ok", symbolic_equal(*pair), time.perf_counter() - start))
            except Exception:  # noqa: BLE001 - includes math-verify's TimeoutException
                outcomes.append(ItemResult("error", None, time.perf_counter() - start))
        return outcomes
    try:
        return get_pool().map(symbolic_equal, pairs, time_limit, expected=expected)
    except Exception:  # noqa: BLE001 - e.g. the OS refused new processes: score 0 rather than stop training
        logger.exception("The grading pool failed; scoring the affected answers as 0")
        for _ in pairs:  # finish the trainer-side stage so every other answer is still graded
            pass
        return []


def _report(name: str, result: GradeResult, log_metric, log_extra) -> list[float]:
    if result.timeouts:
        logger.warning("%s: %d of %d answers timed out", name, result.timeouts, len(result.rewards))
    if log_metric is not None:
        log_metric(f"rewards/{name}/timeouts", float(result.timeouts))
        log_metric(f"rewards/{name}/unparsable", float(result.unparsable))
    if log_extra is not None:
        log_extra(f"{name}/answer", [a if a is None else a[:200] for a in result.answers])
    return result.rewards


def dapo_accuracy_reward(
    completions: list,
    solution: list | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    log_extra: Callable[[str, list], None] | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    **kwargs,
) -> list[float]:
    r"""DAPO training reward: 1.0 when the completion's final answer equals `solution`, else 0.0.

    The answer is the last `Answer:` line in the last 300 characters (case-insensitive; verl `math_dapo`), or failing
    that the last `\boxed{}`. Answers are compared after Minerva-style normalisation, then by math-verify, so `0.5`,
    `1/2` and `\frac{1}{2}` agree and `1,000` equals `1000`. Never raises; each symbolic check gets `time_limit`
    seconds in a worker process (use `functools.partial(dapo_accuracy_reward, time_limit=...)` to change it).

    Example:
    ```python
    >>> dapo_accuracy_reward(["... so the total is 12.\nAnswer: 12", [{"role": "assistant", "content": "Answer: 13"}]],
    ...                      ["12", "12"])
    [1.0, 0.0]
    ```
    """
    result = grade(completions, solution, extract_dapo_answer, time_limit)
    return _report("dapo_accuracy_reward", result, log_metric, log_extra)


dapo_accuracy_reward.required_columns = ("solution",)  # checked against the train set when a trainer is built


def boxed_accuracy_reward(
    completions: list,
    solution: list | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    log_extra: Callable[[str, list], None] | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    **kwargs,
) -> list[float]:
    r"""Evaluation reward (verl `prime_math` rule): last `\boxed{}` or else an `answer:` marker, checked with
    math-verify for symbolic equivalence. 1.0 / 0.0; never raises; same time limit and logging as
    `dapo_accuracy_reward`.
    """
    result = grade(completions, solution, extract_boxed_answer, time_limit)
    return _report("boxed_accuracy_reward", result, log_metric, log_extra)


boxed_accuracy_reward.required_columns = ("solution",)
