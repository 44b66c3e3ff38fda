"""Second pre-registered comparison: a configuration where CoBA's F_t falls through 0.5 (docs/results.md, study 2).

    python benchmarks/compare_regime.py                  # warm start once, every arm x seed, then docs
    python benchmarks/compare_regime.py --report_only    # regenerate the study-2 tables and plots from raw JSON
    python benchmarks/compare_regime.py --quick          # smoke run (CI): tiny sizes, a few steps, no docs
    python benchmarks/compare_regime.py --pilot --arms coba --seeds 0 --set levels='[0,1,2]'  # F-only pilot

The machinery (warm start, runs, pilots, report) is `compare_allocators.py`'s; this file only fixes the protocol
and the arms of the second study. Raw per-run JSON goes to `outputs/regime/`.
"""

from __future__ import annotations

import os
import sys

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # the same digits on every x86-64 CPU with AVX2 (docs/numerics.md)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare_allocators import ARMS, PROTOCOL, QUICK, Study, main  # noqa: E402

# The protocol (docs/results.md, "Study 2: protocol"): fixed from timing-only and F-only pilots before any arm's
# accuracy was looked at. Everything not listed is the first study's.
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

REGIME = Study("regime", REGIME_PROTOCOL, REGIME_ARMS, QUICK, "outputs/regime", "Study 2 (the regime F_t < 0.5)")

if __name__ == "__main__":
    main(study=REGIME)
