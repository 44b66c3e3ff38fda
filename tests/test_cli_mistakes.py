"""A user's mistakes on the command line, each met with one line on stderr naming the field, the value and the fix,
exit status 2, before the demo's warm start or any model loads: rewards, the success reward, checkpoints, the demo's
dataset and steps, a setting that would do nothing, and the plot of a folder that holds no run."""

from __future__ import annotations

import json

import pytest

from coba_trl import CoBAConfig
from tests.test_cli_errors import load, one_line


@pytest.fixture
def script(monkeypatch):
    """examples/train_qwen.py, whose demo, training and warm start fail the test if any is reached."""
    module = load("train_qwen")

    def reached(*args, **kwargs):
        raise AssertionError("the run started: the mistake was not caught before the warm start or model load")

    monkeypatch.setattr(module, "run_demo", reached)
    monkeypatch.setattr(module, "train", reached)
    return module


def refused(script, capsys, *argv: str) -> str:
    """The one line `argv` gets from the script (exit status 2)."""
    with pytest.raises(SystemExit) as stop:
        script.main(list(argv))
    assert stop.value.code == 2
    return one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--reward_funcs", "accuracy"], "reward_funcs: 'accuracy' is not a known reward function; pass one of"),
        (["--reward_funcs", "no_such_module.reward"], "reward_funcs: 'no_such_module.reward' cannot be imported"),
        (["--reward_funcs", "os.no_such_reward"], "module 'os' has no 'no_such_reward'"),
        (["--success_reward_func", "nope"], "'nope' is not one of the reward functions ['dapo_accuracy_reward']"),
        (["--prior_pass_rate_column", "pass_rate"], "prior_pass_rate_column is 'pass_rate', but train_dataset has"),
        (["--max_steps", "0"], "max_steps is 0"),
        (["--skip_rule", "spread_chance"], "skip_rule is 'spread_chance' but skip_settled_prompts is False"),
        (["--resume_from_checkpoint", "true"], "resume_from_checkpoint=True found no checkpoint-N folder in"),
    ],
)
def test_a_demo_mistake_is_one_line_before_the_warm_start(script, capsys, tmp_path, argv, says):
    assert says in refused(script, capsys, *argv, "--output_dir", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_another_dataset_without_a_model_says_to_pass_one(script, capsys, tmp_path):
    line = refused(script, capsys, "--dataset_name", "rates.parquet", "--output_dir", str(tmp_path / "out"))
    assert "dataset_name is 'rates.parquet' but model_name_or_path is not set" in line
    assert "Pass --model_name_or_path" in line


def test_a_reward_mistake_stops_a_model_run_before_the_model_loads(script, capsys, tmp_path):
    model = ["--model_name_or_path", str(tmp_path / "model"), "--use_cpu", "true", "--bf16", "false"]
    line = refused(script, capsys, *model, "--reward_funcs", "nope.reward")
    assert "reward_funcs: 'nope.reward' cannot be imported" in line


@pytest.fixture
def saved_run(tmp_path):
    """A finished demo run that saved checkpoints at steps 20 and 40."""
    run = tmp_path / "outputs" / "saved"
    for step in (20, 40):
        (run / f"checkpoint-{step}").mkdir(parents=True)
    (run / "demo_summary.json").write_text(json.dumps({"steps": 40}))
    return run


def test_a_missing_checkpoint_is_called_missing_and_the_saved_ones_named(script, capsys, saved_run):
    for where in ([], ["--output_dir", str(saved_run.parent / "resumed")]):  # the folder it would write to: either
        line = refused(script, capsys, "--resume_from_checkpoint", str(saved_run / "checkpoint-30"), *where)
        assert f"resume_from_checkpoint {saved_run / 'checkpoint-30'} is missing" in line
        assert f"{saved_run} holds checkpoint-20, checkpoint-40" in line


def test_a_run_folder_given_as_checkpoint_names_its_checkpoints(script, capsys, saved_run, tmp_path):
    line = refused(script, capsys, "--resume_from_checkpoint", str(saved_run))
    assert f"resume_from_checkpoint {saved_run} is a run's output folder, not a checkpoint" in line
    assert f"--resume_from_checkpoint {saved_run / 'checkpoint-40'}" in line
    assert not (saved_run.parent / "resumed").exists() and not any(tmp_path.glob("outputs/*-*"))


def test_a_finished_run_without_checkpoints_is_not_taken_for_one(script, capsys, tmp_path):
    run = tmp_path / "outputs" / "cpu_demo"
    run.mkdir(parents=True)
    (run / "demo_summary.json").write_text("{}")
    line = refused(script, capsys, "--resume_from_checkpoint", str(run))
    assert "is a finished demo run's output folder, not a checkpoint, and that run saved none" in line


def test_skip_rule_without_skipping_is_refused_by_the_config(tmp_path):
    with pytest.raises(ValueError, match="skip_rule is 'spread_chance' but skip_settled_prompts is False"):
        CoBAConfig(output_dir=str(tmp_path), skip_rule="spread_chance", use_cpu=True, bf16=False)
    CoBAConfig(
        output_dir=str(tmp_path), skip_rule="spread_chance", skip_settled_prompts=True, use_cpu=True, bf16=False
    )


def test_the_plot_of_a_folder_without_a_run_is_one_line(tmp_path, capsys):
    from coba_trl import plot

    for folder, says in ((tmp_path / "nope", "does not exist"), (tmp_path, "holds no trainer_state.json")):
        with pytest.raises(SystemExit) as stop:
            plot.main([str(folder)])
        assert stop.value.code == 2 and says in one_line(capsys.readouterr().err)


def test_a_model_that_is_nowhere_is_one_line_before_anything_loads(monkeypatch, capsys, tmp_path):
    script = load("train_qwen")
    monkeypatch.setattr(script, "CoBAGRPOTrainer", None)  # building the trainer would fail the test with a TypeError
    missing = str(tmp_path / "outputs" / "no_model")
    line = refused(script, capsys, "--model_name_or_path", missing, "--use_cpu", "true", "--bf16", "false")
    assert f"model_name_or_path {missing} is missing: no such folder" in line and "Pass a local model" in line
    evaluate = load("evaluate")
    for argv, says in (
        (["--model_name_or_path", missing, "--benchmarks", "arithmetic"], f"model_name_or_path {missing} is missing"),
        (["--model_name_or_path", str(tmp_path), "--benchmarks", "aime"], "benchmarks: unknown ['aime']; choose"),
    ):
        assert says in refused(evaluate, capsys, *argv)


@pytest.mark.parametrize("path", ["/data/no_such_model", "./no_such_model", "../no_such_model", "~/no_such_model"])
def test_a_mistyped_model_path_is_called_missing_not_blamed_on_the_hub(monkeypatch, path):
    from coba_trl.data.sources import check_model_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as error:
        check_model_source(path)
    assert str(error.value).startswith(f"model_name_or_path {path} is missing: no such folder. Pass a local model")
    assert "Cannot load" not in str(error.value) and "offline" not in str(error.value)


def test_a_model_folder_written_with_a_tilde_is_named_in_full_not_called_missing(monkeypatch, tmp_path):
    from coba_trl.data.sources import check_model_source

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "models" / "qwen").mkdir(parents=True)
    with pytest.raises(ValueError) as error:
        check_model_source("~/models/qwen")
    line = str(error.value)
    assert "starts with ~, which is not expanded here" in line and "missing" not in line
    assert line.endswith(f"Pass the folder's full path, {tmp_path / 'models' / 'qwen'}.")


@pytest.fixture
def demo_checkpoint(tmp_path):
    """What the resume checks read of a demo checkpoint saved by the coba allocator with the demo's model size."""
    checkpoint = tmp_path / "outputs" / "saved" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    state = {"version": 2, "allocator": {"allocator": "coba"}, "layout": {"per_device_train_batch_size": 999}}
    (checkpoint / "coba_state.json").write_text(json.dumps(state))
    (checkpoint / "demo_before_rl.json").write_text(json.dumps({"accuracy": 0.5}))
    (checkpoint / "config.json").write_text(
        json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2})
    )
    return checkpoint


def test_a_resume_with_another_allocator_names_both_and_the_fix(script, capsys, demo_checkpoint):
    line = refused(script, capsys, "--resume_from_checkpoint", str(demo_checkpoint), "--budget_allocator", "knapsack")
    assert (
        f"budget_allocator is 'knapsack', but resume_from_checkpoint {demo_checkpoint} was saved by a run with "
        in line
    )
    assert "budget_allocator 'coba'" in line and "Resume with --budget_allocator coba" in line


def test_a_resume_with_another_demo_model_size_names_each_field_and_both_values(script, capsys, demo_checkpoint):
    argv = ["--resume_from_checkpoint", str(demo_checkpoint), "--demo_hidden_size", "32", "--demo_num_heads", "1"]
    line = refused(script, capsys, *argv)
    assert "holds a demo model of another size: demo_hidden_size 32 (saved: 64), demo_num_heads 1 (saved: 2)" in line
    assert "Resume with --demo_hidden_size 64 --demo_num_heads 2" in line


def test_a_resume_with_another_batch_layout_says_what_changes_in_one_line(script, capsys, demo_checkpoint):
    with pytest.raises(AssertionError, match="the run started"):  # a layout change is allowed: the demo starts
        script.main(["--resume_from_checkpoint", str(demo_checkpoint)])
    line = one_line(capsys.readouterr().err)
    assert f": warning: resume_from_checkpoint {demo_checkpoint} was saved with another batch layout" in line
    assert (
        "batch layout (per_device_train_batch_size 999 -> " in line and "generates its rounds for this layout" in line
    )
