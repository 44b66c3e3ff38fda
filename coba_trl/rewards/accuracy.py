"""Math correctness rewards for TRL's GRPOTrainer that never raise and never hang.

Grading a batch has two stages:

1. In the trainer process (cheap, bounded): extract the final answer (``extraction.py``), normalise answer and
   ground truth (``normalize.py``), and decide whatever can be decided exactly: equal strings, or two plain numbers.
   A completion without an extractable answer scores 0 and counts as unparsable.
2. In worker processes (``pool.py``): the math-verify equivalence check for the remaining pairs, each under a hard
   time limit. A pair that runs over scores 0 and counts as a time-out; a worker error scores 0 and counts as
   unparsable.

Counts are reported per call through TRL's `log_metric` callback as `rewards/<func>/timeouts` and
`rewards/<func>/unparsable`, and the extracted answers through `log_extra` as the `<func>/answer` column. Rewards are
1.0 (correct) or 0.0, so they double as the correctness signal that CoBA's pass rates need (``algorithm.md`` §2).
"""

import logging
from collections.abc import Callable, Sequence

from coba_trl.rewards.equivalence import symbolic_equal
from coba_trl.rewards.extraction import completion_text, extract_boxed_answer, extract_dapo_answer
from coba_trl.rewards.normalize import as_number, normalize_answer
from coba_trl.rewards.pool import get_pool

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


def grade(
    completions: Sequence,
    solution: Sequence,
    extract: Callable[[str], str | None],
    time_limit: float = DEFAULT_TIME_LIMIT,
    num_workers: int | None = None,
) -> tuple[list[float], list[str | None], dict[str, int]]:
    """Score completions against ground truths with the given answer extractor.

    Args:
        completions: Plain strings or chat messages (`[{"role": "assistant", "content": ...}]`), one per item.
        solution: Ground-truth answers (strings; numbers and lists of strings are accepted too).
        extract: `extract_dapo_answer` or `extract_boxed_answer`.
        time_limit: Hard limit in seconds for the symbolic check of one item.
        num_workers: `None` to use the shared worker pool; `0` to run the symbolic checks in this process
            (sequential baseline, relying on math-verify's alarm-based time-outs, main thread only).

    Returns:
        rewards (1.0 / 0.0), the extracted answers (None when none was found), and counts of
        "timeouts" and "unparsable" items.
    """
    if len(completions) != len(solution):
        raise ValueError(
            f"Got {len(completions)} completions but {len(solution)} solutions; pass one `solution` per completion."
        )
    rewards = [0.0] * len(completions)
    answers: list[str | None] = [None] * len(completions)
    counts = {"timeouts": 0, "unparsable": 0}
    hard: list[int] = []
    pairs: list[tuple[str, str, float]] = []
    for i, (completion, gold) in enumerate(zip(completions, solution, strict=True)):
        try:
            answers[i] = extract(completion_text(completion))
            gold_text = _gold_text(gold)
            if answers[i] is None or not gold_text:
                counts["unparsable"] += 1
                continue
            gold_norm, pred_norm = normalize_answer(gold_text), normalize_answer(answers[i])
            verdict = _quick_verdict(gold_norm, pred_norm) if pred_norm else False
        except Exception:  # noqa: BLE001 - a reward function must never raise on model output
            logger.debug("Answer extraction failed", exc_info=True)
            counts["unparsable"] += 1
            continue
        if verdict is None:
            hard.append(i)
            pairs.append((gold_norm, pred_norm, time_limit))
        else:
            rewards[i] = float(verdict)
    for i, (status, equal) in zip(hard, _check_symbolically(pairs, time_limit, num_workers), strict=True):
        rewards[i] = float(status == "ok" and bool(equal))
        counts["timeouts"] += status == "timeout"
        counts["unparsable"] += status == "error"
    return rewards, answers, counts


def _gold_text(gold) -> str:
    if isinstance(gold, list | tuple):
        gold = ", ".join(str(g) for g in gold)
    return str(gold).strip()[:_MAX_GOLD_CHARS] if gold is not None else ""


def _check_symbolically(pairs, time_limit, num_workers) -> list[tuple[str, bool | None]]:
    if not pairs:
        return []
    if num_workers == 0:
        outcomes = []
        for pair in pairs:
            try:
                outcomes.append(("ok", symbolic_equal(*pair)))
            except Exception:  # noqa: BLE001 - includes math-verify's TimeoutException
                outcomes.append(("error", None))
        return outcomes
    try:
        results = get_pool().map(symbolic_equal, pairs, time_limit)
    except Exception:  # noqa: BLE001 - e.g. the OS refused new processes: score 0 rather than stop training
        logger.exception("The grading pool failed; scoring %d answers as 0", len(pairs))
        return [("error", None)] * len(pairs)
    return [(result.status, result.value) for result in results]


def _report(name: str, answers: list, counts: dict, log_metric, log_extra) -> None:
    if counts["timeouts"]:
        logger.warning("%s: %d of %d answers timed out in the symbolic check", name, counts["timeouts"], len(answers))
    if log_metric is not None:
        for key, value in counts.items():
            log_metric(f"rewards/{name}/{key}", float(value))
    if log_extra is not None:
        log_extra(f"{name}/answer", [a if a is None else a[:200] for a in answers])


def dapo_accuracy_reward(
    completions: list,
    solution: list,
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
    rewards, answers, counts = grade(completions, solution, extract_dapo_answer, time_limit)
    _report("dapo_accuracy_reward", answers, counts, log_metric, log_extra)
    return rewards


def boxed_accuracy_reward(
    completions: list,
    solution: list,
    log_metric: Callable[[str, float], None] | None = None,
    log_extra: Callable[[str, list], None] | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    **kwargs,
) -> list[float]:
    r"""Evaluation reward (verl `prime_math` rule): last `\boxed{}` or else an `answer:` marker, checked with
    math-verify for symbolic equivalence. 1.0 / 0.0; never raises; same time limit and logging as
    `dapo_accuracy_reward`.
    """
    rewards, answers, counts = grade(completions, solution, extract_boxed_answer, time_limit)
    _report("boxed_accuracy_reward", answers, counts, log_metric, log_extra)
    return rewards
