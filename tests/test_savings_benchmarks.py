"""Smoke runs of the spending benchmarks (`--quick`: a tiny model, a warm start of 10 steps), and the figures they
report recomputed from what they wrote."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scripts.benchmarks import load_benchmark

from coba_trl.rounds.log import read_rounds

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def run(script: str, *argv: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "benchmarks" / script), *argv]
    result = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_the_savings_benchmark_writes_each_arms_counts_and_the_limit(tmp_path):
    arms = ["grpo", "dapo", "knapsack_pilot_spread"]
    out = tmp_path / "savings.json"
    run("rollout_savings.py", "--regime", "hard", "--quick", "--max-steps", "2", "--arms", *arms,
        "--json", str(out), "--output-dir", str(tmp_path / "runs"))  # fmt: skip
    records = json.loads(out.read_text())
    keys = {"arm", "generated", "rows_trained", "rows_with_spread", "generated_per_row_with_spread"}
    keys |= {"prompts_with_spread", "prompts"}  # the breadth beside the diagnostic
    assert [record["arm"] for record in records] == [*arms, "limit"]
    assert all(set(record) == keys for record in records)
    for record in records[:-1]:
        assert read_rounds(tmp_path / "runs" / record["arm"])  # each arm trained and logged its rounds
        if record["rows_with_spread"]:
            assert record["generated_per_row_with_spread"] == pytest.approx(
                record["generated"] / record["rows_with_spread"]
            )
    assert records[-1]["generated_per_row_with_spread"] >= 1.0
    for record in records[:-1]:  # recounted from the allocation log: prompts whose group had a spread of successes
        visits = [v for r in read_rounds(tmp_path / "runs" / record["arm"]) for v in [r, *r.get("refills", [])]]
        spread = {
            p
            for v in visits
            for p, w, n in zip(v["prompt_ids"], v["successes"], v["scored_rollouts"], strict=True)
            if 0 < w < n
        }
        assert record["prompts_with_spread"] == len(spread) and record["prompts"] == 128


@pytest.mark.slow
def test_the_preview_calibration_compares_the_preview_with_the_first_epoch_it_logged(tmp_path):
    bench = load_benchmark("preview_calibration")
    run("preview_calibration.py", "--regime", "hard", "--seed", "1", "--quick", "--output-dir", str(tmp_path))
    for name in ("pass_rates.parquet", "allocation_preview.json", "calibration.json"):
        assert (tmp_path / name).exists()
    calibration = json.loads((tmp_path / "calibration.json").read_text())
    # Seed 1's warm start scored on seed 1's prompts, the ones its runs train on.
    train = load_benchmark("rollout_savings").warm_started(1, str(tmp_path), "hard", quick=True)[2]
    scored = pd.read_parquet(tmp_path / "pass_rates.parquet")
    assert calibration["seed"] == 1 and list(scored["prompt"]) == [p.question for p in train]
    preview = json.loads((tmp_path / "allocation_preview.json").read_text())
    assert preview["settings"]["pass_rate_samples"] == 8
    predicted = {
        (row["allocator"], row["mode"]): row["generated_per_trained_row_with_spread"]
        for row in preview["rollouts_per_trained_row_with_spread"]
    }
    for arm, mode in bench.ARMS.items():
        row = calibration["arms"][arm]
        assert row["predicted"] == predicted[("uniform", mode)]
        measured = bench.epoch_figures(read_rounds(tmp_path / arm), calibration["prompts"])
        assert {key: row[key] for key in measured} == measured
        assert measured["groups"] <= calibration["prompts"]  # the first epoch's visits only
    # The model grpo ended its epoch with, scored on the same prompts and previewed as the warm start was.
    end = calibration["epoch_end"]
    end_preview = json.loads((tmp_path / "epoch_end" / "allocation_preview.json").read_text())
    assert end["predicted"] == bench.uniform_predictions(end_preview)["keep"]
    assert end["flat_share_keep_predicted"] == end_preview["flat_groups_under_keep"]["uniform"]
    assert list(pd.read_parquet(tmp_path / "epoch_end" / "pass_rates.parquet")["prompt"]) == list(scored["prompt"])
    assert end["steps"] > max(
        record["global_step"] for record in read_rounds(tmp_path / "grpo")
    )  # after its last round


def test_the_first_epochs_figures_count_the_groups_of_its_first_visits_skipped_ones_included():
    bench = load_benchmark("preview_calibration")
    records = [
        {"prompt_ids": ["a", "b"], "skipped_prompts": [], "group_sizes": [8, 8], "successes": [0, 4],
         "scored_rollouts": [8, 8], "refills": [
             {"prompt_ids": ["c"], "skipped_prompts": ["d"], "group_sizes": [8], "successes": [8], "scored_rollouts": [8]},
         ]},
        {"prompt_ids": ["e"], "skipped_prompts": [], "group_sizes": [8], "successes": [3], "scored_rollouts": [8]},
    ]  # fmt: skip
    figures = bench.epoch_figures(records, 5)  # a, b, c, d (skipped), e: the fifth visit is in the epoch
    assert (figures["groups"], figures["generated"], figures["rows_with_spread"]) == (4, 32, 16)
    assert figures["generated_per_row_with_spread"] == 2.0 and figures["flat_share"] == 0.5
    assert figures["first_round_flat_share"] == 0.5
    assert bench.epoch_figures(records, 4)["groups"] == 3


@pytest.mark.slow
def test_rollouts_to_accuracy_runs_every_arm_to_the_same_generated_rollouts_and_its_crossings_follow_the_curves(
    tmp_path,
):
    out = tmp_path / "rta.json"
    run("rollouts_to_accuracy.py", "--quick", "--arms", "grpo", "dapo", "--absolute", "0.0", "1.1",
        "--json", str(out), "--output-dir", str(tmp_path / "runs"))  # fmt: skip
    record = json.loads(out.read_text())
    curves, marks = record["curves"], record["thresholds"]
    grpo = curves["grpo"]
    start, final = grpo[0]["avg"], grpo[-1]["avg"]
    assert marks["grpo_gain_50"] == pytest.approx(start + 0.5 * (final - start))
    assert marks["grpo_final"] == pytest.approx(final)
    for arm, curve in curves.items():
        assert curve[0]["generated"] == 0 and curve[-1]["generated"] >= record["rollouts"]  # the same budget
        for name, value in marks.items():
            first = next((p for p in curve if p["avg"] >= value), None)
            expected = None if first is None else {k: first[k] for k in ("step", "generated", "seconds")}
            assert record["crossings"][arm][name] == expected
        for share, value in record["at_equal_rollouts"][arm].items():  # the last evaluation within that budget
            within = [p for p in curve if float(share) == 1.0 or p["generated"] <= float(share) * record["rollouts"]]
            assert value == within[-1]["avg"]
        assert record["crossings"][arm]["absolute_0"]["generated"] == 0  # reached before RL
        assert record["crossings"][arm]["absolute_1.1"] is None  # never reached
    assert curves["dapo"][-1]["step"] < grpo[-1]["step"]  # refill reaches the budget in fewer steps


def test_distinct_prompts_with_spread_count_refill_batches_and_each_prompt_once(tmp_path):
    bench = load_benchmark("rollout_savings")
    first = {"prompt_ids": [0, 1, 2], "successes": [0, 3, 8], "scored_rollouts": [8, 8, 8]}  # only 1 has spread
    refill = {"prompt_ids": [3, 4], "successes": [2, 0], "scored_rollouts": [8, 8]}  # 3 has spread
    later = {"prompt_ids": [1, 0], "successes": [4, 8], "scored_rollouts": [8, 8], "refills": []}  # 1 again
    lines = [json.dumps({**first, "refills": [refill]}), json.dumps(later)]
    (tmp_path / "coba_rounds.jsonl").write_text("\n".join(lines) + "\n")
    assert bench.distinct_prompts_with_spread(str(tmp_path)) == 2


def test_a_saved_warm_start_is_only_reused_by_the_settings_that_made_it(tmp_path, monkeypatch):
    # The benchmarks keep a regime's warm start in their output folder; a regime whose warm start has changed since
    # (as the frontier recipe's did) must make its own, not load the one saved before.
    from coba_trl.demo import config

    bench = load_benchmark("rollout_savings")
    first = bench.warm_started(0, str(tmp_path), "frontier", quick=True)[0].state_dict()
    again = bench.warm_started(0, str(tmp_path), "frontier", quick=True)[0].state_dict()  # loaded, the same weights
    assert all(first[k].equal(again[k]) for k in first) and len(list(tmp_path.glob("*.pt"))) == 1
    monkeypatch.setitem(config.REGIMES, "frontier", {**config.REGIMES["frontier"], "demo_warm_start_upper_share": 0.2})
    other = bench.warm_started(0, str(tmp_path), "frontier", quick=True)[0].state_dict()
    assert len(list(tmp_path.glob("*.pt"))) == 2 and any(not first[k].equal(other[k]) for k in first)
