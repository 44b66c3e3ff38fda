"""Everything coba-trl does to vLLM, in one place (the trainer calls it; TRL's generation code stays TRL's).

- `vllm_backend.CoBAVLLMGeneration`: TRL's `VLLMGeneration` keeping n-sampling in server mode, syncing weights into
  vLLM's CPU build, and syncing once per two-phase round in sleep mode.
- `cpu_weights`: the CPU weight sync itself, `CPUWeightSync`, the worker extension a CPU vLLM server is started
  with (`--worker-extension-cls coba_trl.generation.CPUWeightSync`), and `CPUWeightSyncClient`, a CPU trainer's.
- `cpu_server`: the CPU server (`python -m coba_trl.generation.cpu_server MODEL`), on a Unix socket in a folder only
  its user can open (`private_folder`, which also reads the weight files from it; `unix_http`, HTTP over it).
- `requests`: which rows are asked for in which server request, and how the completions map back.
- `peft_sync`: the PEFT adapters TRL's weight sync cannot carry into vLLM, refused before vLLM starts.
- `cpu_shm`: the shared-memory names of a tensor-parallel colocated engine on the CPU build, removed once built, so
  that a run leaves none behind.

`requests`, `peft_sync`, `private_folder` and `unix_http` import without TRL; the rest needs vLLM only when it runs.
"""

__all__ = ["CPUWeightSync"]


def __getattr__(name: str):
    if name == "CPUWeightSync":
        from coba_trl.generation.cpu_weights import CPUWeightSync

        return CPUWeightSync
    raise AttributeError(f"module 'coba_trl.generation' has no attribute {name!r}")
