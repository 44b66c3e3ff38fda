"""The report sections of a study at equal *generated* rollouts (`Study.report_extras`: `"spending"`, `"reach"`;
study 5). Reported without a verdict.

- `"spending"`: per arm, what it generated and what it trained: rollouts generated, where the budget stopped it,
  the overshoot over the budget, rows trained and rows from groups with a spread, generated per trained row with a
  spread, prompts skipped, refill phases and the rounds where the refill's bound was reached, the zero-variance
  share, and training seconds against `grpo`'s.
- `"reach"`: the generated rollouts each run needs to reach the final held-out greedy accuracy of `grpo` in the same
  unit (warm-start seed, RL seed): the first held-out evaluation (step 0, every `eval_steps` steps, and the step the
  run stopped) at or above it, read against the run's record of completions generated after every step.
"""

from __future__ import annotations

import numpy as np

from studies.report.formats import median_range


def _round_sum(run: dict, key: str) -> float:
    return float(sum(r[key] for r in run["rounds"] if r.get(key) is not None))


def _round_mean(run: dict, key: str) -> float | None:
    values = [r[key] for r in run["rounds"] if r.get(key) is not None]
    return float(np.mean(values)) if values else None


def _mean_cell(values, digits: int) -> str:
    found = [value for value in values if value is not None]
    return f"{np.mean(found):.{digits}f}" if len(found) == len(values) and found else ""


def spending_rows(runs: dict) -> list[str]:
    """One row per arm: generated against trained, skipping and refill counts, training seconds (units every arm
    completed; mean or median [min, max] over them)."""
    rows = [
        "| arm | rollouts generated | stopped at step (runs) | over the budget | rows trained | rows with a spread | "
        "generated per row with a spread | prompts skipped per round | refill phases per round | rounds at the "
        "refill's bound | zero-variance share per round | training s (no evaluations) | training s / `grpo`, "
        "median |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, units in runs.items():
        values = list(units.values())
        generated = [run["rollouts_generated"] for run in values]
        steps = {}
        for run in values:
            label = str(run["optimizer_steps"]) + ("" if run.get("stopped_by_budget_at") else " (max_steps)")
            steps[label] = steps.get(label, 0) + 1
        with_spread = [_round_sum(run, "rows_with_spread") for run in values]
        per_row = [g / s if s else float("nan") for g, s in zip(generated, with_spread, strict=True)]
        to_grpo = [
            run["train_time_s"] / runs["grpo"][unit]["train_time_s"]
            for unit, run in units.items()
            if "grpo" in runs and unit in runs["grpo"]
        ]
        rows.append(
            f"| `{arm}` | {median_range(generated, grouping=',')} | "
            + ", ".join(f"{label} ({count})" for label, count in sorted(steps.items(), key=lambda kv: kv[0]))
            + f" | {np.mean([g - run['rollout_budget'] for g, run in zip(generated, values, strict=True)]):.0f} | "
            f"{np.mean([_round_sum(run, 'rows_trained') for run in values]):,.0f} | {np.mean(with_spread):,.0f} | "
            f"{np.mean(per_row):.3f} | {_mean_cell([_round_mean(run, 'prompts_skipped') for run in values], 2)} | "
            f"{_mean_cell([_round_mean(run, 'refill_phases') for run in values], 2)} | "
            f"{sum(_round_sum(run, 'refill_bound_reached') for run in values):.0f} | "
            f"{_mean_cell([_round_mean(run, 'zero_std') for run in values], 3)} | "
            f"{median_range([run['train_time_s'] for run in values], grouping=',')} | "
            + (f"{np.median(to_grpo):.2f}" if to_grpo else "")
            + " |"
        )
    return rows


def evaluations(run: dict) -> list[tuple[int, float]]:
    """(optimizer step, held-out greedy accuracy) of every evaluation of the run, the final one included."""
    found = [(int(step), float(accuracy)) for step, _, accuracy in run["accuracy_curve"]]
    if not found or found[-1][0] != run["optimizer_steps"]:
        found.append((int(run["optimizer_steps"]), float(run["final_accuracy"])))
    return found


def generated_at(run: dict, step: int) -> int:
    """Completions the run had generated when optimizer step `step` ended (0 before the first)."""
    if step == 0:
        return 0
    for curve_step, count in run["generated_curve"]:
        if curve_step == step:
            return int(count)
    raise ValueError(f"{run['arm']}: no generated count recorded at step {step}")


def rollouts_to_reach(run: dict, target: float) -> int | None:
    """Generated rollouts at the run's first evaluation at or above `target`; None when none is."""
    for step, accuracy in evaluations(run):
        if accuracy >= target:
            return generated_at(run, step)
    return None


def reach_rows(runs: dict) -> list[str]:
    """Per arm: runs that reach `grpo`'s final greedy accuracy of their unit, per warm start the mean rollouts over
    its RL seeds (where every one of them reaches it) and its ratio to `grpo`'s own."""
    if "grpo" not in runs:
        return ["No `grpo` runs: no target."]
    reached = {
        arm: {unit: rollouts_to_reach(run, runs["grpo"][unit]["final_accuracy"]) for unit, run in units.items()}
        for arm, units in runs.items()
    }
    warm_seeds = sorted({warm for warm, _ in runs["grpo"]})

    def per_warm(arm: str) -> dict[int, float | None]:
        means = {}
        for warm in warm_seeds:
            counts = [count for (w, _), count in reached[arm].items() if w == warm]
            means[warm] = None if not counts or None in counts else float(np.mean(counts))
        return means

    grpo = per_warm("grpo")
    rows = [
        "| arm | runs that reach it | rollouts per warm start ("
        + ", ".join(str(warm) for warm in warm_seeds)
        + ") | ratio to `grpo`'s, per warm start | median ratio |",
        "|---|---|---|---|---|",
    ]
    for arm in runs:
        means = per_warm(arm)
        ratios = [means[w] / grpo[w] if means[w] is not None and grpo[w] else None for w in warm_seeds]
        found = [ratio for ratio in ratios if ratio is not None]
        count = sum(value is not None for value in reached[arm].values())
        cells = [
            f"{count} of {len(reached[arm])}",
            ", ".join("not reached" if m is None else f"{m:,.0f}" for m in means.values()),
            ", ".join("" if r is None else f"{r:.2f}" for r in ratios),
            f"{np.median(found):.2f}" if found else "",
        ]
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows


def spending_lines(extras, runs: dict, protocol: dict, heading: str) -> list[str]:
    """The sections `extras` asks for, each under a heading that starts with `heading`."""
    lines = []
    if "spending" in extras:
        lines += [
            f"{heading}rollouts generated and rows trained",
            "",
            "Per arm over the units every arm completed: median [min, max] or mean. *Rollouts generated*: every "
            "phase of every round (screening, allocation, refills), the trainer's `rollouts_generated`; *over the "
            "budget*: by how much the round that reached the budget passed it; *rows with a spread*: trained rows "
            "from groups whose rewards were not all equal; *generated per row with a spread*: the first over the "
            "second, per run. Training seconds leave out the held-out evaluations; runs go two at a time, so they "
            "depend on which runs shared the two cores.",
            "",
            *spending_rows(runs),
            "",
        ]
    if "reach" in extras:
        lines += [
            f"{heading}rollouts to reach GRPO's final accuracy",
            "",
            "Per run, the rollouts generated by its first held-out greedy evaluation (step 0, every "
            f"{protocol['eval_steps']} optimizer steps, and the step it stopped) at or above the final greedy accuracy "
            "of `grpo` in the same (warm-start seed, RL seed) pair. Per warm start: the mean over its RL seeds when "
            "all of them reach it (*not reached* otherwise). Descriptive, no verdict; the evaluation grid makes it "
            f"coarse ({protocol['eval_steps']} steps between evaluations).",
            "",
            *reach_rows(runs),
            "",
        ]
    return lines
