"""Study 3: two-phase rounds and zero-variance groups at an equal rollout budget, in study 2's regime.

Everything not listed is study 1's protocol; raw per-run JSON goes to `outputs/phases/`.
"""

from studies import Study
from studies.allocators import ARMS, PROTOCOL, QUICK

# The protocol (docs/results.md, "Study 3: protocol"): study 2's regime (F_t falls through 0.5), fixed from
# timing-only pilots before any arm's accuracy was looked at.
PHASES_PROTOCOL: dict = {
    **PROTOCOL,
    "levels": [0, 1, 2],  # study 2: 3 to 5 operands
    "warm_start_steps": 425,  # study 2: F_1 = 0.79, falling to about 0.27
    "warm_start_threads": 1,
    "max_steps": 320,  # 160 generation rounds = 20 epochs of the 256 prompts, cosine lr 3e-4
    "eval_steps": 16,
    "seeds": [0, 1, 2],
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
    protocol=PHASES_PROTOCOL,
    arms=PHASES_ARMS,
    quick=QUICK,
    marker="phases",
    plot_prefix="phases",
    output_dir="outputs/phases",
    comparisons=(
        ("coba", "grpo"),
        ("coba_2phase", "coba"),
        ("coba_rescue", "coba_2phase"),
        ("coba_rescue", "coba"),
        *((arm, "grpo") for arm in ("coba_2phase", "coba_rescue", "grpo_drop")),
    ),
    report_extras=("wall_time", "phases"),
)
