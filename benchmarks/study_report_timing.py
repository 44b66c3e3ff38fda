"""The optional sections of a study's report (`Study.report_extras`, study 3): wall time per run and per round,
accuracy at equal wall time, zero-variance groups, drops and rescues, and the budget by the p_i the allocator saw."""

from __future__ import annotations

import os

import numpy as np
from study_report_plots import COLORS, plt, save_figure
from study_report_tables import PASS_RATE_EDGES, UNIFORM_ARMS, round_series, shown_epochs


def train_clock(run: dict) -> dict[int, float]:
    """Seconds inside `trainer.train()` without the held-out evaluations, at the end of each optimizer step (0 -> 0)."""
    return {0: 0.0, **{int(step): seconds for step, seconds, _ in run["step_times"]}}


def round_seconds(run: dict, steps_per_round: int) -> np.ndarray:
    """Training seconds of each generation round (its steps, evaluations left out)."""
    clock = train_clock(run)
    ends = sorted(step for step in clock if step % steps_per_round == 0)
    return np.diff([clock[step] for step in ends])


def generation_seconds(run: dict) -> np.ndarray:
    """Seconds of each round's generation passes: shape (rounds, 2), phase 2 = 0 for one-phase rounds."""
    return np.array([[phases[0], sum(phases[1:])] for _, phases in run["generation_times"]], dtype=float)


def time_curve(run: dict) -> tuple[np.ndarray, np.ndarray]:
    """Training seconds (evaluations left out) at each held-out evaluation, and the accuracy there."""
    clock = train_clock(run)
    points = [(clock[step], accuracy) for step, _, accuracy in run["accuracy_curve"] if step in clock]
    return np.array([p[0] for p in points]), np.array([p[1] for p in points])


def accuracy_at_time(run: dict, seconds: float) -> float:
    """Held-out accuracy of the last evaluation made within `seconds` of training (no interpolation)."""
    times, accuracies = time_curve(run)
    return float(accuracies[times <= seconds + 1e-9][-1])


def _median_range(values, digits: int = 0) -> str:
    values = np.asarray(values, dtype=float)
    return f"{np.median(values):.{digits}f} [{values.min():.{digits}f}, {values.max():.{digits}f}]"


def _wall_time_rows(runs: dict, protocol: dict, reference: str = "coba") -> list[str]:
    """Wall time per run and per round, generation time by phase, and the ratios to the reference arm."""
    steps_per_round = protocol["steps_per_generation"]
    rows = [
        "| arm | run wall s (all of it) | training s (no evaluations) | training s per round | generation s per "
        f"round: phase 1 + phase 2 | CPU s (run process) | training time / `{reference}`, per seed | "
        f"median ratio to `{reference}` | median ratio to `grpo` | CPU s / `{reference}` (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    train = {arm: {r["seed"]: train_clock(r)[max(train_clock(r))] for r in arm_runs} for arm, arm_runs in runs.items()}
    cpu = {arm: {r["seed"]: r["cpu_time_s"] for r in arm_runs} for arm, arm_runs in runs.items()}
    for arm, arm_runs in runs.items():
        per_round = np.concatenate([round_seconds(r, steps_per_round) for r in arm_runs])
        cpu_ratio = [cpu[arm][s] / cpu[reference][s] for s in cpu[arm] if s in cpu.get(reference, {})]
        generation = np.concatenate([generation_seconds(r) for r in arm_runs])
        ratios = {}
        for base in (reference, "grpo"):
            if base in train:
                ratios[base] = [train[arm][s] / train[base][s] for s in sorted(train[arm]) if s in train[base]]
        own = ", ".join(f"{value:.2f}" for value in ratios.get(reference, []))
        rows.append(
            f"| `{arm}` | {_median_range([r['wall_time_s'] for r in arm_runs])} | "
            f"{_median_range(list(train[arm].values()))} | {_median_range(per_round, 2)} | "
            f"{np.median(generation[:, 0]):.2f} + {np.median(generation[:, 1]):.2f} "
            f"(mean {generation.sum(axis=1).mean():.2f}) | {_median_range([r['cpu_time_s'] for r in arm_runs])} | "
            f"{own} | "
            + " | ".join(f"{np.median(ratios[base]):.2f}" if ratios.get(base) else "" for base in (reference, "grpo"))
            + f" | {f'{np.median(cpu_ratio):.2f}' if cpu_ratio else ''} |"
        )
    return rows


def _equal_time_rows(runs: dict) -> list[str]:
    """Per seed, every arm's accuracy at the training time of that seed's fastest run (last evaluation within it)."""
    seeds = sorted(set.intersection(*({r["seed"] for r in arm_runs} for arm_runs in runs.values())))
    budgets = {
        seed: min(max(train_clock(r).values()) for arm_runs in runs.values() for r in arm_runs if r["seed"] == seed)
        for seed in seeds
    }
    rows = [
        "| arm | accuracy at the fastest run's training time, per seed | mean | - `grpo`, per seed | final accuracy "
        "(mean) |",
        "|---|---|---|---|---|",
    ]
    at = {
        arm: {r["seed"]: accuracy_at_time(r, budgets[r["seed"]]) for r in arm_runs if r["seed"] in budgets}
        for arm, arm_runs in runs.items()
    }
    for arm, arm_runs in runs.items():
        values = [at[arm][seed] for seed in seeds]
        diffs = ", ".join(f"{at[arm][s] - at['grpo'][s]:+.3f}" for s in seeds) if "grpo" in at else ""
        rows.append(
            f"| `{arm}` | {', '.join(f'{v:.3f}' for v in values)} | {np.mean(values):.3f} | {diffs} | "
            f"{np.mean([r['final_accuracy'] for r in arm_runs]):.3f} |"
        )
    budget_text = ", ".join(f"seed {seed}: {budgets[seed]:.0f} s" for seed in seeds)
    return [f"Training-time budget (the fastest run of each seed, evaluations left out): {budget_text}.", "", *rows]


def _series_total(run: dict, key: str) -> float:
    values = round_series(run, key)
    return float(values.sum()) if values.size else np.nan


def _phase_rows(runs: dict, protocol: dict) -> list[str]:
    """Zero-variance share by epoch, dropped groups and tokens, rescued groups and how many got a non-zero spread."""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    rows = [
        "| arm | zero-variance share: epoch 1 | epochs 2+ | all rounds | dropped groups per round | dropped tokens "
        "per round | rescued groups per round | rescued with a non-zero spread (share of rescued) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, arm_runs in runs.items():
        zero = [round_series(r, "frac_reward_zero_std") for r in arm_runs]
        later = [z[epoch_rounds:].mean() for z in zero if z.size > epoch_rounds]  # none in a one-epoch run
        cells = [
            f"{np.mean([z[:epoch_rounds].mean() for z in zero]):.3f}",
            f"{np.mean(later):.3f}" if later else "",
            f"{np.mean([z.mean() for z in zero]):.3f}",
        ]
        for key in ("coba/dropped_groups", "coba/dropped_tokens", "coba/rescued_groups"):
            series = [round_series(r, key) for r in arm_runs]
            cells.append(f"{np.mean([s.mean() for s in series]):.2f}" if all(s.size for s in series) else "")
        rescued = sum(_series_total(r, "coba/rescued_groups") for r in arm_runs)
        spread = sum(_series_total(r, "coba/rescued_with_spread") for r in arm_runs)
        cells.append(
            f"{spread:.0f} of {rescued:.0f} ({spread / rescued:.2f})" if rescued == rescued and rescued else ""
        )
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows


def _allocated_bin_rows(runs: dict, protocol: dict) -> list[str]:
    """Mean group size by the pass rate p_i the allocator saw (with two phases: after screening), every epoch."""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    names = [f"[{low}, {high})" for low, high in zip(PASS_RATE_EDGES[:-2], PASS_RATE_EDGES[1:-1], strict=True)]
    names.append(f"[{PASS_RATE_EDGES[-2]}, 1.0]")
    rows = ["| arm | epoch | unseen | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for arm, arm_runs in runs.items():
        if arm in UNIFORM_ARMS:
            continue
        for epoch in [1, *shown_epochs(len(arm_runs[0]["rounds"]) // epoch_rounds)]:
            start = (epoch - 1) * epoch_rounds
            rounds = [rnd for run in arm_runs for rnd in run["rounds"][start : start + epoch_rounds]]
            rates = np.array([np.nan if p is None else p for rnd in rounds for p in rnd[3]], dtype=float)
            sizes = np.array([size for rnd in rounds for size in rnd[2]], dtype=float)
            bins = np.digitize(rates, PASS_RATE_EDGES[1:-1])
            bins[np.isnan(rates)] = -1
            cells = ["" if not (bins == b).any() else f"{sizes[bins == b].mean():.1f}" for b in range(-1, len(names))]
            rows.append(f"| `{arm}` | {epoch} | " + " | ".join(cells) + " |")
    return rows


def plot_accuracy_time(runs: dict, path: str) -> None:
    """Held-out accuracy against training seconds (evaluations left out): seed mean of both, band min-max."""
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for arm, arm_runs in runs.items():
        curves = [time_curve(r) for r in arm_runs]
        length = min(len(times) for times, _ in curves)
        times = np.array([t[:length] for t, _ in curves])
        accuracies = np.array([a[:length] for _, a in curves])
        color = COLORS.get(arm)
        axis.plot(times.mean(axis=0), accuracies.mean(axis=0), marker=".", color=color, label=arm)
        axis.fill_between(times.mean(axis=0), accuracies.min(axis=0), accuracies.max(axis=0), color=color, alpha=0.1)
    axis.set(
        xlabel="training seconds (held-out evaluations left out; seed mean)",
        ylabel="held-out greedy accuracy",
        title="Accuracy vs wall time (band: min-max over seeds)",
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_figure(figure, path)


def plot_round_time(runs: dict, protocol: dict, path: str) -> None:
    """Training seconds per round (seed median), one line per arm."""
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for arm, arm_runs in runs.items():
        values = np.array([round_seconds(r, protocol["steps_per_generation"]) for r in arm_runs])
        axis.plot(np.median(values, axis=0), color=COLORS.get(arm), label=arm, linewidth=0.9)
    axis.set(xlabel="generation round", ylabel="seconds", title="Training seconds per round (seed median)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_figure(figure, path)


def extra_lines(extras, runs: dict, protocol: dict, prefix: str, docs_dir: str, written: list) -> list[str]:
    """The optional sections a study asks for (Study.report_extras): wall time, phase and zero-variance metrics."""
    lines = []
    if "wall_time" in extras:
        for key, plot in (
            ("accuracy_time", lambda p: plot_accuracy_time(runs, p)),
            ("round_time", lambda p: plot_round_time(runs, protocol, p)),
        ):
            plot(os.path.join(docs_dir, f"{prefix}_{key}.png"))
            written.append(os.path.join(docs_dir, f"{prefix}_{key}.png"))
        lines += [
            "### Wall time (median [min, max] over seeds; runs two at a time, one torch thread each)",
            "",
            "*Training s*: seconds inside `trainer.train()` with the held-out evaluations left out (the same for "
            "every arm); *run wall s*: the whole run (loading, evaluations, conversion sampling). Generation seconds "
            "are the rounds' generation-and-scoring calls, phase 1 (screening) and phase 2.",
            "",
            *_wall_time_rows(runs, protocol),
            "",
            "### Held-out accuracy at equal wall time",
            "",
            *_equal_time_rows(runs),
            "",
            f"![accuracy vs wall time]({prefix}_accuracy_time.png)",
            "",
            f"![seconds per round]({prefix}_round_time.png)",
            "",
        ]
    if "phases" in extras:
        lines += [
            "### Zero-variance groups, drops and rescues (seed mean of the per-round values)",
            *_phase_rows(runs, protocol),
            "",
            "### Budget by the pass rate p_i the allocator saw, every epoch (mean group size, seeds pooled)",
            "",
            "With two phases p_i includes the round's screening results, so allocation starts in epoch 1; with one "
            "phase epoch 1 is unseen (uniform).",
            "",
            *_allocated_bin_rows(runs, protocol),
            "",
        ]
    return lines
