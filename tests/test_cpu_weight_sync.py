"""The CPU server route's weight files, without vLLM: what the trainer's client writes (with LoRA, the merged
weights), that the file is gone after every sync, and that the server's worker extension answers every call with a
result or an error, never a raise. Its attackers (links, FIFOs, races, a squatted folder): test_cpu_private_folder.py.
The same route through a real server: test_vllm_server.py."""

import os
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from scripts.tiny_coba import tiny_model
from trl.generation.vllm_generation import VLLMGeneration

import coba_trl.generation.cpu_weights as cpu_weights
from coba_trl.generation.cpu_weights import (
    LOAD_METHOD,
    CPUWeightSync,
    CPUWeightSyncClient,
    client_base_url,
)
from coba_trl.generation.private_folder import FOLDER_ENV, SOCKET_NAME, default_folder, make_private_folder
from coba_trl.generation.unix_http import socket_url

Q_PROJ = "model.layers.0.self_attn.q_proj"


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A server's side without vLLM: its private folder (named to the extension as the server command names it), and
    the weights its extension handed to the engine's loader, by sync."""
    folder = make_private_folder(str(tmp_path / "coba-trl"))
    monkeypatch.setenv(FOLDER_ENV, folder)
    loaded = []
    monkeypatch.setattr(cpu_weights, "load_weights", lambda runner, weights: loaded.append(dict(weights)))
    extension = CPUWeightSync()
    extension.model_runner = None  # what vLLM's worker holds; the stand-in loader above does not use it
    return SimpleNamespace(folder=folder, loaded=loaded, extension=extension)


def client_of(server, answer: str | None = None) -> CPUWeightSyncClient:
    """The trainer's client, its requests answered by `server`'s extension (or the error `answer`)."""
    client = object.__new__(CPUWeightSyncClient)  # no server to connect to
    client.socket_path = os.path.join(server.folder, SOCKET_NAME)
    client.folder, client.base_url = server.folder, socket_url(client.socket_path)

    def post(url, json):
        assert url.endswith("/collective_rpc") and json["method"] == LOAD_METHOD
        (name,) = json["args"]
        server.names.append(name)
        return {"results": [{"error": answer} if answer else server.extension.coba_load_weights_file(name)]}

    server.names = []
    client._post = post
    return client


def trl_weights(model):
    """TRL's own weight iterator of a server sync (`VLLMGeneration._iter_named_params`) over `model`, on one process."""
    from trl.distributed import DistributedBackend

    generation = object.__new__(VLLMGeneration)  # no engine: the iterator needs only the model and the backend
    generation.model = model
    generation._dist = DistributedBackend(SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None)))
    return generation._iter_named_params()


def test_the_weight_file_holds_the_merged_lora_weights(server):
    # TRL merges the adapter, yields the parameters themselves and unmerges in place after its last yield: what the
    # server loads must be the merged weights, not the base weights they are unmerged back to.
    model, _ = tiny_model()
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero: a trained adapter has moved it
                parameter.normal_(std=0.5)
    q_proj = model.get_submodule(f"base_model.model.{Q_PROJ}")
    base = q_proj.base_layer.weight.detach().clone()
    merged = base + q_proj.get_delta_weight("default")
    assert (merged - base).norm() > 0.1 * base.norm()

    client_of(server).update_named_params(None, trl_weights(model))
    (weights,) = server.loaded
    torch.testing.assert_close(weights[f"{Q_PROJ}.weight"], merged)
    assert not any("lora" in name or "base_layer" in name for name in weights)
    torch.testing.assert_close(q_proj.base_layer.weight, base)  # TRL unmerged the adapter afterwards, as before
    (name,) = server.names
    assert os.sep not in name and os.listdir(server.folder) == []  # a bare name; the file is gone


def test_the_weight_file_is_removed_when_the_server_fails(server):
    model, _ = tiny_model()
    with pytest.raises(RuntimeError, match="did not load the trainer's weights: RuntimeError: no room"):
        client_of(server, "RuntimeError: no room").update_named_params(None, trl_weights(model))
    assert len(server.names) == 1 and os.listdir(server.folder) == []


def test_every_entry_point_returns_its_errors(server, tmp_path, monkeypatch):
    # A worker method that raises stops vLLM's server: each one answers an error instead, whatever it is called with.
    entry_points = sorted(name for name in vars(CPUWeightSync) if not name.startswith("_"))
    assert entry_points == ["coba_load_weights_file", "coba_weight_sync_ready"]  # a new one joins the calls below
    extension = server.extension
    save_file({"w": torch.ones(2)}, os.path.join(server.folder, "weights-ok.safetensors"))
    (tmp_path / "coba-trl" / "weights-garbage.safetensors").write_bytes(b"not a safetensors file")
    monkeypatch.setattr(cpu_weights, "load_weights", lambda runner, weights: runner.reload_weights(weights))
    calls = {
        "the loader fails": (extension.coba_load_weights_file, ("weights-ok.safetensors",), {}),
        "not safetensors": (extension.coba_load_weights_file, ("weights-garbage.safetensors",), {}),
        "no such file": (extension.coba_load_weights_file, ("weights-none.safetensors",), {}),
        "a path": (extension.coba_load_weights_file, ("/etc/passwd",), {}),
        "no name": (extension.coba_load_weights_file, (), {}),
        "a number": (extension.coba_load_weights_file, (7,), {}),
        "extra arguments": (extension.coba_weight_sync_ready, ("x",), {"y": "z"}),
    }
    for what, (method, args, kwargs) in calls.items():
        answer = method(*args, **kwargs)
        assert set(answer) == {"error"} and answer["error"], what
    assert extension.coba_weight_sync_ready() == {"folder": server.folder}
    (tmp_path / "open").mkdir(mode=0o755)
    for bad_folder in (
        str(tmp_path / "open"),
        "",
    ):  # readable by others; none named (a server vLLM's own command started)
        monkeypatch.setenv(FOLDER_ENV, bad_folder)
        for method in (
            extension.coba_weight_sync_ready,
            lambda: extension.coba_load_weights_file("weights-ok.safetensors"),
        ):
            assert "PermissionError" in method()["error"]


def test_a_cpu_trainer_reaches_the_server_through_its_socket_only(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    # Unset, TRL's defaults: this user's own server on this machine.
    assert client_base_url(None, "0.0.0.0", 8000) == f"unix:{tmp_path}/coba-trl/{SOCKET_NAME}"
    assert default_folder() == str(tmp_path / "coba-trl")
    assert client_base_url("unix:/x/vllm.sock", "0.0.0.0", 8000) == "unix:/x/vllm.sock"
    with pytest.raises(ValueError, match=r"vllm_server_base_url='http://127.0.0.1:8000': .* unix:PATH"):
        client_base_url("http://127.0.0.1:8000", "0.0.0.0", 8000)
    with pytest.raises(ValueError, match=r"vllm_server_host='127.0.0.1' / vllm_server_port=8000: .*Leave them unset"):
        client_base_url(None, "127.0.0.1", 8000)  # an address the user gave is not silently replaced
