"""Math correctness rewards for GRPO on DAPO-Math-17K and the math benchmarks (see `accuracy.py`)."""

from coba_trl.rewards.accuracy import (
    DEFAULT_TIME_LIMIT,
    GradeResult,
    boxed_accuracy_reward,
    dapo_accuracy_reward,
    grade,
)
from coba_trl.rewards.extraction import completion_text, extract_boxed_answer, extract_dapo_answer
from coba_trl.rewards.normalize import normalize_answer
from coba_trl.rewards.pool import TimeLimitedPool, get_pool, shutdown_pool

__all__ = [
    "DEFAULT_TIME_LIMIT",
    "GradeResult",
    "TimeLimitedPool",
    "boxed_accuracy_reward",
    "completion_text",
    "dapo_accuracy_reward",
    "extract_boxed_answer",
    "extract_dapo_answer",
    "get_pool",
    "grade",
    "normalize_answer",
    "shutdown_pool",
]
