"""PEFT adapters whose weights TRL 1.16's vLLM weight sync cannot carry, refused before vLLM starts.

TRL's sync (`VLLMGeneration._iter_named_params`, used by every vLLM mode and by coba-trl's CPU sync) merges the
adapter into the base weights and sends each parameter under its name with PEFT's prefixes removed. Two kinds of
adapter come out wrong, on TRL's `GRPOTrainer` as on `CoBAGRPOTrainer`:

- `trainable_token_indices`: the merged embedding is sent as `...embed_tokens.token_adapter.weight` and the token
  delta as `...token_adapter.trainable_tokens_delta.default`, names vLLM's model does not have, so vLLM never
  receives the trained rows.
- On a model whose config ties its word embeddings, an adapter on the input embedding or the LM head
  (`modules_to_save` or `target_modules`) gives the trainer a head and an embedding that differ, while vLLM's tied
  head is the embedding: it holds one matrix for both and generates from the wrong one. With `modules_to_save` and
  PEFT's `ensure_weight_tying=True` (PEFT 0.18 or later), PEFT trains one matrix for both and the sync is right.

`check_peft_sync` refuses these at construction (`CoBAVLLMGeneration.__init__`), naming the field and the fix.
"""

from __future__ import annotations

SYNC = "TRL's vLLM weight sync (which CoBAGRPOTrainer uses, as GRPOTrainer does)"
NO_VLLM = "or generate with transformers (use_vllm=False)"


def check_peft_sync(model) -> None:
    """Refuse a PEFT `model` (the trainer's, adapter applied) whose trained weights TRL's sync would not give vLLM."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not hasattr(model, "get_base_model"):
        return  # not a PEFT model: TRL sends the parameters as they are
    active = [configs[name] for name in model.active_adapters if name in configs]
    for config in active:
        indices = getattr(config, "trainable_token_indices", None)
        if indices:
            raise ValueError(
                f"peft_config sets trainable_token_indices={indices!r}, which {SYNC} cannot carry: it sends the "
                "merged embedding and the token delta under names vLLM's model does not have (`token_adapter`), so "
                "vLLM would keep generating from the original rows. Remove trainable_token_indices (to train the "
                "embedding, put its module in modules_to_save, with ensure_weight_tying=True if the model ties its "
                f"word embeddings), {NO_VLLM}."
            )
    if not _ties_word_embeddings(model.get_base_model().config):
        return
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    layers = {"input embedding": model.get_input_embeddings(), "LM head": model.get_output_embeddings()}
    tied = "the model ties its word embeddings (tie_word_embeddings=True), so vLLM's LM head is its input embedding"
    for role, layer in layers.items():
        if isinstance(layer, BaseTunerLayer):
            raise ValueError(
                f"peft_config's target_modules put an adapter on the model's {role}, but {tied}: {SYNC} merges the "
                "adapter into that one matrix, so vLLM would generate with a head and an embedding other than the "
                "trainer's. Remove the embedding and the LM head from target_modules (to train them, put them in "
                f"modules_to_save with ensure_weight_tying=True), {NO_VLLM}."
            )
        ensured = any(getattr(config, "ensure_weight_tying", False) for config in active)
        if isinstance(layer, ModulesToSaveWrapper) and not ensured:
            raise ValueError(
                f"peft_config's modules_to_save gives the model's {role} a trained copy of its own, but {tied}, and "
                f"{SYNC} cannot give vLLM a separate one: vLLM would generate with a head other than the trainer's. "
                f"Set ensure_weight_tying=True in the LoraConfig (PEFT 0.18 or later; PEFT then trains one matrix "
                f"for both), {NO_VLLM}."
            )


def _ties_word_embeddings(config) -> bool:
    """Whether vLLM ties the LM head to the input embedding: the config of the model's language model says so, which
    is what vLLM reads (`get_text_config()`, the config itself for a text-only model)."""
    return bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
