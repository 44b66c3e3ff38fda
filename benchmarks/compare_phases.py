"""Third pre-registered comparison: two-phase rounds and zero-variance groups at an equal rollout budget (docs/results.md, study 3).

    python benchmarks/compare_phases.py                  # warm start once, every arm x seed, then docs
    python benchmarks/compare_phases.py --report_only    # regenerate the study-3 tables and plots from raw JSON
    python benchmarks/compare_phases.py --quick          # smoke run (CI): tiny sizes, a few steps, no docs
    python benchmarks/compare_phases.py --pilot --seeds 0 # timing-only pilot (keeps no accuracy)

The machinery (warm start, runs, pilots, report) is `compare_allocators.py`'s; this file only fixes the protocol
and the arms of the third study. Raw per-run JSON goes to `outputs/phases/`.
"""

from __future__ import annotations

import os
import sys

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the same digits on every x86-64 CPU with AVX2 (docs/numerics.md)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare_allocators import ARMS, PROTOCOL, QUICK, Study, main  # noqa: E402

# The protocol (docs/results.md, "Study 3: protocol"): study 2's regime (F_t falls through 0.5), fixed from
# timing-only pilots before any arm's accuracy was looked at. Everything not listed is the first study's.
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

PHASES = Study(
    "phases",
    PHASES_PROTOCOL,
    PHASES_ARMS,
    QUICK,
    "outputs/phases",
    "Study 3 (two-phase rounds and zero-variance groups)",
    report_extras=("wall_time", "phases"),
)

if __name__ == "__main__":
    main(study=PHASES)
