"""Study 2: a configuration where CoBA's F_t falls through 0.5, plus the tiny-group estimator and B_low = 4.

Everything not listed is study 1's protocol; raw per-run JSON goes to `outputs/regime/`.
"""

from studies.declaration import Study
from studies.protocols.allocators import ARMS, PROTOCOL, QUICK

# The protocol (docs/studies/regime.md, "Study 2: protocol"): fixed from timing-only and F-only pilots before any arm's
# accuracy was looked at.
REGIME_PROTOCOL: dict = {
    **PROTOCOL,
    "levels": [0, 1, 2],  # 3 to 5 operands: an easier mix, so F_t can fall well below 0.5
    "warm_start_steps": 425,  # pilot P12: F_1 = 0.79, epoch-1 mean 0.54, last epoch 0.27 (CoBA, seed 0)
    "warm_start_threads": 1,  # like the RL runs: deterministic and faster on a busy 2-core machine
    "max_steps": 320,  # 160 generation rounds = 20 epochs of the 256 prompts (cosine lr 3e-4 as in study 1)
    "eval_steps": 16,
    "seeds": [0, 1, 2, 3, 4],
}

REGIME_ARMS: dict[str, dict] = {
    **{arm: ARMS[arm] for arm in ("grpo", "knapsack", "coba", "coba_paper")},  # study 1's, unchanged
    "coba_prior2": {"budget_allocator": "coba", "pass_rate_prior_strength": 2.0},
    "coba_blow4": {"budget_allocator": "coba", "min_generations": 4},
}

STUDY = Study(
    name="regime",
    title="Study 2 (the regime F_t < 0.5)",
    label="Study 2",
    protocol=REGIME_PROTOCOL,
    arms=REGIME_ARMS,
    quick=QUICK,
    marker="regime",
    plot_prefix="regime",
    output_dir="outputs/regime",
    comparisons=(
        *((arm, "grpo") for arm in ("knapsack", "coba", "coba_paper", "coba_prior2", "coba_blow4")),
        *((arm, "knapsack") for arm in ("coba", "coba_paper", "coba_prior2", "coba_blow4")),
        *((arm, "coba") for arm in ("coba_paper", "coba_prior2", "coba_blow4")),
    ),
)
