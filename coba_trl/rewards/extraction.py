"""Find the final answer in a completion: cheap, bounded string work that runs in the trainer process.

Two extraction rules (docs/data.md):

* DAPO training grader (verl ``math_dapo``): keep the last 300 characters, take the last ``Answer:`` match
  (case-insensitive) and the rest of its line; failing that, the last ``\\boxed{}``.
* Evaluation grader (verl ``prime_math``): the last ``\\boxed{}``; failing that, an ``answer:`` marker.

Every function here is linear in its (already truncated) input, so no time limit is needed.
"""

import re

DAPO_TAIL_CHARS = 300
"""The DAPO grader only looks at the end of a completion."""

MAX_SEARCH_CHARS = 100_000
"""Completions are cut to their last this-many characters before any search."""

MAX_ANSWER_CHARS = 1_000
"""A longer extracted answer is treated as unparsable (no human grader accepts a 1,000-character answer)."""

_MAX_BOXED_TRIES = 5
_ANSWER_MARKER = re.compile(r"(?:answer|\u7b54\u6848)\s*[:\uff1a]", re.IGNORECASE)
"""`Answer:` in any case, also with a full-width colon or as `答案：` (the DAPO-Math-17K `cn` prompts)."""
_BOXED_OPENERS = ("\\boxed", "\\fbox")


def completion_text(completion) -> str:
    """Text of a completion as TRL passes it: a plain string, or chat messages (`[{"role", "content"}]`).

    For chat completions the assistant messages are joined; message content given as a list of parts
    (`[{"type": "text", "text": ...}]`) is flattened. Anything else gives an empty string.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if not isinstance(completion, list | tuple):
        return ""
    texts = []
    for message in completion:
        if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(part.get("text", "") for part in content if isinstance(part, dict))
    return "\n".join(t for t in texts if isinstance(t, str))


def _brace_group(text: str, start: int) -> tuple[str, int] | None:
    """Content of the balanced `{...}` group opening at `text[start]`, and the index after it."""
    depth = 0
    stop = min(len(text), start + MAX_ANSWER_CHARS + 2)
    for i in range(start, stop):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`), braces balanced.

    An unclosed `\\boxed{` is skipped in favour of an earlier complete one; only the last few openers are tried,
    so the cost stays bounded on adversarial input.
    """
    text = text[-MAX_SEARCH_CHARS:]
    end = len(text)
    for _ in range(_MAX_BOXED_TRIES):
        start = max(text.rfind(opener, 0, end) for opener in _BOXED_OPENERS)
        if start < 0:
            return None
        opener = "\\boxed" if text.startswith("\\boxed", start) else "\\fbox"
        pos = start + len(opener)
        if pos < len(text) and text[pos] == "{":
            group = _brace_group(text, pos)
            if group is not None:
                return group[0]
        elif pos < len(text) and text[pos] == " ":
            match = re.match(rf" +([^\s$]{{1,{MAX_ANSWER_CHARS}}})", text[pos : pos + MAX_ANSWER_CHARS + 8])
            if match:
                return match.group(1)
        end = start
    return None


def last_answer_line(text: str, tail_chars: int | None = DAPO_TAIL_CHARS) -> str | None:
    """The rest of the line after the last `Answer:` marker (case-insensitive), searched in the last `tail_chars`.

    Whitespace (newlines included) right after the marker is skipped, so `Answer:\\n42` gives `42`.
    """
    tail = text[-(tail_chars or MAX_SEARCH_CHARS) :]
    markers = list(_ANSWER_MARKER.finditer(tail))
    if not markers:
        return None
    rest = tail[markers[-1].end() :].lstrip()
    return rest.split("\n", 1)[0].strip()


def extract_dapo_answer(text: str) -> str | None:
    """DAPO rule: last `Answer:` line in the last 300 characters, else the last `\\boxed{}` anywhere."""
    answer = last_answer_line(text, DAPO_TAIL_CHARS)
    if not answer:
        answer = last_boxed(text)
    return _bounded(answer)


def extract_boxed_answer(text: str) -> str | None:
    """Evaluation rule: last `\\boxed{}`, else the last `answer:` line of the completion."""
    answer = last_boxed(text)
    if not answer:
        answer = last_answer_line(text, None)
    return _bounded(answer)


def _bounded(answer: str | None) -> str | None:
    if answer is None:
        return None
    answer = answer.strip()
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer
