"""Study 7: generated rollouts (and seconds) to a held-out accuracy, in the regime where GRPO's frontier moves.

Pre-registered in docs/studies/frontier.md ("Study 7: protocol"); this file is that protocol in code. The regime is
`recipes/cpu_demo_frontier.yaml` (`coba_trl.demo.config.REGIMES["frontier"]`: sums of 4, 6, 8, 10 or 12 digits, 512
training prompts, a warm start of 400 steps, 150 RL steps), whose calibration (docs/benchmarks.md, "The frontier
regime") read GRPO only. Every arm stops at the end of the first round whose generated completions reach what `grpo`
generates in its whole schedule, 75 rounds x 256 = 19,200 (`studies/budget.py`). Held-out avg@16 (16 completions a
problem at temperature 1.0, overall and per level) is measured before RL and every 5 optimizer steps
(`curve_samples`), and once more at the stop. Units: warm starts (5, one RL seed each; Holm across every cell).

The thresholds each arm's curve is read at (`THRESHOLDS`, per warm start, from that warm start's `grpo` run): the
avg@16 before RL plus 50% and 90% of `grpo`'s gain, and `grpo`'s avg@16 at its stop. The crossing rule: the generated
rollouts (and training seconds) at the first evaluation at or above the threshold (`report/crossings.py`).
"""

from studies.declaration import Study
from studies.protocols.rollout_savings_hard import ARMS as STUDY_6_ARMS
from studies.protocols.rollout_savings_hard import PROTOCOL as STUDY_6_PROTOCOL
from studies.protocols.warm_starts import QUICK as STUDY_4_QUICK

PROTOCOL: dict = {
    **STUDY_6_PROTOCOL,  # the demo's model and RL settings, the budget rule ("grpo"), the margin 0.02
    "description": "the frontier regime (recipes/cpu_demo_frontier.yaml); every arm stops at grpo's 19,200 "
    "generated rollouts; held-out avg@16 every 5 steps",
    "operands": [4, 6, 8, 10, 12],  # digits summed at each level
    "num_train_prompts": 512,
    "warm_start_steps": 400,
    "max_steps": 150,
    "eval_steps": 5,
    "curve_samples": 16,  # the curve is avg@16 (overall and per level), not greedy accuracy
    "warm_start_seeds": [0, 1, 2, 3, 4],
    "seeds": [0],
    "goal_ratio": 0.5,  # the goal: grpo's final avg@16 with at most half of grpo's generated rollouts
}

THRESHOLDS: dict[str, float] = {"grpo_gain_50": 0.5, "grpo_gain_90": 0.9, "grpo_final": 1.0}  # shares of the gain

ARMS: dict[str, dict] = {arm: STUDY_6_ARMS[arm] for arm in (
    "grpo", "dapo", "greso", "knapsack", "knapsack_skip", "coba", "coba_skip", "coba_pilot",
)}  # fmt: skip

STUDY = Study(
    name="frontier",
    title="Study 7 (rollouts to a held-out accuracy where the frontier moves)",
    label="Study 7",
    protocol=PROTOCOL,
    arms=ARMS,
    quick={**STUDY_4_QUICK, "curve_samples": 2},  # study 4's tiny sizes, avg@2 on the curve
    marker="frontier",
    plot_prefix="frontier",
    output_dir="benchmarks/results/frontier",
    scratch_dir="outputs/frontier",
    comparisons=tuple((arm, "grpo") for arm in ARMS if arm != "grpo"),
    analysis="intervals",
    unit="warm_start",
    regimes={"frontier": {}},
    report_extras=("crossings", "spending"),
    record="compact",
)
