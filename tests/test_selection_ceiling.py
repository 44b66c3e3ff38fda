"""benchmarks/selection_ceiling.py: the arithmetic of the ceiling of selection on a tiny allocation log."""

import json
import math

import pytest
from scripts.benchmarks import load_benchmark


def tiny_run():
    """Three prompts (levels 0, 1, 1), four rounds of two groups of 4 (one round per two optimizer steps), avg@k
    0.1 before RL, 0.2 at step 4 and 0.3 at step 8, the stop."""
    outcomes = [([0, 1], [2, 0]), ([2, 0], [4, 1]), ([1, 2], [0, 2]), ([0, 1], [4, 4])]
    records = [
        {"global_step": 2 * index, "prompt_ids": [str(p) for p in prompts], "group_sizes": [4, 4],
         "successes": wins, "scored_rollouts": [4, 4]}
        for index, (prompts, wins) in enumerate(outcomes)
    ]  # fmt: skip
    run = {
        "generated_curve": [[step, 8 * ((step + 1) // 2)] for step in range(1, 9)],
        "step_seconds": [[step, float(step)] for step in range(1, 9)],
        "accuracy_curve": [[0, 0, 0.1], [4, 16, 0.2], [8, 32, 0.3]],
        "curve_by_level": [{}, {}, {}],
        "optimizer_steps": 8,
        "rollouts_generated": 32,
        "train_time_s": 8.0,
        "heldout_sampled_accuracy": 0.3,
    }
    return run, records, [0, 1, 1]


def test_the_ceiling_counts_rows_with_spread_and_first_visits_before_each_crossing():
    bench = load_benchmark("selection_ceiling")
    run, records, levels = tiny_run()
    result = bench.warm_start_ceiling(run, records, levels)
    # Rows: all failed 8 (prompt 1 twice), all solved 12, with spread 12 (prompt 0 twice, prompt 2 once).
    assert result["flat"] == {"rows": 32, "all_failed": 0.25, "all_solved": 0.375, "flat": 0.625}
    assert [quarter["flat"] for quarter in result["flat_by_quarter"]] == [0.5, 0.5, 0.5, 1.0]
    assert result["flat_by_level"]["0"]["flat"] == pytest.approx(1 / 3)
    assert result["flat_by_level"]["1"]["flat"] == 0.8 and result["flat_by_level"]["1"]["share_of_flat_rows"] == 0.8
    # grpo_gain_50 (0.2) is crossed at step 4: rounds 0 and 1, 16 rows, 8 with spread; first visits of prompts 0, 1
    # and 2 are 12 rows, and the one later group with spread (prompt 0 in round 1) 4 more.
    half = result["thresholds"]["grpo_gain_50"]
    assert (half["step"], half["generated"], half["rows_with_spread"], half["first_visit_rows"]) == (4, 16, 8, 12)
    assert (half["perfect_prediction"], half["history_only"]) == (0.5, 1.0)
    # grpo_final (0.3) at step 8, the whole run: 12 of 32 with spread; history: 12 first-visit rows + 8 later.
    final = result["thresholds"]["grpo_final"]
    assert (final["step"], final["generated"], final["rows_with_spread"]) == (8, 32, 12)
    assert (final["perfect_prediction"], final["history_only"]) == (0.375, 0.625)


def test_the_ceiling_refuses_a_log_that_is_not_the_runs():
    bench = load_benchmark("selection_ceiling")
    run, records, levels = tiny_run()
    with pytest.raises(ValueError, match="the allocation log has 32 rollouts, the run 40"):
        bench.warm_start_ceiling({**run, "rollouts_generated": 40}, records, levels)


def test_geometric_means_and_intervals_over_warm_starts_are_taken_on_the_logs():
    bench = load_benchmark("selection_ceiling")
    result = bench.summary([0.25, 1.0], geometric=True)
    assert result["mean"] == pytest.approx(0.5)  # sqrt(0.25 x 1.0)
    half = 12.706204736 * (math.log(4) / math.sqrt(2)) / math.sqrt(2)  # t(0.975, 1) x sd of the logs / sqrt(2)
    assert result["low"] == pytest.approx(0.5 * math.exp(-half)) and result["high"] == pytest.approx(
        0.5 * math.exp(half)
    )
    assert bench.summary([0.5, None], geometric=True) is None


def test_the_committed_ceiling_regenerates_from_study_9s_raw_runs_and_the_spending_page_quotes_it(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    committed = root / "benchmarks" / "results" / "frontier_selection" / "ceiling.json"
    bench = load_benchmark("selection_ceiling")
    out = tmp_path / "ceiling.json"
    bench.main(["--study_dir", str(committed.parent), "--json", str(out)])
    assert out.read_bytes() == committed.read_bytes()
    result = json.loads(out.read_text())
    spending = (root / "docs" / "spending.md").read_text()
    assert all(line in spending for line in bench.table(result))
