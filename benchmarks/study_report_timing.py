"""The optional sections of an `"intervals"` study's report (`Study.report_extras`, study 3): wall time per run and
per round with the generation seconds by phase, and the zero-variance groups, drops and rescues per round.

Reported only: no verdict is drawn from these tables (runs go two at a time, so their seconds depend on which runs
shared the two cores)."""

from __future__ import annotations

import numpy as np


def _median_range(values, digits: int = 0, grouping: str = "") -> str:
    """Median [min, max]; `grouping=","` puts thousands separators in."""
    values = np.asarray(values, dtype=float)
    form = f"{grouping}.{digits}f"
    return f"{np.median(values):{form}} [{values.min():{form}}, {values.max():{form}}]"


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
            f"| `{arm}` | {_median_range([r['wall_time_s'] for r in values])} | "
            f"{_median_range([r['train_time_s'] for r in values])} | "
            f"{_median_range([r['train_time_s'] / rounds_per_run for r in values], 2)} | "
            f"{seconds[:, 0].mean():.2f} + {seconds[:, 1].mean():.2f} | "
            f"{_median_range([r['cpu_time_s'] for r in values])} | {', '.join(f'{v:.2f}' for v in own)} | "
            + " | ".join(f"{np.median(ratios):.2f}" if ratios else "" for ratios in (own, to_grpo))
            + " |"
        )
    return rows


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


def extra_lines(extras, runs: dict, protocol: dict, heading: str) -> list[str]:
    """The optional sections a study asks for (`Study.report_extras`): `"wall_time"`, `"phases"` and those of
    `study_report_spending.py` (`"spending"`, `"reach"`), each under a heading that starts with `heading`."""
    from study_report_spending import spending_lines

    lines = spending_lines(extras, runs, protocol, heading)
    if "wall_time" in extras:
        lines += [
            f"{heading}wall time",
            "",
            "Median [min, max] over units; runs two at a time, one torch thread each. *Training s*: seconds inside `trainer.train()` with the held-out evaluations left out; *run wall s*: the "
            "whole run (loading, evaluations, avg@16 sampling). Generation seconds: each round's generation-and-"
            "scoring calls (mean over rounds and units), phase 1 (with two phases, the screening) and phase 2.",
            "",
            *wall_time_rows(runs, protocol),
            "",
        ]
    if "phases" in extras:
        lines += [
            f"{heading}zero-variance groups, drops and rescues",
            "",
            "Mean over units of the per-round values.",
            "",
            *phase_rows(runs, protocol),
            "",
        ]
    return lines
