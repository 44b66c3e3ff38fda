"""The plots of a study's report: accuracy against rollouts, paired differences, budget by pass rate, F_t and
zero-variance groups per round (PNG, beside the study's page under docs/studies/)."""

from __future__ import annotations

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from studies.report.tables import (  # noqa: E402
    PASS_RATE_EDGES,
    UNIFORM_ARMS,
    bin_means,
    curve,
    epoch_mean,
    round_series,
    shown_epochs,
)

COLORS = {
    "grpo": "tab:gray",
    "knapsack": "tab:orange",
    "coba": "tab:blue",
    "coba_paper": "tab:green",
    "coba_explore_first": "tab:purple",
    "grpo_2x": "black",
    "coba_prior2": "tab:red",
    "coba_blow4": "tab:brown",
    "coba_2phase": "tab:cyan",
    "coba_rescue": "tab:olive",
    "grpo_drop": "tab:pink",
}


def plot_accuracy(runs: dict, path: str) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for arm, arm_runs in runs.items():
        xs, accuracies = curve(arm_runs)
        color = COLORS.get(arm)
        axis.plot(xs, accuracies.mean(axis=0), marker=".", color=color, label=f"{arm} ({len(arm_runs)} seeds)")
        axis.fill_between(xs, accuracies.min(axis=0), accuracies.max(axis=0), color=color, alpha=0.12)
    axis.set(
        xlabel="rollouts consumed", ylabel="held-out greedy accuracy", title="Accuracy vs rollouts (band: min-max)"
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_figure(figure, path)


def plot_budget(runs: dict, protocol: dict, path: str) -> None:
    """Mean group size by pooled pass-rate bin, one line per epoch (legend: its F_t): does the peak move?"""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    arms = [arm for arm in runs if arm not in UNIFORM_ARMS]
    figure, axes = plt.subplots(1, len(arms), figsize=(3.2 * len(arms), 3.3), sharey=True, squeeze=False)
    centers = [(low + high) / 2 for low, high in zip(PASS_RATE_EDGES[:-1], PASS_RATE_EDGES[1:], strict=True)]
    epochs = shown_epochs(len(runs[arms[0]][0]["rounds"]) // epoch_rounds) if arms else []
    colors = plt.get_cmap("plasma")
    for axis, arm in zip(axes[0], arms, strict=True):
        failure = [round_series(r, "coba/failure_rate") for r in runs[arm]]
        for index, epoch in enumerate(epochs):
            start = (epoch - 1) * epoch_rounds
            means = bin_means(runs[arm], start, epoch_rounds)
            label = f"epoch {epoch}, F {epoch_mean(failure, start, epoch_rounds)}"
            axis.plot(centers, means, marker="o", color=colors(index / (len(epochs) + 1)), label=label)
        axis.set(title=arm, xlabel="pooled pass rate S_i / N_i")
        axis.grid(alpha=0.3)
        if len(epochs):  # no epoch after the first (a short run): nothing drawn, no legend
            axis.legend(fontsize=6)
    if arms:
        axes[0][0].set_ylabel("mean rollouts per prompt")
    save_figure(figure, path)


def plot_failure(runs: dict, path: str) -> None:
    """F_t per round for every arm (seed mean, band min-max), with the 0.5 turn and the 0.35 target marked."""
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for arm, arm_runs in runs.items():
        values = np.array([round_series(r, "coba/failure_rate") for r in arm_runs])
        if values.size == 0:
            continue
        axis.plot(values.mean(axis=0), color=COLORS.get(arm), label=arm)
        axis.fill_between(
            range(values.shape[1]), values.min(axis=0), values.max(axis=0), color=COLORS.get(arm), alpha=0.1
        )
    for level, style in ((0.5, "--"), (0.35, ":")):
        axis.axhline(level, color="black", linestyle=style, linewidth=0.8)
    axis.set(xlabel="generation round", ylabel="F_t", title="Sampled failure rate F_t per round (band: min-max)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_figure(figure, path)


def plot_paired(runs: dict, path: str, baseline: str = "grpo") -> None:
    """Final greedy accuracy minus the baseline's, one dot per seed, per arm."""
    arms = [arm for arm in runs if arm != baseline]
    figure, axis = plt.subplots(figsize=(7, 3.4))
    reference = {r["seed"]: r["final_accuracy"] for r in runs.get(baseline, [])}
    for index, arm in enumerate(arms):
        diffs = [r["final_accuracy"] - reference[r["seed"]] for r in runs[arm] if r["seed"] in reference]
        axis.scatter([index] * len(diffs), diffs, color=COLORS.get(arm), s=18)
        if diffs:
            axis.hlines(np.mean(diffs), index - 0.25, index + 0.25, color=COLORS.get(arm))
    axis.axhline(0.0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(arms)), arms, fontsize=8)
    axis.set(ylabel=f"final accuracy - {baseline}", title=f"Paired differences against {baseline} (dot: seed)")
    axis.grid(alpha=0.3, axis="y")
    save_figure(figure, path)


def plot_zero_std(runs: dict, path: str) -> None:
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for arm, arm_runs in runs.items():
        values = np.mean([round_series(r, "frac_reward_zero_std") for r in arm_runs], axis=0)
        axis.plot(values, color=COLORS.get(arm), label=arm)
    axis.set(xlabel="round", ylabel="share of groups", title="Zero-variance groups (all correct or all wrong)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_figure(figure, path)


def save_figure(figure, path: str) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
