"""Real vLLM for the tests marked `vllm`: tiny models vLLM's CPU build can load, engines shared across tests, and
one server started with the README's command.

A colocated engine takes about 20 s to start, so TRL's `vllm.LLM` is replaced, for the session, by a factory that
builds one engine per model folder and hands it to every trainer built on that folder: each trainer pushes its own
weights before its first generation, so what an earlier test left in the engine does not matter. The engines of the
`tied` and `untied` folders run in float32 (as coba-trl builds them for a float32 trainer), where vLLM's CPU build
packs every linear layer's weight into its GEMM kernel on any x86 CPU, the case coba-trl's weight sync exists for;
`tied_bf16` runs in bfloat16, vLLM's own default for a float32 checkpoint, whose kernels depend on the processor.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

MODEL_SHAPE = dict(hidden_size=64, num_attention_heads=2)  # head size 32: vLLM's CPU attention needs 32 or more
ENGINE_DTYPE = {"tied": None, "untied": None, "tied_bf16": "bfloat16"}  # None: as coba-trl builds it (float32)
KV_CACHE_GIB = "1"


def save_tiny_model(folder: str, tied: bool) -> None:
    import torch

    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    tokenizer = build_byte_tokenizer()
    model = build_tiny_qwen2(tokenizer, **MODEL_SHAPE)
    if not tied:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="session")
def vllm_models(tmp_path_factory):
    """Folders of tiny Qwen2 models (tied and untied embeddings) with the byte tokenizer, by name."""
    root = tmp_path_factory.mktemp("vllm_models")
    folders = {name: str(root / name) for name in ENGINE_DTYPE}
    for name, folder in folders.items():
        save_tiny_model(folder, tied=name != "untied")
    return folders


@pytest.fixture(scope="session")
def shared_engines(vllm_models):
    """TRL builds one engine per model folder for the whole session (module docstring); yields the cache."""
    import trl.generation.vllm_generation as vllm_generation

    forced = {folder: ENGINE_DTYPE[name] for name, folder in vllm_models.items() if ENGINE_DTYPE[name]}
    engines = {}
    build = vllm_generation.LLM

    def shared_llm(**kwargs):
        model = kwargs["model"]
        if model not in engines:
            dtype = forced.get(model, kwargs.get("dtype", "float32"))
            engines[model] = build(**{**kwargs, "dtype": dtype, "max_num_seqs": 64})
        return engines[model]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        patch.setattr(vllm_generation, "LLM", shared_llm)
        yield engines


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A server on the demo's model, written and served with the README's commands; yields (base URL, model folder)."""
    from coba_trl.generation.cpu_server import running_server

    root = tmp_path_factory.mktemp("vllm_server")
    model_dir = str(root / "demo-model")
    subprocess.run([sys.executable, "-m", "coba_trl.demo.model", model_dir], check=True, capture_output=True)
    env = {"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB, "HF_HUB_OFFLINE": "1"}
    with running_server(model_dir, free_port(), str(root / "server.log"), env=env) as base_url:
        yield base_url, model_dir
