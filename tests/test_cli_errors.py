"""What the example scripts say to a mistyped command line or config file, and where they stop: one line on stderr,
before the demo's warm start or the model is loaded."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from datasets import Dataset
from trl import TrlParser

from coba_trl.cli import check_command_line, read_config

ROOT = Path(__file__).resolve().parents[1]
WARM_START = "[warm-start]"


def run_script(script: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "examples" / script), *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


@functools.cache
def load(script: str):
    spec = importlib.util.spec_from_file_location(script, ROOT / "examples" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[script] = module
    spec.loader.exec_module(module)
    return module


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and "Warning" not in line and "warn(" not in line]
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_demo_names_a_typod_config_key_its_file_and_the_field_meant(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("budget_allocater: knapsack\nmax_steps: 3\n")
    result = run_script("train_qwen.py", "--config", str(config), "--output_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and WARM_START not in result.stdout
    line = one_line(result.stderr)
    assert f"unknown key `budget_allocater` in config file {config}; did you mean `budget_allocator`?" in line


def test_a_missing_config_file_is_one_line_naming_its_path(tmp_path):
    for script in ("train_qwen.py", "evaluate.py"):
        result = run_script(script, "--config", str(tmp_path / "nope.yaml"))
        assert result.returncode == 2 and WARM_START not in result.stdout
        assert f"config file {tmp_path / 'nope.yaml'} does not exist" in one_line(result.stderr)


def test_a_negative_learning_rate_stops_the_demo_before_its_warm_start(tmp_path):
    result = run_script("train_qwen.py", "--learning_rate=-1e-5", "--output_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and WARM_START not in result.stdout
    assert "learning_rate (-1e-05) must be a positive, finite number" in one_line(result.stderr)
    assert not (tmp_path / "out").exists()


def test_evaluate_names_a_typod_config_key_and_flag(tmp_path, capsys):
    config = tmp_path / "eval.yaml"
    config.write_text("model_name_or_path: outputs/cpu_demo\nbenchmark: [arithmetic]\n")
    with pytest.raises(SystemExit) as stop:
        load("evaluate").main(["--config", str(config)])
    assert stop.value.code == 2
    assert f"config file {config}; did you mean `benchmarks`" in one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit):
        load("evaluate").main(["--model_name_or_path", "m", "--max_new_tokes", "8"])
    assert "unknown option --max_new_tokes; did you mean --max_new_tokens" in one_line(capsys.readouterr().err)


def test_a_training_set_without_prompt_fails_before_any_model_loads(tmp_path):
    path = tmp_path / "questions.parquet"
    Dataset.from_dict({"question": ["1 + 1"], "answer": ["2"]}).to_parquet(path)
    missing_model = str(tmp_path / "no_model_here")  # a folder without a model: were it loaded first, this would fail
    os.mkdir(missing_model)
    evaluate = run_script("evaluate.py", "--model_name_or_path", missing_model, "--train_dataset", str(path))
    argv = ["--model_name_or_path", missing_model, "--dataset_name", str(path), "--use_cpu", "true", "--bf16", "false"]
    train = run_script("train_qwen.py", *argv, "--output_dir", str(tmp_path / "out"))
    for result, flag in ((evaluate, "--train_dataset"), (train, "--dataset_name")):  # one line, exit status 2
        assert result.returncode == 2, result.stderr
        line = one_line(result.stderr)
        assert line.startswith(f"{result.args[1].rsplit('/', 1)[-1]}: error: {flag} {path}: ")
        assert "no `prompt` column (columns: ['question', 'answer']). Accepted" in line


@pytest.mark.parametrize("script", ["train_qwen.py", "evaluate.py"])
def test_a_prefix_of_a_flag_is_refused_with_the_flags_meant(tmp_path, script):
    flag = "--max_generation" if script == "train_qwen.py" else "--model_name"
    result = run_script(script, flag, "64", "--output_dir", str(tmp_path))
    assert result.returncode == 2
    meant = "--max_generations" if script == "train_qwen.py" else "--model_name_or_path"
    assert f"unknown option {flag}; did you mean" in one_line(result.stderr) and meant in one_line(result.stderr)
    assert WARM_START not in result.stdout


@dataclass
class Settings:
    budget_allocator: str = field(default="coba")
    max_steps: int = field(default=1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "must hold `field: value` lines (a YAML mapping), not a list"),
        ("max_steps: [1\n", "is not valid YAML at line 2"),
    ],
)
def test_a_config_file_that_is_no_mapping_is_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit):
        read_config(str(path))
    assert message in one_line(capsys.readouterr().err)


def test_flags_and_config_keys_are_checked_against_every_dataclass(tmp_path, capsys):
    parser = TrlParser((Settings,))
    path = tmp_path / "ok.yaml"
    path.write_text("max_steps: 2\nenv:\n  FOO: bar\n")
    check_command_line(parser, ["--config", str(path), "--budget_allocator", "uniform"])  # all known: no exit
    with pytest.raises(SystemExit):
        check_command_line(parser, ["--config"])
    assert "--config needs the path of a YAML file" in one_line(capsys.readouterr().err)


HEAVY_MODULES = ("torch", "transformers.training_args", "trl.trainer.grpo_trainer")
REFUSED_EARLY = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("imported:", [name for name in {heavy} if name in sys.modules])
"""


@pytest.mark.parametrize(
    ("script", "argv", "says"),
    [
        ("examples/train_qwen.py", ["--budget_alocator", "knapsack"], "did you mean --budget_allocator"),
        ("examples/train_qwen.py", ["--config", "{bad_yaml}"], "did you mean `budget_allocator`"),
        ("examples/evaluate.py", ["--model_name_or_path", "m", "--bencmarks", "x"], "did you mean --benchmarks"),
        ("coba_trl/preview.py", ["rates.json", "--budget_alocator", "knapsack"], "did you mean --budget_allocator"),
        ("examples/train_qwen.py", ["--model_name_or_path", "./no_such_model"], "./no_such_model is missing"),
        ("examples/evaluate.py", ["--model_name_or_path", "~/no_such_model"], "~/no_such_model is missing"),
        (
            "examples/train_qwen.py",
            ["--budget_allocator", "knapsak"],
            "argument --budget_allocator/--budget-allocator: invalid choice: 'knapsak' (choose from 'coba', 'knapsack'",
        ),
        ("examples/train_qwen.py", ["--config", "{bad_choice}"], "skip_rule: invalid choice: 'gres' (choose from"),
        ("coba_trl/preview.py", ["rates.json", "--skip-prior=neighbour"], "invalid choice: 'neighbour' (choose from"),
    ],
    ids=[
        "train_qwen-flag",
        "train_qwen-config-key",
        "evaluate-flag",
        "preview-flag",
        "train_qwen-model",
        "evaluate-model",
        "train_qwen-choice",
        "train_qwen-config-choice",
        "preview-choice",
    ],
)
def test_a_misspelt_name_or_missing_model_is_refused_before_torch_is_imported(tmp_path, script, argv, says):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("budget_alocator: knapsack\n")
    bad_choice = tmp_path / "bad_choice.yaml"
    bad_choice.write_text("skip_rule: gres\n")
    argv = [arg.format(bad_yaml=bad_yaml, bad_choice=bad_choice) for arg in argv]
    command = [sys.executable, "-c", REFUSED_EARLY.format(heavy=HEAVY_MODULES), str(ROOT / script), *argv]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2 and says in one_line(result.stderr)
    assert "imported: []" in result.stdout


def test_the_names_checked_before_import_are_the_parsers_fields():
    from coba_trl import preview
    from coba_trl.config import CoBAConfig
    from coba_trl.declared_fields import declared_field_names

    train_qwen = load("train_qwen")
    parsed = {f.name for kind in train_qwen.make_parser().dataclass_types for f in dataclasses.fields(kind)}
    assert declared_field_names(train_qwen.DATACLASSES) == parsed
    parsed = {f.name for kind in (preview.PreviewArguments, CoBAConfig) for f in dataclasses.fields(kind)}
    assert declared_field_names(preview.DATACLASSES) == parsed


def test_the_choices_checked_before_import_are_the_parsers_choices():
    from coba_trl import preview
    from coba_trl.config import CoBAConfig
    from coba_trl.declared_fields import declared_choices

    ours = {"budget_allocator", "zero_variance_groups", "skip_rule", "skip_prior", "group_weighting"}
    parsers = [
        (load("train_qwen").make_parser(), load("train_qwen").DATACLASSES),
        (TrlParser((preview.PreviewArguments, CoBAConfig)), preview.DATACLASSES),
        (TrlParser((load("evaluate").EvalArguments,)), [("evaluate", "EvalArguments")]),
    ]
    for parser, classes in parsers:
        declared = declared_choices(classes)
        parsed = {action.dest: tuple(action.choices) for action in parser._actions if action.choices is not None}
        assert declared.keys() <= parsed.keys()  # the rest (an Enum's values, a dict's keys) is left to the parser
        assert declared == {name: parsed[name] for name in declared}
    assert (
        ours | {"instruction", "deduplicate", "demo_warm_start_lr_scheduler_type"}
        <= declared_choices(load("train_qwen").DATACLASSES).keys()
    )
    assert ours <= declared_choices(preview.DATACLASSES).keys()
    assert {"instruction", "backend"} <= declared_choices([("evaluate", "EvalArguments")]).keys()


@pytest.mark.parametrize(
    ("script", "argv", "says"),
    [
        ("train_qwen", ["--budget_allocator", "knapsak"], "--budget_allocator/--budget-allocator: invalid choice"),
        ("evaluate", ["--model_name_or_path", "m", "--instruction", "boxd"], "--instruction: invalid choice"),
    ],
)
def test_an_invalid_choice_is_one_line_without_the_usage(capsys, script, argv, says):
    with pytest.raises(SystemExit) as stop:
        load(script).main(argv)
    assert stop.value.code == 2 and says in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv", [[], ["--budget_allocator", "knapsack"], ["--budget_allocator=coba"]])
def test_the_checks_before_import_pass_the_readme_main_job_and_valid_choices(argv):
    """The README's main job is `python examples/train_qwen.py` with no argument at all."""
    from coba_trl.cli import check_names_before_import

    assert check_names_before_import(argv, load("train_qwen").DATACLASSES) is None
