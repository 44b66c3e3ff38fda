"""Tiny, locally built Qwen2 models, a tiny vision-language model and byte-level tokenizers.

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
    # The tied head is a view of the embedding and never saved: declared so, transformers' Trainer ties it again on
    # a resume instead of warning that the checkpoint lacks `lm_head.weight`.
    model._keys_to_ignore_on_save = set(model.all_tied_weights_keys)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# ChatML whose message content may also be a list of parts: {"type": "image"} (an image placeholder) or text.
CHATML_VISION_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_llava(image_size: int = 28, hidden_size: int = 32, seed: int = 0):
    """A randomly initialised LLaVA (a 1-layer CLIP vision tower, a 2-layer Qwen2 language model) and its processor,
    built from `build_byte_tokenizer` plus an `<image>` token and a PIL CLIP image processor: `(model, processor)`.

    Every image becomes (image_size / 14)^2 `<image>` tokens (4 at the default 28 pixels). LLaVA rather than
    Qwen2-VL: transformers' Qwen2-VL processor also needs a video processor, which needs torchvision.
    """
    import torch
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        Qwen2Config,
    )

    tokenizer = build_byte_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": [SPECIAL_TOKENS[1], "<image>"]})
    tokenizer.chat_template = CHATML_VISION_TEMPLATE
    size = {"shortest_edge": image_size}
    image_processor = CLIPImageProcessorPil(size=size, crop_size={"height": image_size, "width": image_size})
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,
        chat_template=CHATML_VISION_TEMPLATE,
    )
    vision = CLIPVisionConfig(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=14,
    )
    text = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlavaForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, processor
