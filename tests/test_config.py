"""CoBAConfig: defaults, parsing from YAML and the command line, and its validation errors."""

from pathlib import Path

import pytest
from trl import TrlParser

from coba_trl import CoBAConfig
from coba_trl.config import coba_field_names

BASE = dict(per_device_train_batch_size=8, num_generations=4, use_cpu=True, report_to="none", bf16=False)


def test_defaults_follow_the_released_code(tmp_path):
    args = CoBAConfig(output_dir=str(tmp_path), **BASE)
    assert (args.budget_allocator, args.min_generations, args.max_generations) == ("coba", 2, 128)
    assert (args.coba_kappa, args.coba_window, args.coba_gamma) == (11.0, 1, 10.0)
    assert args.coba_tau is None and args.coba_heap_fraction is None
    assert (args.coba_hard_threshold, args.coba_easy_threshold) == (0.05, 0.99)
    assert (args.pass_rate_window, args.success_threshold, args.pass_rate_prior_strength) == (1, 1.0, 0.0)
    assert args.success_reward_func is None and args.prompt_id_column is None and args.prior_pass_rate_column is None


def test_trl_parser_reads_yaml_and_command_line(tmp_path):
    config = tmp_path / "coba.yaml"
    config.write_text(
        f"output_dir: {tmp_path}\nbudget_allocator: knapsack\nmax_generations: 64\ncoba_tau: 5.0\n"
        "per_device_train_batch_size: 8\nnum_generations: 4\nuse_cpu: true\nbf16: false\nreport_to: none\n"
    )
    (args,) = TrlParser((CoBAConfig,)).parse_args_and_config(
        ["--config", str(config), "--max_generations", "32", "--prompt_id_column", "uid", "--success_threshold", "0.5"]
    )
    assert isinstance(args, CoBAConfig)
    assert (args.budget_allocator, args.max_generations, args.coba_tau) == ("knapsack", 32, 5.0)
    assert (args.prompt_id_column, args.success_threshold) == ("uid", 0.5)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(min_generations=8, max_generations=6), "min_generations"),
        (dict(max_generations=3), "max_generations"),
        (dict(min_generations=5), "min_generations"),
        (dict(min_generations=0), "min_generations"),
        (dict(budget_allocator="greedy"), "budget_allocator"),
        (dict(pass_rate_window=0), "pass_rate_window"),
        (dict(group_weighting="sequence"), "group_weighting"),
        (dict(two_phase_rounds=True, zero_variance_groups="rescue", min_generations=1), "min_generations"),
        (dict(success_threshold=float("nan")), "success_threshold"),
        (dict(pass_rate_prior_strength=-1.0), "pass_rate_prior_strength"),
        (dict(pass_rate_prior_strength=float("inf")), "pass_rate_prior_strength"),
        (dict(learning_rate=-1e-5), r"learning_rate \(-1e-05\).*--learning_rate 1e-6"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(num_train_epochs=0, max_steps=-1), "num_train_epochs.*trains no step"),
        (dict(temperature=0.0), "temperature"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(top_k=-1), r"top_k \(-1\) must be >= 0.*--top_k 0"),
        (dict(max_completion_length=0), r"max_completion_length \(0\) must be at least 1.*--max_completion_length"),
        # A round of no rows divided by zero when the sampler was built; 0 passes over each round trained nothing.
        (dict(per_device_train_batch_size=0), r"per_device_train_batch_size \(0\) must be at least 1"),
        (dict(gradient_accumulation_steps=0), r"gradient_accumulation_steps \(0\) must be at least 1"),
        (dict(steps_per_generation=0), r"steps_per_generation \(0\) must be at least 1"),
        (dict(num_iterations=0), r"num_iterations \(0\) must be at least 1.*--num_iterations 1"),
    ],
)
def test_bad_fields_name_themselves(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        CoBAConfig(output_dir=str(tmp_path), **{**BASE, **overrides})


def test_the_config_builds_the_history_it_describes(tmp_path):
    args = CoBAConfig(output_dir=str(tmp_path), pass_rate_window=3, pass_rate_prior_strength=2.0, **BASE)
    history = args.build_pass_rate_history()
    assert (history.window, history.prior_strength) == (3, 2.0)
    assert CoBAConfig(output_dir=str(tmp_path), **BASE).build_pass_rate_history().prior_strength == 0.0


def test_bad_allocator_parameters_fail_at_construction_naming_the_field(tmp_path):
    # The allocators name their own arguments (kappa, heap_fraction): the refusal says which field sets each.
    with pytest.raises(
        ValueError, match=r"^coba_kappa \(1.0\): kappa must lie in .*Pass --coba_kappa 11.0 \(the default\)"
    ):
        CoBAConfig(output_dir=str(tmp_path), coba_kappa=1.0, **BASE)
    with pytest.raises(ValueError, match=r"^coba_heap_fraction \(2.0\): .*Leave --coba_heap_fraction unset"):
        CoBAConfig(output_dir=str(tmp_path), coba_heap_fraction=2.0, **BASE)
    # The pair: an easy threshold set below the default hard one names both fields, not only the one left alone.
    with pytest.raises(
        ValueError, match=r"^coba_hard_threshold \(0.05\) must not exceed coba_easy_threshold \(0.01\)"
    ):
        CoBAConfig(output_dir=str(tmp_path), coba_easy_threshold=0.01, **BASE)


def test_every_coba_field_is_documented():
    new = coba_field_names()
    reference = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert "budget_allocator" in new and "log_allocations" in new
    for name in new:  # in the class docstring (TRL's style) and in the fields table of docs/configuration.md
        assert f"\n        {name} (`" in CoBAConfig.__doc__, name
        assert f"\n| `{name}` | " in reference, name


@pytest.mark.parametrize(("flag", "value"), [([], True), (["false"], False), (["true"], True)])
def test_activation_checkpointing_switches_checkpointing_on_every_supported_transformers(tmp_path, flag, value):
    """The recipes' `activation_checkpointing` (TrainingArguments' name from transformers 5.23) also sets
    `gradient_checkpointing`, the name older transformers and TRL read, and the two never disagree."""
    parser = TrlParser((CoBAConfig,))
    argv = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--activation_checkpointing"]
    (args,) = parser.parse_args_and_config([*argv, *flag])
    assert args.activation_checkpointing is value and args.gradient_checkpointing is value
    args = CoBAConfig(output_dir=str(tmp_path), activation_checkpointing=not value, **BASE)
    assert args.activation_checkpointing is (not value) and args.gradient_checkpointing is (not value)
