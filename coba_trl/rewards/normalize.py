"""Minerva / DAPO-style normalisation of a final answer, and an exact fast path for plain numbers.

The DAPO training grader (verl ``math_dapo``) compares answers as strings after a Minerva-style clean-up: keep the
right-hand side of an ``=``, drop ``$`` and ``\\text{}`` wrappers, units and spacing, remove commas in integers and
repair ``\\frac12`` / ``\\sqrt2`` shorthands. ``normalize_answer`` does that clean-up (written from that
description); ``as_number`` then decides plain numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``) exactly in the
trainer process, so only genuinely symbolic answers need the math-verify worker (``equivalence.py``).
"""

import re
from fractions import Fraction

from coba_trl.rewards.extraction import last_boxed

_UNIT_WORDS = (
    "square units|square feet|square inches|square meters|square centimeters|sq units|units|unit|"
    "degrees|degree|radians|cm|mm|km|m|meters|meter|metres|inches|inch|in|feet|foot|ft|miles|mile|mph|"
    "hours|hour|hrs|minutes|minute|mins|min|seconds|second|sec|s|days|day|weeks|years|"
    "dollars|dollar|cents|cent|points|ways|integers|digits|people|students|pounds|kg|g|gm|grams|liters|"
    "edges|meals|sides|games|times|numbers|km/h|km/hr|m/s|mi/h|ft/s"
)
_TEXT_UNIT = re.compile(r"(?<=[\d}])\s*\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z\s/.]*\}(?:\^\{?[23]\}?)?$")
_TRAILING_UNITS = re.compile(
    r"(?:\\?[ ,~]|\\[;!])*(?:\\(?:text|mbox|mathrm)\{\s*)?(?:" + _UNIT_WORDS + r")\b\.?\}?(?:\^\{?[23]\}?)?$"
)
_LEADING_PHRASE = re.compile(r"^(?:the\s+)?(?:final\s+)?(?:answer\s+is|answer\s*:|ans\s*:)\s*", re.IGNORECASE)
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_REMOVED = (
    "\\left",
    "\\right",
    "\\displaystyle",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\quad",
    "\\qquad",
    "{,}",
    "\\%",
    "%",
    "\\$",
    "^\\circ",
    "^{\\circ}",
    "°",
    "~",
    "**",
    "`",
)
_CHAR_FIXES = {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times", "\u221a": "\\sqrt", "\u03c0": "\\pi"}
_CONJUNCTION = re.compile(r"\s*(?:\\(?:text|mbox|mathrm)\{\s*(?:or|and)\s*\}|\b(?:or|and)\b)\s*")
"""`x = 3 or x = -3` and `2 and -2` list several answers: make them comma-separated for math-verify."""
_ESCAPED_SPACE = re.compile(r"(?<!\\)\\ ")
"""`\\ ` (a LaTeX space), but not the space after a `\\\\` row break."""
_SPECIAL_TOKENS = re.compile(r"<\|[^<>|]{1,40}\|>|</?s>|<\uff5c[^<>\uff5c]{1,40}\uff5c>")
_NUMBER_THEN_WORDS = re.compile(r"^([+-]?\d[\d,]*(?:\.\d+)?)\s+[A-Za-z]{2,}[A-Za-z\s.'-]*$")
"""`12 apples`, `5 red marbles`: a number followed by plain words is that number."""
_MIXED_NUMBER = re.compile(r"^([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SPACES = re.compile(r"(\\[a-zA-Z]+)?\s+(?=([a-zA-Z])?)")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_SCIENTIFIC = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)[eE][+-]?\d{1,3}$")
_FRACTION = re.compile(r"^([+-]?)(?:\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}|(\d+)/(\d+))$")


def _drop_spaces(text: str) -> str:
    """Remove whitespace, except one space between a LaTeX command and a following letter (`\\pi r`)."""

    def keep(match: re.Match) -> str:
        command, next_letter = match.group(1), match.group(2)
        if command and next_letter:
            return command + " "
        return command or ""

    return _SPACES.sub(keep, text)


def _strip_units(text: str) -> str:
    """Drop a trailing unit (`5 cm`, `12\\text{ dollars}`, `9 square units`) that follows a number or a group."""
    match = _TRAILING_UNITS.search(text)
    if match is None or match.start() == 0 or text[: match.start()].rstrip()[-1:] not in "0123456789})":
        return text
    return text[: match.start()].strip()


def _fix_shorthands(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{2}` -> `\\frac{1}{2}`, `\\sqrt2` -> `\\sqrt{2}`."""
    text = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", text)
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", text)
    text = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", text)
    return text


def _unwrap_boxed(text: str) -> str:
    inner = last_boxed(text) if ("\\boxed" in text or "\\fbox" in text) else None
    return inner if inner is not None else text


def normalize_answer(answer: str) -> str:
    r"""Canonical string form of a final answer (Minerva / DAPO normalisation, plus a few human-obvious fixes).

    >>> normalize_answer(r"x = \$1,000 \text{ dollars}.")
    '1000'
    """
    text = _SPECIAL_TOKENS.sub("", answer).strip()
    for bad, good in _CHAR_FIXES.items():
        text = text.replace(bad, good)
    text = _LEADING_PHRASE.sub("", text).replace("\\$", "")
    text = _unwrap_boxed(text)
    dollars = re.search(r"\$+([^$]+)\$+", text)
    if dollars:
        text = dollars.group(1)
    text = text.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    text = _unwrap_boxed(text)
    text = _CONJUNCTION.sub(",", text)
    if "=" in text and not re.search(r"[<>;]|,(?!\d{3}(?!\d))|\\[lg]eq?|\\neq", text):
        text = text.split("=")[-1]
    text = _strip_units(_strip_units(_TEXT_UNIT.sub("", text.strip().rstrip(".").strip())))
    text = _NUMBER_THEN_WORDS.sub(r"\1", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\mbox", "\\text")
    text = _TEXT_WRAPPER.sub(r"\1", text)
    text = _ESCAPED_SPACE.sub("", text)
    for removed in _REMOVED:
        text = text.replace(removed, "")
    text = text.replace("$", "")
    text = _drop_spaces(text).rstrip(".").strip()
    text = _fix_shorthands(text)
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    choice = re.fullmatch(r"\(([A-Ea-e])\)", text)
    if choice:
        text = choice.group(1).upper()
    if _PLAIN_NUMBER.match(text):
        text = _canonical_decimal(text)
    return text


def _canonical_decimal(text: str) -> str:
    """`+007` -> `7`, `3.50` -> `3.5`, `2.` -> `2`, `-0` -> `0` (plain decimals only)."""
    sign = "-" if text.startswith("-") else ""
    text = text.lstrip("+-")
    whole, _, frac = text.partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    number = whole + ("." + frac if frac else "")
    return "0" if number == "0" else sign + number


def as_number(text: str) -> Fraction | None:
    """Exact value of a normalised plain number, else None.

    Integers, decimals, `1e3`, `3/4`, `\\frac{3}{4}`, `-\\frac{3}{4}`, and mixed numbers such as `3\\frac{1}{2}` (3.5).
    """
    if len(text) > 60:
        return None
    if _PLAIN_NUMBER.match(text) or _SCIENTIFIC.match(text):
        return Fraction(text)
    mixed = _MIXED_NUMBER.match(text)
    if mixed and 0 < int(mixed.group(3)) < int(mixed.group(4)):
        value = int(mixed.group(2)) + Fraction(int(mixed.group(3)), int(mixed.group(4)))
        return -value if mixed.group(1) == "-" else value
    match = _FRACTION.match(text)
    if not match:
        return None
    sign, num, den = match.group(1), match.group(2) or match.group(4), match.group(3) or match.group(5)
    if int(den) == 0:
        return None
    value = Fraction(int(num), int(den))
    return -value if sign == "-" else value
