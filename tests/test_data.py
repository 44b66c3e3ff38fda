"""DAPO-Math-17K and the evaluation sets load from either schema into the same normalised rows."""

import json
import logging
import socket
from pathlib import Path

import datasets
import pytest

from coba_trl.data import EVAL_BENCHMARKS, load_dapo_math, load_eval_benchmark, strip_instruction, text_prompt_id
from coba_trl.data.prompts import BOXED_SUFFIX, DAPO_PREFIX, DAPO_SUFFIX
from coba_trl.rewards import boxed_accuracy_reward, dapo_accuracy_reward

FIXTURES = Path(__file__).parent / "fixtures"
VERL_FILES = [FIXTURES / "dapo_verl.parquet", FIXTURES / "dapo_verl.jsonl"]


@pytest.mark.parametrize("path", VERL_FILES, ids=lambda p: p.suffix)
def test_verl_schema_is_deduplicated_by_id(path, caplog):
    with caplog.at_level(logging.INFO, logger="coba_trl.data.dapo"):
        dataset = load_dapo_math(str(path))
    assert len(dataset) == 25
    assert dataset.duplicates_dropped == 18
    assert "dropped 18 duplicate rows of 43" in caplog.text
    assert len(set(dataset["prompt_id"])) == 25


def test_text_deduplication_and_no_deduplication():
    path = str(VERL_FILES[0])
    by_text = load_dapo_math(path, deduplicate="text")
    assert (len(by_text), by_text.duplicates_dropped) == (24, 19)
    everything = load_dapo_math(path, deduplicate=False)
    assert (len(everything), everything.duplicates_dropped) == (43, 0)


def test_rows_are_normalised_for_grpo():
    row = load_dapo_math(str(VERL_FILES[0]))[0]
    assert row["prompt"] == [
        {"role": "user", "content": f"{DAPO_PREFIX}\n\nHow many positive divisors does $360$ have?\n\n{DAPO_SUFFIX}"}
    ]
    assert row["solution"] == "24"
    assert row["problem"] == "How many positive divisors does $360$ have?"
    assert row["prompt_id"] == "00000000-1111-4222-8333-444455550000"
    assert row["reward_model"]["style"] == "rule-lighteval/MATH_v2"
    assert row["source_prompt"][0]["role"] == "user"


def test_processed_schema_gives_the_same_rows_as_verl():
    processed = load_dapo_math(str(FIXTURES / "dapo_processed.parquet"))
    verl = load_dapo_math(str(VERL_FILES[0]), deduplicate="text")
    assert processed.duplicates_dropped == 0
    assert processed["prompt"] == verl["prompt"]
    assert processed["solution"] == verl["solution"]
    assert processed["prompt_id"] == verl["prompt_id"]


def test_boxed_instruction_replaces_the_answer_line():
    row = load_dapo_math(str(VERL_FILES[1]), instruction="boxed")[0]
    assert row["prompt"][0]["content"] == f"How many positive divisors does $360$ have?\n\n{BOXED_SUFFIX}"
    assert "Answer:" not in row["prompt"][0]["content"]


def test_prompt_ids_are_stable_across_loads_and_formats(tmp_path):
    rows = [json.loads(line) for line in (FIXTURES / "dapo_verl.jsonl").read_text().splitlines()]
    for row in rows:
        del row["extra_info"]
    no_ids = tmp_path / "no_ids.jsonl"
    no_ids.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = load_dapo_math(str(no_ids)), load_dapo_math(str(no_ids))
    assert first["prompt_id"] == second["prompt_id"]
    assert len(first) == 24
    assert first[0]["prompt_id"] == text_prompt_id("How many positive divisors does $360$ have?")
    assert text_prompt_id("abc") == "a9993e364706816a"
    parquet, jsonl = load_dapo_math(str(VERL_FILES[0])), load_dapo_math(str(VERL_FILES[1]))
    assert parquet["prompt_id"] == jsonl["prompt_id"]


def test_strip_instruction_leaves_plain_problems_alone():
    assert strip_instruction(f"{DAPO_PREFIX}\n\nWhat is 2+2?\n\n{DAPO_SUFFIX}") == "What is 2+2?"
    assert strip_instruction("  What is 2+2?  ") == "What is 2+2?"


def test_training_rows_work_with_the_reward():
    dataset = load_dapo_math(str(VERL_FILES[0]))
    completions = [[{"role": "assistant", "content": f"Answer: {s}"}] for s in dataset["solution"]]
    assert dapo_accuracy_reward(completions, dataset["solution"]) == [1.0] * len(dataset)


@pytest.mark.parametrize(
    "name",
    ["bad_dapo.jsonl", "aime24.jsonl"],
)
def test_files_in_another_schema_name_the_missing_column(name):
    with pytest.raises(ValueError, match=r"no `prompt` column.*verl.*processed"):
        load_dapo_math(str(FIXTURES / name))


def test_chat_prompt_without_ground_truth_is_rejected(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}], "answer": "1"}) + "\n")
    with pytest.raises(ValueError, match="reward_model.ground_truth"):
        load_dapo_math(str(path))


def test_string_prompt_without_solution_is_rejected(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"prompt": "What is 1+1?", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="no `solution` column"):
        load_dapo_math(str(path))


def test_missing_and_unreadable_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="No data found"):
        load_dapo_math(str(tmp_path / "missing.parquet"))
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(ValueError, match="Cannot read"):
        load_dapo_math(str(broken))
    with pytest.raises(ValueError, match="instruction"):
        load_dapo_math(str(VERL_FILES[0]), instruction="latex")


EXPECTED_SOLUTIONS = {
    "aime24": ["24", "4", "408", "8", "36"],
    "aime25": ["7", "-5", "24", "93"],
    "amc23": ["24", "4", "408", "8"],
    "math500": ["\\frac{2}{3}", "\\left( 3, \\frac{\\pi}{2} \\right)", "\\text{Evelyn}"],
    "olympiadbench": ["2, -2", "5 \\sqrt{2}"],
    "minerva": ["60", "3000"],
}


@pytest.mark.parametrize("name", sorted(EVAL_BENCHMARKS))
def test_eval_benchmarks_are_normalised(name):
    dataset = load_eval_benchmark(name, path=str(FIXTURES / f"{name}.jsonl"))
    assert dataset["solution"] == EXPECTED_SOLUTIONS[name]
    assert set(dataset["benchmark"]) == {name}
    assert all(p[0]["content"].endswith(BOXED_SUFFIX) for p in dataset["prompt"])
    assert dataset["prompt_id"] == [text_prompt_id(p) for p in dataset["problem"]]
    completions = [f"\\boxed{{{s}}}" for s in dataset["solution"]]
    assert boxed_accuracy_reward(completions, dataset["solution"]) == [1.0] * len(dataset)


def test_eval_benchmark_keeps_its_own_solution_column():
    dataset = load_eval_benchmark("math500", path=str(FIXTURES / "math500.jsonl"), instruction="answer")
    assert dataset[0]["source_solution"] == "Divide by 6."
    assert dataset[0]["prompt"][0]["content"].startswith(DAPO_PREFIX)


def test_opencompass_aime25_combines_both_configs(monkeypatch):
    calls, real_load_dataset = [], datasets.load_dataset

    def fake_load_dataset(path, config=None, split=None, **kwargs):
        calls.append((path, config, split))
        part = "I" if config == "AIME2025-I" else "II"
        return real_load_dataset("json", data_files=str(FIXTURES / f"aime25_opencompass_{part}.jsonl"), split="train")

    monkeypatch.setattr("coba_trl.data.sources.datasets.load_dataset", fake_load_dataset)
    dataset = load_eval_benchmark("aime25", path="opencompass/AIME2025")
    assert calls[-2:] == [
        ("opencompass/AIME2025", "AIME2025-I", "test"),
        ("opencompass/AIME2025", "AIME2025-II", "test"),
    ]
    assert dataset["solution"] == ["24", "4", "408", "8", "36"]


def test_hub_ids_are_only_fetched_on_load(monkeypatch):
    calls = []

    def fake_load_dataset(path, config=None, split=None, **kwargs):
        calls.append((path, config, split))
        return datasets.Dataset.from_dict({"prompt": ["x"], "solution": ["1"], "problem": ["x"], "answer": [1.0]})

    monkeypatch.setattr("coba_trl.data.sources.datasets.load_dataset", fake_load_dataset)
    assert calls == []
    load_dapo_math("open-r1/DAPO-Math-17k-Processed", config="en")
    load_eval_benchmark("math500")
    assert calls == [("open-r1/DAPO-Math-17k-Processed", "en", "train"), ("HuggingFaceH4/MATH-500", None, "test")]


def test_unknown_benchmark_and_missing_columns_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="Unknown benchmark 'gsm8k'"):
        load_eval_benchmark("gsm8k")
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "response": "2"}) + "\n")
    with pytest.raises(ValueError, match="no answer column"):
        load_eval_benchmark("minerva", path=str(path))


def test_chat_prompts_with_a_system_message_use_the_user_turn(tmp_path):
    system = {"role": "system", "content": "You are a careful mathematician."}
    rows = [
        {
            "prompt": [system, {"role": "user", "content": f"{DAPO_PREFIX}\n\nWhat is {n}+1?\n\n{DAPO_SUFFIX}"}],
            "reward_model": {"ground_truth": str(n + 1)},
        }
        for n in (1, 2, 1)
    ]
    path = tmp_path / "system.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dataset = load_dapo_math(str(path), deduplicate="text")
    assert dataset.duplicates_dropped == 1
    assert dataset["problem"] == ["What is 1+1?", "What is 2+1?"]
    assert dataset["solution"] == ["2", "3"]


def test_a_hub_id_offline_fails_at_once_naming_it_and_a_local_alternative():
    with pytest.raises(
        ValueError, match=r"'no-such-owner/no-such-set'.*offline mode.*local \.parquet, \.jsonl or \.json"
    ):
        load_dapo_math("no-such-owner/no-such-set")


def test_without_network_a_hub_id_fails_before_any_download(monkeypatch):
    from huggingface_hub import constants

    from coba_trl.data import sources

    def unresolvable(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    def no_download(*args, **kwargs):
        raise AssertionError("load_dataset was called without network")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_DATASETS_OFFLINE", *sources.PROXY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sources.socket, "getaddrinfo", unresolvable)
    monkeypatch.setattr(sources.datasets, "load_dataset", no_download)
    with pytest.raises(ValueError, match=r"'BytedTsinghua-SIA/DAPO-Math-17k'.*no network.*HF_HUB_OFFLINE=1"):
        load_dapo_math()
