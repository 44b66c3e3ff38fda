"""Study 7's report: thresholds from each warm start's GRPO run, the first evaluation at or above them (the stop's
measurement included), rollouts read from the run's own generated count, ratios to GRPO's and the goal's verdict."""

import math

import pytest
from scripts.benchmarks import load_benchmark


def run(arm, warm, points, stop=None, budget=1280):
    """A compact study-7 record: `points` are (step, generated, seconds, avg@k); `stop` an extra (step, generated,
    seconds, avg@k) between evaluations, where the budget stopped the run."""
    last = stop or points[-1]
    return {
        "arm": arm,
        "warm_start_seed": warm,
        "seed": 0,
        "accuracy_curve": [[s, 0, a] for s, _, _, a in points],
        "curve_by_level": [{"0": a} for *_, a in points],
        "generated_curve": [[s, g] for s, g, _, _ in [*points, *([stop] if stop else [])] if s],
        "step_seconds": [[s, t] for s, _, t, _ in [*points, *([stop] if stop else [])] if s],
        "optimizer_steps": last[0],
        "rollouts_generated": last[1],
        "train_time_s": last[2],
        "heldout_sampled_accuracy": last[3],
        "rollout_budget": budget,
        "level_rounds": [{"step": 0, "by_level": {"0": 256}, "by_pass_rate": {"unseen": 256}}],
        "rounds": [{"zero_std": 0.5}],
    }


GRPO = [(0, 0, 0.0, 0.10), (5, 640, 10.0, 0.20), (10, 1280, 20.0, 0.30)]


def test_thresholds_and_the_first_crossing_count_the_rollouts_generated_by_then():
    crossings = load_benchmark("studies.report.crossings")
    shares = {"grpo_gain_50": 0.5, "grpo_gain_90": 0.9, "grpo_final": 1.0}
    grpo = run("grpo", 0, GRPO)
    assert crossings.thresholds(grpo, shares) == pytest.approx(
        {"grpo_gain_50": 0.2, "grpo_gain_90": 0.28, "grpo_final": 0.3}
    )
    # A refilling arm: ahead at its step-5 evaluation (1,000 generated), stopped by the budget at step 6.
    dapo = run("dapo", 0, [(0, 0, 0.0, 0.10), (5, 1000, 12.0, 0.25)], stop=(6, 1300, 15.0, 0.31))
    points = crossings.curve(dapo)
    assert [p["step"] for p in points] == [0, 5, 6] and points[-1]["avg"] == 0.31  # the stop's measurement last
    found = crossings.crossings({"grpo": {(0, 0): grpo}, "dapo": {(0, 0): dapo}}, shares)
    assert [found["grpo"][name][0]["generated"] for name in shares] == [640, 1280, 1280]
    assert [found["dapo"][name][0]["generated"] for name in shares] == [1000, 1300, 1300]
    assert found["dapo"]["grpo_final"][0]["seconds"] == 15.0


def test_the_goal_needs_half_of_grpos_rollouts_in_every_warm_start():
    crossings = load_benchmark("studies.report.crossings")
    runs = {"grpo": {}, "fast": {}, "never": {}}
    for warm, scale in enumerate((1.0, 1.1, 0.9)):
        runs["grpo"][(warm, 0)] = run("grpo", warm, [(s, g, t, a * scale) for s, g, t, a in GRPO])
        # Reaches grpo's final avg@k at 640 of grpo's 1,280 in every warm start: a ratio of 0.5.
        runs["fast"][(warm, 0)] = run("fast", warm, [(0, 0, 0.0, 0.1 * scale), (5, 640, 9.0, 0.3 * scale),
                                                     (10, 1280, 18.0, 0.3 * scale)])  # fmt: skip
        runs["never"][(warm, 0)] = run("never", warm, [(s, g, t, 0.1 * scale) for s, g, t, _ in GRPO])
    test = crossings.ratio_test(
        *(crossings.crossings(runs, {"grpo_final": 1.0})[a]["grpo_final"] for a in ("fast", "grpo"))
    )
    assert test["ratios"] == {0: 0.5, 1: 0.5, 2: 0.5} and math.isclose(test["geo"], 0.5)
    rows = "\n".join(crossings.crossing_rows(runs, {"seeds": [0], "goal_ratio": 0.5}, {"grpo_final": 1.0}))
    assert "| `never` | `grpo_final` | 0 of 3 |" in rows and "does not reach" in rows
    assert "met by `fast`" in rows
    slower = {
        **runs,
        "fast": {unit: {**r, "generated_curve": [[5, 700], [10, 1280]]} for unit, r in runs["fast"].items()},
    }
    assert "met by no arm" in "\n".join(crossings.crossing_rows(slower, {"seeds": [0]}, {"grpo_final": 1.0}))


def test_rows_with_spread_by_a_step_count_each_rounds_rows_over_its_optimizer_steps():
    crossings = load_benchmark("studies.report.crossings")
    record = {"rounds": [{"step": 0, "rows_with_spread": 200}, {"step": 2, "rows_with_spread": 100}]}
    assert [crossings.rows_with_spread_by(record, step, 2) for step in (0, 1, 2, 3, 4, 9)] == [
        0,
        100,
        200,
        250,
        300,
        300,
    ]


def test_the_interim_readout_gives_each_run_arms_ratios_and_differences_against_grpo():
    interim = load_benchmark("studies.interim")
    runs = {"grpo": {}, "skip": {}}
    for warm, scale in enumerate((1.0, 1.1)):
        runs["grpo"][(warm, 0)] = run("grpo", warm, [(s, g, t, a * scale) for s, g, t, a in GRPO])
        # Reaches grpo's final avg@k with 960 of grpo's 1,280 rollouts, and ends 0.01 above it.
        runs["skip"][(warm, 0)] = run("skip", warm, [(0, 0, 0.0, 0.1 * scale), (5, 960, 9.0, 0.3 * scale + 0.01)])
    lines = interim.readout(runs, margin=0.02)
    assert lines[0] == "skip (2 warm starts)"
    assert lines[3] == "  rollouts to grpo_final / grpo's: 0: 0.750, 1: 0.750; geometric mean 0.750 [0.750, 0.750]"
    assert lines[4].startswith("  avg@k at the stop - grpo's: +0.0100, +0.0100; mean +0.0100")
