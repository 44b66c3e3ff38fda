"""Study 8: does a prompt's neighbourhood (its level) as its pass-rate prior bring Knapsack-RL closer to GRPO's final
accuracy for fewer rollouts, in the frontier regime?

Pre-registered in docs/studies/frontier_neighbours.md ("Study 8: protocol"), written after study 7's results and
before any run of the new arms. Everything but the arms is study 7's (`protocols/frontier.py`): the regime, the 5
warm starts, the stopping rule at grpo's 19,200 generated rollouts, the avg@16 curve every 5 steps, the thresholds
and the crossing rule. The new arms add `pass_rate_neighbour_column="level"` with `pass_rate_prior_strength=2` to
study 7's `knapsack` and `knapsack_skip`. The controls (`grpo`, `knapsack`, `knapsack_skip`) are study 7's settings;
their raw runs are study 7's, copied, once a rerun of `grpo` on warm start 0 reproduces its record (the protocol
says what happens otherwise).
"""

from studies.declaration import Study
from studies.protocols.frontier import ARMS as STUDY_7_ARMS
from studies.protocols.frontier import STUDY as STUDY_7

NEIGHBOURS = {"pass_rate_neighbour_column": "level", "pass_rate_prior_strength": 2.0}

ARMS: dict[str, dict] = {
    "grpo": STUDY_7_ARMS["grpo"],
    "knapsack": STUDY_7_ARMS["knapsack"],
    "knapsack_skip": STUDY_7_ARMS["knapsack_skip"],
    "knapsack_level": {**STUDY_7_ARMS["knapsack"], **NEIGHBOURS},
    "knapsack_skip_level": {**STUDY_7_ARMS["knapsack_skip"], **NEIGHBOURS},
}

STUDY = Study(
    name="frontier_neighbours",
    title="Study 8 (neighbourhood priors for Knapsack-RL where the frontier moves)",
    label="Study 8",
    protocol=STUDY_7.protocol,
    arms=ARMS,
    quick=STUDY_7.quick,
    marker="frontier_neighbours",
    plot_prefix="frontier_neighbours",
    output_dir="benchmarks/results/frontier_neighbours",
    scratch_dir="outputs/frontier_neighbours",
    comparisons=(
        ("knapsack_level", "knapsack"),
        ("knapsack_skip_level", "knapsack_skip"),
        ("knapsack_level", "grpo"),
        ("knapsack_skip_level", "grpo"),
    ),
    analysis="intervals",
    unit="warm_start",
    regimes=STUDY_7.regimes,
    report_extras=("crossings", "spending"),
    record="compact",
)
