"""The allocation preview: its expected mixed-group counts, recomputed independently, and the trainer's first round."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_trl.allocation import PassRateHistory, build_allocator
from coba_trl.allocation.spread import population_prior, spread_chance
from coba_trl.preview import BANDS, allocation_preview, band_index, main, mixed_group_probability
from coba_trl.rounds.plan import plan_round

ROOT = Path(__file__).resolve().parents[1]


def _allocators(min_generations=2, max_generations=32):
    return {name: build_allocator(name, min_generations, max_generations) for name in ("coba", "knapsack", "uniform")}


def _mixed_by_hand(rates, sizes) -> float:
    """Sum over prompts with a pass rate and a group of P(at least one success and one failure), by complement."""
    total = 0.0
    for p, n in zip(rates, sizes, strict=True):
        if n and not math.isnan(p):
            total += 1.0 - p**n - (1.0 - p) ** n
    return total


def test_a_group_is_mixed_unless_all_succeed_or_all_fail():
    assert mixed_group_probability([0.5], [2])[0] == pytest.approx(0.5)  # SS, SF, FS, FF: two of four mixed
    assert mixed_group_probability([0.0, 1.0, 0.3], [16, 16, 1]).tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert mixed_group_probability([0.25], [3])[0] == pytest.approx(1 - 0.25**3 - 0.75**3)


def test_pass_rates_fall_in_their_bands():
    rates = [math.nan, 0.0, 0.01, 0.25, 0.26, 0.5, 0.75, 0.99, 1.0]
    names = [BANDS[i] for i in band_index(np.array(rates))]
    assert names == ["unknown", "0", "(0, 0.25]", "(0, 0.25]", "(0.25, 0.5]", "(0.25, 0.5]", "(0.5, 0.75]"] + [
        "(0.75, 1)",
        "1",
    ]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from([0.0, 1.0, math.nan]), st.floats(0.0, 1.0)), min_size=8, max_size=60),
    st.sampled_from([(32, 8), (24, 4), (64, 16)]),
)
def test_expected_mixed_groups_match_an_independent_count(rates, layout):
    budget, num_generations = layout
    order = np.random.default_rng(len(rates)).permutation(len(rates))
    preview = allocation_preview(rates, budget, num_generations, _allocators(), order)
    rounds = preview.settings["rounds"]
    m = budget // num_generations
    assert rounds == len(rates) // m
    for name, sizes in preview.group_sizes.items():
        in_rounds = order[: rounds * m]
        assert (sizes[in_rounds] >= 1).all() and (np.delete(sizes, in_rounds) == 0).all()
        for r in range(rounds):  # every round spends exactly its budget, as the trainer's rounds do
            assert sizes[order[r * m : (r + 1) * m]].sum() == budget
        expected = _mixed_by_hand(rates, sizes) / rounds
        assert preview.expected_mixed_per_round[name] == pytest.approx(expected, abs=1e-9)
    assert (preview.group_sizes["uniform"][order[: rounds * m]] == num_generations).all()
    if preview.expected_mixed_per_round["uniform"] > 0:
        assert preview.relative_to_uniform["uniform"] == pytest.approx(1.0)


def test_the_first_round_is_the_trainers_first_round_with_priors():
    rates = np.random.default_rng(0).uniform(size=32).round(2)
    rates[[3, 9]] = [0.0, 1.0]
    for name in ("coba", "knapsack"):
        preview = allocation_preview(rates, 256, 8, {name: build_allocator(name, 2, 32)})
        plan = plan_round(list(range(32)), build_allocator(name, 2, 32), PassRateHistory(), 256, 32, prior=rates)
        assert preview.group_sizes[name].tolist() == plan.group_sizes.tolist()


def test_the_command_prints_and_writes_the_preview(tmp_path, capsys):
    rates = [0.0, 0.125, 0.5, 0.875, 1.0, 0.25, 0.75, 0.375] * 8
    path = tmp_path / "train_pass_rates.parquet"
    Dataset.from_dict({"prompt": ["q"] * len(rates), "pass_rate": rates}).to_parquet(path)
    main([str(path), "--generation_batch_size", "128", "--num_generations", "8", "--max_generations", "32"])
    out = capsys.readouterr().out
    assert "| coba |" in out and "| knapsack |" in out and "| uniform |" in out
    assert "expectation" in out
    written = json.loads((tmp_path / "allocation_preview.json").read_text())
    assert (tmp_path / "allocation_preview.md").read_text() in out
    assert written["settings"]["rounds"] == 4 and written["settings"]["budget"] == 128
    for name, sizes in written["group_sizes"].items():  # the file alone lets anyone recompute the figures
        per_round = _mixed_by_hand(rates, sizes) / 4
        assert written["expected_mixed_groups_per_round"][name] == pytest.approx(per_round)


def test_a_training_recipe_sets_the_run_previewed(tmp_path):
    path = tmp_path / "rates.jsonl"
    Dataset.from_dict({"pass_rate": np.linspace(0, 1, 300).tolist()}).to_json(path)
    recipe = str(
        ROOT / "recipes" / "qwen2.5-7b-instruct_coba.yaml"
    )  # 4096 completions a round, 16 on average, 2 to 128
    preview = main([str(path), "--recipe", recipe, "--max_generations", "64", "--preview_dir", str(tmp_path)])
    settings = preview.settings
    assert (settings["budget"], settings["num_generations"], settings["min_generations"]) == (4096, 16, 2)
    assert settings["max_generations"] == 64 and settings["rounds"] == 1  # flags override the recipe


@pytest.mark.slow
def test_evaluate_previews_the_allocation_of_the_pass_rates_it_writes(tmp_path, capsys):
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2
    from tests.test_evaluate import load_script

    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    argv = ["--model_name_or_path", str(tmp_path / "model"), "--train_dataset", "arithmetic", "--max_problems", "32"]
    argv += ["--k", "2", "--max_new_tokens", "4", "--dtype", "float32", "--backend", "transformers"]
    scored = load_script().main([*argv, "--output_dir", str(tmp_path / "rates")])
    assert "expected mixed groups / round" in capsys.readouterr().out
    written = json.loads((tmp_path / "rates" / "allocation_preview.json").read_text())
    assert written["settings"]["budget"] == 256 and written["settings"]["rounds"] == 1  # the demo's round: 32 x 8
    # The pass rates come from 2 samples each: the chance of spread is the posterior one (coba_trl.allocation.spread).
    assert written["settings"]["pass_rate_samples"] == 2
    successes = np.rint(np.asarray(scored["pass_rate"]) * 2)
    prior = population_prior(successes, np.full(successes.size, 2))
    sizes = np.asarray(written["group_sizes"]["uniform"])
    chances = [spread_chance([s], [2], int(n), prior)[0] for s, n in zip(successes, sizes, strict=True) if n]
    assert written["expected_mixed_groups_per_round"]["uniform"] == pytest.approx(sum(chances))


def _write_inputs(folder: Path) -> None:
    """One file per bad input of the command-line tests, and good pass rates beside them."""
    rates = [0.0, 0.125, 0.5, 0.875, 1.0, 0.25, 0.75, 0.375] * 8
    Dataset.from_dict({"pass_rate": rates}).to_parquet(folder / "rates.parquet")
    Dataset.from_dict({"pass_rate": [100 * r for r in rates]}).to_parquet(folder / "percent.parquet")
    (folder / "rates.csv").write_text("pass_rate\n" + "".join(f"{r}\n" for r in rates))
    (folder / "notes.md").write_text("# Pass rates\n")
    (folder / "empty.jsonl").write_text("")
    (folder / "broken.json").write_text('{"pass_rate": 0.5,\n')
    (folder / "list.json").write_text(json.dumps(rates))
    (folder / "words.json").write_text(json.dumps([0.5, "high", 0.25]))
    (folder / "typo.yaml").write_text("generation_batch_size: 64\nmax_generation: 32\nmodel_name_or_path: m\n")


SMALL_RUN = ["--generation_batch_size", "64", "--num_generations", "8"]

BAD_INPUTS = {  # name: (arguments after the folder's files, words the one line must hold)
    "recipe key": (
        ["rates.parquet", "--recipe", "typo.yaml"],
        ["unknown key `max_generation`", "did you mean `max_generations`", "--recipe"],
    ),
    "pass rate outside [0, 1]": (
        ["percent.parquet", *SMALL_RUN],
        ["--pass_rate_column 'pass_rate'", "in [0, 1]", "the first is row 1 with 12.5", "divide them by 100"],
    ),
    "missing column": (
        ["rates.parquet", "--pass_rate_column", "rate", *SMALL_RUN],
        ["--pass_rate_column is 'rate'", "columns: ['pass_rate']"],
    ),
    "missing file": (
        ["nowhere.parquet", *SMALL_RUN],
        ["nowhere.parquet does not exist", "pass an existing .parquet, .jsonl or .json file"],
    ),
    "csv file": (
        ["rates.csv", *SMALL_RUN],
        ["rates.csv is a .csv file", "reads a .parquet, .jsonl or .json file", "from_csv"],
    ),
    "markdown file": (
        ["notes.md", *SMALL_RUN],
        ["notes.md is a .md file", "pass the train_pass_rates.parquet that examples/evaluate.py --train_dataset"],
    ),
    "config rule": (
        ["rates.parquet", *SMALL_RUN, "--min_generations", "9"],
        ["min_generations (9) must not exceed num_generations (8)", "lower min_generations"],
    ),
    "unreadable file": (["broken.json", *SMALL_RUN], ["pass_rates: Cannot read", "as json: JSON parse error"]),
    "empty file": (["empty.jsonl", *SMALL_RUN], ["empty.jsonl is empty", "one row per prompt"]),
    "list that is not pass rates": (["words.json", *SMALL_RUN], ["the list of pass rates in", "row 1 with 'high'"]),
    "list with a column flag": (
        ["list.json", "--pass_rate_column", "rate"],
        ["has no columns", "drop --pass_rate_column rate"],
    ),
    "missing recipe": (
        ["rates.parquet", "--recipe", "nowhere.yaml"],
        ["nowhere.yaml does not exist (--recipe", "pass the path of a YAML file"],
    ),
    "--config": (["rates.parquet", "--config", "typo.yaml"], ["the preview has no --config", "--recipe FILE.yaml"]),
}


def _in(folder: Path, argv: list[str]) -> list[str]:
    """`argv` with its file names in `folder`."""
    return [str(folder / a) if (folder / a).suffix and not a.startswith("-") else a for a in argv]


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_each_bad_input_is_one_line_naming_the_flag_and_the_fix(tmp_path, capfd, name):
    _write_inputs(tmp_path)
    capfd.readouterr()
    argv, words = BAD_INPUTS[name]
    with pytest.raises(SystemExit) as stop:
        main([*_in(tmp_path, argv), "--preview_dir", str(tmp_path / "out")])
    err = capfd.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err  # no traceback, no progress bar, no log line
    for word in words:
        assert word in err
    assert "prior_pass_rate_column" not in err  # the preview's flags, not the trainer's
    assert name == "--config" or "--config" not in err
    assert not (tmp_path / "out").exists()


def test_the_command_line_prints_the_one_line_and_nothing_else(tmp_path):
    _write_inputs(tmp_path)
    command = [sys.executable, "-m", "coba_trl.preview", str(tmp_path / "percent.parquet"), *SMALL_RUN]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "divide them by 100" in result.stderr, result.stderr


def test_a_json_list_of_numbers_is_the_pass_rates_and_a_list_of_objects_the_rows(tmp_path):
    _write_inputs(tmp_path)
    rows = [{"prompt": "q", "pass_rate": rate} for rate in json.loads((tmp_path / "list.json").read_text())]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    column = main([str(tmp_path / "rates.parquet"), *SMALL_RUN, "--preview_dir", str(tmp_path / "column")])
    for name in ("list.json", "rows.json"):
        preview = main([str(tmp_path / name), *SMALL_RUN, "--preview_dir", str(tmp_path / name[:-5])])
        assert preview.settings["known"] == 64
        for allocator, sizes in column.group_sizes.items():
            assert preview.group_sizes[allocator].tolist() == sizes.tolist()


def test_a_recipe_may_hold_the_keys_of_a_training_config_and_no_other():
    from coba_trl.cli import field_names
    from coba_trl.preview_inputs import recipe_keys, recipe_settings
    from tests.test_cli_errors import load

    assert recipe_keys() == set(field_names(load("train_qwen").make_parser()))
    for recipe in sorted((ROOT / "recipes").glob("*.yaml")):  # every recipe shipped previews as it is
        assert "num_generations" in recipe_settings(str(recipe), "preview")


def test_output_dir_is_where_the_preview_writes_and_two_folders_are_refused(tmp_path, capfd):
    _write_inputs(tmp_path)
    inputs = set(tmp_path.iterdir())
    main([str(tmp_path / "rates.parquet"), *SMALL_RUN, "--output_dir", str(tmp_path / "mine")])
    assert {path.name for path in (tmp_path / "mine").iterdir()} == {
        "allocation_preview.md",
        "allocation_preview.json",
    }
    assert set(tmp_path.iterdir()) == inputs | {tmp_path / "mine"}  # nothing written next to the input
    capfd.readouterr()
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "rates.parquet"), *SMALL_RUN, "--output_dir", "a", "--preview_dir", "b"])
    err = capfd.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "--preview_dir b and --output_dir a" in err


def test_help_shows_the_example_commands_as_written(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "\n    python -m coba_trl.preview outputs/pass_rates/train_pass_rates.parquet \\\n" in out
    assert "\n        --recipe recipes/qwen2.5-7b-instruct_coba.yaml   # the run a training config describes\n" in out


def test_a_neighbour_column_the_preview_does_not_play_is_named(tmp_path, capsys):
    rates = [0.5, None, 0.25, 0.75] * 16
    Dataset.from_dict({"pass_rate": rates}).to_parquet(tmp_path / "rates.parquet")
    args = [str(tmp_path / "rates.parquet"), *SMALL_RUN, "--preview_dir", str(tmp_path / "out")]
    main([*args, "--pass_rate_neighbour_column", "level"])
    assert "Not previewed: pass_rate_neighbour_column ('level')" in capsys.readouterr().out
    main(args)
    assert "Not previewed" not in capsys.readouterr().out
