"""avg@k evaluation: the scoring logic and examples/evaluate.py on the tiny local model and the fixtures."""

from __future__ import annotations

import importlib.util
import json
import math
import shlex
import sys
from pathlib import Path

import pytest
from datasets import Dataset

from coba_trl.evaluation import (
    BenchmarkResult,
    avg_at_k,
    evaluate_benchmark,
    markdown_table,
    overall,
    transformers_generate,
)
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ("aime24", "aime25", "amc23", "math500", "olympiadbench", "minerva")


def load_script():
    spec = importlib.util.spec_from_file_location("evaluate_script", ROOT / "examples" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluate_script"] = module
    spec.loader.exec_module(module)
    return module


def test_avg_at_k_is_the_mean_per_problem_success_in_percent():
    assert avg_at_k([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]) == pytest.approx(62.5)
    with pytest.raises(ValueError):
        avg_at_k([])


def test_evaluate_benchmark_grades_boxed_answers(tmp_path):
    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "1+1?"}], [{"role": "user", "content": "2+2?"}]],
            "solution": ["2", "4"],
        }
    )

    def generate(prompts, k):  # the first sample is right, the others are wrong
        answers = {"1+1?": "2", "2+2?": "4"}
        return [[f"\\boxed{{{answers[p[0]['content']]}}}"] + ["\\boxed{7}"] * (k - 1) for p in prompts]

    result = evaluate_benchmark("toy", dataset, generate, k=4, samples_path=str(tmp_path / "s.jsonl"))
    assert (result.avg_at_k, result.problems, result.completions) == (25.0, 2, 8)
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["scores"] == [1.0, 0.0, 0.0, 0.0]


def test_overall_is_the_unweighted_mean_over_benchmarks():
    results = [BenchmarkResult("a", 10.0, 16, 30, 480), BenchmarkResult("b", 50.0, 16, 500, 8000)]
    assert overall(results) == 30.0
    assert "| **overall (mean)** | **30.00** |" in markdown_table(results, "m")


def sample_twenty_problems_twice():
    tokenizer = build_byte_tokenizer()
    generate = transformers_generate(build_tiny_qwen2(tokenizer, hidden_size=16), tokenizer, 2, 1.0, 1.0, batch_size=4)
    return generate([[{"role": "user", "content": f"{i}+1="}] for i in range(20)], 2)


def test_sampling_shows_its_progress_in_a_log_as_whole_lines_with_the_time_left(capsys):
    """A long evaluation redirected to a file: a line per tenth of the problems (here a batch of 4 sequences, 2
    problems at k = 2), each with the time left, and no carriage return of a bar."""
    assert len(sample_twenty_problems_twice()) == 20
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("Sampling 2 per problem: ")]
    assert [line.split()[4] for line in lines] == [f"{done}/20" for done in range(2, 21, 2)]
    assert all(line.endswith(" left") and " elapsed, about " in line for line in lines)


def test_sampling_progress_follows_transformers_switch(capsys, monkeypatch):
    """On a terminal, transformers' tqdm bar; none at all once transformers' progress bars are disabled."""
    from tqdm.auto import tqdm
    from transformers.utils import logging

    from coba_trl.progress import progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = progress(3, "Sampling", "problems")
    assert isinstance(bar, tqdm)
    bar.close()
    capsys.readouterr()
    logging.disable_progress_bar()
    try:
        sample_twenty_problems_twice()  # on a terminal
        monkeypatch.undo()
        sample_twenty_problems_twice()  # in a log
    finally:
        logging.enable_progress_bar()
    assert "Sampling" not in capsys.readouterr().err


def test_loading_and_writing_show_no_bar_in_a_log(capsys):
    """Around the sampling, transformers' and datasets' own bars (loading weights, writing the pass rates) stay out of
    a log, and are on again after."""
    import datasets
    from transformers.utils import logging

    from coba_trl.progress import no_bars_in_a_log

    with no_bars_in_a_log():
        for _ in logging.tqdm(range(3), desc="Loading weights"):
            pass
        Dataset.from_dict({"a": [1, 2]}).map(lambda row: row)
    assert capsys.readouterr().err == ""
    assert logging.is_progress_bar_enabled() and datasets.is_progress_bar_enabled()


def test_bad_benchmark_path_entry_is_an_error():
    with pytest.raises(ValueError, match="benchmark_paths"):
        load_script().parse_paths(["aime2024=foo.jsonl"])


@pytest.mark.slow
def test_evaluate_script_on_fixtures_writes_the_tables(tmp_path):
    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    paths = [f"{name}={ROOT / 'tests' / 'fixtures' / name}.jsonl" for name in BENCHMARKS]
    out = tmp_path / "eval"
    argv = ["--model_name_or_path", str(tmp_path / "model"), "--k", "2", "--max_new_tokens", "6"]
    argv += ["--dtype", "float32", "--backend", "transformers", "--output_dir", str(out), "--benchmark_paths", *paths]
    results = load_script().main(argv)
    assert [r.benchmark for r in results] == list(BENCHMARKS)
    table = json.loads((out / "eval_results.json").read_text())
    assert set(table["benchmarks"]) == set(BENCHMARKS) and 0.0 <= table["overall"] <= 100.0
    assert table["settings"]["k"] == 2 and table["settings"]["top_p"] == 0.9
    markdown = (out / "eval_results.md").read_text()
    assert all(f"| {name} |" in markdown for name in BENCHMARKS) and "overall" in markdown
    assert len((out / "samples_aime24.jsonl").read_text().splitlines()) == table["benchmarks"]["aime24"]["problems"]


def test_pass_rates_count_successes_at_the_threshold():
    from coba_trl.pass_rates import pass_rates

    def reward(completions, solutions):
        return [None if c == "?" else float(c == s) for c, s in zip(completions, solutions, strict=True)]

    # "?" has no reward (None): neither a success nor a failure, as in training; a prompt with none scored is NaN
    assert pass_rates([["1", "2", "?", "1"], ["3", "3"]], ["1", "3"], reward) == [2 / 3, 1.0]
    assert math.isnan(pass_rates([["?"]], ["1"], reward)[0])


@pytest.mark.slow
def test_training_set_pass_rates_feed_the_prior_column_from_step_1(tmp_path):
    from coba_trl.data import load_dapo_math
    from tests.test_examples import load_script as load_train_script

    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    source = str(ROOT / "tests" / "fixtures" / "dapo_verl.jsonl")
    argv = ["--model_name_or_path", str(tmp_path / "model"), "--train_dataset", source, "--k", "3"]
    argv += ["--max_new_tokens", "4", "--dtype", "float32", "--backend", "transformers"]
    scored = load_script().main([*argv, "--max_problems", "8", "--output_dir", str(tmp_path / "rates")])
    path = tmp_path / "rates" / "train_pass_rates.parquet"
    reloaded = load_dapo_math(str(path))  # the written file loads back as the same training set
    assert reloaded["prompt"] == scored["prompt"] and reloaded["prompt_id"] == scored["prompt_id"]
    assert reloaded["pass_rate"] == scored["pass_rate"] and all(r in (0, 1 / 3, 2 / 3, 1) for r in scored["pass_rate"])

    out = tmp_path / "train"
    load_train_script().main(
        [
            "--model_name_or_path", str(tmp_path / "model"), "--dataset_name", str(path),
            "--prior_pass_rate_column", "pass_rate", "--prompt_id_column", "prompt_id",
            "--num_generations", "4", "--per_device_train_batch_size", "8", "--max_steps", "1",
            "--max_completion_length", "4", "--dtype", "float32", "--use_cpu", "true", "--bf16", "false",
            "--activation_checkpointing", "false", "--save_strategy", "no", "--report_to", "none",
            "--disable_tqdm", "true", "--output_dir", str(out),
        ]
    )  # fmt: skip
    first_round = json.loads((out / "trainer_state.json").read_text())["log_history"][0]
    assert "budget/mean_by_pass_rate/unseen" not in first_round  # every prompt has its prior at step 1
    assert any(key.startswith("budget/mean_by_pass_rate/") for key in first_round)


def test_help_describes_the_script_with_examples(capsys):
    with pytest.raises(SystemExit):
        load_script().main(["--help"])
    head = capsys.readouterr().out[:5000]
    assert head.startswith("usage: python examples/evaluate.py --model_name_or_path MODEL")
    assert "avg@k of a model" in head and "--benchmarks arithmetic" in head.split("examples:")[1]


@pytest.mark.slow
def test_the_demo_task_evaluates_offline(tmp_path, capfd):
    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    capfd.readouterr()  # the model's saving bar
    argv = ["--model_name_or_path", str(tmp_path / "model"), "--k", "2", "--max_problems", "6", "--dtype", "float32"]
    argv += ["--backend", "transformers", "--output_dir", str(tmp_path / "eval")]
    (result,) = load_script().main([*argv, "--benchmarks", "arithmetic"])
    assert (result.benchmark, result.problems, result.completions) == ("arithmetic", 6, 12)
    scored = load_script().main([*argv, "--train_dataset", "arithmetic"])
    assert len(scored) == 6 and scored["solution"][0].isdigit()
    err = capfd.readouterr().err  # redirected, as to a log: whole lines, the sampling's among them, and no bar
    assert "\r" not in err and "Sampling 2 per problem: 6/6 problems (100%)" in err


@pytest.mark.slow
def test_the_closing_hint_trains_on_the_pass_rates_on_this_machine(tmp_path, capsys):
    """The command evaluate.py prints after scoring a training set runs as printed (here shortened to one step)."""
    from tests.test_examples import load_script as load_train_script

    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    argv = ["--model_name_or_path", str(tmp_path / "model"), "--k", "2", "--max_problems", "8", "--dtype", "float32"]
    argv += ["--train_dataset", "arithmetic", "--backend", "transformers", "--output_dir", str(tmp_path / "rates")]
    load_script().main(argv)
    out = capsys.readouterr().out
    command = out.split("allocating from step 1, with:\n  ", 1)[1].splitlines()[0]
    assert command.startswith(f"python examples/train_qwen.py --model_name_or_path {tmp_path / 'model'} ")
    short = ["--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4", "--report_to", "none"]
    short += ["--disable_tqdm", "true", "--output_dir", str(tmp_path / "train")]
    load_train_script().main([*shlex.split(command)[2:], *short])
    assert (tmp_path / "train" / "trainer_state.json").is_file()


def test_a_misspelled_flag_names_the_closest_options(capsys):
    with pytest.raises(SystemExit):
        load_script().main(["--model_name_or_path", "m", "--benchmrks", "aime24"])
    assert "unknown option --benchmrks; did you mean --benchmarks" in capsys.readouterr().err


def test_arithmetic_means_the_task_of_the_demo_run_with_that_seed():
    from coba_trl.demo.config import regime_arguments
    from coba_trl.demo.task import demo_problem_sets

    script = load_script()
    _, demo = regime_arguments("frontier")
    train, heldout, _ = demo_problem_sets(512, 300, 0, seed=3, operands_per_level=tuple(demo.demo_operands))

    def questions(dataset):
        return [prompt[0]["content"] for prompt in dataset["prompt"]]

    assert questions(script.demo_task("train", "frontier", 3)) == [p.question for p in train]
    assert questions(script.demo_task("heldout", "frontier", 3)) == [p.question for p in heldout]
    # Why it matters: the default seed's held-out problems include training prompts of a run with --seed 3.
    seed_3_train = set(questions(script.demo_task("train", "demo", 3)))
    assert not set(questions(script.demo_task("heldout", "demo", 3))) & seed_3_train
    assert set(questions(script.demo_task("heldout", "demo"))) & seed_3_train


def test_a_demo_seed_without_the_demo_task_is_refused():
    script = load_script()
    assert script.EvalArguments(model_name_or_path="m", benchmarks=["arithmetic"], demo_seed=3).demo_seed == 3
    assert script.EvalArguments(model_name_or_path="m", train_dataset="arithmetic", demo_seed=3).demo_seed == 3
    with pytest.raises(ValueError, match="demo_seed \\(3\\) sets the CPU demo's task.*--benchmarks arithmetic"):
        script.EvalArguments(model_name_or_path="m", demo_seed=3)  # the six math benchmarks
    with pytest.raises(ValueError, match="drop --demo_seed"):
        script.EvalArguments(
            model_name_or_path="m", train_dataset="data.parquet", benchmarks=["arithmetic"], demo_seed=3
        )
