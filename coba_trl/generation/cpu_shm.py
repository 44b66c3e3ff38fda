"""Shared-memory segments of vLLM's CPU build under tensor parallelism, released as soon as every process holds them.

With `vllm_tensor_parallel_size > 1` the CPU build's tensor-parallel group communicates through one POSIX
shared-memory segment per process (`/dev/shm/<name>_<rank>`, vLLM's `_CPUSHMDistributed`). A colocated engine
(`external_launcher`) names them after its rendezvous, `env://`, so every run on a machine uses the same names, and
the segments are removed only by a destructor at the process's normal exit. A run that ends otherwise (killed, or
leaving through `os._exit` as a multi-process CPU run does to avoid a gloo teardown crash) leaves them behind, and the
next run with the same group stops at engine start: "create shm in SHMManager failed. errno: 17".

Once the engine is built every process of the group has mapped every segment, so their names can go: the memory stays
mapped until the processes end, nothing is left behind whatever ends them, and the next run creates its own.
"""

from __future__ import annotations

import os

SHM_FOLDER = "/dev/shm"


def segment_names() -> list[str]:
    """The segments this process created for vLLM's CPU tensor-parallel groups (none without such a group)."""
    from vllm.distributed import parallel_state

    names = []
    for reference in list(getattr(parallel_state, "_groups", {}).values()):
        group = reference()
        communicator = getattr(group, "device_communicator", None)
        shared = getattr(communicator, "dist_module", None)
        if hasattr(shared, "group_name"):  # the CPU build's shared-memory communicator
            names.append(f"{shared.group_name.lstrip('/')}_{communicator.rank}")
    return names


def release_segment_names() -> list[str]:
    """Remove the names of this process's segments (the memory stays mapped); returns the names removed."""
    removed = []
    for name in segment_names():
        path = os.path.join(SHM_FOLDER, name)
        if os.path.exists(path):
            os.unlink(path)
            removed.append(name)
    return removed
