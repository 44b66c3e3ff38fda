"""Construction-time errors of CoBAGRPOTrainer, and the TRL upgrade-safety checks."""

import functools
import inspect
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from datasets import Dataset, IterableDataset
from scripts.tiny_coba import TINY_ARGS, parity_reward, prompt_dataset, tiny_model
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.compat import check_signatures, check_trl_version
from coba_trl.validation import check_context_length, check_hub_access, check_prompt_column, longest_prompt_tokens


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return tiny_model()


def _build(tmp_path, model_and_tokenizer, args=None, train_dataset=None, **kwargs):
    model, tokenizer = model_and_tokenizer
    args = args or CoBAConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)
    dataset = prompt_dataset() if train_dataset is None else train_dataset
    return CoBAGRPOTrainer(
        model, parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer, **kwargs
    )


def test_a_grpo_config_is_refused(tmp_path, model_and_tokenizer):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)
    with pytest.raises(ValueError, match="CoBAConfig"):
        _build(tmp_path, model_and_tokenizer, args=args)


def test_an_iterable_dataset_without_prompt_id_column_is_refused(tmp_path, model_and_tokenizer):
    stream = IterableDataset.from_generator(lambda: iter([{"prompt": "a"}]))
    with pytest.raises(ValueError, match="IterableDataset.*prompt_id_column is None.*Set prompt_id_column"):
        _build(tmp_path, model_and_tokenizer, train_dataset=stream)


@pytest.mark.parametrize("field", ["prompt_id_column", "prior_pass_rate_column"])
def test_a_missing_column_names_the_field(tmp_path, model_and_tokenizer, field):
    args = CoBAConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **{field: "nope"}, **TINY_ARGS
    )
    with pytest.raises(ValueError, match=field):
        _build(tmp_path, model_and_tokenizer, args=args)


def test_an_environment_without_a_train_dataset_is_refused(tmp_path, model_and_tokenizer):
    # With a train_dataset, environments and rollout_func are supported (tests/test_setups_*.py).
    model, tokenizer = model_and_tokenizer
    args = CoBAConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)
    with pytest.raises(ValueError, match="environment_factory without a train_dataset"):
        CoBAGRPOTrainer(model, parity_reward, args=args, processing_class=tokenizer, environment_factory=object)


def test_an_unknown_success_reward_func_is_refused(tmp_path, model_and_tokenizer):
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        success_reward_func="accuracy",
        **TINY_ARGS,
    )
    with pytest.raises(ValueError, match="success_reward_func"):
        _build(tmp_path, model_and_tokenizer, args=args)


def test_prompt_id_and_prior_columns_survive_remove_unused_columns(tmp_path, model_and_tokenizer):
    dataset = Dataset.from_dict({"prompt": ["a", "b", "c", "d"], "uid": list("abcd"), "prior": [0.1, None, 0.5, 1]})
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        prompt_id_column="uid",
        prior_pass_rate_column="prior",
        remove_unused_columns=True,
        **TINY_ARGS,
    )
    batch = next(iter(_build(tmp_path, model_and_tokenizer, args=args, train_dataset=dataset).get_train_dataloader()))
    assert len(batch) == 2 and {"prompt", "uid", "prior"} <= set(batch[0])


def test_an_allocation_that_does_not_spend_the_round_is_refused(tmp_path, model_and_tokenizer):
    trainer = _build(tmp_path, model_and_tokenizer)
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array([1, 1])
    with pytest.raises(ValueError, match="generation_batch_size"):
        trainer.train()


def test_units_the_allocator_reports_as_stranded_are_topped_up(tmp_path, model_and_tokenizer):
    # The released CoBA even pass can strand units at B_up and says so in `unallocated`; the round still spends
    # generation_batch_size rows, the stranded units going round-robin in batch order to prompts with room.
    trainer = _build(tmp_path, model_and_tokenizer)
    trainer.args.max_steps = 1
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array([3, 1])
    trainer.allocator.metrics = lambda: {"unallocated": 4.0}
    trainer.train()
    logs = trainer.state.log_history[0]
    assert (logs["budget/min"], logs["budget/max"]) == (3, 5)


def test_untested_trl_versions_fail_loudly():
    check_trl_version("1.16.0")
    check_trl_version("1.16.9")
    for version in ("1.15.2", "1.17.0", "2.0.0"):
        with pytest.raises(ImportError, match="trl>=1.16,<1.17"):
            check_trl_version(version)


def test_a_changed_signature_fails_loudly():
    check_signatures(GRPOTrainer, RepeatSampler)

    class Drifted(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list, extra):
            raise NotImplementedError

    with pytest.raises(ImportError, match="_calculate_rewards"):
        check_signatures(Drifted, RepeatSampler)


@pytest.mark.parametrize(
    ("priors", "row"),
    [
        ([0.2, None, float("nan"), 1.0, 0.0, 37.5], 5),  # a percentage deep in the data
        ([0.2, -0.1, 0.5, 0.5, 0.5, 0.5], 1),
        (["0.2", "0.4", "0.5", "0.5", "0.5", "0.5"], 0),  # strings, not numbers
    ],
)
def test_an_out_of_range_prior_fails_at_construction(tmp_path, model_and_tokenizer, priors, row):
    dataset = Dataset.from_dict({"prompt": [f"Question {i}:" for i in range(6)], "prior": priors})
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        prior_pass_rate_column="prior",
        **TINY_ARGS,
    )
    with pytest.raises(ValueError, match=rf"prior_pass_rate_column 'prior'.* row {row} .*divide it by 100"):
        _build(tmp_path, model_and_tokenizer, args=args, train_dataset=dataset)


def test_a_reward_column_missing_from_the_dataset_fails_at_construction(tmp_path, model_and_tokenizer):
    from coba_trl.rewards import dapo_accuracy_reward

    model, tokenizer = model_and_tokenizer
    args = CoBAConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)

    def needs_answer(completions, answer, **kwargs):
        return [0.0] * len(completions)

    for reward, column in ((dapo_accuracy_reward, "solution"), (needs_answer, "answer")):
        with pytest.raises(ValueError, match=rf"needs the dataset column\(s\) \['{column}'\]"):
            CoBAGRPOTrainer(model, reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer)


def test_a_fixed_vllm_sampling_seed_is_refused(tmp_path, model_and_tokenizer):
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        use_vllm=True,
        generation_kwargs={"seed": 1234},
        **TINY_ARGS,
    )
    with pytest.raises(ValueError, match="seed=1234.*identical"):
        _build(tmp_path, model_and_tokenizer, args=args)


def test_the_dataset_keeps_exactly_the_users_columns(tmp_path, model_and_tokenizer):
    dataset = prompt_dataset()
    trainer = _build(tmp_path, model_and_tokenizer, train_dataset=dataset)
    assert trainer.train_dataset.column_names == dataset.column_names == ["prompt", "uid"]
    batch = next(iter(trainer.get_train_dataloader()))
    assert all(set(row) == {"prompt", "uid"} for row in batch)


def test_prompt_plus_completion_longer_than_the_context_fails_at_construction(tmp_path, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    dataset = prompt_dataset()
    prompt = longest_prompt_tokens(dataset, tokenizer)
    assert prompt == len(tokenizer.encode("Question 10:", add_special_tokens=False))
    context = model.config.max_position_embeddings
    args = CoBAConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)
    args.max_completion_length = context - prompt + 1
    with pytest.raises(ValueError, match=rf"max_position_embeddings \({context}\).*at most {context - prompt}"):
        _build(tmp_path, model_and_tokenizer, args=args)
    args.max_completion_length = context - prompt
    check_context_length(model, tokenizer, dataset, args)  # exactly the context: accepted


def test_a_prompt_longer_than_the_context_is_never_told_to_shorten_the_completion_below_zero(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    context = model.config.max_position_embeddings
    dataset = Dataset.from_dict({"prompt": ["x" * (context + 10)]})
    args = SimpleNamespace(max_completion_length=8, use_vllm=False, vllm_mode="colocate", vllm_max_model_length=None)
    with pytest.raises(ValueError, match="The prompt alone fills the context, so no completion fits") as error:
        check_context_length(model, tokenizer, dataset, args)
    assert "at most -" not in str(error.value)


def test_a_stream_s_first_prompts_are_checked_against_the_context(tmp_path, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    stream = prompt_dataset().to_iterable_dataset()
    prompt = longest_prompt_tokens(stream, tokenizer)
    assert prompt == len(tokenizer.encode("Question 10:", add_special_tokens=False))
    context = model.config.max_position_embeddings
    args = CoBAConfig(output_dir=str(tmp_path), prompt_id_column="uid", max_steps=2, **TINY_ARGS)
    args.max_completion_length = context - prompt + 1
    with pytest.raises(ValueError, match=rf"max_position_embeddings \({context}\).*at most {context - prompt}"):
        check_context_length(model, tokenizer, stream, args)


def test_chat_prompts_are_measured_with_the_chat_template(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    messages = [{"role": "user", "content": "2+3="}]
    dataset = Dataset.from_dict({"prompt": [messages, [{"role": "user", "content": "1+1="}]]})
    templated = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert longest_prompt_tokens(dataset, tokenizer) == len(templated)
    images = Dataset.from_dict({"prompt": [[{"role": "user", "content": [{"type": "image"}]}]]})
    assert longest_prompt_tokens(images, tokenizer) is None  # not text: left to the backend


def test_vllm_max_model_length_is_checked_against_the_prompt_and_the_model(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    dataset = prompt_dataset()
    prompt = longest_prompt_tokens(dataset, tokenizer)
    args = SimpleNamespace(max_completion_length=100, use_vllm=True, vllm_mode="colocate", vllm_max_model_length=64)
    with pytest.raises(ValueError, match=rf"vllm_max_model_length \(64\).*at least {prompt + 100}"):
        check_context_length(model, tokenizer, dataset, args)
    args.vllm_max_model_length = model.config.max_position_embeddings + 1
    with pytest.raises(ValueError, match="larger than the model's context"):
        check_context_length(model, tokenizer, dataset, args)
    args.vllm_mode = "server"  # the server's own --max-model-len applies, not this field
    check_context_length(model, tokenizer, dataset, args)


def test_push_to_hub_is_refused_offline_before_any_training(monkeypatch):
    from huggingface_hub import constants

    check_hub_access(False, None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE.*hf auth login"):
        check_hub_access(True, "hf_token")


def test_a_dataset_without_prompt_names_its_columns_and_the_layouts(tmp_path, model_and_tokenizer):
    dataset = Dataset.from_dict({"question": ["1 + 1 ="] * 16, "solution": ["2"] * 16})
    with pytest.raises(ValueError, match=r"no `prompt` column \(columns: \['question', 'solution'\]\).*chat messages"):
        _build(tmp_path, model_and_tokenizer, train_dataset=dataset)


def test_a_stream_without_prompt_is_named_from_its_first_row_only():
    def endless():
        while True:
            yield {"question": "1 + 1 ="}

    stream = IterableDataset.from_generator(endless)  # no known features: only its first row is read
    with pytest.raises(ValueError, match=r"columns: \['question'\].*rename_column\('question', 'prompt'\)"):
        check_prompt_column(stream)


@pytest.mark.parametrize("prompts", [["Question 1:", "", "Question 3:"], ["Question 1:", None, "  "]])
def test_empty_prompts_fail_at_construction(tmp_path, model_and_tokenizer, prompts):
    dataset = Dataset.from_dict({"prompt": prompts * 6})
    with pytest.raises(ValueError, match="empty prompt.*the first at row 1"):
        _build(tmp_path, model_and_tokenizer, train_dataset=dataset)


def test_none_in_a_column_the_reward_reads_fails_at_construction(tmp_path, model_and_tokenizer):
    def solution_reward(completions, solution, **kwargs):
        return [float(c.strip() == s) for c, s in zip(completions, solution, strict=True)]

    model, tokenizer = model_and_tokenizer
    dataset = Dataset.from_dict({"prompt": [f"Question {i}:" for i in range(16)], "solution": ["2"] * 15 + [None]})
    args = CoBAConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **TINY_ARGS)
    with pytest.raises(ValueError, match=r"column 'solution', which holds None in 1 row.*row 15"):
        CoBAGRPOTrainer(model, solution_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    dataset = dataset.select(range(15))  # the rows left hold no None: the indices mapping is read, not the table
    CoBAGRPOTrainer(model, solution_reward, args=args, train_dataset=dataset, processing_class=tokenizer)


def test_a_wrong_success_reward_func_is_refused_before_the_model_loads(tmp_path):
    """The reward names are known before TRL loads the model: a model id that cannot load here is never reached."""
    args = CoBAConfig(output_dir=str(tmp_path), success_reward_func="accuracy", **TINY_ARGS)
    with pytest.raises(
        ValueError, match=r"success_reward_func is 'accuracy'; 'accuracy' is not one of .*'parity_reward'"
    ):
        CoBAGRPOTrainer("no-such-org/no-such-model", parity_reward, args=args, train_dataset=prompt_dataset())


def _no_rewards(completions, **kwargs):
    """Forgets to return its list."""
    [float(len(c) % 2 == 0) for c in completions]


def test_a_reward_function_that_returns_none_is_named_with_what_it_returned(tmp_path, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    args = CoBAConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=1, **TINY_ARGS
    )
    trainer = CoBAGRPOTrainer(
        model, [parity_reward, _no_rewards], args=args, train_dataset=prompt_dataset(), processing_class=tokenizer
    )
    assert trainer.reward_func_names == ["parity_reward", "_no_rewards"]  # logged under their own names
    with pytest.raises(TypeError, match=r"^The reward function '_no_rewards' returned None \(NoneType\), not a list"):
        trainer.train()


@pytest.mark.parametrize("stream", [False, True], ids=["dataset", "stream"])
def test_two_prompts_sharing_an_id_are_refused_naming_both_rows(stream):
    from coba_trl.validation import check_dataset

    dataset = Dataset.from_dict({"prompt": ["Add 2 and 3:", "Add 4 and 5:", "Add 2 and 3:"], "uid": ["a", "b", "a"]})
    check_dataset(dataset.to_iterable_dataset() if stream else dataset, "uid", None)  # the same prompt twice: fine
    clash = Dataset.from_dict({"prompt": ["Add 2 and 3:", "Add 4 and 5:", "Add 6 and 7:"], "uid": ["a", "b", "a"]})
    with pytest.raises(ValueError, match=r"prompt_id_column 'uid' gives rows 0 and 2 the same id 'a', but different "):
        check_dataset(clash.to_iterable_dataset() if stream else clash, "uid", None)


def _solution_reward(completions, solution, **kwargs):
    """Scores each completion against its problem's solution."""
    return [float(c == s) for c, s in zip(completions, solution, strict=True)]


_solution_reward.required_columns = ("solution",)


def test_a_checked_reward_function_keeps_the_function_given_reachable():
    from coba_trl.validation import checked_reward_funcs

    checked, partial = checked_reward_funcs([_solution_reward, functools.partial(_solution_reward, solution=["4"])])
    assert checked.__wrapped__ is _solution_reward and inspect.unwrap(checked) is _solution_reward
    assert checked.__doc__ == _solution_reward.__doc__ and checked.required_columns == ("solution",)
    assert inspect.signature(checked) == inspect.signature(_solution_reward)
    assert partial.__name__ == "_solution_reward" and partial.__wrapped__.func is _solution_reward
    assert pickle.loads(pickle.dumps(checked))(["4"], solution=["4"]) == [1.0]
