"""CoBA rounds requested from a real vLLM server (vLLM's CPU build, started with the README's command) through TRL's
`VLLMClient`, with the trainer's weights synced into the server before every round (`CPUWeightSync`).

The server holds the demo's model shape (`python -m coba_trl.demo.model`); each trainer sends its weights before its
first generation. Every prompt must get exactly its group size, asked for as one request per distinct group size
with n = that size, and TRL's importance-sampling ratio must stay near 1 at every step: a completion mapped to
another row, or logprobs out of line, would push it far off.
"""

from collections import Counter

import pytest
from scripts.vllm_runs import RoundWatch, assert_vllm_followed_the_trainer, coba_trainer

pytestmark = pytest.mark.vllm


def expected_requests(sizes: list[int]) -> list[tuple[int, int]]:
    """One request per distinct group size n, listing the prompts with n rows: (n, number of prompts), by n."""
    return sorted(Counter(sizes).items())


@pytest.mark.parametrize("two_phase", [False, True], ids=["one-phase", "two-phase"])
def test_server_generates_each_group_with_the_trainers_weights(tmp_path, vllm_server, two_phase):
    base_url, model_dir = vllm_server
    watch = RoundWatch()
    trainer = coba_trainer(
        model_dir, str(tmp_path), watch, vllm_mode="server", vllm_server_base_url=base_url, two_phase_rounds=two_phase
    )
    trainer.train()
    assert_vllm_followed_the_trainer(trainer, watch)
    min_generations = trainer.args.min_generations
    for planned, requests in zip(watch.planned, watch.requests, strict=True):
        sizes = list(planned.values())
        if two_phase:  # phase 1 screens every prompt with min_generations rows, phase 2 asks for the rest
            rest = [size - min_generations for size in sizes if size > min_generations]
            expected = [(min_generations, len(sizes))] + expected_requests(rest)
        else:
            expected = expected_requests(sizes)
        assert requests == expected
