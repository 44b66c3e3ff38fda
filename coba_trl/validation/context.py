"""The context-length check: the longest prompt plus `max_completion_length` must fit the model's context and, with
colocated vLLM, `vllm_max_model_length`, so that generation does not overflow mid-run.
"""

from __future__ import annotations

import heapq

from datasets import Dataset

from coba_trl.validation.dataset import ROWS_PEEKED, dataset_columns

LONGEST_PROMPTS_TOKENIZED = 16  # prompts tokenized to find the longest one: those with the most characters


def longest_prompt_tokens(train_dataset: Dataset, processing_class) -> int | None:
    """Tokens of the longest prompt of `train_dataset` as generation sees it (chat template and generation prompt
    applied), measured on the prompts with the most characters (of a stream, among its first `ROWS_PEEKED` rows);
    None when the prompts are neither text nor chat messages of text (images, tool schemas), which this check leaves
    alone."""
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    if "prompt" not in (dataset_columns(train_dataset) or []) or not callable(getattr(tokenizer, "encode", None)):
        return None
    if isinstance(train_dataset, Dataset):
        prompts = train_dataset["prompt"]
    else:  # a stream is not read ahead: its first rows
        prompts = [row["prompt"] for row in train_dataset.take(ROWS_PEEKED)]
    if not all(_is_text_prompt(prompt) for prompt in prompts):
        return None
    longest = heapq.nlargest(LONGEST_PROMPTS_TOKENIZED, prompts, key=_prompt_characters)
    if not longest:
        return None
    lengths = []
    for prompt in longest:
        if isinstance(prompt, str):
            lengths.append(len(tokenizer.encode(prompt, add_special_tokens=False)))
        else:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
            lengths.append(len(ids))
    return max(lengths)


def _is_text_prompt(prompt) -> bool:
    if isinstance(prompt, str):
        return True
    return isinstance(prompt, list) and all(
        isinstance(message, dict) and isinstance(message.get("content"), str) for message in prompt
    )


def _prompt_characters(prompt) -> int:
    return len(prompt) if isinstance(prompt, str) else sum(len(message["content"]) for message in prompt)


def check_context_length(model, processing_class, train_dataset: Dataset, args) -> None:
    """The longest prompt plus `max_completion_length` must fit the model's context (`max_position_embeddings`) and,
    with colocated vLLM, `vllm_max_model_length`; otherwise generation would overflow on the GPUs, mid-run.

    `model` is the trainer's model (for a PEFT model, its base model's config is read); `args` its `CoBAConfig`.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    context = getattr(getattr(base, "config", None), "max_position_embeddings", None)
    vllm_context = args.vllm_max_model_length if args.use_vllm and args.vllm_mode == "colocate" else None
    if context is not None and vllm_context is not None and vllm_context > context:
        raise ValueError(
            f"vllm_max_model_length ({vllm_context}) is larger than the model's context, max_position_embeddings "
            f"({context}). Set vllm_max_model_length to at most {context}."
        )
    prompt = longest_prompt_tokens(train_dataset, processing_class)
    if prompt is None:
        return
    needed = prompt + args.max_completion_length
    lengths = (
        f"The longest prompt of train_dataset ({prompt} tokens) plus max_completion_length "
        f"({args.max_completion_length}) is {needed} tokens"
    )
    if context is not None and needed > context:
        shorter = (
            f"Set max_completion_length to at most {context - prompt}, or drop the longest prompts from train_dataset."
            if prompt < context
            else "The prompt alone fills the context, so no completion fits: drop or shorten the longest prompts (a "
            "shorter instruction, e.g. --instruction none), or train a model with a longer context."
        )
        raise ValueError(f"{lengths}, more than the model's context, max_position_embeddings ({context}). {shorter}")
    if vllm_context is not None and needed > vllm_context:
        allowed = f" (the model allows up to {context})" if context is not None else ""
        raise ValueError(
            f"{lengths}, more than vllm_max_model_length ({vllm_context}). Raise vllm_max_model_length to at least "
            f"{needed}{allowed}"
            + (f", or set max_completion_length to at most {vllm_context - prompt}." if prompt < vllm_context else ".")
        )
