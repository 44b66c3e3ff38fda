"""Study 5: spending rollouts only where they teach, at an equal number of *generated* rollouts, in the demo's regime.

Pre-registered in docs/studies/rollout_savings.md ("Study 5: protocol"); this file is that protocol in code. The regime is study
4's regime `demo` (the CPU demo's configuration exactly), with study 4's warm starts 0 to 2 and two more. Every arm
keeps the demo's schedule (100 optimizer steps, cosine learning rate over them) and stops at the end of the first
round whose completions generated so far (every phase: screening, allocation, refills) reach what `grpo` generates
in the whole schedule, 50 rounds x 256 = 12,800 (`studies/budget.py`); an arm that throws groups away and generates
others in their place trains fewer rounds. Units: warm starts (`unit="warm_start"`: RL seeds averaged within a
warm start, 95% t-intervals over the warm starts, Holm across every reported cell).

The arms `dapo`, `greso`, `coba_pilot` and `knapsack_skip` need the trainer's `zero_variance_groups="refill"` and
`skip_settled_prompts`; the study runs only on code that has them.
"""

from studies.declaration import Study
from studies.protocols.warm_starts import ARMS as STUDY_4_ARMS
from studies.protocols.warm_starts import PROTOCOL as STUDY_4_PROTOCOL
from studies.protocols.warm_starts import QUICK as STUDY_4_QUICK

PROTOCOL: dict = {
    **STUDY_4_PROTOCOL,  # regime `demo` of study 4: the demo's task, model, warm start and schedule
    "description": "the CPU demo's configuration; every arm stops at grpo's 12,800 generated rollouts",
    "stop_at_generated_rollouts": "grpo",  # studies/budget.py: 50 rounds x 256 of the grpo arm
    # Units: 5 warm starts (0 to 2 are study 4's) x 2 RL seeds, RL seed outermost (studies/runner.py's order).
    "warm_start_seeds": [0, 1, 2, 3, 4],
    "seeds": [0, 1],
    "equivalence_margin": 0.02,
}

# The refill's and the skipping's own settings stay at their defaults: max_refill_phases 8,
# skip_target_zero_spread 0.25.
ARMS: dict[str, dict] = {
    "grpo": STUDY_4_ARMS["grpo"],  # uniform groups of 8, every group kept
    "grpo_drop": {"budget_allocator": "uniform", "zero_variance_groups": "drop"},
    "dapo": {"budget_allocator": "uniform", "zero_variance_groups": "refill"},
    "greso": {"budget_allocator": "uniform", "zero_variance_groups": "refill", "skip_settled_prompts": True},
    "coba_pilot": {
        "budget_allocator": "coba",
        "group_weighting": "row",  # the released default, as study 4's `coba`
        "two_phase_rounds": True,
        "zero_variance_groups": "refill",
        "skip_settled_prompts": True,
    },
    "knapsack_skip": {"budget_allocator": "knapsack", "zero_variance_groups": "refill", "skip_settled_prompts": True},
}

# The arms that need the trainer's refill or prompt skipping.
NEEDS_REFILL_OR_SKIPPING = tuple(
    arm
    for arm, settings in ARMS.items()
    if settings.get("zero_variance_groups") == "refill" or settings.get("skip_settled_prompts")
)

STUDY = Study(
    name="rollout_savings",
    title="Study 5 (rollouts saved: refill and prompt skipping at equal generated rollouts)",
    label="Study 5",
    protocol=PROTOCOL,
    arms=ARMS,
    quick={**STUDY_4_QUICK, "warm_start_seeds": [0, 1]},
    marker="rollout_savings",
    plot_prefix="rollout_savings",
    output_dir="benchmarks/results/rollout_savings",
    scratch_dir="outputs/rollout_savings",
    comparisons=(
        *((arm, "grpo") for arm in ("grpo_drop", "dapo", "greso", "coba_pilot", "knapsack_skip")),
        *((arm, "dapo") for arm in ("grpo_drop", "greso", "coba_pilot", "knapsack_skip")),
    ),
    analysis="intervals",
    unit="warm_start",
    regimes={"demo": {}},
    # Its counts and training seconds against grpo's, and the rollouts to reach grpo's final accuracy.
    report_extras=("spending", "reach"),
    record="compact",
)
