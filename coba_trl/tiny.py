"""Tiny, locally built Qwen2 models and byte-level tokenizers.

Nothing here touches the Hugging Face Hub: the tests and the offline CPU demo build their models from these
helpers so they run without a network. The tokenizer is byte-level (every UTF-8 byte is one token, no merges),
so any text round-trips, and it carries a minimal ChatML template like Qwen's.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with a 256-symbol alphabet plus ChatML special tokens (vocabulary size 259)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[SPECIAL_TOKENS[1]],
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [SPECIAL_TOKENS[1]]})
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def build_tiny_qwen2(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 512,
    seed: int = 0,
    num_key_value_heads: int | None = None,
    vocab_size: int | None = None,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM sized for CPU tests; its vocabulary matches ``tokenizer``.

    ``num_key_value_heads`` (default: ``num_attention_heads``) and ``vocab_size`` (default: ``len(tokenizer)``) give
    a real model's shape, e.g. Qwen2.5-0.5B's 2 key-value heads and 151,936 rows, of which the tokenizer uses the first.
    Built on the current default device (``with torch.device("cuda"): ...``).
    """
    import torch

    config = Qwen2Config(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads or num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
