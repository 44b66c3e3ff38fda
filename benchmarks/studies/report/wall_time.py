"""The wall-time section of an `"intervals"` study's report (`Study.report_extras`: `"wall_time"`; study 3): wall
time per run and per round with the generation seconds by phase, and each arm's training time against a reference
arm's, unit by unit.

Reported only: no verdict is drawn from this table (runs go two at a time, so their seconds depend on which runs
shared the two cores)."""

from __future__ import annotations

import numpy as np

from studies.report.formats import median_range


def _ratios(runs: dict, arm: str, reference: str, key: str) -> list[float]:
    """Per unit, the arm's `key` over the reference arm's (units both ran)."""
    if reference not in runs:
        return []
    return [run[key] / runs[reference][unit][key] for unit, run in runs[arm].items() if unit in runs[reference]]


def wall_time_rows(runs: dict, protocol: dict, reference: str = "coba") -> list[str]:
    """Wall time per run and per round, generation time by phase, and the per-unit ratios to the reference arm."""
    rows = [
        "| arm | run wall s (all of it) | training s (no evaluations) | training s per round | generation s per "
        f"round: phase 1 + phase 2 | CPU s (run process) | training time / `{reference}`, per unit | median ratio "
        f"to `{reference}` | median ratio to `grpo` |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rounds_per_run = protocol["max_steps"] // protocol["steps_per_generation"]
    for arm, units in runs.items():
        values = list(units.values())
        seconds = np.array([(r["generation_s"] + [0.0])[:2] for run in values for r in run["rounds"]], dtype=float)
        own, to_grpo = _ratios(runs, arm, reference, "train_time_s"), _ratios(runs, arm, "grpo", "train_time_s")
        rows.append(
            f"| `{arm}` | {median_range([r['wall_time_s'] for r in values])} | "
            f"{median_range([r['train_time_s'] for r in values])} | "
            f"{median_range([r['train_time_s'] / rounds_per_run for r in values], 2)} | "
            f"{seconds[:, 0].mean():.2f} + {seconds[:, 1].mean():.2f} | "
            f"{median_range([r['cpu_time_s'] for r in values])} | {', '.join(f'{v:.2f}' for v in own)} | "
            + " | ".join(f"{np.median(ratios):.2f}" if ratios else "" for ratios in (own, to_grpo))
            + " |"
        )
    return rows
