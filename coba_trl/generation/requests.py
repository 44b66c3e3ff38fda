"""Server requests that keep vLLM's n-sampling for variable-size groups (pure Python, no vLLM needed).

CoBA runs TRL's generation with `num_generations = 1`, one row per completion, so TRL's server path would ask for every
row as its own prompt with n = 1. Instead the rows that share a prompt are asked for together: one request per
distinct group size k, listing every prompt that has k rows with n = k, so vLLM samples a group as n children of one
request that share the prompt's prefill. `plan_requests` groups the rows, `assign_completions` maps the completions
back to the rows they belong to, in row order, with their logprobs; `generate_grouped` sends the requests at once,
so that the server schedules them together as it would one request.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """One server request: `prompts` (token ids), `n` completions each; `rows[j]` are the rows of `prompts[j]`."""

    n: int
    prompts: list[list[int]]
    rows: list[list[int]]


def plan_requests(row_prompts: list[list[int]]) -> list[Request]:
    """One request per distinct number of rows a prompt has, prompts in order of first appearance.

    Rows with equal token ids are one group: they ask for the same distribution, so which of the prompt's k
    completions lands on which of its rows does not matter, only that each row gets exactly one.
    """
    rows_of: dict[tuple[int, ...], list[int]] = {}
    for row, ids in enumerate(row_prompts):
        rows_of.setdefault(tuple(ids), []).append(row)
    by_size: dict[int, Request] = {}
    for ids, rows in rows_of.items():
        request = by_size.setdefault(len(rows), Request(len(rows), [], []))
        request.prompts.append(list(ids))
        request.rows.append(rows)
    return [by_size[n] for n in sorted(by_size)]


def assign_completions(num_rows: int, requests: list[Request], outputs: list[dict]) -> dict[str, list | None]:
    """Each row's completion, from `outputs[i]` (what `VLLMClient.generate` returned for `requests[i]`).

    The server answers prompt-major: the n completions of a prompt come before those of the next. Returns
    `completion_ids`, `logprobs` and `logprob_token_ids` as lists over rows (a key is None when the server sent none).
    """
    keys = ("completion_ids", "logprobs", "logprob_token_ids")
    assigned: dict[str, list | None] = {key: [None] * num_rows for key in keys}
    for request, output in zip(requests, outputs, strict=True):
        expected = len(request.prompts) * request.n
        if len(output["completion_ids"]) != expected:
            raise RuntimeError(
                f"The vLLM server returned {len(output['completion_ids'])} completions for {len(request.prompts)} "
                f"prompts with n={request.n}, expected {expected}."
            )
        for key in keys:
            values = output.get(key)
            if values is None:
                assigned[key] = None
            elif assigned[key] is not None:
                for j, rows in enumerate(request.rows):
                    for r, row in enumerate(rows):
                        assigned[key][row] = values[j * request.n + r]
    return assigned


def generate_grouped(client, row_prompts: list[list[int]], **sampling) -> dict[str, list | None]:
    """Each row's completion from `client` (TRL's `VLLMClient`): the requests of `plan_requests`, sent concurrently,
    each with `sampling` (every argument of `client.generate` but the prompts and n)."""
    requests = plan_requests(row_prompts)
    if not requests:
        return assign_completions(0, [], [])
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        futures = [pool.submit(client.generate, prompts=r.prompts, n=r.n, **sampling) for r in requests]
        outputs = [future.result() for future in futures]
    return assign_completions(len(row_prompts), requests, outputs)


class GroupedClient:
    """Stands in for TRL's `VLLMClient` while TRL's own server path generates one completion per row (n = 1).

    TRL gathers every process's rows, calls `generate` with them and its sampling parameters, broadcasts the answer
    and slices each process's rows out of it. Here `generate` asks for the rows as `generate_grouped` does, passing
    TRL's parameters on as they are (so none is dropped), and answers in TRL's layout. Where the processes hold
    different numbers of rows, each one's rows reach TRL padded to the largest number, `width`: process p's real rows
    are the first `rows_per_process[p]` of its block of `width`, and each padding row gets an empty completion
    instead of a request.
    """

    def __init__(self, client, rows_per_process: list[int]):
        self.client = client
        self.rows_per_process = rows_per_process

    def generate(self, prompts: list[list[int]], n: int = 1, **sampling) -> dict[str, list | None]:
        """TRL's request of `prompts` with n = 1 (one completion per row), made as grouped requests."""
        width = max(self.rows_per_process, default=0)
        real = [p * width + i for p, rows in enumerate(self.rows_per_process) for i in range(rows)]
        completions = generate_grouped(self.client, [prompts[row] for row in real], **sampling)
        output: dict[str, list | None] = {"prompt_ids": [list(ids) for ids in prompts]}
        for key, values in completions.items():
            if values is None:  # the server sent no logprobs
                output[key] = None
                continue
            output[key] = [[] for _ in prompts]
            for row, value in zip(real, values, strict=True):
                output[key][row] = value
        return output
