"""Plots of a CoBA-RL run from its log history: ``python -m coba_trl.plot <output_dir>``.

Reads ``trainer_state.json`` (the output directory's own, else the latest ``checkpoint-*``'s) and writes PNGs next
to it with matplotlib's Agg backend (no display needed):

- ``budget_by_pass_rate.png``: mean group size of the prompts in each pass-rate bin per round (the allocation
  shifting from easy to hard prompts as the model improves, algorithm.md sections 3-5);
- ``capability.png``: alpha_t, beta_t of the Beta value density and the failure rates F_t, F_bar_t (section 3);
- ``reward_accuracy.png``: mean training reward and, when logged, held-out accuracy.
A plot whose metrics are absent from the log (e.g. capability for a uniform or Knapsack run) is skipped.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BUDGET_BIN_PREFIX = "budget/mean_by_pass_rate/"
STATE_FILE = "trainer_state.json"


def find_trainer_state(output_dir: str) -> str:
    """Path of the run's ``trainer_state.json``: the top-level one, else the one of the latest checkpoint."""
    path = os.path.join(output_dir, STATE_FILE)
    if os.path.isfile(path):
        return path
    checkpoints = glob.glob(os.path.join(output_dir, "checkpoint-*", STATE_FILE))
    if not checkpoints:
        raise ValueError(f"No {STATE_FILE} in {output_dir!r} or its checkpoint-* folders: pass a training output_dir.")
    return max(checkpoints, key=lambda p: int(re.search(r"checkpoint-(\d+)", p).group(1)))


def load_log_history(output_dir: str) -> list[dict]:
    with open(find_trainer_state(output_dir)) as handle:
        return json.load(handle)["log_history"]


def series(log_history: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of every log record that has ``key``."""
    points = [(record["step"], record[key]) for record in log_history if key in record and "step" in record]
    return [step for step, _ in points], [value for _, value in points]


def _bin_order(name: str) -> tuple[float, str]:
    if name == "unseen":
        return (-1.0, name)
    return (float(name.split("-")[0]), name)


def plot_budget_by_pass_rate(log_history: list[dict], path: str) -> bool:
    bins = sorted(
        {key[len(BUDGET_BIN_PREFIX) :] for r in log_history for key in r if key.startswith(BUDGET_BIN_PREFIX)},
        key=_bin_order,
    )
    if not bins:
        return False
    figure, axis = plt.subplots(figsize=(7, 4))
    colors = plt.get_cmap("viridis")
    for index, name in enumerate(bins):
        steps, values = series(log_history, BUDGET_BIN_PREFIX + name)
        color = "grey" if name == "unseen" else colors(index / max(len(bins) - 1, 1))
        axis.plot(steps, values, marker=".", label=f"p in {name}" if name != "unseen" else "unseen", color=color)
    steps, values = series(log_history, "budget/mean")
    axis.plot(steps, values, linestyle="--", color="black", label="mean (G)")
    axis.set(xlabel="step", ylabel="rollouts per prompt", title="Budget by pass-rate bin")
    axis.legend(fontsize=8, ncol=2)
    _save(figure, path)
    return True


def plot_capability(log_history: list[dict], path: str) -> bool:
    if not series(log_history, "coba/failure_rate")[0]:
        return False
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("coba/alpha", "alpha"), ("coba/beta", "beta")):
        steps, values = series(log_history, key)
        left.plot(steps, values, marker=".", label=label)
    left.set(xlabel="step", title="Beta(alpha, beta) of the value density")
    left.legend()
    for key, label in (("coba/failure_rate", "F_t"), ("coba/failure_rate_smoothed", "F_bar_t")):
        steps, values = series(log_history, key)
        right.plot(steps, values, marker=".", label=label)
    right.set(xlabel="step", ylim=(0, 1), title="Global failure rate")
    right.legend()
    _save(figure, path)
    return True


def plot_reward_accuracy(log_history: list[dict], path: str) -> bool:
    steps, rewards = series(log_history, "reward")
    accuracy_steps, accuracy = series(log_history, "heldout_accuracy")
    if not steps and not accuracy_steps:
        return False
    figure, axis = plt.subplots(figsize=(7, 4))
    if steps:
        axis.plot(steps, rewards, marker=".", alpha=0.7, label="train reward (mean)")
    if accuracy_steps:
        axis.plot(accuracy_steps, accuracy, marker="o", linewidth=2, label="held-out accuracy")
    axis.set(xlabel="step", ylim=(0, 1), title="Reward and accuracy")
    axis.legend()
    _save(figure, path)
    return True


def _save(figure, path: str) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


PLOTS = {
    "budget_by_pass_rate.png": plot_budget_by_pass_rate,
    "capability.png": plot_capability,
    "reward_accuracy.png": plot_reward_accuracy,
}


def plot_run(output_dir: str) -> list[str]:
    """Write every plot whose metrics the run logged into ``output_dir``; returns the written paths."""
    log_history = load_log_history(output_dir)
    written = []
    for name, plot in PLOTS.items():
        path = os.path.join(output_dir, name)
        if plot(log_history, path):
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Plot a CoBA-RL run's budget allocation, capability and reward.")
    parser.add_argument("output_dir", help="Training output_dir (holds trainer_state.json or checkpoint-*/).")
    for path in plot_run(parser.parse_args(argv).output_dir):
        print(path)


if __name__ == "__main__":
    main()
