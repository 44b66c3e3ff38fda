"""Smoke runs of benchmarks/studies/runner.py at tiny sizes (`--quick`): every declared study pilots, runs and reports."""

import dataclasses
import json
import os
import shutil

import pytest
from scripts.benchmarks import load_benchmark


def run(study: str, *options: str) -> None:
    load_benchmark("studies.runner").main([study, *options])


@pytest.mark.slow
def test_study_1_runs_every_arm_at_its_budget_and_reports(tmp_path):
    paths = load_benchmark("studies.paths")
    study = load_benchmark("studies.protocols").load_study("allocators")
    output_dir, docs_dir = str(tmp_path / "raw"), str(tmp_path / "docs")
    run("allocators", "--quick", "--workers", "1", "--output_dir", output_dir)
    runs = {}
    for arm in study.arms:
        with open(paths.run_path(output_dir, arm, 0)) as handle:
            runs[arm] = json.load(handle)
    base = runs["grpo"]["rollouts"]
    assert base > 0
    assert all(runs[arm]["rollouts"] == base for arm in study.arms if arm != "grpo_2x")
    assert runs["grpo_2x"]["rollouts"] == 2 * base
    for record in runs.values():
        assert record["accuracy_curve"][0][1] == 0  # the curve starts at the warm-start checkpoint
        assert sum(sum(sizes) for _, _, sizes, *_ in record["rounds"]) == record["rollouts"]
        assert len(record["train_pass_rates_after"]) == study.quick["num_train_prompts"]
        assert set(record["train_greedy_correct_after"]) <= {0.0, 1.0}
    run("allocators", "--report_only", "--output_dir", output_dir, "--docs_dir", docs_dir)
    report = open(os.path.join(docs_dir, "allocators.md")).read()
    assert all(f"`{arm}`" in report for arm in study.arms)
    assert os.path.getsize(os.path.join(docs_dir, "compare_accuracy.png")) > 0


@pytest.mark.slow
def test_study_3_pilots_keep_no_accuracy_and_its_runs_record_phases_rescues_and_drops(tmp_path):
    paths = load_benchmark("studies.paths")
    output_dir, docs_dir = str(tmp_path / "raw"), str(tmp_path / "docs")
    common = ["--quick", "--workers", "1", "--output_dir", output_dir]
    run("phases", *common, "--pilot", "--arms", "coba_rescue", "--warm_start_seeds", "0")
    regime_dir = os.path.join(output_dir, "study_2_regime")
    with open(paths.pilot_path(regime_dir, "coba_rescue", 0, legacy=False)) as handle:
        pilot = json.load(handle)
    assert "final_accuracy" not in pilot and "accuracy_curve" not in pilot  # a pilot keeps no accuracy
    assert pilot["train_time_s"] > 0 and pilot["generation_time_s"] > 0 and pilot["coba/failure_rate"]

    arms = ["coba", "coba_rescue", "grpo_drop"]
    run("phases", *common)  # every arm: a unit is reported when all five ran
    records = {}
    for arm in arms:
        with open(paths.run_path(regime_dir, arm, 0, warm_seed=1, legacy=False)) as handle:
            records[arm] = json.load(handle)
    rescue, drop = records["coba_rescue"]["rounds"], records["grpo_drop"]["rounds"]
    assert all(len(r["generation_s"]) == 2 for r in rescue)  # screening + the rest, every round
    assert all(len(r["generation_s"]) == 1 for r in records["coba"]["rounds"])
    assert all(r["rescued_groups"] >= r["rescued_with_spread"] >= 0 for r in rescue)
    assert all("dropped_groups" in r and "rescued_groups" not in r for r in drop)
    os.makedirs(docs_dir)
    with open(os.path.join(docs_dir, "phases.md"), "w") as handle:
        handle.write("# study 3\n\nkept\n<!-- phases:begin -->\n<!-- phases:end -->\n\n## conclusions\n")
    run("phases", "--report_only", "--output_dir", output_dir, "--docs_dir", docs_dir)
    report = open(os.path.join(docs_dir, "phases.md")).read()
    assert "kept" in report and "<!-- phases:end -->\n\n## conclusions\n" in report  # only its section rewritten
    assert all(f"`{arm}`" in report for arm in arms)
    assert "95% t-interval" in report and "rescued groups with a non-zero spread" in report
    assert "generation s per round: phase 1 + phase 2" in report


@pytest.mark.slow
def test_study_4_units_record_small_json_and_the_report_regenerates_byte_for_byte(tmp_path):
    paths = load_benchmark("studies.paths")
    output_dir, docs_dir = str(tmp_path / "raw"), tmp_path / "docs"
    run("warm_starts", "--quick", "--workers", "1", "--regimes", "demo", "--output_dir", output_dir)
    regime_dir = os.path.join(output_dir, "demo")
    records = sorted(os.listdir(os.path.join(regime_dir, "runs")))
    assert len(records) == 5 * 2  # five arms x two units (warm-start seeds 0 and 1, RL seed 0)
    with open(paths.run_path(regime_dir, "coba_shuffled", 0, warm_seed=1, legacy=False)) as handle:
        record = json.load(handle)
    assert {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "torch_cpu_capability"} <= set(record["provenance"]["numerics"])
    assert record["settings"]["group_weighting"] == "row" and record["optimizer_steps"] == 4
    assert {"F_t", "alpha", "sizes", "p_per_rollout"} <= set(record["rounds"][0])
    assert 0.0 <= record["heldout_sampled_accuracy"] <= 1.0 and record["tokens"] > 0
    assert os.path.exists(os.path.join(regime_dir, "warm_start", "warm1.json"))

    (docs_dir / "first").mkdir(parents=True)
    (docs_dir / "first" / "warm_starts.md").write_text(
        "# kept\n<!-- warm_starts:begin -->\n<!-- warm_starts:end -->\n"
    )
    shutil.copytree(docs_dir / "first", docs_dir / "second")
    for name in ("first", "second"):
        run("warm_starts", "--report_only", "--output_dir", output_dir, "--docs_dir", str(docs_dir / name))
    first, second = (docs_dir / name / "warm_starts.md" for name in ("first", "second"))
    assert first.read_bytes() == second.read_bytes()
    assert "# kept" in first.read_text() and "95% t-interval" in first.read_text()
    png = [docs_dir / name / "warm_starts_intervals.png" for name in ("first", "second")]
    assert png[0].read_bytes() == png[1].read_bytes()
    assert "### Study 4: re-analysis after the results (warm starts as units, Holm)" in first.read_text()

    # A future study's default: warm starts as units (2 here), Holm-adjusted verdicts beside the raw ones.
    study = dataclasses.replace(load_benchmark("studies.protocols").load_study("warm_starts"), unit="warm_start")
    load_benchmark("studies.report.pages").write_report(study, output_dir, str(docs_dir / "default"))
    report = (docs_dir / "default" / "warm_starts.md").read_text()
    assert "#### Study 4: comparisons (warm starts as units, Holm)" in report
    assert "| verdict | verdict after Holm |" in report and "pre-registered comparisons" not in report
    assert "over the 2 warm starts (t with 1 degree of freedom)" in report and "re-analysis" not in report


@pytest.mark.slow
def test_study_7_records_the_avg_curve_by_level_and_where_rollouts_went_and_reports_the_crossings(tmp_path):
    paths = load_benchmark("studies.paths")
    output_dir, docs_dir = str(tmp_path / "raw"), tmp_path / "docs"
    run("frontier", "--quick", "--workers", "1", "--arms", "grpo", "dapo", "--output_dir", output_dir)
    with open(paths.run_path(os.path.join(output_dir, "frontier"), "dapo", 0, warm_seed=1, legacy=False)) as handle:
        record = json.load(handle)
    assert len(record["curve_by_level"]) == len(record["accuracy_curve"])  # avg@k per level at every evaluation
    assert set(record["curve_by_level"][0]) == {"0", "1", "2", "3", "4"}
    assert [step for step, _ in record["step_seconds"]] == list(range(1, record["optimizer_steps"] + 1))
    generated = sum(sum(r["by_level"].values()) for r in record["level_rounds"])
    assert generated == record["rollouts_generated"]  # every phase of every round, refills included
    assert all(sum(r["by_level"].values()) == sum(r["by_pass_rate"].values()) for r in record["level_rounds"])
    with open(os.path.join(output_dir, "protocol.json")) as handle:  # the report of the two arms that ran
        recorded = json.load(handle)
    recorded["arms"] = {arm: recorded["arms"][arm] for arm in ("grpo", "dapo")}
    with open(os.path.join(output_dir, "protocol.json"), "w") as handle:
        json.dump(recorded, handle)
    study = dataclasses.replace(
        load_benchmark("studies.protocols").load_study("frontier"), arms=recorded["arms"],
        comparisons=(("dapo", "grpo"),),
    )  # fmt: skip
    load_benchmark("studies.report.pages").write_report(study, output_dir, str(docs_dir))
    report = (docs_dir / "frontier.md").read_text()
    assert "rollouts to each threshold" in report and "| `dapo` | `grpo_final` | " in report
    assert "where the rollouts went" in report and "**Goal, first half**" in report


@pytest.mark.slow
def test_study_8_runs_knapsack_with_the_level_as_its_prior(tmp_path):
    paths = load_benchmark("studies.paths")
    output_dir = str(tmp_path / "raw")
    run(
        "frontier_neighbours", "--quick", "--workers", "1", "--arms", "knapsack_skip_level", "--output_dir", output_dir
    )
    path = paths.run_path(os.path.join(output_dir, "frontier"), "knapsack_skip_level", 0, warm_seed=1, legacy=False)
    with open(path) as handle:
        record = json.load(handle)
    settings = record["settings"]
    assert (settings["pass_rate_neighbour_column"], settings["pass_rate_prior_strength"]) == ("level", 2.0)
    assert (settings["budget_allocator"], settings["zero_variance_groups"]) == ("knapsack", "refill")
    assert sum(sum(r["by_level"].values()) for r in record["level_rounds"]) == record["rollouts_generated"]


@pytest.mark.slow
def test_study_9_keeps_each_runs_allocation_log_beside_its_raw_result(tmp_path):
    import gzip

    paths = load_benchmark("studies.paths")
    output_dir = str(tmp_path / "raw")
    run("frontier_selection", "--quick", "--workers", "1", "--arms", "grpo", "--warm_start_seeds", "0",
        "--output_dir", output_dir)  # fmt: skip
    regime = os.path.join(output_dir, "frontier")
    with open(paths.run_path(regime, "grpo", 0, warm_seed=0, legacy=False)) as handle:
        record = json.load(handle)
    kept = paths.rounds_log_path(regime, "grpo", 0, warm_seed=0, legacy=False)
    with open(os.path.join(regime, "trainer", "grpo_warm0_seed0", "coba_rounds.jsonl"), "rb") as log:
        assert gzip.decompress(open(kept, "rb").read()) == log.read()  # the trainer's log, whole
    rounds = [json.loads(line) for line in gzip.open(kept, "rt")]
    assert sum(sum(r["group_sizes"]) for r in rounds) == record["rollouts_generated"]
    assert open(kept, "rb").read()[4:8] == bytes(4)  # no time in the header: the same log gives the same bytes
    study = load_benchmark("studies.protocols").load_study("frontier_selection")
    page = load_benchmark("studies.report.pages").write_report(study, output_dir, str(tmp_path / "docs"))[0]
    assert "(1 of the 1 declared units started)" in open(page).read()  # the runs read, the logs beside them left


@pytest.mark.parametrize(
    "name",
    [
        "phases",
        "warm_starts",
        "rollout_savings",
        "rollout_savings_hard",
        "frontier",
        "frontier_neighbours",
        "frontier_selection",
    ],
)
def test_committed_raw_results_regenerate_the_study_page_byte_for_byte(tmp_path, name):
    study = load_benchmark("studies.protocols").load_study(name)
    root = os.path.join(os.path.dirname(__file__), "..")
    raw = os.path.join(root, study.output_dir)
    if not os.path.exists(os.path.join(raw, "protocol.json")):
        pytest.skip(f"{name}: raw results not committed yet")
    pages = os.path.join(root, "docs", "studies")
    shutil.copy(os.path.join(pages, f"{name}.md"), tmp_path / f"{name}.md")
    written = load_benchmark("studies.report.pages").write_report(study, raw, str(tmp_path))
    assert written[0] == str(tmp_path / f"{name}.md")
    for path in written:  # the page and every plot
        committed = os.path.join(pages, os.path.basename(path))
        assert open(path, "rb").read() == open(committed, "rb").read(), path
