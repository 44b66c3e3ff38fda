"""CoBA rounds requested from a real vLLM server (vLLM's CPU build, started with the README's command) through TRL's
`VLLMClient`, with the trainer's weights synced into the server before every round (`CPUWeightSync`).

The server holds the demo's model shape (`python -m coba_trl.demo.model`); each trainer sends its weights before its
first generation. Every prompt must get exactly its group size, asked for as one request per distinct group size
with n = that size, and TRL's importance-sampling ratio must stay near 1 at every step: a completion mapped to
another row, logprobs out of line, or weights other than the trainer's (a LoRA adapter left unmerged) would push it
far off.
"""

from collections import Counter

import pytest
import torch
from peft import LoraConfig
from scripts.vllm_runs import RoundWatch, assert_vllm_followed_the_trainer, coba_trainer
from trl.generation.vllm_client import VLLMClient

import coba_trl.generation.cpu_weights as cpu_weights

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


def test_server_samples_from_the_merged_lora_weights(tmp_path, vllm_server, monkeypatch):
    # TRL merges the adapter into the weights it sends and unmerges it in place afterwards: the file the server loads
    # must hold the merged weights, and the server then samples as the trainer computes (the ratio bound).
    base_url, model_dir = vllm_server
    watch, files = RoundWatch(), []
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = coba_trainer(
        model_dir, str(tmp_path), watch, peft_config=lora, vllm_mode="server", vllm_server_base_url=base_url
    )
    q_proj = trainer.model.get_submodule("base_model.model.model.layers.0.self_attn.q_proj")
    save_file = cpu_weights.save_file

    def keep(weights, path):  # what each sync writes, beside the trainer's base and merged weights at that moment
        base = q_proj.base_layer.weight.detach().clone()
        files.append(
            (
                weights["model.layers.0.self_attn.q_proj.weight"].clone(),
                base,
                base + q_proj.get_delta_weight("default"),
            )
        )
        save_file(weights, path)

    monkeypatch.setattr(cpu_weights, "save_file", keep)
    trainer.train()
    assert_vllm_followed_the_trainer(trainer, watch)
    assert len(files) == len(watch.planned)  # one sync per round
    for sent, _, merged in files:
        torch.testing.assert_close(sent, merged)
    sent, base, merged = files[-1]
    assert (merged - base).norm() > 0.05 * base.norm()  # the adapter did move the weights the server samples from


def test_the_server_refuses_weight_files_from_elsewhere(vllm_server):
    # Its development endpoint has no authentication: a path outside the trainer's private folder is refused, and
    # the server keeps serving.
    from requests import Session  # installed with vLLM

    base_url, model_dir = vllm_server
    session = Session()
    session.trust_env = False  # the server is local: no proxy
    path = f"{model_dir}/model.safetensors"
    refused = session.post(f"{base_url}/collective_rpc", json={"method": cpu_weights.LOAD_METHOD, "args": [path]})
    assert refused.status_code == 200  # answered, not raised: an error in a worker would stop the server
    (error,) = refused.json()["results"]
    assert error.startswith("PermissionError: this vLLM server loads weight files only from") and path in error
    (completion,) = VLLMClient(base_url=base_url).generate(prompts=[[50, 43, 51, 61]], max_tokens=2)["completion_ids"]
    assert len(completion) == 2
