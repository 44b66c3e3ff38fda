"""PEFT adapters whose trained weights TRL's vLLM weight sync cannot carry are refused when the trainer is built,
before any vLLM engine starts; those it carries are accepted. The engine is never started here: the backend's
`_init_vllm` is replaced, so a guard that let an adapter through shows as a trainer built without an error.

Why the guard exists is checked on TRL's own sync (`VLLMGeneration._iter_named_params`, what every vLLM mode sends):
when a TRL upgrade sends these weights right, the last two tests fail and the guard can go.
"""

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
import trl.generation.vllm_generation as trl_vllm_generation
from peft import LoraConfig, get_peft_model
from scripts.tiny_coba import TINY_ARGS, parity_reward, prompt_dataset, tiny_model

import coba_trl.generation.vllm_backend as vllm_backend
import coba_trl.trainer as trainer_module
from coba_trl import CoBAConfig, CoBAGRPOTrainer

LORA = dict(r=4, target_modules=["q_proj"], lora_dropout=0.0)


@pytest.fixture
def no_engine(monkeypatch):
    """The vLLM backend is built as in a run, without starting vLLM; records whether it got that far."""
    started = []
    monkeypatch.setattr(trainer_module, "check_vllm_installed", lambda use_vllm: None)
    monkeypatch.setattr(vllm_backend.CoBAVLLMGeneration, "_init_vllm", lambda self: started.append(self.model))
    return started


def build(tmp_path, peft_config, tied=True, use_vllm=True):
    model, tokenizer = tiny_model()
    if not tied:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        **TINY_ARGS,
    )
    return CoBAGRPOTrainer(
        model,
        parity_reward,
        args=args,
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
        peft_config=peft_config,
    )


def test_trainable_token_indices_are_refused_with_vllm(tmp_path, no_engine):
    config = LoraConfig(**LORA, trainable_token_indices=[5, 7])
    with pytest.raises(ValueError, match=r"trainable_token_indices=\[5, 7\].*TRL's vLLM weight sync") as error:
        build(tmp_path, config)
    assert "use_vllm=False" in str(error.value) and not no_engine


@pytest.mark.parametrize(
    ("peft_fields", "field"),
    [
        (dict(modules_to_save=["lm_head"]), "modules_to_save"),
        (dict(modules_to_save=["embed_tokens"]), "modules_to_save"),
        (dict(target_modules=["q_proj", "embed_tokens"]), "target_modules"),
    ],
    ids=["saved-head", "saved-embedding", "lora-embedding"],
)
def test_a_head_apart_from_the_embedding_of_a_tied_model_is_refused_with_vllm(tmp_path, no_engine, peft_fields, field):
    config = LoraConfig(**{**LORA, **peft_fields})
    with pytest.raises(ValueError, match=rf"peft_config's {field} .*tie_word_embeddings=True") as error:
        build(tmp_path, config)
    fix = "ensure_weight_tying=True" if field == "modules_to_save" else "Remove the embedding and the LM head"
    assert fix in str(error.value) and not no_engine


@pytest.mark.parametrize(
    ("peft_fields", "tied"),
    [
        ({}, True),
        (dict(modules_to_save=["lm_head"], ensure_weight_tying=True), True),
        (dict(modules_to_save=["lm_head"]), False),
    ],
    ids=["lora", "saved-head-kept-tied", "saved-head-untied-model"],
)
def test_adapters_the_sync_carries_are_accepted(tmp_path, no_engine, peft_fields, tied):
    build(tmp_path, LoraConfig(**{**LORA, **peft_fields}), tied=tied)
    assert len(no_engine) == 1


def test_without_vllm_trainable_token_indices_train(tmp_path):
    # The trainer's own generation uses the adapter directly: nothing to sync, nothing refused.
    trainer = build(tmp_path, LoraConfig(**LORA, trainable_token_indices=[5, 7]), use_vllm=False)
    assert trainer.args.use_vllm is False


def _trl_sync(peft_config) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """What TRL's sync sends for a trained adapter, and the trainer's input embedding and LM head weights."""
    model, _ = tiny_model()
    peft_model = get_peft_model(model, peft_config)
    with torch.no_grad():
        for parameter in peft_model.parameters():
            if parameter.requires_grad:  # as if trained
                parameter.add_(torch.randn_like(parameter))
        embedding = peft_model.get_input_embeddings()(torch.arange(model.config.vocab_size))
        head = peft_model.get_output_embeddings()(torch.eye(model.config.hidden_size)).T
    generation = object.__new__(trl_vllm_generation.VLLMGeneration)
    generation.model = peft_model
    generation._dist = SimpleNamespace(gather_params=lambda parameters: nullcontext(), is_fsdp=False)
    return {name: tensor.clone() for name, tensor in generation._iter_named_params()}, embedding, head


def test_trls_sync_sends_trained_tokens_under_names_vllm_does_not_have():
    sent, embedding, _ = _trl_sync(LoraConfig(**LORA, trainable_token_indices=[5, 7]))
    assert "model.embed_tokens.weight" not in sent
    assert any("token_adapter" in name for name in sent)


def test_trls_sync_sends_a_saved_head_apart_from_the_tied_embedding():
    # vLLM's tied head is its embedding: of what TRL sends, it can hold only the embedding.
    sent, embedding, head = _trl_sync(LoraConfig(**LORA, modules_to_save=["lm_head"]))
    assert torch.equal(sent["model.embed_tokens.weight"], embedding) and not torch.allclose(embedding, head)
    assert torch.equal(sent["lm_head.weight"], head)
