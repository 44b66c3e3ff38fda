"""Processes simulated by threads, for testing code that gathers and broadcasts across processes without launching
any: `World.run` runs one function per simulated process, and `World.patch(module)` replaces that module's
`gather_object` / `broadcast_object_list` (accelerate's, those it imported) with collectives among the threads. A
collective that not every process joins times out (`threading.BrokenBarrierError`) instead of hanging."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from types import SimpleNamespace
from unittest.mock import patch


class World:
    def __init__(self, num_processes: int, timeout: float = 10.0):
        self.num_processes = num_processes
        self._barrier = threading.Barrier(num_processes, timeout=timeout)
        self._slots: list = [None] * num_processes
        self._local = threading.local()

    @property
    def rank(self) -> int:
        return self._local.rank

    def accelerator(self, rank: int) -> SimpleNamespace:
        """The attributes of an accelerate `Accelerator` that generation code reads, for process `rank`."""
        return SimpleNamespace(process_index=rank, is_main_process=rank == 0, num_processes=self.num_processes)

    def gather_object(self, objects: list) -> list:
        self._slots[self.rank] = list(objects)
        self._barrier.wait()
        gathered = [item for slot in self._slots for item in slot]
        self._barrier.wait()
        return gathered

    def broadcast_object_list(self, objects: list, from_process: int = 0) -> list:
        if self.rank == from_process:
            self._slots[from_process] = list(objects)
        self._barrier.wait()
        objects[:] = self._slots[from_process]
        self._barrier.wait()
        return objects

    def patch(self, *modules) -> ExitStack:
        stack = ExitStack()
        for module in modules:
            for name in ("gather_object", "broadcast_object_list"):
                if hasattr(module, name):  # the collectives the module imported
                    stack.enter_context(patch.object(module, name, getattr(self, name)))
        return stack

    def run(self, *programs) -> list:
        """Run `programs[r]()` as process r, all at once; returns their results in process order."""

        def as_rank(rank):
            self._local.rank = rank
            return programs[rank]()

        with ThreadPoolExecutor(max_workers=self.num_processes) as pool:
            return list(pool.map(as_rank, range(self.num_processes)))


class FakeServer:
    """What `VLLMClient.generate` answers: per prompt, n completions [*prompt, -1, child], prompt-major."""

    def __init__(self):
        self.requests = []
        self.sampling = []  # each request's arguments other than the prompts and n

    def generate(self, prompts, n=1, **sampling):
        self.requests.append((len(prompts), n))
        self.sampling.append(sampling)
        completions = [[*prompt, -1, child] for prompt in prompts for child in range(n)]
        return {
            "prompt_ids": [list(prompt) for prompt in prompts],
            "completion_ids": completions,
            "logprobs": [[[-0.5]] * len(c) for c in completions],
            "logprob_token_ids": [[[t] for t in c] for c in completions],
        }


SAMPLING = dict(
    repetition_penalty=1.0,
    temperature=1.0,
    top_p=1.0,
    top_k=-1,
    min_p=None,
    max_completion_length=8,
    logprobs=0,
    structured_outputs_regex=None,
    generation_kwargs={},
    enable_sleep_mode=False,
)


def server_generation(cls, world: World, rank: int, server: FakeServer):
    """An instance of TRL's `VLLMGeneration` (or a subclass) in server mode on process `rank`, without vLLM."""
    generation = object.__new__(cls)
    for name, value in {**SAMPLING, "mode": "server", "vllm_client": server}.items():
        setattr(generation, name, value)
    generation.accelerator = world.accelerator(rank)
    return generation
