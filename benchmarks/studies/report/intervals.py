"""The `"intervals"` analysis of a study's report (studies 3 rerun and 4): paired differences with 95% t-intervals.

Every arm of a (warm-start seed, RL seed) pair starts from the same checkpoint and sees the same prompts in the same
order. For each comparison the study declares and each co-primary metric (final held-out greedy accuracy, held-out
avg@16 at temperature 1.0) the report gives the per-unit differences, their mean, the 95% t-interval over the units,
and the verdict words of `studies/analysis.py`.

- `Study.unit == "warm_start"` (the default): a warm start's difference is the mean over its RL seeds; the table
  has the p-values, the Holm adjustment of the p-value of a difference across every comparison of the study (all
  regimes, both metrics) and the verdict before and after it.
- `Study.unit == "run"` (studies 3 and 4, as pre-registered): each (warm-start seed, RL seed) pair is a unit and the
  verdict is the interval rule; the warm-start analysis with Holm follows as a re-analysis, beside the pre-registered
  verdicts (`reanalysis_lines`).
"""

from __future__ import annotations

import json
import os

import numpy as np

from studies.analysis import LEVEL, Cell, interval_verdict, paired_test, with_holm
from studies.report.extras import extra_lines
from studies.report.plots import COLORS, plt, save_figure

METRICS = {"final_accuracy": "final held-out greedy accuracy", "heldout_sampled_accuracy": "held-out avg@16"}


def load_units(output_dir: str, arms) -> tuple[dict[str, dict[tuple[int, int], dict]], int]:
    """Runs by arm (declaration order), each a dict unit -> run, of the units every arm completed; and how many
    units have at least one run (a study stopped by its time limit leaves incomplete units out)."""
    runs: dict[str, dict] = {arm: {} for arm in arms}
    folder = os.path.join(output_dir, "runs")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".json"):  # the allocation logs beside the runs (`<run>.rounds.jsonl.gz`)
            continue
        with open(os.path.join(folder, name)) as handle:
            run = json.load(handle)
        runs[run["arm"]][(run["warm_start_seed"], run["seed"])] = run
    started = set().union(*(set(units) for units in runs.values()))
    complete = sorted(set.intersection(*(set(units) for units in runs.values())))
    return {arm: {unit: units[unit] for unit in complete} for arm, units in runs.items()}, len(started)


def unit_differences(runs: dict, arm: str, baseline: str, metric: str, unit: str) -> tuple[list, np.ndarray]:
    """Units both arms ran and the arm's metric minus the baseline's on each: per (warm-start seed, RL seed) pair
    (`unit="run"`), or per warm start, the mean over its RL seeds (`unit="warm_start"`)."""
    shared = [unit_ for unit_ in runs[arm] if unit_ in runs[baseline]]
    per_run = {u: runs[arm][u][metric] - runs[baseline][u][metric] for u in shared}
    if unit == "run":
        return shared, np.array(list(per_run.values()))
    warm_seeds = sorted({warm for warm, _ in shared})
    means = [np.mean([d for (w, _), d in per_run.items() if w == warm]) for warm in warm_seeds]
    return warm_seeds, np.array(means)


def study_cells(comparisons, regimes: dict[str, tuple[dict, dict]], unit: str) -> list[Cell]:
    """Every comparison x metric x regime with at least 2 units, Holm-adjusted across all of them.

    `regimes`: regime -> (its protocol, its runs by arm and unit)."""
    cells = []
    for regime, (protocol, runs) in regimes.items():
        for arm, baseline in comparisons:
            if arm not in runs or baseline not in runs:
                continue
            for metric in METRICS:
                units, differences = unit_differences(runs, arm, baseline, metric, unit)
                if differences.size >= 2:
                    test = paired_test(differences, protocol["equivalence_margin"])
                    cells.append(Cell(regime, arm, baseline, metric, tuple(units), test))
    return with_holm(cells)


def _mean_of(rounds: list[dict], key: str) -> float:
    """Mean of a per-round value over `rounds`, leaving out rounds without it (F_t before the first observation).

    `"targeting"`: p per rollout - p per prompt (rounds where the allocator saw a pass rate).
    """
    if key == "targeting":
        values = [r["p_per_rollout"] - r["p_per_prompt"] for r in rounds if r["p_per_rollout"] is not None]
    else:
        values = [r[key] for r in rounds if r[key] is not None]
    return float(np.mean(values)) if values else float("nan")


def _spread(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f} [{values.min():.3f}, {values.max():.3f}]"


def _rollouts(runs: list[dict]) -> str:
    """The runs' rollouts: each distinct count of rounds x rollouts per round, or, for a study at equal generated
    rollouts, the range of the completions generated."""
    if all("rollouts_generated" in run for run in runs):
        generated = [run["rollouts_generated"] for run in runs]
        return (
            f"{min(generated):,} to {max(generated):,} generated" if len(set(generated)) > 1 else f"{generated[0]:,}"
        )
    return ", ".join(sorted({str(run["rollouts"]) for run in runs}))


def regime_lines(protocol: dict, recorded_arms: dict, output_dir: str) -> tuple[list[str], dict]:
    """One regime's tables (warm starts, F_t and targeting while allocating, budget, per-arm means) and its runs by
    arm and unit."""
    runs, started = load_units(output_dir, recorded_arms)
    declared = len(protocol["warm_start_seeds"]) * len(protocol["seeds"])
    if not next(iter(runs.values())):
        return [f"No unit complete in every arm ({started} of the {declared} declared units started)."], runs
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    warm = []
    for seed in protocol["warm_start_seeds"]:
        path = os.path.join(output_dir, "warm_start", f"warm{seed}.json")
        if os.path.exists(path):
            with open(path) as handle:
                before = json.load(handle)
            warm.append(
                f"| {seed} | {before['heldout']['accuracy']:.3f} | {np.mean(before['heldout_sampled']):.3f} | "
                f"{before['wall_time_s']:.0f} |"
            )
    lines = [
        f"Units complete in every arm: {len(next(iter(runs.values())))} of the {declared} declared (warm-start seed x "
        f"RL seed; {started} started). Warm starts (before RL; every arm of a unit starts from its warm start):",
        "",
        "| warm-start seed | held-out greedy accuracy | held-out avg@16 | warm-start wall s |",
        "|---|---|---|---|",
        *warm,
        "",
        f"F_t while allocating: mean over the rounds after epoch 1 (rounds {epoch_rounds + 1} on; epoch 1 has no "
        "pass-rate history, every arm splits it uniformly), then mean [min, max] over units. *p per rollout - p per "
        "prompt*: rollout-weighted minus plain mean of the pass rates the allocator saw (below 0: budget to harder "
        "prompts).",
        "",
        "| arm | F_t epoch 1 | F_t while allocating | p per rollout - p per prompt while allocating | "
        "group size sd while allocating | rollouts | optimizer steps | tokens (prompt + completion) | tokens / "
        "`grpo` |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    grpo_tokens = np.mean([r["tokens"] for r in runs["grpo"].values()]) if "grpo" in runs else float("nan")
    for arm, units in runs.items():
        values = list(units.values())
        allocating = [_mean_of(r["rounds"][epoch_rounds:], "F_t") for r in values]
        targeting = [_mean_of(r["rounds"][epoch_rounds:], "targeting") for r in values]
        sd = [np.mean([x["sizes"][3] for x in r["rounds"][epoch_rounds:]] or [np.nan]) for r in values]
        tokens = np.mean([r["tokens"] for r in values])
        lines.append(
            f"| `{arm}` | {np.mean([_mean_of(r['rounds'][:epoch_rounds], 'F_t') for r in values]):.3f} | "
            f"{_spread(allocating)} | {np.mean(targeting):+.3f} | {np.mean(sd):.2f} | "
            f"{_rollouts(values)} | "
            f"{', '.join(sorted({str(r['optimizer_steps']) for r in values}))} | {tokens:.0f} | "
            f"{tokens / grpo_tokens:.3f} |"
        )
    lines += ["", "| arm | " + " | ".join(f"{label} (mean +- sd)" for label in METRICS.values()) + " | run wall s |"]
    lines.append("|---|" + "---|" * (len(METRICS) + 1))
    for arm, units in runs.items():
        cells = []
        for metric in METRICS:
            values = np.array([r[metric] for r in units.values()])
            cells.append(f"{values.mean():.3f} +- {values.std(ddof=1) if values.size > 1 else 0.0:.3f}")
        lines.append(
            f"| `{arm}` | " + " | ".join(cells) + f" | {np.mean([r['wall_time_s'] for r in units.values()]):.0f} |"
        )
    return lines, runs


def run_unit_lines(cells: list[Cell]) -> list[str]:
    """The pre-registered table of studies 3 and 4: per-unit differences, mean, 95% t-interval, interval verdict."""
    lines = [
        "| comparison | metric | differences per unit (warm-start seed, RL seed) | mean | 95% t-interval | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for cell in cells:
        test = cell.test
        lines.append(
            f"| `{cell.arm}` - `{cell.baseline}` | {METRICS[cell.metric]} | {_signed(test.differences)} | "
            f"{test.mean:+.3f} | [{test.low:+.4f}, {test.high:+.4f}] | "
            f"**{interval_verdict(test.low, test.high, test.margin)}** |"
        )
    return lines


def warm_start_lines(cells: list[Cell], runs_as_units: list[Cell] | None = None) -> list[str]:
    """Warm starts as units, every regime in one table (Holm's family): per-warm-start differences, mean and 95%
    t-interval, the p-value of a difference with its Holm adjustment, the equivalence p-value (not adjusted), the
    verdict before and after Holm; with `runs_as_units`, the pre-registered analysis of the same cells beside it (its
    verdict, p and Holm p)."""
    header = (
        "| regime | comparison | metric | differences per warm start (RL seeds averaged) | mean [95% t-interval] | "
        "p (Holm) | p equivalence | verdict | verdict after Holm |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|"]
    if runs_as_units is not None:
        lines = [header + " pre-registered (runs as units): verdict; p (Holm); after Holm |", lines[1] + "---|"]
    for index, cell in enumerate(cells):
        test = cell.test
        row = (
            f"| `{cell.regime}` | `{cell.arm}` - `{cell.baseline}` | {METRICS[cell.metric]} | "
            f"{_signed(test.differences)} | {test.mean:+.3f} [{test.low:+.3f}, {test.high:+.3f}] | "
            f"{test.p_difference:.3g} ({cell.holm_difference:.3g}) | "
            f"{test.p_equivalence:.3g} | {cell.word} | **{cell.holm_word}** |"
        )
        if runs_as_units is not None:
            run = runs_as_units[index]
            row += (
                f" {interval_verdict(run.test.low, run.test.high, run.test.margin)}; {run.test.p_difference:.3g} "
                f"({run.holm_difference:.3g}); {run.holm_word} |"
            )
        lines.append(row)
    return lines


def unit_lines(runs: dict) -> list[str]:
    """Every run's two metrics, one column per unit."""
    units = list(next(iter(runs.values())))
    lines = ["| arm | metric | " + " | ".join(f"({w}, {s})" for w, s in units) + " |"]
    lines.append("|---|---|" + "---|" * len(units))
    for arm, arm_runs in runs.items():
        for metric, label in METRICS.items():
            cells = [f"{arm_runs[u][metric]:.3f}" if u in arm_runs else "" for u in units]
            lines.append(f"| `{arm}` | {label} | " + " | ".join(cells) + " |")
    return lines


def _signed(values) -> str:
    return ", ".join(f"{value:+.3f}" for value in values)


def _where(cell: Cell) -> str:
    return f"`{cell.regime}`, `{cell.arm}` - `{cell.baseline}`, {METRICS[cell.metric]}"


WORDS = ("ahead", "behind", "equivalent", "not detected")


def _margins(cells: list[Cell]) -> str:
    return ", ".join(f"+-{margin:g}" for margin in sorted({cell.test.margin for cell in cells}))


def _tally_row(name: str, words: list[str], cells: list[Cell] | None = None) -> str:
    """One row of the verdict counts; with `cells`, their smallest p of a difference and where it is."""
    counts = " | ".join(str(words.count(word)) for word in WORDS)
    if cells is None:
        return f"| {name} | {counts} | |"
    first = min(cells, key=lambda cell: cell.test.p_difference)
    return f"| {name} | {counts} | {first.test.p_difference:.3g} ({_where(first)}) |"


def _sizes(cells: list[Cell]) -> tuple[str, str]:
    """How many units the cells have, and the t-interval's degrees of freedom, in words."""
    sizes = sorted({len(cell.units) for cell in cells})
    if len(sizes) == 1:
        return str(sizes[0]), f"{sizes[0] - 1} degree{'s' if sizes[0] > 2 else ''} of freedom"
    return f"{sizes[0]} to {sizes[-1]}", "n - 1 degrees of freedom"


def holm_lines(cells: list[Cell], runs_as_units: list[Cell] | None = None) -> list[str]:
    """How the warm-start analysis was done, its table, and what Holm's correction leaves; with `runs_as_units`,
    beside the pre-registered analysis of the same cells."""
    if not cells:
        return ["No comparison has 2 warm starts that both of its arms completed: no interval over warm starts."]
    count, df = _sizes(cells)
    lines = [
        f"Warm starts as units: a warm start's difference is the mean over its RL seeds, then the mean and 95% "
        f"t-interval over the {count} warm starts (t with {df}). *p*: the two-sided t-test of a zero difference; "
        f"*p equivalence*: the two one-sided tests against {_margins(cells)} (twice the larger p-value: below 0.05 "
        f"exactly when the 95% interval lies inside the margin). Verdicts at 5%: ahead / behind when p is below "
        "0.05, else equivalent when p equivalence is, else not detected. *After Holm*: p of a difference adjusted by "
        f"Holm's correction across all {len(cells)} cells below (every regime, comparison and metric), ahead / behind "
        "when the adjusted p is below 0.05; equivalence is the pre-registered rule, not adjusted "
        "(`benchmarks/studies/analysis.py`). Intervals are rounded once, to 3 decimals, from the full values; p-values "
        "to 3 significant digits.",
    ]
    if runs_as_units is not None:
        lines[0] += (
            f" The last column is the pre-registered analysis of the same cells ({_sizes(runs_as_units)[0]} runs as "
            "units): its interval verdict, and its p-value and verdict with Holm's correction applied the same way "
            "(equivalence read from its own interval)."
        )
    lines += [
        "",
        *warm_start_lines(cells, runs_as_units),
        "",
        f"Verdicts over the {len(cells)} cells (Holm's first threshold: {LEVEL} / {len(cells)} = "
        f"{LEVEL / len(cells):.3g}):",
        "",
        "| analysis | " + " | ".join(WORDS) + " | smallest p of a difference |",
        "|---|---|---|---|---|---|",
    ]
    if runs_as_units is not None:
        preregistered = [interval_verdict(c.test.low, c.test.high, c.test.margin) for c in runs_as_units]
        lines += [
            _tally_row("runs as units, as pre-registered", preregistered, runs_as_units),
            _tally_row("runs as units, Holm", [c.holm_word for c in runs_as_units]),
        ]
    lines += [
        _tally_row("warm starts as units", [c.word for c in cells], cells),
        _tally_row("warm starts as units, Holm", [c.holm_word for c in cells]),
    ]
    if runs_as_units is not None:
        changed = sum(a != b.word for a, b in zip(preregistered, cells, strict=True))
        changed_holm = sum(a != b.holm_word for a, b in zip(preregistered, cells, strict=True))
        lines += [
            "",
            f"Verdicts that differ from the pre-registered ones: {changed} of {len(cells)} with warm starts as units, "
            f"{changed_holm} of {len(cells)} with warm starts as units and Holm.",
        ]
    return lines


def plot_intervals(cells: list[Cell], path: str, title: str) -> None:
    """Each comparison's mean difference and 95% t-interval, one panel per metric, one colour per regime."""
    regimes = list(dict.fromkeys(cell.regime for cell in cells))
    figure, axes = plt.subplots(1, len(METRICS), figsize=(5.2 * len(METRICS), 3.8), sharey=True, squeeze=False)
    markers = ["o", "s", "^", "D"]
    for axis, (metric, label) in zip(axes[0], METRICS.items(), strict=True):
        for offset, regime in enumerate(regimes):
            rows = [cell for cell in cells if cell.metric == metric and cell.regime == regime]
            positions = np.arange(len(rows)) + 0.15 * (offset - (len(regimes) - 1) / 2)
            means = np.array([cell.test.mean for cell in rows])
            errors = np.array([[c.test.mean - c.test.low for c in rows], [c.test.high - c.test.mean for c in rows]])
            axis.errorbar(means, positions, xerr=errors, fmt=markers[offset % 4], capsize=3, label=regime)
            axis.set_yticks(range(len(rows)), [f"{cell.arm} - {cell.baseline}" for cell in rows], fontsize=8)
        axis.axvline(0.0, color="black", linewidth=0.8)
        for edge in sorted({cell.test.margin for cell in cells}):
            for side in (-edge, edge):
                axis.axvline(side, color=COLORS["grpo"], linestyle=":", linewidth=0.8)
        axis.set(xlabel=f"difference in {label}", title=label)
        axis.grid(alpha=0.3, axis="x")
        axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    save_figure(figure, path)


def interval_sections(study, recorded: dict, output_dir: str, docs_dir: str) -> tuple[dict[str, list[str]], list[str]]:
    """Every regime of the study: its tables, comparisons and runs, and one plot of all intervals. Returns the
    generated blocks by marker (with `unit="run"`, also `<marker>_reanalysis`: the warm-start analysis with Holm
    beside the pre-registered one) and the written plots."""
    machine, numerics = recorded["machine"], recorded["numerics"]
    lines = [
        f"Code at commit `{recorded['commit'][:12]}`; machine {machine['cpu_model']}, {machine['nproc']} cores, load "
        f"{', '.join(str(v) for v in machine['load_average'])} at the start; numerics "
        + ", ".join(f"{key}={value}" for key, value in numerics.items() if value is not None)
        + "."
    ]
    timing_path = os.path.join(output_dir, "wall_time.json")
    if os.path.exists(timing_path):
        with open(timing_path) as handle:
            timing = json.load(handle)
        lines[0] += (
            f" The whole study: {timing['wall_time_s'] / 60:.1f} min wall, runs two at a time with one torch thread "
            f"each; load {', '.join(str(v) for v in timing['load_average'])} at the end."
        )
    regimes, bodies = {}, {}
    for regime, protocol in recorded["protocol"].items():
        bodies[regime], runs = regime_lines(protocol, recorded["arms"], os.path.join(output_dir, regime))
        regimes[regime] = (protocol, runs)
    cells = study_cells(study.comparisons, regimes, study.unit)
    for regime, (protocol, runs) in regimes.items():
        heading = f"#### {study.label}, regime `{regime}`"
        lines += ["", heading, "", f"Regime `{regime}`: {protocol['description']}.", "", *bodies[regime], ""]
        if study.unit == "run":
            regime_cells = [cell for cell in cells if cell.regime == regime]
            lines += [f"{heading}: pre-registered comparisons", "", *run_unit_lines(regime_cells), ""]
        lines += [f"{heading}: every run", "", *unit_lines(runs)]
        if study.report_extras and next(iter(runs.values()), None):
            lines += ["", *extra_lines(study.report_extras, runs, protocol, f"{heading}: ")]
            lines.pop()
    prefix, written = study.plot_prefix, []
    if study.unit == "warm_start":
        lines += ["", f"#### {study.label}: comparisons (warm starts as units, Holm)", "", *holm_lines(cells)]
    over = "warm starts" if study.unit == "warm_start" else "units"
    margins = _margins(cells)
    written.append(os.path.join(docs_dir, f"{prefix}_intervals.png"))
    plot_intervals(cells, written[-1], f"Paired differences: mean and 95% t-interval over {over} (dotted: {margins})")
    lines += ["", f"![paired differences with 95% t-intervals]({prefix}_intervals.png)"]
    blocks = {study.marker: lines}
    if study.unit == "run":
        warm = study_cells(study.comparisons, regimes, "warm_start")
        written.append(os.path.join(docs_dir, f"{prefix}_warm_start_intervals.png"))
        title = f"Re-analysis: mean and 95% t-interval over warm starts (dotted: {margins})"
        plot_intervals(warm, written[-1], title)
        blocks[f"{study.marker}_reanalysis"] = [
            *holm_lines(warm, cells),
            "",
            f"![paired differences over warm starts with 95% t-intervals]({prefix}_warm_start_intervals.png)",
        ]
    return blocks, written
