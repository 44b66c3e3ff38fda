"""Procedurally generated arithmetic problems of graded difficulty for the offline CPU demo.

Each problem is a sum of single digits whose difficulty grows with the number of operands, so a small model finds
some prompts easy and some hard: the spread of pass rates CoBA-RL's allocation works on (docs/algorithm.md,
"Allocating one round").
Answers use the DAPO-Math format, a last line ``Answer: <integer>``, so the DAPO reward grades them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from datasets import Dataset

# Number of single-digit operands per difficulty level: more operands, more to add up, harder.
DIFFICULTY_LEVELS: tuple[int, ...] = (3, 4, 5, 6, 7)


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int
    level: int

    @property
    def completion(self) -> str:
        """The reference completion the warm-start phase imitates."""
        return f"Answer: {self.answer}"


def make_problem(
    rng: random.Random, level: int, operands_per_level: tuple[int, ...] = DIFFICULTY_LEVELS, digits: int = 1
) -> Problem:
    """One problem of difficulty ``level`` (an index into ``operands_per_level``): a sum of numbers of up to
    ``digits`` digits (single digits by default)."""
    operands = [rng.randint(0, 10**digits - 1) for _ in range(operands_per_level[level])]
    return Problem(question="+".join(map(str, operands)) + "=", answer=sum(operands), level=level)


def make_problems(
    num_problems: int,
    seed: int,
    exclude: set[str] | None = None,
    unique: bool = True,
    operands_per_level: tuple[int, ...] = DIFFICULTY_LEVELS,
    digits: int = 1,
) -> list[Problem]:
    """``num_problems`` problems, levels cycling evenly, none of whose questions is in ``exclude``; level i sums
    ``operands_per_level[i]`` numbers of up to ``digits`` digits.

    With ``unique`` no question repeats (a level of 3 operands has 1,000 distinct questions).
    """
    rng = random.Random(seed)
    seen = set(exclude or ())
    problems: list[Problem] = []
    while len(problems) < num_problems:
        problem = make_problem(rng, len(problems) % len(operands_per_level), operands_per_level, digits)
        if problem.question not in seen:
            if unique:
                seen.add(problem.question)
            problems.append(problem)
    return problems


def level_shortfall(
    num_train: int, num_heldout: int, operands_per_level: tuple[int, ...], digits: int = 1
) -> tuple[int, int, int] | None:
    """The first level without enough distinct questions for its share of the training prompts and held-out problems
    (levels take turns, and the two sets are disjoint), with at least one question left outside the held-out set for
    the warm start, which draws there: ``(operands, problems needed, distinct questions)``, or None when every level
    has enough."""
    levels = len(operands_per_level)
    for level, operands in enumerate(operands_per_level):
        train, heldout = (max(0, (count - level + levels - 1) // levels) for count in (num_train, num_heldout))
        needed = max(train + heldout, heldout + 1)
        available = (10**digits) ** operands
        if needed > available:
            return operands, needed, available
    return None


def demo_problem_sets(
    num_train: int,
    num_heldout: int,
    num_warm_start: int,
    seed: int,
    operands_per_level: tuple[int, ...] = DIFFICULTY_LEVELS,
    digits: int = 1,
    warm_start_levels: int | None = None,
    warm_start_upper_share: float = 0.0,
) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """Distinct RL training prompts, distinct held-out problems and a warm-start stream (repeats allowed).

    Level i sums ``operands_per_level[i]`` numbers of up to ``digits`` digits. Training and held-out problems share
    the level mix; the warm start draws from the first ``warm_start_levels`` levels (all by default), and with
    ``warm_start_upper_share`` that share of its problems from the levels above them. Neither training set contains
    a held-out question.
    """
    operands = tuple(operands_per_level)
    short = level_shortfall(num_train, num_heldout, operands, digits)
    if short is not None:
        raise ValueError(
            f"A level of {short[0]} numbers has {short[2]} distinct questions, fewer than the {short[1]} its share of "
            f"num_train ({num_train}) and num_heldout ({num_heldout}) needs: ask for fewer problems, or more operands."
        )
    heldout = make_problems(num_heldout, seed=seed + 1, operands_per_level=operands, digits=digits)
    excluded = {p.question for p in heldout}
    train = make_problems(num_train, seed=seed, exclude=excluded, operands_per_level=operands, digits=digits)
    upper = operands[warm_start_levels:] if warm_start_levels else ()
    above = max(1, round(num_warm_start * warm_start_upper_share)) if upper and warm_start_upper_share else 0
    warm_start = make_problems(
        num_warm_start - above,
        seed=seed + 2,
        exclude=excluded,
        unique=False,
        operands_per_level=operands[:warm_start_levels],
        digits=digits,
    )
    if above:
        drawn = make_problems(above, seed + 3, excluded, unique=False, operands_per_level=upper, digits=digits)
        warm_start += [replace(problem, level=problem.level + warm_start_levels) for problem in drawn]
    return train, heldout, warm_start


def to_prompt_dataset(problems: list[Problem]) -> Dataset:
    """GRPO rows: a one-message chat ``prompt``, the ``solution`` string, a stable ``prompt_id`` and the level."""
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": p.question}] for p in problems],
            "solution": [str(p.answer) for p in problems],
            "prompt_id": [str(i) for i in range(len(problems))],
            "level": [p.level for p in problems],
        }
    )
