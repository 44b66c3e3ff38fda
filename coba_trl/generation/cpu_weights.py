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

On a server, `CPUWeightSync` is a vLLM worker extension (`--worker-extension-cls coba_trl.generation.CPUWeightSync`):
`CPUWeightSyncClient`, the `VLLMClient` TRL's server sync talks to on a CPU trainer, writes the weights to a
safetensors file and asks the workers, through the development server's `/collective_rpc`, to load it. The file lives
in the system's temporary folder, so the server must run on the same machine (or share that folder).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator

import torch
from safetensors.torch import load_file, save_file
from trl.generation.vllm_client import VLLMClient

EXTENSION = "coba_trl.generation.CPUWeightSync"
LOAD_METHOD = "coba_load_weights_file"
READY_METHOD = "coba_weight_sync_ready"


def load_weights(model_runner, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Load `weights` (checkpoint names, as TRL's sync yields them) into the model of a vLLM CPU `model_runner`."""
    model_runner.reload_weights(weights_iterator=iter(weights))
    for module in model_runner.get_model().modules():
        method = getattr(module, "quant_method", None)
        if type(method).__name__ == "UnquantizedEmbeddingMethod" and hasattr(module, "cpu_linear"):
            method.process_weights_after_loading(module)  # pack the head again from its (possibly tied) weight


class CPUWeightSync:
    """vLLM worker extension: loads the weight files `CPUWeightSyncClient` writes (methods reached by collective_rpc)."""

    def coba_weight_sync_ready(self) -> bool:
        return True

    def coba_load_weights_file(self, path: str) -> None:
        load_weights(self.model_runner, load_file(path).items())


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
        self._weights_dir = tempfile.mkdtemp(prefix="coba-trl-weights-")
        atexit.register(shutil.rmtree, self._weights_dir, ignore_errors=True)

    def update_named_params(self, metadata, named_params: Iterator[tuple[str, torch.Tensor]]) -> None:
        path = os.path.join(self._weights_dir, "weights.safetensors")
        save_file({name: tensor.detach().to("cpu").contiguous() for name, tensor in named_params}, path)
        try:
            self._post(f"{self.base_url}/collective_rpc", json={"method": LOAD_METHOD, "args": [path]})
        finally:
            os.remove(path)
