"""The CPU server route's weight files, without vLLM: what the trainer's client writes (with LoRA, the merged
weights), where it may write them and the server may read them (one private folder per user), and that the file is
gone after every sync. The same route through a real server: test_vllm_server.py."""

import os
import tempfile
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from scripts.tiny_coba import tiny_model
from trl.distributed import DistributedBackend
from trl.generation.vllm_generation import VLLMGeneration

from coba_trl.generation.cpu_weights import LOAD_METHOD, CPUWeightSync, CPUWeightSyncClient, weights_folder

Q_PROJ = "model.layers.0.self_attn.q_proj"


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The system's temporary folder, for this test: `tmp_path`."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def client_that_loads(loaded: list, error: str = "") -> CPUWeightSyncClient:
    """The trainer's client, its server stood in for by a function that reads the file it is asked to load."""
    client = object.__new__(CPUWeightSyncClient)  # no server to connect to
    client.base_url = "http://127.0.0.1:1"

    def post(url, json):
        assert url.endswith("/collective_rpc") and json["method"] == LOAD_METHOD
        (path,) = json["args"]
        loaded.append((path, load_file(path)))
        return {"results": [error]}  # one worker's answer

    client._post = post
    return client


def trl_weights(model):
    """TRL's own weight iterator of a server sync (`VLLMGeneration._iter_named_params`) over `model`, on one process."""
    generation = object.__new__(VLLMGeneration)  # no engine: the iterator needs only the model and the backend
    generation.model = model
    generation._dist = DistributedBackend(SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None)))
    return generation._iter_named_params()


def test_the_weight_file_holds_the_merged_lora_weights(temp_dir):
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

    loaded = []
    client_that_loads(loaded).update_named_params(None, trl_weights(model))
    ((path, weights),) = loaded
    torch.testing.assert_close(weights[f"{Q_PROJ}.weight"], merged)
    assert not any("lora" in name or "base_layer" in name for name in weights)
    torch.testing.assert_close(q_proj.base_layer.weight, base)  # TRL unmerged the adapter afterwards, as before
    assert os.path.dirname(path) == weights_folder() and not os.path.exists(path)


def test_the_weight_file_is_removed_when_the_server_fails(temp_dir):
    model, _ = tiny_model()
    loaded = []
    with pytest.raises(RuntimeError, match="did not load the trainer's weights: RuntimeError: no room"):
        client_that_loads(loaded, "RuntimeError: no room").update_named_params(None, trl_weights(model))
    ((path, _),) = loaded
    assert not os.path.exists(path) and os.listdir(weights_folder()) == []


def test_the_weights_folder_is_this_users_alone(temp_dir):
    folder = weights_folder()
    assert folder == str(temp_dir / f"coba-trl-weights-{os.getuid()}")
    assert os.stat(folder).st_mode & 0o777 == 0o700
    os.chmod(folder, 0o755)  # others could list it: refused until it is removed
    with pytest.raises(
        PermissionError, match=r"coba-trl-weights-\d+ must be a folder owned by user \d+.*0700.*Remove"
    ):
        weights_folder()
    os.rmdir(folder)
    os.symlink(temp_dir, folder)  # a link (another user's folder, say) in its place
    with pytest.raises(PermissionError, match="must be a folder"):
        weights_folder()


def test_the_server_loads_weight_files_only_from_that_folder(temp_dir):
    # Its /collective_rpc endpoint has no authentication: whoever reaches it names the path.
    folder = weights_folder()
    outside = temp_dir / "weights.safetensors"
    outside.write_bytes(b"")
    inside_link = os.path.join(folder, "weights-link.safetensors")
    os.symlink(outside, inside_link)
    extension = CPUWeightSync()  # refused before its model runner is reached
    for path in (str(outside), os.path.join(folder, "..", "weights.safetensors"), inside_link, "/etc/passwd"):
        refusal = extension.coba_load_weights_file(path)  # returned, not raised: that would stop vLLM's server
        assert refusal.startswith(f"PermissionError: this vLLM server loads weight files only from {folder},")
        assert refusal.endswith(f"refused: {path!r}.")
    assert extension.coba_weight_sync_ready() == folder
