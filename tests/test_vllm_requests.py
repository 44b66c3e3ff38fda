"""Server requests that keep n-sampling: every row gets exactly one completion of its own prompt, with its logprobs."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coba_trl.generation.requests import assign_completions, plan_requests


def fake_server(request, seed=0):
    """What `VLLMClient.generate` returns for a request: prompt-major, each completion naming its prompt and child."""
    completions = [[*prompt, -1, child] for prompt in request.prompts for child in range(request.n)]
    return {
        "completion_ids": completions,
        "logprobs": [[[-0.5 * child - seed]] for _ in request.prompts for child in range(request.n)],
        "logprob_token_ids": [[[child]] for _ in request.prompts for child in range(request.n)],
    }


def test_one_request_per_distinct_group_size():
    rows = [[1], [2], [1], [3], [2], [1], [4]]
    requests = plan_requests(rows)
    assert [(r.n, r.prompts, r.rows) for r in requests] == [
        (1, [[3], [4]], [[3], [6]]),
        (2, [[2]], [[1, 4]]),
        (3, [[1]], [[0, 2, 5]]),
    ]


@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3), min_size=1, max_size=40))
def test_every_row_gets_one_completion_of_its_own_prompt(rows):
    requests = plan_requests(rows)
    assert sorted(r.n for r in requests) == sorted(set(len([x for x in rows if x == row]) for row in rows))
    assigned = assign_completions(len(rows), requests, [fake_server(r) for r in requests])
    completions = assigned["completion_ids"]
    for row, completion in zip(rows, completions, strict=True):
        assert completion[: len(row)] == row and completion[len(row)] == -1  # its own prompt's completion
    for row in map(tuple, rows):  # the k rows of a prompt get its k different completions
        children = sorted(c[-1] for r, c in zip(rows, completions, strict=True) if tuple(r) == row)
        assert children == list(range(len(children)))
    for completion, logprobs, tokens in zip(
        completions, assigned["logprobs"], assigned["logprob_token_ids"], strict=True
    ):
        assert logprobs == [[-0.5 * completion[-1]]] and tokens == [[completion[-1]]]  # logprobs stay with it


def test_a_server_without_logprobs_gives_none():
    requests = plan_requests([[1], [1], [2]])
    outputs = [{**fake_server(r), "logprobs": None, "logprob_token_ids": None} for r in requests]
    assigned = assign_completions(3, requests, outputs)
    assert assigned["logprobs"] is None and assigned["logprob_token_ids"] is None
    assert len(assigned["completion_ids"]) == 3


def test_a_short_answer_is_an_error_not_a_misalignment():
    requests = plan_requests([[1], [1]])
    output = fake_server(requests[0])
    output["completion_ids"] = output["completion_ids"][:1]
    with pytest.raises(RuntimeError, match="expected 2"):
        assign_completions(2, requests, [output])
