"""The guard behind the CPU weight sync's LM-head repack, on a real colocated engine (vLLM's CPU build): after every
sync the head computes with the trainer's weights, or the sync stops with an error naming the vLLM version and what
it did not find. The engine is the session's shared one (`scripts/vllm_fixtures.py`)."""

import itertools

import pytest
import torch
from scripts.vllm_runs import RoundWatch, coba_trainer
from transformers import AutoModelForCausalLM

import coba_trl.generation.cpu_weights as cpu_weights

pytestmark = pytest.mark.vllm
SEEDS = itertools.count(2)


@pytest.fixture
def engine_and_weights(tmp_path, vllm_models, shared_engines):
    """The shared engine's model runner (tied head), as a trainer builds it, and weights it does not hold yet."""
    trainer = coba_trainer(vllm_models["tied"], str(tmp_path), RoundWatch(), max_steps=1)
    engine = trainer.vllm_generation.llm
    model = AutoModelForCausalLM.from_pretrained(vllm_models["tied"])
    torch.manual_seed(next(SEEDS))  # each test's weights differ from what the engine holds
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    weights = [(name, parameter.detach()) for name, parameter in model.named_parameters()]
    return engine.llm_engine.model_executor.driver_worker.model_runner, weights


def test_the_guard_passes_on_the_real_engine(engine_and_weights):
    runner, weights = engine_and_weights
    cpu_weights.load_weights(runner, weights)
    embedding = dict(weights)["model.embed_tokens.weight"]
    torch.testing.assert_close(runner.get_model().lm_head.weight[: embedding.shape[0]], embedding)


@pytest.mark.parametrize(
    "renamed, message",
    [("HEAD_METHOD", "no `quant_method` of class `RenamedMethod`"), ("KERNEL", "no `RenamedMethod` attribute")],
)
def test_the_guard_names_what_a_vllm_version_renamed(engine_and_weights, monkeypatch, renamed, message):
    import vllm

    runner, weights = engine_and_weights
    monkeypatch.setattr(cpu_weights, renamed, "RenamedMethod")
    with pytest.raises(RuntimeError, match=rf"vLLM {vllm.__version__} \(CPU build\) has {message}.*on its `lm_head`"):
        cpu_weights.load_weights(runner, weights)


def test_the_guard_stops_a_sync_that_leaves_the_head_stale(engine_and_weights, monkeypatch):
    # A vLLM version whose repack no longer updates the head's kernel: the head would keep its old weights.
    import vllm
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    runner, weights = engine_and_weights
    monkeypatch.setattr(UnquantizedEmbeddingMethod, "process_weights_after_loading", lambda self, layer: None)
    with pytest.raises(
        RuntimeError, match=rf"vLLM {vllm.__version__} .*LM head \(model.embed_tokens.weight\) computes"
    ):
        cpu_weights.load_weights(runner, weights)
