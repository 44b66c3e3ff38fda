"""Server generation when processes hold different numbers of rows, as they do in a tool loop: with the collectives
simulated by threads, every process gets its own rows' completions, and a process done with its tool loop joins the
others' generations until all are done, so none waits forever."""

import threading

import pytest
import trl.generation.vllm_generation as trl_vllm_generation
from scripts.fake_collectives import FakeServer, World, server_generation

import coba_trl.generation.vllm_backend as vllm_backend
from coba_trl.generation.row_shares import Share, padding
from coba_trl.generation.vllm_backend import CoBAVLLMGeneration


def _own(prompts, completions):
    """Each completion is [*its prompt, -1, child]."""
    return all(c[: len(p)] == p and c[len(p)] == -1 for p, c in zip(prompts, completions, strict=True))


def test_padding_brings_each_process_to_the_largest_share():
    shares = [
        Share(True, 3, 1, False, ([1], None)),
        Share(True, 0, 1, False, None),
        Share(True, 2, 1, False, ([5], None)),
    ]
    assert padding(shares, 0) == ([], [])
    assert padding(shares, 1) == ([[1]] * 3, [None] * 3) and padding(shares, 2) == ([[1]], [None])


def test_a_tool_loop_with_different_rows_per_process_gives_each_row_its_own_completion():
    world, server = World(2), FakeServer()
    generations = [server_generation(CoBAVLLMGeneration, world, rank, server) for rank in range(2)]
    turns = {0: [[[1], [1], [2]], [[1], [2]], [[2]]], 1: [[[3]]]}  # process 1's rows stop calling tools first

    def program(rank):
        def tool_loop():
            outputs = [generations[rank].generate(prompts, None, 1) for prompts in turns[rank]]
            generations[rank].join_until_done()
            return outputs

        return tool_loop

    with world.patch(vllm_backend, trl_vllm_generation):
        results = world.run(program(0), program(1))
    for rank, outputs in enumerate(results):
        assert len(outputs) == len(turns[rank])
        for prompts, (prompt_ids, completion_ids, logprobs, _) in zip(turns[rank], outputs, strict=True):
            assert prompt_ids == prompts and _own(prompts, completion_ids) and len(logprobs) == len(prompts)
    assert len(server.requests) == 4  # turn 1: groups of 1 and 2; turns 2 and 3: one request each
    assert sum(prompts * n for prompts, n in server.requests) == 4 + 2 + 1  # the rows padding TRL's slice are not


def test_trls_path_gets_rows_padded_to_the_largest_share():
    # Several completions per row (GRPO's layout, e.g. a rollout_func's call) take TRL's own path: its slice at
    # process_index * len(prompts) is right once every process holds as many rows.
    world, server = World(2), FakeServer()
    generations = [server_generation(CoBAVLLMGeneration, world, rank, server) for rank in range(2)]
    rows = {0: [[1], [1], [2], [2]], 1: [[3], [3]]}

    with world.patch(vllm_backend, trl_vllm_generation):
        results = world.run(*[lambda rank=rank: generations[rank].generate(rows[rank], None, 2) for rank in range(2)])
    for rank, (prompt_ids, completion_ids, _, _) in enumerate(results):
        assert prompt_ids == rows[rank] and _own(rows[rank], completion_ids)


def test_without_joining_a_process_that_left_the_tool_loop_the_others_would_wait():
    # What `join_until_done` is for: process 1's rows stop calling tools after one turn; if it just went on, process
    # 0's next generation would wait for it in the gather (here: the simulated barrier times out).
    world, server = World(2, timeout=1.0), FakeServer()
    generations = [server_generation(CoBAVLLMGeneration, world, rank, server) for rank in range(2)]

    def process_0():
        generations[0].generate([[1], [2]], None, 1)
        generations[0].generate([[1]], None, 1)

    with world.patch(vllm_backend, trl_vllm_generation), pytest.raises(threading.BrokenBarrierError):
        world.run(process_0, lambda: generations[1].generate([[3], [4]], None, 1))
