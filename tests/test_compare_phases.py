"""Smoke run of benchmarks/compare_phases.py (study 3 of docs/results.md) at tiny sizes: pilots, runs and report."""

import json
import os

import pytest
from scripts.benchmarks import load_benchmark


def test_the_protocol_keeps_temperature_one_an_equal_budget_and_the_five_arms():
    script = load_benchmark("compare_phases")
    assert script.PHASES_PROTOCOL["temperature"] == 1.0
    assert len(script.PHASES_PROTOCOL["seeds"]) >= 3
    assert not any("budget_multiplier" in settings for settings in script.PHASES_ARMS.values())
    assert set(script.PHASES_ARMS) == {"grpo", "coba", "coba_2phase", "coba_rescue", "grpo_drop"}
    assert script.PHASES_ARMS["grpo_drop"] == {"budget_allocator": "uniform", "zero_variance_groups": "drop"}
    assert script.PHASES_ARMS["coba_rescue"]["two_phase_rounds"] and not script.PHASES_ARMS["coba"].get(
        "two_phase_rounds"
    )


def test_arm_settings_reach_the_trainer_config(tmp_path):
    script = load_benchmark("compare_phases")
    helpers = load_benchmark("compare_allocators")
    args = helpers.training_args(script.PHASES_PROTOCOL, script.PHASES_ARMS, "coba_rescue", 0, str(tmp_path))
    assert args.two_phase_rounds and args.zero_variance_groups == "rescue" and args.budget_allocator == "coba"
    assert args.generation_batch_size == 256 and args.temperature == 1.0
    drop = helpers.training_args(script.PHASES_PROTOCOL, script.PHASES_ARMS, "grpo_drop", 0, str(tmp_path))
    assert drop.zero_variance_groups == "drop" and not drop.two_phase_rounds and drop.generation_batch_size == 256


@pytest.mark.slow
def test_quick_study_pilots_runs_and_reports_its_own_section(tmp_path):
    script = load_benchmark("compare_phases")
    helpers = load_benchmark("compare_allocators")
    output_dir, docs_dir = str(tmp_path / "raw"), str(tmp_path / "docs")
    arms = ["coba", "coba_rescue", "grpo_drop"]
    common = ["--quick", "--workers", "1", "--output_dir", output_dir, "--arms", *arms]
    script.main([*common, "--pilot", "--arms", "coba_rescue"], study=script.PHASES)
    with open(helpers.pilot_path(output_dir, "coba_rescue", 0)) as handle:
        pilot = json.load(handle)
    assert "final_accuracy" not in pilot and "accuracy_curve" not in pilot  # a pilot keeps no accuracy
    assert pilot["train_time_s"] > 0 and pilot["generation_time_s"] > 0

    script.main(common, study=script.PHASES)
    with open(helpers.run_path(output_dir, "coba_rescue", 0)) as handle:
        run = json.load(handle)
    assert all(len(phases) == 2 for _, phases in run["generation_times"])  # screening + the rest, every round
    assert run["step_times"][-1][0] == script.QUICK["max_steps"]
    with open(helpers.run_path(output_dir, "coba", 0)) as handle:
        assert all(len(phases) == 1 for _, phases in json.load(handle)["generation_times"])

    os.makedirs(docs_dir)
    with open(os.path.join(docs_dir, "results.md"), "w") as handle:
        handle.write(
            "# study 1\n<!-- results:begin -->\nkept\n<!-- results:end -->\n<!-- phases:begin -->\n<!-- phases:end -->\n"
        )
    script.main(["--report_only", "--output_dir", output_dir, "--docs_dir", docs_dir], study=script.PHASES)
    report = open(os.path.join(docs_dir, "results.md")).read()
    assert "kept" in report and all(f"`{arm}`" in report for arm in arms)
    assert "### Held-out accuracy at equal wall time" in report
    assert "rescued with a non-zero spread" in report
    for plot in ("accuracy_time", "round_time", "budget_by_pass_rate"):
        assert os.path.getsize(os.path.join(docs_dir, f"phases_{plot}.png")) > 0
