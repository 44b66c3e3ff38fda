"""Aggregate the raw runs of `compare_allocators.py` into the tables and plots of docs/results.md.

    python benchmarks/compare_allocators.py --report_only

Reads `<output_dir>/protocol.json`, `warm_start/before_rl.json` and `runs/<arm>_seed<k>.json`; rewrites only the
part of docs/results.md between the `results:begin` / `results:end` markers (the protocol and the conclusions
around it are written by hand) and the PNGs `docs/compare_*.png`.
"""

from __future__ import annotations

import glob
import json
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
ARM_ORDER = ("grpo", "knapsack", "coba", "coba_paper", "coba_explore_first", "grpo_2x")
COLORS = {
    "grpo": "tab:gray",
    "knapsack": "tab:orange",
    "coba": "tab:blue",
    "coba_paper": "tab:green",
    "coba_explore_first": "tab:purple",
    "grpo_2x": "black",
}


def load_runs(output_dir: str) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "runs", "*.json"))):
        with open(path) as handle:
            run = json.load(handle)
        runs.setdefault(run["arm"], []).append(run)
    return {arm: sorted(runs[arm], key=lambda r: r["seed"]) for arm in ARM_ORDER if arm in runs}


def curve(runs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Rollouts of each evaluation point and the accuracies there, one row per seed (points all seeds share)."""
    points = [{rollouts: accuracy for _, rollouts, accuracy in run["accuracy_curve"]} for run in runs]
    shared = sorted(set.intersection(*(set(p) for p in points)))
    return np.array(shared), np.array([[p[x] for x in shared] for p in points])


def round_series(run: dict, key: str) -> np.ndarray:
    """One value per generation round (the records where the round was made carry the metric)."""
    return np.array([record[key] for record in run["log_history"] if key in record and "budget/mean" in record])


def budget_by_level(run: dict, levels: list[int], num_levels: int) -> np.ndarray:
    """Mean group size per difficulty level in every round: shape (rounds, levels)."""
    table = np.full((len(run["rounds"]), num_levels), np.nan)
    for index, (_, prompt_ids, sizes, *_) in enumerate(run["rounds"]):
        prompt_levels = np.array([levels[int(i)] for i in prompt_ids])
        sizes = np.array(sizes, dtype=float)
        for level in range(num_levels):
            if (prompt_levels == level).any():
                table[index, level] = sizes[prompt_levels == level].mean()
    return table


def conversion(before: list[float], after: list[float]) -> dict[str, float]:
    """Shares of training prompts by solved state before and after RL (solved = every sample correct)."""
    before, after = np.array(before), np.array(after)
    not_solved, unsolved = before < 1.0, before == 0.0
    return {
        "to_solved": float((after[not_solved] == 1.0).mean()) if not_solved.any() else np.nan,
        "unsolved_to_any": float((after[unsolved] > 0.0).mean()) if unsolved.any() else np.nan,
        "solved_after": float((after == 1.0).mean()),
        "majority_after": float((after[before < 0.5] >= 0.5).mean()) if (before < 0.5).any() else np.nan,
        "mean_after": float(after.mean()),
    }


def greedy_conversion(before: list[float], after: list[float]) -> dict[str, float]:
    """Training prompts answered right by greedy decoding: wrong -> right, right -> wrong, and right after."""
    before, after = np.array(before), np.array(after)
    return {
        "gained": float(after[before == 0].mean()) if (before == 0).any() else np.nan,
        "lost": float((after[before == 1] == 0).mean()) if (before == 1).any() else np.nan,
        "right_after": float(after.mean()),
    }


def _mean_std(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f} +- {values.std(ddof=1) if values.size > 1 else 0.0:.3f}"


def _paired(runs: dict, arm: str, baseline: str = "grpo") -> str:
    """Per-seed difference of final accuracy against the baseline arm (same seed = same prompt order)."""
    if arm == baseline or baseline not in runs:
        return ""
    reference = {r["seed"]: r["final_accuracy"] for r in runs[baseline]}
    return ", ".join(f"{r['final_accuracy'] - reference[r['seed']]:+.3f}" for r in runs[arm] if r["seed"] in reference)


def _summary_rows(runs: dict, protocol: dict) -> list[str]:
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    rows = [
        "| arm | seeds | rollouts | final greedy accuracy (mean +- sd) | per seed | vs `grpo`, per seed | "
        "mean over the curve | sampled accuracy avg@16 | zero-variance groups (all rounds / after epoch 1) | "
        "wall s (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, arm_runs in runs.items():
        _, accuracies = curve(arm_runs)
        zero = [round_series(r, "frac_reward_zero_std") for r in arm_runs]
        later = [z[epoch_rounds:].mean() for z in zero if z.size > epoch_rounds]
        per_seed = ", ".join(f"{r['final_accuracy']:.3f}" for r in arm_runs)
        rows.append(
            f"| `{arm}` | {len(arm_runs)} | {arm_runs[0]['rollouts']} | "
            f"{_mean_std([r['final_accuracy'] for r in arm_runs])} | {per_seed} | {_paired(runs, arm)} | "
            f"{_mean_std(accuracies.mean(axis=1))} | "
            f"{_mean_std([np.mean(r['heldout_sampled_after']) for r in arm_runs])} | "
            f"{np.mean([z.mean() for z in zero]):.3f} / {np.mean(later) if later else np.nan:.3f} | "
            f"{np.mean([r['wall_time_s'] for r in arm_runs]):.0f} |"
        )
    return rows


def _conversion_rows(runs: dict, before: dict) -> list[str]:
    rows = [
        "| arm | sampled: not solved -> solved (16/16) | sampled: unsolved (0/16) -> any success | "
        "sampled: p < 0.5 -> p >= 0.5 | mean sampled pass rate after | greedy: wrong -> right | "
        "greedy: right -> wrong | greedy right after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, arm_runs in runs.items():
        conv = [conversion(before["train_pass_rates"], r["train_pass_rates_after"]) for r in arm_runs]
        greedy = [greedy_conversion(before["train_greedy_correct"], r["train_greedy_correct_after"]) for r in arm_runs]
        cells = [_mean_std([c[key] for c in conv]) for key in ("to_solved", "unsolved_to_any", "majority_after")]
        cells += [_mean_std([c["mean_after"] for c in conv])]
        cells += [_mean_std([g[key] for g in greedy]) for key in ("gained", "lost", "right_after")]
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows


PASS_RATE_EDGES = (0.0, 0.05, 0.2, 0.4, 0.6, 0.8, 1.0)


def _rollout_share_rows(runs: dict, protocol: dict) -> list[str]:
    """Share of the rollouts after epoch 1 by the historical pass rate p_i the allocation saw (seed mean)."""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    names = [f"[{low}, {high})" for low, high in zip(PASS_RATE_EDGES[:-2], PASS_RATE_EDGES[1:-1], strict=True)]
    rows = ["| arm | " + " | ".join(names) + " | [0.8, 1.0] |", "|---|" + "---|" * len(PASS_RATE_EDGES[1:])]
    for arm, arm_runs in runs.items():
        shares = []
        for run in arm_runs:
            rates = np.array([np.nan if p is None else p for rnd in run["rounds"][epoch_rounds:] for p in rnd[3]])
            sizes = np.array([size for rnd in run["rounds"][epoch_rounds:] for size in rnd[2]], dtype=float)
            bins = np.digitize(rates, PASS_RATE_EDGES[1:-1])  # NaN (unseen) lands past the last bin
            if sizes.sum() > 0:  # a run shorter than one epoch has no rounds after epoch 1
                shares.append([sizes[bins == b].sum() / sizes.sum() for b in range(len(PASS_RATE_EDGES) - 1)])
        cells = [f"{v:.2f}" for v in np.mean(shares, axis=0)] if shares else ["n/a"] * (len(PASS_RATE_EDGES) - 1)
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows


def _equal_rollout_rows(runs: dict) -> list[str]:
    """Accuracy of every arm at each rollout count the base arms evaluated (grpo_2x reaches them twice as fast)."""
    base = next(iter(runs.values()))
    marks, _ = curve(base)
    rows = ["| arm | " + " | ".join(str(int(x)) for x in marks) + " |", "|---|" + "---|" * len(marks)]
    for arm, arm_runs in runs.items():
        xs, accuracies = curve(arm_runs)
        lookup = dict(zip(xs.tolist(), accuracies.mean(axis=0).tolist(), strict=True))
        rows.append(f"| `{arm}` | " + " | ".join(f"{lookup[x]:.3f}" if x in lookup else "" for x in marks) + " |")
    return rows


def _budget_rows(runs: dict, protocol: dict, before: dict, num_levels: int) -> list[str]:
    """Mean group size per level in each epoch (seed mean) and the level with the most budget."""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    header = " | ".join(f"L{level} ({level + 3} ops)" for level in range(num_levels))
    rows = [
        f"| arm | epoch | {header} | peak level | train reward | F_t | alpha_t |",
        "|---|---|" + "---|" * (num_levels + 4),
    ]
    for arm, arm_runs in runs.items():
        tables = np.array([budget_by_level(r, before["train_levels"], num_levels) for r in arm_runs])
        rewards = np.array([round_series(r, "reward") for r in arm_runs])
        failure = [round_series(r, "coba/failure_rate") for r in arm_runs]
        alpha = [round_series(r, "coba/alpha") for r in arm_runs]
        for start in range(0, tables.shape[1], epoch_rounds):
            block = np.nanmean(tables[:, start : start + epoch_rounds], axis=(0, 1))
            reward = rewards[:, start : start + epoch_rounds].mean()
            cells = " | ".join(f"{value:.1f}" for value in block)
            peak = f"L{int(np.nanargmax(block))}" if np.nanmax(block) - np.nanmin(block) > 0.05 else "flat"
            capability = [_epoch_mean(values, start, epoch_rounds) for values in (failure, alpha)]
            rows.append(
                f"| `{arm}` | {start // epoch_rounds + 1} | {cells} | {peak} | {reward:.3f} | "
                + " | ".join(capability)
                + " |"
            )
    return rows


def _epoch_mean(series: list[np.ndarray], start: int, length: int) -> str:
    """Mean over seeds of a per-round metric within one epoch ("" when the arm does not log it)."""
    if not all(values.size > start for values in series):
        return ""
    return f"{np.mean([values[start : start + length].mean() for values in series]):.2f}"


def plot_accuracy(runs: dict, path: str) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for arm, arm_runs in runs.items():
        xs, accuracies = curve(arm_runs)
        axis.plot(xs, accuracies.mean(axis=0), marker=".", color=COLORS[arm], label=f"{arm} ({len(arm_runs)} seeds)")
        axis.fill_between(xs, accuracies.min(axis=0), accuracies.max(axis=0), color=COLORS[arm], alpha=0.12)
    axis.set(
        xlabel="rollouts consumed", ylabel="held-out greedy accuracy", title="Accuracy vs rollouts (band: min-max)"
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def plot_budget(runs: dict, protocol: dict, path: str) -> None:
    """Mean group size by historical pass-rate bin, one line per epoch: does the peak move as the model improves?"""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    arms = [arm for arm in runs if arm not in ("grpo", "grpo_2x")]
    figure, axes = plt.subplots(1, len(arms), figsize=(3.2 * len(arms), 3.3), sharey=True, squeeze=False)
    centers = [(low + high) / 2 for low, high in zip(PASS_RATE_EDGES[:-1], PASS_RATE_EDGES[1:], strict=True)]
    epochs = range(1, len(runs[arms[0]][0]["rounds"]) // epoch_rounds) if arms else ()
    colors = plt.get_cmap("plasma")
    for axis, arm in zip(axes[0], arms, strict=True):
        for epoch in epochs:
            rounds = [
                rnd for run in runs[arm] for rnd in run["rounds"][epoch * epoch_rounds : (epoch + 1) * epoch_rounds]
            ]
            rates = np.array([np.nan if p is None else p for rnd in rounds for p in rnd[3]])
            sizes = np.array([size for rnd in rounds for size in rnd[2]], dtype=float)
            bins = np.digitize(rates, PASS_RATE_EDGES[1:-1])
            means = [sizes[bins == b].mean() if (bins == b).any() else np.nan for b in range(len(centers))]
            color = colors(epoch / (len(epochs) + 1))
            axis.plot(centers, means, marker="o", color=color, label=f"epoch {epoch + 1}")
        axis.set(title=arm, xlabel="historical pass rate p_i")
        axis.grid(alpha=0.3)
    if arms:
        axes[0][0].set_ylabel("mean rollouts per prompt")
    if arms and len(epochs):  # no epoch after the first (a short run): nothing drawn, no legend
        axes[0][0].legend(fontsize=7)
    _save(figure, path)


def plot_zero_std(runs: dict, path: str) -> None:
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for arm, arm_runs in runs.items():
        values = np.mean([round_series(r, "frac_reward_zero_std") for r in arm_runs], axis=0)
        axis.plot(values, color=COLORS[arm], label=arm)
    axis.set(xlabel="round", ylabel="share of groups", title="Zero-variance groups (all correct or all wrong)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def _save(figure, path: str) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def write_report(output_dir: str, docs_dir: str = "docs") -> list[str]:
    """Rewrite the generated section of `docs_dir/results.md` and its plots; returns the written paths."""
    with open(os.path.join(output_dir, "protocol.json")) as handle:
        protocol = json.load(handle)["protocol"]
    with open(os.path.join(output_dir, "warm_start", "before_rl.json")) as handle:
        before = json.load(handle)
    runs = load_runs(output_dir)
    if not runs:
        raise ValueError(f"No runs in {output_dir}/runs: run benchmarks/compare_allocators.py first.")
    num_levels = max(before["train_levels"]) + 1
    os.makedirs(docs_dir, exist_ok=True)
    plots = {
        "compare_accuracy.png": lambda p: plot_accuracy(runs, p),
        "compare_budget_by_pass_rate.png": lambda p: plot_budget(runs, protocol, p),
        "compare_zero_std.png": lambda p: plot_zero_std(runs, p),
    }
    written = []
    for name, plot in plots.items():
        plot(os.path.join(docs_dir, name))
        written.append(os.path.join(docs_dir, name))
    before_solved = np.array(before["train_pass_rates"])
    lines = [
        BEGIN,
        "*Generated by `python benchmarks/compare_allocators.py --report_only` from the raw runs.*",
        "",
        f"Warm-start model (every arm's start): held-out accuracy {before['heldout']['accuracy']:.3f}; training "
        f"prompts unsolved {np.mean(before_solved == 0):.3f}, partly solved "
        f"{np.mean((before_solved > 0) & (before_solved < 1)):.3f}, solved {np.mean(before_solved == 1):.3f} "
        f"({protocol['conversion_samples']} samples each); training prompts right by greedy decoding "
        f"{np.mean(before['train_greedy_correct']):.3f}; held-out sampled accuracy (avg@"
        f"{protocol['conversion_samples']}, temperature 1.0) {np.mean(before['heldout_sampled']):.3f}.",
        "",
        "### Summary per arm",
        *_summary_rows(runs, protocol),
        "",
        "### Held-out accuracy at equal rollouts (seed mean)",
        *_equal_rollout_rows(runs),
        "",
        "![accuracy vs rollouts](compare_accuracy.png)",
        "",
        "### Conversion of the 256 training prompts (before RL = the warm-start model; seed mean +- sd)",
        *_conversion_rows(runs, before),
        "",
        "### Where the rollouts went after epoch 1: share by the historical pass rate p_i the allocator saw",
        *_rollout_share_rows(runs, protocol),
        "",
        "### Budget by difficulty level per epoch (seed mean of the mean group size)",
        *_budget_rows(runs, protocol, before, num_levels),
        "",
        "![budget by pass rate](compare_budget_by_pass_rate.png)",
        "",
        "![zero-variance groups](compare_zero_std.png)",
        END,
    ]
    path = os.path.join(docs_dir, "results.md")
    text = ""
    if os.path.exists(path):
        with open(path) as handle:
            text = handle.read()
    generated = "\n".join(lines)
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + generated + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n## Results\n\n" + generated + "\n"
    with open(path, "w") as handle:
        handle.write(text)
    return [path, *written]
