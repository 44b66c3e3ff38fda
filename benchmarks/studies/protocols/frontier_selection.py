"""Study 9: which selection of the groups to generate reaches GRPO's final held-out accuracy for the fewest rollouts,
on the frontier recipe as it is now?

Pre-registered in docs/studies/frontier_selection.md ("Study 9: protocol"), before any run. Everything but the
recipe's warm start and the arms is study 7's (`protocols/frontier.py`): the 5 warm starts (one RL seed each, the
warm start is the unit), the stopping rule at `grpo`'s 19,200 generated rollouts, the avg@16 curve every 5 steps,
the thresholds, the crossing rule and Holm across every reported comparison. The warm start is the recipe's since
study 8 (`recipes/cpu_demo_frontier.yaml`): its two easiest levels, with 1% of its problems from the three above.
Each run's allocation log is kept beside its raw result (`keep_allocation_logs`).
"""

from studies.declaration import Study
from studies.protocols.frontier import ARMS as STUDY_7_ARMS
from studies.protocols.frontier import STUDY as STUDY_7
from studies.protocols.frontier_neighbours import ARMS as STUDY_8_ARMS

PROTOCOL: dict = {
    **STUDY_7.protocol,
    "description": "the frontier recipe (recipes/cpu_demo_frontier.yaml: a warm start on its two easiest levels, 1% "
    "of its problems from the three above); every arm stops at grpo's 19,200 generated rollouts; held-out avg@16 "
    "every 5 steps",
    "warm_start_levels": 2,
    "warm_start_upper_share": 0.01,
    "keep_allocation_logs": True,
}

# Two optimizer passes over each generated batch (TRL's `num_iterations`), so twice the optimizer steps: reaching
# the same generated rollouts takes 300 steps (the learning rate's schedule spans them).
REUSE = {"num_iterations": 2, "max_steps": 300}
LEVEL_SKIP = {
    "budget_allocator": "uniform",
    "zero_variance_groups": "refill",
    "skip_settled_prompts": True,
    "skip_rule": "spread_chance",
    "skip_prior": "neighbourhood",
    "pass_rate_neighbour_column": "level",
}
COBA = STUDY_7_ARMS["coba"]  # released defaults, row weighting

ARMS: dict[str, dict] = {
    "grpo": STUDY_7_ARMS["grpo"],
    "grpo_reuse": {**STUDY_7_ARMS["grpo"], **REUSE},
    "dapo": STUDY_7_ARMS["dapo"],
    "greso": STUDY_7_ARMS["greso"],
    "knapsack_skip_level": STUDY_8_ARMS["knapsack_skip_level"],
    "coba": COBA,
    "coba_paper": {**COBA, "coba_hard_threshold": 0.0, "coba_easy_threshold": 1.0, "coba_heap_fraction": 1.0},
    "coba_cap16": {**COBA, "max_generations": 16},
    "level_skip": LEVEL_SKIP,
    "level_skip_reuse": {**LEVEL_SKIP, **REUSE},
}

STUDY = Study(
    name="frontier_selection",
    title="Study 9 (selecting the groups to generate on the frontier recipe)",
    label="Study 9",
    protocol=PROTOCOL,
    arms=ARMS,
    quick=STUDY_7.quick,
    marker="frontier_selection",
    plot_prefix="frontier_selection",
    output_dir="benchmarks/results/frontier_selection",
    scratch_dir="outputs/frontier_selection",
    comparisons=(
        *((arm, "grpo") for arm in ARMS if arm != "grpo"),
        ("level_skip_reuse", "grpo_reuse"),
        ("coba_paper", "coba"),
        ("coba_cap16", "coba"),
    ),
    analysis="intervals",
    unit="warm_start",
    regimes=STUDY_7.regimes,
    report_extras=("crossings", "spending"),
    record="compact",
)
