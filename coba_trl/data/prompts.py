"""Prompt instructions: the DAPO `Answer:` instruction and the usual `\\boxed{}` one, and stable prompt ids.

DAPO-Math-17K prompts wrap each problem in an instruction asking for a last line `Answer: $Answer`; the DAPO grader
(`coba_trl.rewards.dapo_accuracy_reward`) reads that line. Evaluation sets are usually asked for a `\\boxed{}`
answer (`coba_trl.rewards.boxed_accuracy_reward`).
"""

import hashlib
import re

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem."
)
DAPO_SUFFIX = 'Remember to put your answer on its own line after "Answer:".'
BOXED_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."

INSTRUCTIONS = ("answer", "boxed", "none")
"""`answer`: the DAPO instruction; `boxed`: ask for `\\boxed{}`; `none`: the bare problem."""

_DAPO_WRAPPED = re.compile(
    r"^\s*Solve the following math problem\b.*?\n\s*\n(?P<problem>.*)\n\s*\n\s*Remember to put your answer\b[^\n]*\s*$",
    re.DOTALL,
)


def strip_instruction(content: str) -> str:
    """The bare problem of a DAPO-wrapped prompt (the text unchanged when it is not wrapped)."""
    match = _DAPO_WRAPPED.match(content)
    return match.group("problem").strip() if match else content.strip()


def apply_instruction(problem: str, instruction: str) -> str:
    """Wrap a bare problem in the chosen instruction (see `INSTRUCTIONS`)."""
    if instruction == "answer":
        return f"{DAPO_PREFIX}\n\n{problem}\n\n{DAPO_SUFFIX}"
    if instruction == "boxed":
        return f"{problem}\n\n{BOXED_SUFFIX}"
    if instruction == "none":
        return problem
    raise ValueError(f"instruction ({instruction!r}) must be one of {INSTRUCTIONS}.")


def text_prompt_id(problem: str) -> str:
    """Stable id of a problem: the first 16 hex digits of the SHA-1 of its whitespace-trimmed text."""
    return hashlib.sha1(problem.strip().encode("utf-8")).hexdigest()[:16]


def as_messages(content: str) -> list[dict[str, str]]:
    """A single-turn chat prompt, as TRL's conversational datasets expect."""
    return [{"role": "user", "content": content}]
