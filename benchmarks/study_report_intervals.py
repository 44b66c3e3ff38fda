"""The `"intervals"` analysis of a study's report (study 4): paired differences over units with 95% t-intervals.

A unit is a (warm-start seed, RL seed) pair; every arm of a unit starts from the same checkpoint and sees the same
prompts in the same order. For each pre-registered comparison and each co-primary metric (final held-out greedy
accuracy, held-out avg@16 at temperature 1.0) the report gives the per-unit differences, their mean and the 95%
t-interval over the n units (mean +- t(0.975, n - 1) * sd / sqrt(n)), and the verdict word the rule fixes:

- "ahead" / "behind": the interval excludes 0 (above / below it), checked first;
- "equivalent": the interval lies within +-`equivalence_margin` (0.02);
- "not detected": anything else.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
from study_report_plots import COLORS, plt, save_figure
from study_report_timing import extra_lines

METRICS = {"final_accuracy": "final held-out greedy accuracy", "heldout_sampled_accuracy": "held-out avg@16"}


def t_quantile(probability: float, df: int) -> float:
    """Student's t quantile for `probability` in (0.5, 1): bisection on the CDF, integrated on a fine grid."""
    scale = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 20_001)
        density = scale * (1 + grid**2 / df) ** (-(df + 1) / 2)
        return 0.5 + float(np.sum((density[1:] + density[:-1]) / 2) * (grid[1] - grid[0]))

    low, high = 0.0, 1000.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < probability else (low, middle)
    return (low + high) / 2


def interval(differences) -> tuple[float, float, float]:
    """Mean and the two-sided 95% t-interval over the units."""
    values = np.asarray(differences, dtype=float)
    mean = float(values.mean())
    half = t_quantile(0.975, values.size - 1) * float(values.std(ddof=1)) / math.sqrt(values.size)
    return mean, mean - half, mean + half


def verdict(low: float, high: float, margin: float) -> str:
    """The pre-registered verdict word for an interval [low, high]."""
    if low > 0:
        return "ahead"
    if high < 0:
        return "behind"
    if -margin <= low and high <= margin:
        return "equivalent"
    return "not detected"


def load_units(output_dir: str, arms) -> tuple[dict[str, dict[tuple[int, int], dict]], int]:
    """Runs by arm (declaration order), each a dict unit -> run, of the units every arm completed; and how many
    units have at least one run (a study stopped by its time limit leaves incomplete units out)."""
    runs: dict[str, dict] = {arm: {} for arm in arms}
    folder = os.path.join(output_dir, "runs")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name)) as handle:
            run = json.load(handle)
        runs[run["arm"]][(run["warm_start_seed"], run["seed"])] = run
    started = set().union(*(set(units) for units in runs.values()))
    complete = sorted(set.intersection(*(set(units) for units in runs.values())))
    return {arm: {unit: units[unit] for unit in complete} for arm, units in runs.items()}, len(started)


def paired(runs: dict, arm: str, baseline: str, metric: str) -> tuple[list, np.ndarray]:
    """Units both arms ran, and the arm's metric minus the baseline's on each."""
    shared = [unit for unit in runs[arm] if unit in runs[baseline]]
    return shared, np.array([runs[arm][u][metric] - runs[baseline][u][metric] for u in shared])


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


def regime_lines(protocol: dict, recorded_arms: dict, output_dir: str) -> tuple[list[str], dict, dict]:
    """One regime's tables: warm starts, F_t and targeting while allocating, budget, per-arm means; its runs by arm
    and unit; each arm's F_t while allocating (mean over units)."""
    runs, started = load_units(output_dir, recorded_arms)
    declared = len(protocol["warm_start_seeds"]) * len(protocol["seeds"])
    if not next(iter(runs.values())):
        return [f"No unit complete in every arm ({started} of the {declared} declared units started)."], runs, {}
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
    regime = {}
    for arm, units in runs.items():
        values = list(units.values())
        allocating = [_mean_of(r["rounds"][epoch_rounds:], "F_t") for r in values]
        regime[arm] = float(np.mean(allocating))
        targeting = [_mean_of(r["rounds"][epoch_rounds:], "targeting") for r in values]
        sd = [np.mean([x["sizes"][3] for x in r["rounds"][epoch_rounds:]] or [np.nan]) for r in values]
        tokens = np.mean([r["tokens"] for r in values])
        lines.append(
            f"| `{arm}` | {np.mean([_mean_of(r['rounds'][:epoch_rounds], 'F_t') for r in values]):.3f} | "
            f"{_spread(allocating)} | {np.mean(targeting):+.3f} | {np.mean(sd):.2f} | "
            f"{', '.join(sorted({str(r['rollouts']) for r in values}))} | "
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
    return lines, runs, regime


def comparison_lines(runs: dict, comparisons, margin: float) -> tuple[list[str], list[tuple]]:
    """The pre-registered comparisons, both metrics: per-unit differences, mean, 95% t-interval and verdict."""
    lines = [
        "| comparison | metric | differences per unit (warm-start seed, RL seed) | mean | 95% t-interval | verdict |",
        "|---|---|---|---|---|---|",
    ]
    results = []
    for arm, baseline in comparisons:
        if arm not in runs or baseline not in runs:
            continue
        for metric, label in METRICS.items():
            shared, differences = paired(runs, arm, baseline, metric)
            if differences.size < 2:
                continue
            mean, low, high = interval(differences)
            word = verdict(low, high, margin)
            results.append((arm, baseline, metric, mean, low, high, word))
            per_unit = ", ".join(f"{d:+.3f}" for d in differences)
            lines.append(
                f"| `{arm}` - `{baseline}` | {label} | {per_unit} | {mean:+.3f} | [{low:+.4f}, {high:+.4f}] | "
                f"**{word}** |"
            )
    return lines, results


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


def plot_intervals(results: dict, path: str) -> None:
    """Each comparison's mean difference and 95% t-interval, one panel per metric, one colour per regime."""
    figure, axes = plt.subplots(1, len(METRICS), figsize=(5.2 * len(METRICS), 3.8), sharey=True, squeeze=False)
    markers = ["o", "s", "^", "D"]
    for axis, (metric, label) in zip(axes[0], METRICS.items(), strict=True):
        for offset, (regime, rows) in enumerate(results.items()):
            rows = [row for row in rows if row[2] == metric]
            positions = np.arange(len(rows)) + 0.15 * (offset - (len(results) - 1) / 2)
            means = np.array([row[3] for row in rows])
            errors = np.array([[row[3] - row[4] for row in rows], [row[5] - row[3] for row in rows]])
            axis.errorbar(means, positions, xerr=errors, fmt=markers[offset % 4], capsize=3, label=regime)
            axis.set_yticks(range(len(rows)), [f"{row[0]} - {row[1]}" for row in rows], fontsize=8)
        axis.axvline(0.0, color="black", linewidth=0.8)
        for edge in (-0.02, 0.02):
            axis.axvline(edge, color=COLORS["grpo"], linestyle=":", linewidth=0.8)
        axis.set(xlabel=f"difference in {label}", title=label)
        axis.grid(alpha=0.3, axis="x")
        axis.legend(fontsize=8)
    figure.suptitle("Paired differences: mean and 95% t-interval over units (dotted: +-0.02)", fontsize=10)
    save_figure(figure, path)


def interval_sections(study, recorded: dict, output_dir: str, docs_dir: str) -> tuple[list[str], list[str]]:
    """Every regime of the study: its tables and comparisons; one plot of all intervals."""
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
    all_results = {}
    for regime, protocol in recorded["protocol"].items():
        regime_dir = os.path.join(output_dir, regime)
        body, runs, _ = regime_lines(protocol, recorded["arms"], regime_dir)
        comparisons, all_results[regime] = comparison_lines(runs, study.comparisons, protocol["equivalence_margin"])
        lines += [
            "",
            f"### Regime `{regime}`: {protocol['description']}",
            "",
            *body,
            "",
            f"#### Regime `{regime}`: pre-registered comparisons (paired by unit)",
            "",
            *comparisons,
            "",
            f"#### Regime `{regime}`: every run",
            "",
            *unit_lines(runs),
        ]
        if study.report_extras and next(iter(runs.values()), None):
            lines += ["", *extra_lines(study.report_extras, runs, protocol, f"Regime `{regime}`: ")]
            lines.pop()
    path = os.path.join(docs_dir, f"{study.plot_prefix}_intervals.png")
    plot_intervals(all_results, path)
    lines += ["", f"![paired differences with 95% t-intervals]({study.plot_prefix}_intervals.png)"]
    return lines, [path]
