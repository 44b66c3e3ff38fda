"""Study 3: two-phase rounds and zero-variance groups at an equal rollout budget, in study 2's regime.

This file is the protocol of study 3 as it runs now (docs/studies/phases.md, "Study 3 rerun: protocol"): study 3's
regime, arms and comparisons, on pinned CPU numerics, with (warm-start seed, RL seed) units and study 4's 95%
t-interval verdicts (`unit="run"`; the report adds the re-analysis with warm starts as units and Holm's
correction). The first run of study 3 (one warm start, RL seeds as units, the sign rule, unpinned numerics
on another machine) is kept in docs/studies/phases.md as a record; its raw runs were not kept.
"""

from studies.declaration import Study
from studies.protocols.allocators import ARMS, PROTOCOL, QUICK

# Study 2's regime (F_t falls through 0.5), unchanged from study 3's first run.
PHASES_PROTOCOL: dict = {
    **{key: value for key, value in PROTOCOL.items() if key != "warm_start_seed"},
    "description": "study 2's regime: 3 to 5 operands, 425 warm-start steps, 160 rounds (F_t falls through 0.5)",
    "levels": [0, 1, 2],  # study 2: 3 to 5 operands
    "warm_start_steps": 425,
    "warm_start_threads": 1,
    "max_steps": 320,  # 160 generation rounds = 20 epochs of the 256 prompts, cosine lr 3e-4
    "eval_steps": 16,
    "trainer": {"activation_checkpointing": False, "ddp_find_unused_parameters": False},
    "conversion": False,  # no training-prompt conversion sampling (the first run's conversion table is not repeated)
    # Units (warm-start seed x RL seed), RL seed outermost: the first three units cover every warm start.
    "warm_start_seeds": [0, 1, 2],
    "seeds": [0, 1],
    "equivalence_margin": 0.02,
}

# Every arm spends 32 x 8 = 256 rollouts per round; with two phases the 32 x 2 screening rows are part of them.
PHASES_ARMS: dict[str, dict] = {
    **{arm: ARMS[arm] for arm in ("grpo", "coba")},  # study 1's, unchanged
    "coba_2phase": {"budget_allocator": "coba", "two_phase_rounds": True},
    "coba_rescue": {"budget_allocator": "coba", "two_phase_rounds": True, "zero_variance_groups": "rescue"},
    "grpo_drop": {"budget_allocator": "uniform", "zero_variance_groups": "drop"},
}

STUDY = Study(
    name="phases",
    title="Study 3 (two-phase rounds and zero-variance groups)",
    label="Study 3 rerun",
    protocol=PHASES_PROTOCOL,
    arms=PHASES_ARMS,
    quick={**QUICK, "seeds": [0], "warm_start_seeds": [0, 1]},
    marker="phases",
    plot_prefix="phases",
    output_dir="benchmarks/results/phases",
    scratch_dir="outputs/phases",
    comparisons=(
        ("coba_2phase", "coba"),
        ("coba_rescue", "coba_2phase"),
        ("coba_rescue", "coba"),
        ("grpo_drop", "grpo"),
        *((arm, "grpo") for arm in ("coba", "coba_2phase", "coba_rescue")),
    ),
    analysis="intervals",
    unit="run",  # as pre-registered; the report adds the warm-start re-analysis
    regimes={"study_2_regime": {}},
    report_extras=("wall_time", "phases"),
    record="compact",
)
