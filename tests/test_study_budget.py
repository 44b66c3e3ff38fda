"""Study 5's stopping rule at equal generated rollouts (benchmarks/studies/budget.py) and its declaration, without a
model: the callback is driven with plain objects standing in for the trainer's arguments, state and control."""

import dataclasses
from types import SimpleNamespace

import pytest
from scripts.benchmarks import load_benchmark
from transformers import TrainerControl


def round_args(steps_per_generation=2, gradient_accumulation_steps=1, num_iterations=1):
    return SimpleNamespace(
        steps_per_generation=steps_per_generation,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_iterations=num_iterations,
    )


def drive(callback, args, generated_by_step: dict[int, int], max_steps: int) -> int:
    """Run the callback through the steps as the Trainer does; the step training stopped at."""
    counter = {"value": 0}
    callback.generated = lambda: counter["value"]
    for step in range(1, max_steps + 1):
        counter["value"] = generated_by_step.get(step, counter["value"])
        control = TrainerControl()
        callback.on_step_end(args, SimpleNamespace(global_step=step), control)
        if control.should_training_stop:
            return step
    return max_steps


def test_the_budget_stops_a_run_only_at_the_end_of_the_round_that_reaches_it():
    budget = load_benchmark("studies.budget")
    args = round_args()  # a round every 2 optimizer steps; its completions are counted at its first step
    callback = budget.GeneratedRolloutBudget(1000, lambda: 0)
    # Rounds of 300, 400 and 350 generated completions: the third reaches 1050 >= 1000 at step 5.
    stopped = drive(callback, args, {1: 300, 3: 700, 5: 1050, 7: 1400}, max_steps=100)
    assert stopped == 6 and callback.stopped_at == 6  # the round's second half is trained first
    assert callback.curve == [[1, 300], [2, 300], [3, 700], [4, 700], [5, 1050], [6, 1050]]


def test_a_run_that_never_reaches_the_budget_runs_its_schedule_and_says_so():
    budget = load_benchmark("studies.budget")
    callback = budget.GeneratedRolloutBudget(10_000, lambda: 0)
    assert drive(callback, round_args(), {1: 256, 3: 512}, max_steps=4) == 4 and callback.stopped_at is None


def test_round_ends_follow_gradient_accumulation_and_iterations():
    budget = load_benchmark("studies.budget")
    assert [budget.ends_a_round(round_args(4, 2), step) for step in (1, 2, 3, 4)] == [False, True, False, True]
    assert [budget.ends_a_round(round_args(2, 1, 2), step) for step in (1, 2, 3, 4)] == [False, False, False, True]
    assert budget.rounds_behind(round_args(), 100) == 50 and budget.rounds_behind(round_args(), 99) == 50


def test_the_budget_named_by_an_arm_is_that_arms_schedule(tmp_path):
    budget, study_run = load_benchmark("studies.budget"), load_benchmark("studies.run")
    study = load_benchmark("studies.protocols").load_study("rollout_savings")
    protocol = {**study.protocol, **study.regimes["demo"]}

    def arm_args(arm):
        return study_run.training_args(protocol, study.arms, arm, 0, str(tmp_path))

    assert budget.generated_rollout_budget(protocol, arm_args) == 50 * 256 == 12_800
    assert budget.generated_rollout_budget({**protocol, budget.PROTOCOL_KEY: 5000}, arm_args) == 5000
    assert budget.generated_rollout_budget({"max_steps": 100}, arm_args) is None  # studies 1 to 4
    refilling = SimpleNamespace(zero_variance_groups="refill", skip_settled_prompts=False)
    with pytest.raises(ValueError, match="not fixed by its schedule"):
        budget.generated_rollout_budget({**protocol, budget.PROTOCOL_KEY: "dapo"}, lambda arm: refilling)
    for wrong in (0, True, 1.5):
        with pytest.raises(ValueError, match="stop_at_generated_rollouts"):
            budget.generated_rollout_budget({**protocol, budget.PROTOCOL_KEY: wrong}, arm_args)


def test_study_5_is_study_4s_demo_regime_with_more_warm_starts_and_the_budget_rule():
    studies, protocols = load_benchmark("studies.declaration"), load_benchmark("studies.protocols")
    study, study4 = protocols.load_study("rollout_savings"), protocols.load_study("warm_starts")
    ours = {**study.protocol, **study.regimes["demo"]}
    theirs = {**study4.protocol, **study4.regimes["demo"]}
    changed = {key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key)}
    assert changed == {"description", "stop_at_generated_rollouts", "warm_start_seeds"}
    assert ours["warm_start_seeds"][:3] == theirs["warm_start_seeds"] and ours["seeds"] == theirs["seeds"]
    assert study.arms["grpo"] == study4.arms["grpo"] and study.unit == "warm_start"
    assert len(study.comparisons) == 9 and len(set(study.comparisons)) == 9
    assert all(baseline == "grpo" for arm, baseline in study.comparisons[:5])
    assert {arm for arm, baseline in study.comparisons if baseline == "dapo"} == set(study.arms) - {"grpo", "dapo"}
    assert len(studies.units(ours)) == 10


def test_study_6_is_study_5_on_the_hard_regime_with_one_rl_seed_and_the_benchmarks_arms(tmp_path):
    from coba_trl.demo.config import regime_arguments

    studies, protocols = load_benchmark("studies.declaration"), load_benchmark("studies.protocols")
    study, study5 = protocols.load_study("rollout_savings_hard"), protocols.load_study("rollout_savings")
    ours, theirs = {**study.protocol, **study.regimes["hard"]}, {**study5.protocol, **study5.regimes["demo"]}
    changed = {key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key)}
    assert changed == {"description", "operands", "num_train_prompts", "seeds"}
    _, hard = regime_arguments("hard")  # the hard regime's recipe
    assert (ours["operands"], ours["num_train_prompts"]) == (hard.demo_operands, hard.demo_num_train_prompts)
    assert ours["warm_start_steps"] == hard.demo_warm_start_steps and len(studies.units(ours)) == 5
    assert len(study.comparisons) == 17 and study.unit == "warm_start"
    bench = load_benchmark("rollout_savings")
    assert all(bench.ARMS[arm] == settings for arm, settings in study.arms.items())  # the benchmark's arms
    study_run, task = load_benchmark("studies.run"), load_benchmark("studies.task")
    args = {arm: study_run.training_args(ours, study.arms, arm, 0, str(tmp_path)) for arm in study.arms}
    assert (
        args["knapsack_spread"].skip_rule == "spread_chance" and args["dapo_spread"].zero_variance_groups == "refill"
    )
    train = task.problem_sets(ours)[0]
    assert len(train) == 128 and {len(p.question.split("+")) for p in train} == {2, 20, 24, 28, 32}


def test_study_5_arms_reach_the_trainer_config(tmp_path):
    from coba_trl import CoBAConfig

    fields = {field.name for field in dataclasses.fields(CoBAConfig)}
    if not {"skip_settled_prompts", "max_refill_phases"} <= fields:
        pytest.skip("the trainer has no refill or prompt skipping yet")
    study_run = load_benchmark("studies.run")
    study = load_benchmark("studies.protocols").load_study("rollout_savings")
    protocol = {**study.protocol, **study.regimes["demo"]}
    args = {arm: study_run.training_args(protocol, study.arms, arm, 0, str(tmp_path)) for arm in study.arms}
    assert args["dapo"].zero_variance_groups == "refill" and not args["dapo"].skip_settled_prompts
    assert args["greso"].skip_settled_prompts and args["greso"].budget_allocator == "uniform"
    assert args["coba_pilot"].two_phase_rounds and args["coba_pilot"].budget_allocator == "coba"
    assert args["knapsack_skip"].budget_allocator == "knapsack" and args["knapsack_skip"].skip_settled_prompts
    assert {a.generation_batch_size for a in args.values()} == {256} and {a.max_steps for a in args.values()} == {100}


def test_compact_records_keep_the_refill_and_skipping_counts_where_logged():
    records = load_benchmark("studies.records")
    log = {"budget/mean": 8.0, "coba/rollouts_generated": 512, "coba/rows_with_spread": 200, "coba/refill_phases": 1}
    rounds = [[2, ["a", "b"], [8, 8], [None, 0.5], [None, 0.5]]]
    (record,) = records.compact_rounds([log], rounds, [[2, [0.1, 0.1]]])
    assert (record["rollouts_generated"], record["rows_with_spread"], record["refill_phases"]) == (512, 200, 1)
    assert "prompts_skipped" not in record  # not logged, not kept


def test_the_rollout_savings_benchmark_lists_study_5s_arms_and_checks_them_before_training(capsys):
    from coba_trl import CoBAConfig

    bench = load_benchmark("rollout_savings")
    assert bench.main(["--list-arms"]) == 0
    listed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [*load_benchmark("studies.protocols").load_study("rollout_savings").arms, *bench.EXTRA_ARMS]
    for arm in ("grpo", "dapo", "greso", "knapsack", "knapsack_skip", "coba", "coba_skip", "coba_pilot"):
        assert arm in listed
    landed = "skip_settled_prompts" in {field.name for field in dataclasses.fields(CoBAConfig)}
    assert bench.main(["--dry-run", "--regime", "hard"]) == (0 if landed else 1)  # nothing trains either way
    out = capsys.readouterr()
    assert out.out.count(": ok") == (len(bench.ARMS) if landed else 0)
    if not landed:
        assert "the benchmark needs a trainer with" in out.err
    results = [
        {"arm": "dapo", "steps": 80, "generated": 12_800, "rows_trained": 10_240, "rows_with_spread": 10_240},
        {"arm": "grpo", "steps": 100, "generated": 12_800, "rows_trained": 12_800, "rows_with_spread": 6_400},
    ]
    results[0]["seconds"], results[1]["seconds"] = 51.2, 64.0
    results[0].update(prompts_with_spread=96, prompts=128)  # grpo's record predates the breadth count: left blank
    rows = bench.table(results)
    assert rows[2].endswith("| 1.250 | 5.00 | 1.000 | 1.000 | 0.750 |")
    assert rows[3].endswith("| 2.000 | 10.00 | 1.600 | 2.000 |  |")


def test_rollouts_to_reach_grpos_final_accuracy_read_the_generated_count_at_the_first_evaluation_past_it():
    spending = load_benchmark("studies.report.spending")
    # Stopped by the budget at step 6, between evaluations (every 4 steps): its final accuracy counts as one.
    run = {
        "arm": "dapo",
        "accuracy_curve": [[0, 0, 0.30], [4, 1024, 0.45]],  # the middle figure is rounds x 256: not what is read
        "optimizer_steps": 6,
        "final_accuracy": 0.52,
        "generated_curve": [[1, 300], [2, 300], [3, 700], [4, 700], [5, 1050], [6, 1050]],
    }
    assert spending.evaluations(run) == [(0, 0.30), (4, 0.45), (6, 0.52)]
    assert spending.rollouts_to_reach(run, 0.30) == 0  # the warm start already had it
    assert spending.rollouts_to_reach(run, 0.40) == 700  # generated by step 4, not 1024
    assert spending.rollouts_to_reach(run, 0.50) == 1050  # only the evaluation at the stop reaches it
    assert spending.rollouts_to_reach(run, 0.60) is None
    # The reach table: per warm start a mean only where every RL seed reached it.
    grpo = {**run, "arm": "grpo", "final_accuracy": 0.45, "optimizer_steps": 4}
    late = {**run, "accuracy_curve": [[0, 0, 0.3], [4, 1024, 0.4]], "final_accuracy": 0.4}
    runs = {"grpo": {(0, 0): grpo, (0, 1): grpo}, "dapo": {(0, 0): run, (0, 1): late}}
    rows = spending.reach_rows(runs)
    assert rows[2] == "| `grpo` | 2 of 2 | 700 | 1.00 | 1.00 |"
    assert rows[3] == "| `dapo` | 1 of 2 | not reached |  |  |"


def test_the_benchmarks_history_rule_skips_a_prompt_for_good_once_its_group_was_flat():
    bench = load_benchmark("rollout_savings")
    # Three prompts, three epochs of groups of 4: "a" always mixed, "b" flat then (unseen) mixed, "c" mixed then flat.
    visits = [("a", 2, 4), ("b", 0, 4), ("c", 1, 4), ("a", 3, 4), ("b", 2, 4), ("c", 4, 4), ("a", 1, 4)]
    visits += [("b", 1, 4), ("c", 2, 4)]
    # Epoch 1 skips nothing; epoch 2 skips "b"; epoch 3 skips "b" (never seen again) and "c" (flat in epoch 2).
    assert bench.history_rule(visits, 3) == [(12, 8), (8, 4), (4, 4)]


def test_study_7_runs_the_frontier_recipe_it_was_registered_on_with_the_eight_arms_and_an_avg16_curve(tmp_path):
    from coba_trl.demo.config import regime_arguments

    studies, protocols = load_benchmark("studies.declaration"), load_benchmark("studies.protocols")
    study = protocols.load_study("frontier")
    ours = {**study.protocol, **study.regimes["frontier"]}
    training, demo = regime_arguments("frontier")  # the recipe's values
    # The recipe's warm start has since moved to its two easiest rungs (1% of its problems from the three above); the
    # study's, as registered, draws from every rung.
    assert (demo.demo_warm_start_levels, demo.demo_warm_start_upper_share) == (2, 0.01)
    assert "warm_start_levels" not in ours and {
        p.level for p in load_benchmark("studies.task").problem_sets(ours)[2]
    } == {0, 1, 2, 3, 4}
    assert ours["operands"] == demo.demo_operands and ours["num_train_prompts"] == demo.demo_num_train_prompts
    assert (ours["warm_start_steps"], ours["warm_start_learning_rate"]) == (
        demo.demo_warm_start_steps,
        demo.demo_warm_start_learning_rate,
    )
    assert (ours["hidden_size"], ours["num_layers"], ours["num_heldout"]) == (
        demo.demo_hidden_size,
        demo.demo_num_layers,
        demo.demo_num_heldout,
    )
    assert (ours["max_steps"], ours["eval_steps"]) == (training["max_steps"], demo.demo_eval_steps)
    for key in ("learning_rate", "lr_scheduler_type", "num_generations", "steps_per_generation",
                "max_completion_length", "temperature", "min_generations", "max_generations"):  # fmt: skip
        assert ours[key] == training[key], key
    assert ours["curve_samples"] == 16 and len(studies.units(ours)) == 5 and study.unit == "warm_start"
    assert set(study.arms) == {"grpo", "dapo", "greso", "knapsack", "knapsack_skip", "coba", "coba_skip", "coba_pilot"}
    assert study.comparisons == tuple((arm, "grpo") for arm in study.arms if arm != "grpo")
    study_run = load_benchmark("studies.run")
    args = study_run.training_args(ours, study.arms, "grpo", 0, str(tmp_path))
    budget = load_benchmark("studies.budget").generated_rollout_budget(
        ours, lambda arm: study_run.training_args(ours, study.arms, arm, 0, str(tmp_path))
    )
    assert args.generation_batch_size == 256 and budget == 150 // 2 * 256
    train, heldout, _ = load_benchmark("studies.task").problem_sets(ours)
    assert len({p.question for p in train}) == 512 and not {p.question for p in train} & {p.question for p in heldout}


def test_study_8_is_study_7_with_the_level_as_knapsacks_prior(tmp_path):
    protocols, study_run = load_benchmark("studies.protocols"), load_benchmark("studies.run")
    study, study_7 = protocols.load_study("frontier_neighbours"), protocols.load_study("frontier")
    assert (study.protocol, study.regimes, study.unit) == (study_7.protocol, study_7.regimes, study_7.unit)
    for control in ("grpo", "knapsack", "knapsack_skip"):  # their runs are study 7's: the same settings
        assert study.arms[control] == study_7.arms[control]
    protocol = {**study.protocol, **study.regimes["frontier"]}
    for arm, control in (("knapsack_level", "knapsack"), ("knapsack_skip_level", "knapsack_skip")):
        args = study_run.training_args(protocol, study.arms, arm, 0, str(tmp_path))
        base = study_run.training_args(protocol, study.arms, control, 0, str(tmp_path)).to_dict()
        differ = {k for k, v in args.to_dict().items() if v != base[k] and not k.endswith("_dir")}
        assert differ == {"pass_rate_neighbour_column", "pass_rate_prior_strength"}
        assert (args.pass_rate_neighbour_column, args.pass_rate_prior_strength) == ("level", 2.0)
    from coba_trl.demo.task import to_prompt_dataset

    train = load_benchmark("studies.task").problem_sets(protocol)[0]
    assert "level" in to_prompt_dataset(train).column_names  # the column the new arms name reaches the trainer


def test_study_9_runs_the_frontier_recipe_as_it_is_now_with_study_7s_rules_and_its_own_arms(tmp_path):
    from coba_trl.demo.config import WARM_START_PROBLEMS, regime_arguments
    from coba_trl.demo.task import demo_problem_sets

    protocols, study_run = load_benchmark("studies.protocols"), load_benchmark("studies.run")
    study, study_7 = protocols.load_study("frontier_selection"), protocols.load_study("frontier")
    ours = {**study.protocol, **study.regimes["frontier"]}
    training, demo = regime_arguments("frontier")  # the recipe's values
    # The recipe's problems, its warm start's included (two easiest rungs, 1% from the three above).
    assert load_benchmark("studies.task").problem_sets(ours) == demo_problem_sets(
        demo.demo_num_train_prompts,
        demo.demo_num_heldout,
        WARM_START_PROBLEMS,
        seed=training["seed"],
        operands_per_level=tuple(demo.demo_operands),
        warm_start_levels=demo.demo_warm_start_levels,
        warm_start_upper_share=demo.demo_warm_start_upper_share,
    )
    assert (ours["warm_start_steps"], ours["warm_start_learning_rate"]) == (
        demo.demo_warm_start_steps,
        demo.demo_warm_start_learning_rate,
    )
    assert demo.demo_warm_start_lr_scheduler_type == "constant"  # the studies' warm start's schedule
    assert (ours["hidden_size"], ours["num_layers"]) == (demo.demo_hidden_size, demo.demo_num_layers)
    assert (ours["max_steps"], ours["eval_steps"]) == (training["max_steps"], demo.demo_eval_steps)
    for key in ("learning_rate", "lr_scheduler_type", "num_generations", "steps_per_generation",
                "max_completion_length", "temperature", "min_generations", "max_generations"):  # fmt: skip
        assert ours[key] == training[key], key
    # Study 7's rules otherwise: the budget, the curve, the units; every run's allocation log kept.
    differ = {key for key in {**ours, **study_7.protocol} if ours.get(key) != study_7.protocol.get(key)}
    assert differ == {"description", "warm_start_levels", "warm_start_upper_share", "keep_allocation_logs"}
    assert (study.regimes, study.unit, study.report_extras) == (study_7.regimes, study_7.unit, study_7.report_extras)
    for arm in ("grpo", "dapo", "greso", "coba"):
        assert study.arms[arm] == study_7.arms[arm]
    assert study.arms["knapsack_skip_level"] == protocols.load_study("frontier_neighbours").arms["knapsack_skip_level"]
    assert {("level_skip_reuse", "grpo_reuse"), ("coba_paper", "coba"), ("coba_cap16", "coba")} < set(
        study.comparisons
    ) and len(study.comparisons) == 12
    budget = load_benchmark("studies.budget")
    grpo = study_run.training_args(ours, study.arms, "grpo", 0, str(tmp_path))
    assert budget.generated_rollout_budget(ours, lambda arm: grpo) == 19_200
    for arm in ("grpo_reuse", "level_skip_reuse"):  # twice the steps, so the same generated rollouts can be reached
        args = study_run.training_args(ours, study.arms, arm, 0, str(tmp_path))
        assert args.num_iterations == 2 and budget.rounds_behind(args, args.max_steps) * 256 == 19_200
    paper = study_run.training_args(ours, study.arms, "coba_paper", 0, str(tmp_path))
    assert (paper.coba_hard_threshold, paper.coba_easy_threshold, paper.coba_heap_fraction) == (0.0, 1.0, 1.0)
    assert study_run.training_args(ours, study.arms, "coba_cap16", 0, str(tmp_path)).max_generations == 16


def test_every_study_9_arm_can_be_timed_alone_with_the_studys_own_settings():
    """`rollouts_to_accuracy.py --arms ARM` runs the arm as study 9 registered it (its seconds are timed there)."""
    bench = load_benchmark("rollout_savings")
    study = load_benchmark("studies.protocols").load_study("frontier_selection")
    assert {arm: bench.ARMS.get(arm) for arm in study.arms} == study.arms
