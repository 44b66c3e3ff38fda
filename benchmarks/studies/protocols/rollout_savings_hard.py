"""Study 6: rollouts saved where most groups teach nothing, at an equal number of generated rollouts.

Pre-registered in docs/studies/rollout_savings_hard.md ("Study 6: protocol"); this file is that protocol in code. The regime is the CPU
task's `hard` regime (`recipes/cpu_demo_hard.yaml`, `coba_trl.demo.config.REGIMES["hard"]`: sums of 2, 20, 24, 28 or
32 digits, 128 training prompts, the demo's warm start of 300 steps and its RL schedule), where more than half of
GRPO's first-epoch groups of 8 have no spread. Every arm stops at the end of the first round whose completions
generated so far reach what `grpo` generates in the whole schedule, 50 rounds x 256 = 12,800 (`studies/budget.py`).
Units: warm starts (5, one RL seed each; the warm start is the unit, Holm across every reported cell).

The arms are those of `benchmarks/rollout_savings.py`'s regime comparison (`ARMS` here; the benchmark runs them and
its exploratory extras): GRPO and DAPO, GRESO's skipping, the allocators with and without refill and skipping, CoBA
with a pilot phase, and skipping by the chance of a group with spread (`skip_rule="spread_chance"`).
"""

from studies.declaration import Study
from studies.protocols.rollout_savings import ARMS as STUDY_5_ARMS
from studies.protocols.rollout_savings import PROTOCOL as STUDY_5_PROTOCOL
from studies.protocols.rollout_savings import STUDY as STUDY_5

PROTOCOL: dict = {
    **STUDY_5_PROTOCOL,  # the demo's model, warm start and RL schedule, the budget rule, the margin
    "description": "the hard regime (recipes/cpu_demo_hard.yaml); every arm stops at grpo's 12,800 generated rollouts",
    "operands": [2, 20, 24, 28, 32],  # digits summed at each level (the demo: 3 to 7)
    "num_train_prompts": 128,
    "warm_start_seeds": [0, 1, 2, 3, 4],
    "seeds": [0],
}

SPREAD = {"skip_settled_prompts": True, "skip_rule": "spread_chance"}
ARMS: dict[str, dict] = {
    "grpo": STUDY_5_ARMS["grpo"],  # uniform groups of 8, every group kept
    "dapo": STUDY_5_ARMS["dapo"],  # uniform, refill
    "greso": STUDY_5_ARMS["greso"],  # uniform, refill, GRESO's skipping
    "knapsack": {"budget_allocator": "knapsack"},
    "knapsack_skip": STUDY_5_ARMS["knapsack_skip"],  # Knapsack-RL, refill, GRESO's skipping
    "coba": {"budget_allocator": "coba", "group_weighting": "row"},
    "coba_skip": {"budget_allocator": "coba", "group_weighting": "row", "zero_variance_groups": "refill",
                  "skip_settled_prompts": True},
    "coba_pilot": STUDY_5_ARMS["coba_pilot"],  # CoBA, two phases, refill, GRESO's skipping
    "dapo_spread": {"budget_allocator": "uniform", "zero_variance_groups": "refill", **SPREAD},
    "knapsack_spread": {"budget_allocator": "knapsack", "zero_variance_groups": "refill", **SPREAD},
}  # fmt: skip

OTHERS = [arm for arm in ARMS if arm not in ("grpo", "dapo")]

STUDY = Study(
    name="rollout_savings_hard",
    title="Study 6 (rollouts saved in the hard regime, at equal generated rollouts)",
    label="Study 6",
    protocol=PROTOCOL,
    arms=ARMS,
    quick={**STUDY_5.quick, "num_train_prompts": 16},
    marker="rollout_savings_hard",
    plot_prefix="rollout_savings_hard",
    output_dir="benchmarks/results/rollout_savings_hard",
    scratch_dir="outputs/rollout_savings_hard",
    comparisons=(
        *((arm, "grpo") for arm in ARMS if arm != "grpo"),
        *((arm, "dapo") for arm in OTHERS),
    ),
    analysis="intervals",
    unit="warm_start",
    regimes={"hard": {}},
    report_extras=("spending", "reach"),
    record="compact",
)
