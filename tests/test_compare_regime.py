"""Smoke run of benchmarks/compare_regime.py (study 2 of docs/results.md) at tiny sizes: pilots, runs and report."""

import json
import os

import numpy as np
import pytest
from scripts.benchmarks import load_benchmark


def test_the_protocol_keeps_temperature_one_and_an_equal_budget_for_every_arm():
    script = load_benchmark("compare_regime")
    assert script.REGIME_PROTOCOL["temperature"] == 1.0
    assert not any("budget_multiplier" in settings for settings in script.REGIME_ARMS.values())
    assert {"grpo", "knapsack", "coba", "coba_paper"} <= set(script.REGIME_ARMS)
    assert any(settings.get("pass_rate_prior_strength", 0) > 0 for settings in script.REGIME_ARMS.values())


@pytest.mark.slow
def test_quick_study_pilots_runs_and_reports_its_own_section(tmp_path):
    script = load_benchmark("compare_regime")
    helpers = load_benchmark("compare_allocators")
    output_dir, docs_dir = str(tmp_path / "raw"), str(tmp_path / "docs")
    arms = ["grpo", "coba_prior2"]
    common = ["--quick", "--workers", "1", "--output_dir", output_dir, "--arms", *arms]
    script.main([*common, "--pilot"], study=script.REGIME)
    with open(helpers.pilot_path(output_dir, "coba_prior2", 0)) as handle:
        pilot = json.load(handle)
    assert "final_accuracy" not in pilot and "accuracy_curve" not in pilot  # a pilot keeps no accuracy
    assert pilot["coba/failure_rate"] and pilot["machine"]["cpu_model"] is not None

    script.main(common, study=script.REGIME)
    with open(helpers.run_path(output_dir, "coba_prior2", 0)) as handle:
        run = json.load(handle)
    assert all(len(record) == 5 for record in run["rounds"])  # allocator's p_i and the pooled S_i / N_i
    assert run["machine"]["nproc"] >= 1

    os.makedirs(docs_dir)
    with open(os.path.join(docs_dir, "results.md"), "w") as handle:
        handle.write(
            "# study 1\n<!-- results:begin -->\nkept\n<!-- results:end -->\n# study 2\n<!-- regime:begin -->\n"
            "<!-- regime:end -->\n"
        )
    script.main(["--report_only", "--output_dir", output_dir, "--docs_dir", docs_dir], study=script.REGIME)
    report = open(os.path.join(docs_dir, "results.md")).read()
    assert "kept" in report and all(f"`{arm}`" in report for arm in arms)
    assert os.path.getsize(os.path.join(docs_dir, "regime_budget_by_pass_rate.png")) > 0


def test_the_pre_registered_verdict_needs_four_of_five_seeds_or_three_of_three():
    report = load_benchmark("compare_report")
    shown_epochs, verdict = report.shown_epochs, report.verdict

    assert verdict(np.array([0.02, 0.01, 0.03, -0.01, 0.02])) == "beats"
    assert verdict(np.array([0.05, 0.04, -0.01, -0.01, 0.02])) == "no difference shown against"
    assert verdict(np.array([-0.02, -0.01, -0.03])) == "loses to"
    assert verdict(np.array([0.02, 0.01, -0.001])) == "no difference shown against"
    assert shown_epochs(5) == [2, 3, 4, 5] and shown_epochs(20) == [2, 3, 4, 5, 6, 10, 14, 18, 20]
