"""Plots of a CoBA-RL run from its log history: ``python -m coba_trl.plot <output_dir>``.

Reads ``trainer_state.json`` (the output directory's own, else the latest ``checkpoint-*``'s) and writes PNGs next
to it with matplotlib's Agg backend (no display needed):

- ``budget_by_pass_rate.png``: mean group size of the prompts in each pass-rate bin per round (the allocation
  shifting from easy to hard prompts as the model improves, docs/algorithm.md, "Capability" and
  "Allocating one round");
- ``capability.png``: alpha_t, beta_t of the Beta value density (CoBA only) and the failure rates F_t, F_bar_t
  (section 3);
- ``reward_accuracy.png``: mean training reward and, when logged, held-out accuracy;
- ``spending.png``: completions generated against rows trained and rows from groups with a spread of rewards, per
  round (what refill, skipping and a pilot spend beside what reaches the loss).
Only metrics the run logged get a plot or a panel (a Knapsack run has no alpha/beta panel). The x axis is the
optimizer step, with integer ticks. Series are told apart by colour, marker and line style together (so two that
coincide, or a print in grey, still show which is which), and a series with only a few points, as in a run of three
steps, has each value written next to its point.
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
from matplotlib.ticker import MaxNLocator  # noqa: E402

from coba_trl.rounds.metrics import PASS_RATE_BINS  # noqa: E402

BUDGET_BIN_PREFIX = "budget/mean_by_pass_rate/"
STATE_FILE = "trainer_state.json"


def find_trainer_state(output_dir: str) -> str:
    """Path of the run's ``trainer_state.json``: the top-level one, else the one of the latest checkpoint."""
    path = os.path.join(output_dir, STATE_FILE)
    if os.path.isfile(path):
        return path
    if not os.path.isdir(output_dir):
        raise ValueError(f"output_dir {output_dir} does not exist: pass the output_dir of a training run.")
    checkpoints = glob.glob(os.path.join(output_dir, "checkpoint-*", STATE_FILE))
    if not checkpoints:
        raise ValueError(
            f"output_dir {output_dir} holds no {STATE_FILE}, nor do any checkpoint-* folders in it: pass the "
            "output_dir of a training run."
        )
    return max(checkpoints, key=lambda p: int(re.search(r"checkpoint-(\d+)", p).group(1)))


def load_log_history(output_dir: str) -> list[dict]:
    with open(find_trainer_state(output_dir)) as handle:
        return json.load(handle)["log_history"]


def series(log_history: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of every log record that has ``key``."""
    points = [(record["step"], record[key]) for record in log_history if key in record and "step" in record]
    return [step for step, _ in points], [value for _, value in points]


# Pass-rate bins from hard to easy, in the order of an ordered colour map (so neighbouring bins get neighbouring hues).
PASS_RATE_BIN_NAMES = tuple(name for name, _, _ in PASS_RATE_BINS) + ("1.0",)
BIN_MARKERS = ("o", "s", "^", "D", "v", "*")
BIN_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
FEW_POINTS = 3  # a series with at most this many points has its values written next to them


def bin_label(name: str) -> str:
    """A pass-rate bin in words: "p 0.2 to 0.4", "p 0.8 to under 1", "p = 1 (always solved)", "unseen"."""
    if name == "1.0":
        return "p = 1 (always solved)"
    if name not in PASS_RATE_BIN_NAMES:
        return "unseen (no pass rate yet)"
    low, high = name.split("-")
    return f"p {low} to under {high}" if high == "1.0" else f"p {low} to {high}"


def bin_color(name: str):
    """Fixed colour of a pass-rate bin: grey for unseen prompts, else its place on the ordered "plasma" map."""
    if name not in PASS_RATE_BIN_NAMES:
        return "grey"
    return plt.get_cmap("plasma")(0.88 * PASS_RATE_BIN_NAMES.index(name) / (len(PASS_RATE_BIN_NAMES) - 1))


def _bin_order(name: str) -> int:
    return PASS_RATE_BIN_NAMES.index(name) if name in PASS_RATE_BIN_NAMES else -1


def _label_few_points(axis, steps: list, values: list, color) -> None:
    """Write each value next to its point when a series has too few points to read as a line."""
    if len(steps) <= FEW_POINTS:
        for step, value in zip(steps, values, strict=True):
            axis.annotate(
                f"{value:.3g}", (step, value), xytext=(5, 4), textcoords="offset points", color=color, fontsize=8
            )


def _step_axis(axis) -> None:
    """Optimizer steps are whole numbers: integer ticks, also for a run of three steps or a single logged point."""
    steps = [x for line in axis.get_lines() for x in line.get_xdata()]
    if steps:
        low, high = min(steps), max(steps)
        margin = max(0.5, 0.04 * (high - low))
        axis.set_xlim(low - margin, high + margin)
    axis.set_xlabel("optimizer step")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    axis.grid(alpha=0.3)


def plot_budget_by_pass_rate(log_history: list[dict], path: str) -> bool:
    bins = sorted(
        {key[len(BUDGET_BIN_PREFIX) :] for r in log_history for key in r if key.startswith(BUDGET_BIN_PREFIX)},
        key=_bin_order,
    )
    if not bins:
        return False
    figure, axis = plt.subplots(figsize=(8.5, 4))
    for name in bins:
        steps, values = series(log_history, BUDGET_BIN_PREFIX + name)
        if name in PASS_RATE_BIN_NAMES:
            # Harder bins are drawn wider and first, and each has its own marker and line style, so a bin that
            # coincides with another (say 0.8 to under 1 and p = 1, both at B_low) still shows as a rim around it.
            order = _bin_order(name)
            size = {"linewidth": 2.6 - 0.3 * order, "markersize": 7.0 - 0.5 * order}
            style = {"marker": BIN_MARKERS[order], "linestyle": BIN_LINESTYLES[order], **size}
        else:
            style = {"marker": "x", "linestyle": ":"}
        axis.plot(steps, values, color=bin_color(name), label=bin_label(name), **style)
        _label_few_points(axis, steps, values, bin_color(name))
    steps, values = series(log_history, "budget/mean")
    axis.plot(steps, values, linestyle="--", linewidth=1, color="black", label="mean over all prompts")
    axis.set(
        ylabel="rollouts per prompt (mean over the bin)",
        title="Rollouts per prompt by pass rate p (its success rate when last seen)",
    )
    _step_axis(axis)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _save(figure, path)
    return True


def _overlaid(axis, log_history: list[dict], under: tuple[str, str], over: tuple[str, str], color) -> None:
    """Two series that can coincide (F_t and F_bar_t with window 1): a wide translucent band under a thin line."""
    steps, values = series(log_history, under[0])
    axis.plot(steps, values, color=color, linewidth=5, alpha=0.3, marker="o", markersize=9, label=under[1])
    steps, values = series(log_history, over[0])
    axis.plot(steps, values, color=color, linewidth=1.2, linestyle="--", marker=".", label=over[1])
    _label_few_points(axis, steps, values, color)


def plot_capability(log_history: list[dict], path: str) -> bool:
    """The capability state: Beta(alpha_t, beta_t) when the allocator logs it (CoBA) and the failure rates."""
    panels = [key for key in ("coba/alpha", "coba/failure_rate") if series(log_history, key)[0]]
    if not panels:
        return False
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for axis, key in zip(axes[0], panels, strict=True):
        if key == "coba/alpha":
            for name, color, marker, line, meaning in (
                ("alpha", "tab:blue", "o", "-", "large: the peak on easy prompts"),
                ("beta", "tab:orange", "s", "--", "large: the peak on hard prompts"),
            ):
                steps, values = series(log_history, f"coba/{name}")
                label = f"{name}_t ({meaning})"
                axis.plot(steps, values, marker=marker, linestyle=line, color=color, label=label)
                _label_few_points(axis, steps, values, color)
            axis.set(ylabel="Beta parameter (no unit)", title="Value density Beta(alpha_t, beta_t)")
        else:
            under = ("coba/failure_rate_smoothed", "F_bar_t: averaged over the last coba_window rounds")
            over = ("coba/failure_rate", "F_t: share of failed rollouts in the round (mean over prompts)")
            _overlaid(axis, log_history, under, over, "tab:red")
            axis.set(ylabel="failure rate (1 - mean pass rate)", ylim=(0, 1), title="Global failure rate")
        _step_axis(axis)
        axis.legend(fontsize=8)
    _save(figure, path)
    return True


def plot_reward_accuracy(log_history: list[dict], path: str) -> bool:
    steps, rewards = series(log_history, "reward")
    accuracy_steps, accuracy = series(log_history, "heldout_accuracy")
    if not steps and not accuracy_steps:
        return False
    figure, axis = plt.subplots(figsize=(7, 4))
    if steps:
        axis.plot(
            steps, rewards, marker=".", linestyle="--", color="tab:blue", label="training reward (mean over the round)"
        )
        _label_few_points(axis, steps, rewards, "tab:blue")
    if accuracy_steps:
        label = "held-out accuracy (greedy answers)"
        axis.plot(accuracy_steps, accuracy, marker="s", linewidth=2, color="tab:green", label=label)
        _label_few_points(axis, accuracy_steps, accuracy, "tab:green")
    if all(0.0 <= value <= 1.0 for value in rewards + accuracy):
        axis.set_ylim(0, 1)
    axis.set(ylabel="reward / accuracy (fraction correct)", title="Reward and accuracy")
    _step_axis(axis)
    axis.legend(fontsize=8)
    _save(figure, path)
    return True


def plot_spending(log_history: list[dict], path: str) -> bool:
    """Per round: completions generated (every phase and refill) beside rows trained and rows with spread."""
    steps, generated = series(log_history, "coba/rollouts_generated")
    if not steps:
        return False
    figure, axis = plt.subplots(figsize=(7, 4))
    lines = [
        ("coba/rollouts_generated", "completions generated (every phase and refill)", "tab:red", "o", "-"),
        ("coba/rows_trained", "rows trained", "tab:blue", "s", "--"),
        ("coba/rows_with_spread", "rows trained from groups with spread", "tab:green", "^", ":"),
    ]
    if series(log_history, "coba/rows_trained") == (steps, generated):  # one line would hide the other: one label
        lines[:2] = [("coba/rollouts_generated", "completions generated = rows trained", "tab:red", "o", "-")]
    for key, label, color, marker, line in lines:
        steps, values = series(log_history, key)
        axis.plot(steps, values, marker=marker, linestyle=line, color=color, label=label)
        _label_few_points(axis, steps, values, color)
    axis.set_ylim(bottom=0)
    axis.set(ylabel="completions per round", title="Completions generated and trained per round")
    _step_axis(axis)
    axis.legend(fontsize=8)
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
    "spending.png": plot_spending,
}


def plot_run(output_dir: str, log_history: list[dict] | None = None) -> list[str]:
    """Write every plot whose metrics the run logged into ``output_dir`` (from its log history, read there unless
    given); returns the written paths."""
    log_history = load_log_history(output_dir) if log_history is None else log_history
    written = []
    for name, plot in PLOTS.items():
        path = os.path.join(output_dir, name)
        if plot(log_history, path):
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Plot a CoBA-RL run's budget allocation, capability, reward and spending."
    )
    parser.add_argument("output_dir", help="Training output_dir (holds trainer_state.json or checkpoint-*/).")
    output_dir = parser.parse_args(argv).output_dir
    try:
        log_history = load_log_history(output_dir)
    except ValueError as error:  # no run there: one line, exit status 2, as argparse's own errors
        from coba_trl.cli import fail

        fail(str(error), parser.prog)
    for path in plot_run(output_dir, log_history):
        print(path)


if __name__ == "__main__":
    main()
