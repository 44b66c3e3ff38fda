"""Held-out accuracy of the demo model: greedy decoding, graded on the last ``Answer:`` line."""

from __future__ import annotations

import re

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from coba_trl.demo.task import Problem

_ANSWER = re.compile(r"Answer\s*:\s*(-?\d+)\s*$", re.IGNORECASE)


def extract_integer_answer(text: str) -> int | None:
    """The integer on the last ``Answer:`` line of ``text``, or ``None``."""
    lines = text.strip().splitlines()
    match = _ANSWER.search(lines[-1]) if lines else None
    return int(match.group(1)) if match else None


@torch.no_grad()
def heldout_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    max_new_tokens: int = 12,
    batch_size: int = 256,
) -> dict[str, float]:
    """Greedy accuracy overall (``"accuracy"``) and per difficulty level (``"level_<k>"``)."""
    model.eval()
    correct: list[bool] = []
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p.question}], add_generation_prompt=True, tokenize=False
            )
            for p in chunk
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        output = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        decoded = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        correct.extend(extract_integer_answer(text) == p.answer for text, p in zip(decoded, chunk, strict=True))
    scores = {"accuracy": sum(correct) / len(correct)}
    for level in sorted({p.level for p in problems}):
        hits = [c for c, p in zip(correct, problems, strict=True) if p.level == level]
        scores[f"level_{level}"] = sum(hits) / len(hits)
    return scores
