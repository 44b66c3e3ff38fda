"""Smoke run of benchmarks/compare_allocators.py (the allocator comparison of docs/results.md) at tiny sizes."""

import json
import os

import pytest
from scripts.benchmarks import load_benchmark


@pytest.mark.slow
def test_quick_comparison_runs_every_arm_at_its_budget_and_reports(tmp_path):
    script = load_benchmark("compare_allocators")
    output_dir, docs_dir = str(tmp_path / "raw"), str(tmp_path / "docs")
    script.main(["--quick", "--workers", "1", "--output_dir", output_dir])
    runs = {}
    for arm in script.ARMS:
        with open(script.run_path(output_dir, arm, 0)) as handle:
            runs[arm] = json.load(handle)
    base = runs["grpo"]["rollouts"]
    assert base > 0
    assert all(runs[arm]["rollouts"] == base for arm in script.ARMS if arm != "grpo_2x")
    assert runs["grpo_2x"]["rollouts"] == 2 * base
    for run in runs.values():
        assert run["accuracy_curve"][0][1] == 0  # the curve starts at the warm-start checkpoint
        assert sum(sum(sizes) for _, _, sizes, *_ in run["rounds"]) == run["rollouts"]
        assert len(run["train_pass_rates_after"]) == script.QUICK["num_train_prompts"]
        assert set(run["train_greedy_correct_after"]) <= {0.0, 1.0}

    script.main(["--report_only", "--output_dir", output_dir, "--docs_dir", docs_dir])
    with open(os.path.join(docs_dir, "results.md")) as handle:
        report = handle.read()
    assert all(f"`{arm}`" in report for arm in script.ARMS)
    assert os.path.getsize(os.path.join(docs_dir, "compare_accuracy.png")) > 0
