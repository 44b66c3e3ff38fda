"""The study declarations of benchmarks/studies/protocols/: arms reach the trainer config, study 4's demo regime is
the CPU demo's configuration, its shuffled arm keeps CoBA's group sizes without their targeting, and the verdict
rules."""

import dataclasses

import numpy as np
import pytest
from scripts.benchmarks import load_benchmark


def declarations():
    protocols = load_benchmark("studies.protocols")
    return [protocols.load_study(name) for name in protocols.declared()]


def refill_and_skipping_available() -> bool:
    """Whether the installed trainer has `zero_variance_groups="refill"` and `skip_settled_prompts` (study 5)."""
    from coba_trl import CoBAConfig

    return {"skip_settled_prompts", "max_refill_phases"} <= {field.name for field in dataclasses.fields(CoBAConfig)}


def test_every_declaration_compares_its_own_arms_at_temperature_one(tmp_path):
    study_run = load_benchmark("studies.run")
    studies = declarations()
    assert [s.name for s in studies] == [
        "allocators",
        "frontier",
        "frontier_neighbours",
        "frontier_selection",
        "phases",
        "regime",
        "rollout_savings",
        "rollout_savings_hard",
        "warm_starts",
    ]
    waiting = (
        ()
        if refill_and_skipping_available()
        else load_benchmark("studies.protocols.rollout_savings").NEEDS_REFILL_OR_SKIPPING
    )
    for study in studies:
        assert {arm for pair in study.comparisons for arm in pair} <= set(study.arms)
        for regime in study.regimes.values():
            protocol = {**study.protocol, **regime}
            assert protocol["temperature"] == 1.0
            for arm in study.arms:
                if study.name.startswith("rollout_savings") and arm in waiting:
                    continue  # checked once the trainer has refill and skipping
                args = study_run.training_args(protocol, study.arms, arm, 0, str(tmp_path))
                multiplier = study.arms[arm].get("budget_multiplier", 1)
                assert (
                    args.generation_batch_size
                    == protocol["prompts_per_round"] * protocol["num_generations"] * multiplier
                )


def test_arm_settings_reach_the_trainer_config(tmp_path):
    study_run = load_benchmark("studies.run")
    phases = load_benchmark("studies.protocols").load_study("phases")
    args = study_run.training_args(phases.protocol, phases.arms, "coba_rescue", 0, str(tmp_path))
    assert args.two_phase_rounds and args.zero_variance_groups == "rescue" and args.budget_allocator == "coba"
    study4 = load_benchmark("studies.protocols").load_study("warm_starts")
    assert study_run.training_args(study4.protocol, study4.arms, "coba_prompt", 0, str(tmp_path)).group_weighting == (
        "prompt"
    )
    shuffled = study_run.training_args(study4.protocol, study4.arms, "coba_shuffled", 0, str(tmp_path))
    assert shuffled.budget_allocator == "coba" and shuffled.group_weighting == "row"


def test_study_4_demo_regime_is_the_cpu_demo_configuration(tmp_path):
    from coba_trl import CoBAConfig
    from coba_trl.demo.config import DEMO_TRAINING_ARGS, DemoArguments
    from coba_trl.demo.run import WARM_START_PROBLEMS

    study_run = load_benchmark("studies.run")
    study = load_benchmark("studies.protocols").load_study("warm_starts")
    protocol = {**study.protocol, **study.regimes["demo"]}
    demo = DemoArguments()
    assert (protocol["hidden_size"], protocol["num_layers"]) == (demo.demo_hidden_size, demo.demo_num_layers)
    assert (protocol["num_train_prompts"], protocol["num_heldout"]) == (
        demo.demo_num_train_prompts,
        demo.demo_num_heldout,
    )
    assert protocol["warm_start_steps"] == demo.demo_warm_start_steps
    assert protocol["warm_start_learning_rate"] == demo.demo_warm_start_learning_rate
    assert (
        protocol["eval_steps"] == demo.demo_eval_steps and protocol["num_warm_start_problems"] == WARM_START_PROBLEMS
    )
    assert protocol["data_seed"] == DEMO_TRAINING_ARGS["seed"] == 0  # unit (0, 0) is the demo's run
    ours = study_run.training_args(protocol, study.arms, "coba", 0, str(tmp_path))
    theirs = CoBAConfig(**{**DEMO_TRAINING_ARGS, "output_dir": str(tmp_path)})
    differing = {
        field.name
        for field in dataclasses.fields(CoBAConfig)
        if field.name not in ("output_dir", "logging_dir", "disable_tqdm")
        and getattr(ours, field.name) != getattr(theirs, field.name)
    }
    assert differing == set()
    grpo = study_run.training_args(protocol, study.arms, "grpo", 0, str(tmp_path))
    assert grpo.budget_allocator == "uniform" and grpo.generation_batch_size == theirs.generation_batch_size


def test_shuffled_arm_hands_cobas_sizes_to_a_seeded_permutation_of_the_prompts():
    from coba_trl import CoBAConfig

    arms = load_benchmark("studies.arms")
    args = CoBAConfig(output_dir="unused", budget_allocator="coba", num_generations=8, use_cpu=True)
    rates = np.linspace(0.05, 0.95, 32)
    reference = args.build_allocator()
    reference.observe(np.full(32, 0.3))
    targeted = reference.allocate(rates, 256)
    runs = []
    for _ in range(2):
        shuffled = arms.ShuffledGroupSizes(args.build_allocator(), seed=[1, 0])
        shuffled.observe(np.full(32, 0.3))
        runs.append([shuffled.allocate(rates, 256) for _ in range(3)])
    first = runs[0][0]
    assert sorted(first.tolist()) == sorted(targeted.tolist()) and first.sum() == 256  # the same sizes ...
    assert not np.array_equal(first, targeted)  # ... handed to other prompts
    assert all(np.array_equal(a, b) for a, b in zip(*runs, strict=True))  # seeded: a rerun repeats them
    assert not np.array_equal(runs[0][0], runs[0][1])  # a new permutation every round
    assert shuffled.failure_rate == reference.failure_rate  # the rest is CoBA's


def test_interval_verdicts_follow_the_pre_registered_words():
    analysis = load_benchmark("studies.analysis")
    assert analysis.t_quantile(0.975, 5) == pytest.approx(2.5706, abs=1e-4)
    mean, low, high = analysis.interval([0.01, 0.03, 0.02, 0.04, 0.02, 0.03])
    assert mean == pytest.approx(0.025) and low > 0 and analysis.interval_verdict(low, high, 0.02) == "ahead"
    assert analysis.interval_verdict(-0.05, -0.001, 0.02) == "behind"
    assert analysis.interval_verdict(-0.015, 0.019, 0.02) == "equivalent"
    assert analysis.interval_verdict(-0.016, 0.021, 0.02) == "not detected"
    assert analysis.interval_verdict(0.001, 0.015, 0.02) == "ahead"  # excluding 0 is checked first


def test_future_studies_take_the_warm_start_as_the_unit_and_studies_3_and_4_keep_their_pre_registered_one():
    studies = {study.name: study for study in declarations()}
    assert load_benchmark("studies.declaration").Study.__dataclass_fields__["unit"].default == "warm_start"
    assert studies["warm_starts"].unit == studies["phases"].unit == "run"
    assert [studies[name].label for name in ("allocators", "regime", "phases", "warm_starts", "rollout_savings")] == [
        "Study 1",
        "Study 2",
        "Study 3 rerun",
        "Study 4",
        "Study 5",
    ]
    assert studies["rollout_savings"].unit == "warm_start"


def test_studies_1_and_2_keep_their_sign_rule():
    tables = load_benchmark("studies.report.tables")
    verdict, shown_epochs = tables.verdict, tables.shown_epochs
    assert verdict(np.array([0.02, 0.01, 0.03, -0.01, 0.02])) == "beats"
    assert verdict(np.array([0.05, 0.04, -0.01, -0.01, 0.02])) == "no difference shown against"
    assert verdict(np.array([-0.02, -0.01, -0.03])) == "loses to"
    assert verdict(np.array([0.02, 0.01, -0.001])) == "no difference shown against"
    assert shown_epochs(5) == [2, 3, 4, 5] and shown_epochs(20) == [2, 3, 4, 5, 6, 10, 14, 18, 20]


def test_an_unknown_study_is_named_with_the_declared_ones(capsys):
    with pytest.raises(SystemExit):
        load_benchmark("studies.runner").main(["warm_start", "--report_only"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "study warm_start: no declaration benchmarks/studies/protocols/warm_start.py" in error
    assert "rollout_savings_hard, warm_starts" in error
