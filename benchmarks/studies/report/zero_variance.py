"""The zero-variance section of an `"intervals"` study's report (`Study.report_extras`: `"phases"`; study 3): the
share of groups without spread by epoch, and the groups dropped and rescued per round. Reported without a verdict."""

from __future__ import annotations

import numpy as np


def phase_rows(runs: dict, protocol: dict) -> list[str]:
    """Zero-variance share by epoch; dropped groups and tokens; rescued groups and rows, and how many rescued groups
    ended with a non-zero spread (per round, mean over rounds, then over units)."""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    rows = [
        "| arm | zero-variance share: epoch 1 | epochs 2+ | all rounds | dropped groups per round | dropped tokens "
        "per round | rescued groups per round | rescued rows per round | rescued groups with a non-zero spread "
        "(share of rescued) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def series(run: dict, key: str) -> np.ndarray:
        return np.array([r[key] for r in run["rounds"] if r.get(key) is not None], dtype=float)

    for arm, units in runs.items():
        values = list(units.values())
        zero = [series(run, "zero_std") for run in values]
        cells = [
            f"{np.mean([z[:epoch_rounds].mean() for z in zero]):.3f}",
            f"{np.mean([z[epoch_rounds:].mean() for z in zero]):.3f}" if zero[0].size > epoch_rounds else "",
            f"{np.mean([z.mean() for z in zero]):.3f}",
        ]
        for key, digits in (("dropped_groups", 2), ("dropped_tokens", 1), ("rescued_groups", 2), ("rescued_rows", 2)):
            found = [series(run, key) for run in values]
            cells.append(f"{np.mean([s.mean() for s in found]):.{digits}f}" if all(s.size for s in found) else "")
        rescued = sum(series(run, "rescued_groups").sum() for run in values)
        spread = sum(series(run, "rescued_with_spread").sum() for run in values)
        cells.append(f"{spread:.0f} of {rescued:.0f} ({spread / rescued:.2f})" if rescued else "")
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows
