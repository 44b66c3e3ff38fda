"""What `CoBAGRPOTrainer` relies on in TRL's GRPOTrainer beyond method signatures (those are checked at import by
`coba_trl.compat`), exercised on TRL's own trainer with a tiny model: when a TRL upgrade changes one of these, the
test says what changed and which part of coba-trl depends on it.
"""

import math

import pytest
import torch
from datasets import Dataset
from scripts.tiny_coba import TINY_ARGS, tiny_model
from trl import GRPOConfig, GRPOTrainer

from coba_trl.rounds.phases import PADDING, ROWS, SUMMED

UPGRADE = "Re-check coba_trl/trainer.py against the new TRL before widening coba_trl.compat.TESTED_TRL_RANGE."
PROMPTS = ["Question 1:", "A much longer question 2:", "Q3:"]


def half_reward(completions, **kwargs):
    """0.5 for every completion, None (unscorable) for the prompt 'Q3:'."""
    return [None if prompt == "Q3:" else 0.5 for prompt in kwargs["prompts"]]


def length_reward(completions, **kwargs):
    """The completion's length: a reward with a spread, None for the prompt 'Q3:'."""
    return [
        None if prompt == "Q3:" else float(len(completion))
        for prompt, completion in zip(kwargs["prompts"], completions, strict=True)
    ]


def _grpo(tmp_path, num_generations=2, **overrides) -> GRPOTrainer:
    model, tokenizer = tiny_model()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        num_generations=num_generations,
        **{**TINY_ARGS, "per_device_train_batch_size": len(PROMPTS) * num_generations, **overrides},
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS * 4})
    return GRPOTrainer(
        model, [half_reward, length_reward], args=args, train_dataset=dataset, processing_class=tokenizer
    )


@pytest.fixture(scope="module")
def one_call(tmp_path_factory):
    """A GRPOTrainer after one `_generate_and_score_completions` call on 3 prompts x 2 completions, with what its
    `_calculate_rewards` returned."""
    trainer = _grpo(tmp_path_factory.mktemp("contract"))
    trainer.model.train()
    returned = []
    calculate = trainer._calculate_rewards

    def capture(*args, **kwargs):
        returned.append(calculate(*args, **kwargs))
        return returned[-1]

    trainer._calculate_rewards = capture
    rows = [{"prompt": prompt} for prompt in PROMPTS for _ in range(trainer.num_generations)]
    output = trainer._generate_and_score_completions(rows)
    return trainer, output, returned


def test_one_call_appends_one_value_to_each_metric_the_trainer_rewrites(one_call):
    trainer, _, _ = one_call
    keys = ["frac_reward_zero_std", "reward", "reward_std"]
    keys += [f"rewards/{name}/{stat}" for name in trainer.reward_func_names for stat in ("mean", "std")]
    counts = {key: len(trainer._metrics["train"][key]) for key in keys}
    assert counts == dict.fromkeys(keys, 1), (
        f"One _generate_and_score_completions call appended {counts} values to these metrics; CoBAGRPOTrainer "
        "replaces the last value of each per generation pass (del metrics[key][-num_phases:]) with the whole round's "
        f"value, which assumes exactly one append per call. {UPGRADE}"
    )


def test_the_logged_advantages_are_the_batchs_appended_once(one_call):
    trainer, output, _ = one_call
    logged = list(trainer._logs["advantages"])
    assert logged == output["advantages"].tolist(), (
        f"After one call TRL's logged advantages are {logged}, not the batch's {output['advantages'].tolist()} "
        "appended once; CoBAGRPOTrainer pops that many entries and extends the log with its own advantages. "
        f"{UPGRADE}"
    )


def test_calculate_rewards_returns_the_gathered_rows_by_reward_function(one_call):
    trainer, output, returned = one_call
    rows = len(PROMPTS) * trainer.num_generations
    assert len(returned) == 1 and tuple(returned[0].shape) == (rows, 2), (
        f"_calculate_rewards returned {[tuple(r.shape) for r in returned]} for one call; CoBAGRPOTrainer captures "
        f"it as the gathered (completions of all processes, reward functions) tensor, here ({rows}, 2). {UPGRADE}"
    )
    rewards = returned[0]
    assert rewards[:4, 0].tolist() == [0.5] * 4 and torch.isnan(rewards[4:]).all(), (
        "_calculate_rewards no longer gives each row its reward functions' values in row order with None as NaN; "
        f"got {rewards.tolist()}. CoBAGRPOTrainer's group statistics and success counts read it that way. {UPGRADE}"
    )


def test_unscorable_rows_are_left_out_of_the_logged_reward(one_call):
    # 'Q3:' rows have no reward at all (NaN): TRL 1.16 leaves them out of `reward` instead of counting them as 0.
    trainer, _, returned = one_call
    scorable = returned[0][:4].sum(dim=1)
    expected = scorable.mean().item()
    logged = trainer._metrics["train"]["reward"][-1]
    assert math.isclose(logged, expected, rel_tol=1e-6), (
        f"TRL logged reward {logged}; the mean over the scorable rows is {expected}. CoBAGRPOTrainer's round-level "
        f"`reward` of a two-phase round follows TRL's definition (unscorable rows left out). {UPGRADE}"
    )


def test_the_output_keys_are_the_ones_the_two_phase_merge_knows(one_call):
    _, output, _ = one_call
    unknown = sorted(set(output) - set(PADDING) - set(ROWS) - set(SUMMED))
    assert not unknown, (
        f"_generate_and_score_completions returned keys {unknown} that coba_trl.rounds.phases.merge_phase_outputs does not "
        f"know how to pad or concatenate; two-phase rounds would refuse them. Add each with TRL's padding. {UPGRADE}"
    )


def test_prompts_are_left_padded_and_completions_right_padded(one_call):
    trainer, output, _ = one_call
    pad = trainer.processing_class.pad_token_id
    prompt_mask, completion_mask = output["prompt_mask"], output["completion_mask"]
    assert prompt_mask[:, -1].all() and not prompt_mask[:, 0].all(), (
        f"The prompt mask {prompt_mask.tolist()} is not left-padded (prompts of different lengths, every prompt "
        f"ending in the last column); coba_trl.rounds.phases.PADDING pads prompt_ids / prompt_mask on the left. {UPGRADE}"
    )
    assert (output["prompt_ids"][prompt_mask == 0] == pad).all()
    padded = completion_mask == 0
    assert padded.any() and not padded.all(), "setup: with this seed some completions end early and some do not"
    assert (padded.cummax(dim=1).values == padded).all(), (
        f"The completion mask {completion_mask.tolist()} is not right-padded; coba_trl.rounds.phases.PADDING pads "
        f"completion tensors on the right. {UPGRADE}"
    )
    assert (output["completion_ids"][padded] == pad).all()


def test_the_attributes_the_trainer_reads_are_there(one_call):
    trainer, _, _ = one_call
    expected = {
        "reward_weights": torch.Tensor,
        "reward_func_names": list,
        "scale_rewards": str,
        "multi_objective_aggregation": str,
        "num_iterations": int,
        "shuffle_dataset": bool,
        "_step": int,
    }
    found = {name: type(getattr(trainer, name, None)) for name in expected}
    changed = {name: kind.__name__ for name, kind in found.items() if not issubclass(kind, expected[name])}
    assert not changed, (
        f"GRPOTrainer attributes CoBAGRPOTrainer reads (group advantages, sampler, round schedule) changed type or "
        f"are gone: {changed}. {UPGRADE}"
    )
    assert trainer._tokenizer.pad_token_id == trainer.processing_class.pad_token_id, (
        f"GRPOTrainer._tokenizer, whose pad token the two-phase merge pads with, is gone or changed. {UPGRADE}"
    )


def test_num_generations_is_read_when_the_method_runs(tmp_path):
    # CoBAGRPOTrainer sets num_generations = 1 around each call so every row is one completion of its own group.
    trainer = _grpo(tmp_path)
    trainer.model.train()
    trainer.num_generations = 1
    output = trainer._generate_and_score_completions([{"prompt": prompt} for prompt in PROMPTS])
    zero_std = trainer._metrics["train"]["frac_reward_zero_std"]
    assert output["advantages"].shape == (len(PROMPTS),) and zero_std == [1.0], (
        f"With num_generations set to 1 after construction, 3 rows gave advantages {output['advantages'].shape} "
        f"and frac_reward_zero_std {zero_std} (expected 3 groups of one, all zero spread): TRL no longer reads "
        "self.num_generations at call time, which CoBAGRPOTrainer relies on to generate one completion per "
        f"expanded row in every backend. {UPGRADE}"
    )


def test_step_counts_training_steps_and_sets_the_generation_rounds(tmp_path):
    # 3 prompts x 2 completions per round, split into 2 steps of 3 rows; 3 optimizer steps of 2 micro-steps each.
    trainer = _grpo(
        tmp_path, per_device_train_batch_size=3, steps_per_generation=2, gradient_accumulation_steps=2, max_steps=3
    )
    calls = []
    generate = trainer._generate_and_score_completions

    def record(inputs):
        calls.append(trainer._step)
        return generate(inputs)

    trainer._generate_and_score_completions = record
    trainer.train()
    assert trainer._step == 6, (
        f"After 3 optimizer steps of 2 accumulated micro-steps, GRPOTrainer._step is {trainer._step}, not 6: it no "
        "longer counts training_step calls. CoBAGRPOTrainer saves and restores it as the round schedule (and the "
        f"round sampler's position) across a resume. {UPGRADE}"
    )
    assert calls == [0, 2, 4], (
        f"TRL generated at micro-steps {calls}, not at every _step % (steps_per_generation * num_iterations) == 0 "
        f"([0, 2, 4]); CoBAGRPOTrainer's rounds and resume assume that schedule. {UPGRADE}"
    )


def test_trls_server_path_slices_each_process_at_its_index_times_its_rows():
    # Why coba_trl.generation.row_shares exists: with different numbers of rows per process (a tool loop's turns),
    # TRL's server path hands process 1 a slice of process 0's completions. When this fails, TRL slices by the
    # gathered sizes itself and CoBAVLLMGeneration's padding of TRL's path can go.
    import trl.generation.vllm_generation as trl_vllm_generation
    from scripts.fake_collectives import FakeServer, World, server_generation

    world, server = World(2), FakeServer()
    generations = [server_generation(trl_vllm_generation.VLLMGeneration, world, rank, server) for rank in range(2)]
    rows = {0: [[1], [2], [3]], 1: [[4]]}
    with world.patch(trl_vllm_generation):
        results = world.run(*[lambda rank=rank: generations[rank].generate(rows[rank], None, 1) for rank in range(2)])
    assert results[0][1] == [[1, -1, 0], [2, -1, 0], [3, -1, 0]]
    assert results[1][1] == [[2, -1, 0]]  # process 1 gets process 0's second row, not its own [4]


def test_grouped_server_requests_pass_on_every_sampling_parameter_trls_server_path_sends():
    # CoBAVLLMGeneration asks for a round's rows as grouped requests (n = group size) from inside TRL's own server
    # path; each request must carry every parameter TRL's request carries, as TRL set it, including any a later TRL
    # adds, or server-mode sampling would silently differ from GRPOTrainer's.
    import trl.generation.vllm_generation as trl_vllm_generation
    from scripts.fake_collectives import FakeServer, World, server_generation

    import coba_trl.generation.vllm_backend as vllm_backend

    world, rows = World(1), [[1], [2], [1], [3], [1]]
    sent = {}
    for cls in (trl_vllm_generation.VLLMGeneration, vllm_backend.CoBAVLLMGeneration):
        server = FakeServer()
        generation = server_generation(cls, world, 0, server)
        generation.structured_outputs_regex, generation.generation_kwargs = "[ab]+", {"stop": ["\\n"]}
        with world.patch(trl_vllm_generation, vllm_backend):
            world.run(lambda generation=generation: generation.generate(rows, None, 1))
        sent[cls.__name__] = server
    (trl_parameters,) = sent["VLLMGeneration"].sampling
    grouped = sent["CoBAVLLMGeneration"]
    assert sorted(n for _, n in grouped.requests) == [1, 3]  # setup: grouped requests, not TRL's one request
    for parameters in grouped.sampling:
        missing = {key: value for key, value in trl_parameters.items() if parameters.get(key, object()) != value}
        assert not missing and set(parameters) == set(trl_parameters), (
            f"TRL's server path sends {missing} (or other parameters) that CoBAVLLMGeneration's grouped requests do "
            f"not pass on as TRL set them: {parameters}. coba_trl.generation.requests.GroupedClient must pass every "
            f"argument of TRL's request but the prompts and n. {UPGRADE}"
        )
