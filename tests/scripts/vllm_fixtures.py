"""Real vLLM for the tests marked `vllm`: tiny models vLLM's CPU build can load, engines shared across tests, and
one server started with the README's command.

A colocated engine takes about 20 s to start, so TRL's `vllm.LLM` is replaced, for the session, by a factory that
builds one engine per model folder and hands it to every trainer built on that folder: each trainer pushes its own
weights before its first generation, so what an earlier test left in the engine does not matter. The engines of the
`tied` and `untied` folders run in float32 (as coba-trl builds them for a float32 trainer), where vLLM's CPU build
packs every linear layer's weight into its GEMM kernel on any x86 CPU, the case coba-trl's weight sync exists for;
`tied_bf16` runs in bfloat16, vLLM's own default for a float32 checkpoint, whose kernels depend on the processor.

The server is the README's: its commands are read from README.md and run, as written, by a shell in a temporary
folder, with `python` this interpreter and no `VLLM_*` variable set (a KV cache size among them), as a user's shell
would run them. One thing differs: `XDG_RUNTIME_DIR` is a temporary folder, so the server's socket and weight folder
(`coba-trl` in it) are this test run's, not those of a server the user runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

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


def readme_server_commands() -> tuple[str, str, str]:
    """The README's CPU server commands, continuation lines joined: write the model, start the server, train."""
    from tests.test_readme import shell_commands

    commands = shell_commands()
    write = [c for c in commands if c.startswith("python -m coba_trl.demo.model")]
    serve = [c for c in commands if "coba_trl.generation.cpu_server" in c]
    train = [c for c in commands if c.endswith("--use_vllm --vllm_mode server")]
    assert len(write) == len(serve) == len(train) == 1, (write, serve, train)
    return write[0], serve[0], train[0]


def shell_environment() -> dict[str, str]:
    """This process's environment less what a user's shell would not have: `python` is this interpreter, no VLLM_*
    variable is set, no torch rendezvous (a colocated engine of an earlier test sets one up in this process)."""
    unset = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
    env = {name: value for name, value in os.environ.items() if not name.startswith("VLLM_") and name not in unset}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """The README's server on the demo's model, started by the README's commands (module docstring); yields (base URL,
    model folder)."""
    from coba_trl.generation.cpu_server import running_server

    write, serve, _ = readme_server_commands()
    cwd, env = tmp_path_factory.mktemp("vllm_server"), shell_environment()
    # Open to others on the way to it (unlike pytest's own folders, or a real runtime folder): the test of another
    # user's calls then stands on the server's own folder alone.
    runtime = tempfile.mkdtemp(prefix="coba-trl-runtime-")
    os.chmod(runtime, 0o755)
    env["XDG_RUNTIME_DIR"] = runtime
    subprocess.run(["bash", "-c", write], cwd=cwd, env=env, check=True, capture_output=True)
    socket_path = os.path.join(runtime, "coba-trl", "vllm.sock")
    try:
        with running_server(serve, socket_path, str(cwd / "server.log"), cwd=str(cwd), env=env) as base_url:
            yield base_url, str(cwd / "outputs" / "demo-model")
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
