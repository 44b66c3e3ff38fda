"""Symbolic equivalence of two normalised answers with math-verify (runs inside a pool worker).

This is the only step of grading that can hang (sympy on `10^{10^{10}}` and the like), so the reward functions run
it in worker processes that are killed on time-out (``pool.py``). Inside a worker's main thread math-verify's own
`signal.alarm` time-outs still work and act as a first line of defence.

math-verify conventions (docs/data.md): `verify(gold, pred)` takes the gold answer first;
its LaTeX extraction needs a math environment, so each answer is parsed as `\\boxed{answer}`, and only when that
fails as a plain expression (`ExprExtractionConfig`), which would read `12,13` as 12.13.
"""

import logging
import math


def _parse_both_ways(answer: str, parsing_timeout: int) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    parsed = parse(
        "\\boxed{" + answer + "}",
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0)],
        fallback_mode="no_fallback",
        parsing_timeout=parsing_timeout,
    )
    if parsed:
        return parsed
    return parse(answer, extraction_config=[ExprExtractionConfig()], parsing_timeout=parsing_timeout)


def symbolic_equal(gold: str, pred: str, time_limit: float = 5.0) -> bool:
    """Whether `pred` equals `gold` according to math-verify (numeric, symbolic, set and interval comparisons).

    Only call this in a process's main thread (a pool worker): math-verify's alarm-based time-outs need it.
    """
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import verify

    seconds = max(1, math.ceil(time_limit))
    gold_parsed = _parse_both_ways(gold, seconds)
    pred_parsed = _parse_both_ways(pred, seconds)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, allow_set_relation_comp=True, timeout_seconds=seconds))
