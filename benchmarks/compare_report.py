"""Aggregate the raw runs of `compare_allocators.py` into the tables and plots of docs/results.md.

    python benchmarks/compare_allocators.py --report_only

Reads `<output_dir>/protocol.json`, `warm_start/before_rl.json` and `runs/<arm>_seed<k>.json`; rewrites only the
part of docs/results.md between the `<name>:begin` / `<name>:end` markers of its study (the protocol and the
conclusions around it are written by hand) and the study's PNGs (`docs/compare_*.png` for the first study, named
"results"; `docs/<name>_*.png` for the others).
"""

from __future__ import annotations

import glob
import json
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
UNIFORM_ARMS = ("grpo", "grpo_2x", "grpo_drop")
COMPARISONS = (  # (arm, baseline); pairs of arms a study lacks are skipped
    *((arm, "grpo") for arm in ("knapsack", "coba", "coba_paper", "coba_explore_first", "coba_prior2", "coba_blow4")),
    *((arm, "knapsack") for arm in ("coba", "coba_paper", "coba_prior2", "coba_blow4")),
    *((arm, "coba") for arm in ("coba_paper", "coba_explore_first", "coba_prior2", "coba_blow4")),
    # study 3: two phases against one, rescue against plain two-phase, each against GRPO, DAPO's drop against GRPO
    ("coba_2phase", "coba"),
    ("coba_rescue", "coba_2phase"),
    ("coba_rescue", "coba"),
    *((arm, "grpo") for arm in ("coba_2phase", "coba_rescue", "grpo_drop")),
)


def load_runs(output_dir: str, arm_order) -> dict[str, list[dict]]:
    """Runs by arm, in the protocol's arm order, each arm's runs by seed."""
    runs: dict[str, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "runs", "*.json"))):
        with open(path) as handle:
            run = json.load(handle)
        runs.setdefault(run["arm"], []).append(run)
    return {arm: sorted(runs[arm], key=lambda r: r["seed"]) for arm in arm_order if arm in runs}


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
        for epoch in [1, *shown_epochs(tables.shape[1] // epoch_rounds)]:
            start = (epoch - 1) * epoch_rounds
            block = np.nanmean(tables[:, start : start + epoch_rounds], axis=(0, 1))
            reward = rewards[:, start : start + epoch_rounds].mean()
            cells = " | ".join(f"{value:.1f}" for value in block)
            peak = f"L{int(np.nanargmax(block))}" if np.nanmax(block) - np.nanmin(block) > 0.05 else "flat"
            capability = [_epoch_mean(values, start, epoch_rounds) for values in (failure, alpha)]
            rows.append(f"| `{arm}` | {epoch} | {cells} | {peak} | {reward:.3f} | " + " | ".join(capability) + " |")
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
        color = COLORS.get(arm)
        axis.plot(xs, accuracies.mean(axis=0), marker=".", color=color, label=f"{arm} ({len(arm_runs)} seeds)")
        axis.fill_between(xs, accuracies.min(axis=0), accuracies.max(axis=0), color=color, alpha=0.12)
    axis.set(
        xlabel="rollouts consumed", ylabel="held-out greedy accuracy", title="Accuracy vs rollouts (band: min-max)"
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def _pooled_rate(round_record: list) -> list:
    """The plain pooled pass rate S_i / N_i of each prompt of a round (the allocator's p_i in older records)."""
    return round_record[4] if len(round_record) > 4 else round_record[3]


def _epoch_rounds(arm_runs: list[dict], start: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Pooled pass rates (NaN = unseen) and group sizes of rounds [start, start + length) of every seed."""
    rounds = [rnd for run in arm_runs for rnd in run["rounds"][start : start + length]]
    rates = np.array([np.nan if p is None else p for rnd in rounds for p in _pooled_rate(rnd)], dtype=float)
    return rates, np.array([size for rnd in rounds for size in rnd[2]], dtype=float)


def bin_means(arm_runs: list[dict], start: int, length: int) -> np.ndarray:
    """Mean group size per pooled pass-rate bin over rounds [start, start + length) of every seed (NaN: empty bin)."""
    rates, sizes = _epoch_rounds(arm_runs, start, length)
    bins = np.digitize(rates, PASS_RATE_EDGES[1:-1])  # NaN (unseen) lands past the last bin
    return np.array(
        [sizes[bins == b].mean() if (bins == b).any() else np.nan for b in range(len(PASS_RATE_EDGES) - 1)]
    )


def shown_epochs(num_epochs: int) -> list[int]:
    """Epochs (1-based) of the budget tables and plots: every one after the first up to 8, else 2 to 6 and every 4th."""
    if num_epochs <= 8:
        return list(range(2, num_epochs + 1))
    return sorted({*range(2, 7), *range(10, num_epochs + 1, 4), num_epochs})


def _bin_rows(runs: dict, protocol: dict) -> list[str]:
    """Mean group size by pooled pass-rate bin in each epoch after the first, with F_t and the peak bin.

    "p per rollout" is the rollout-weighted mean of the prompts' pooled pass rates, "p per prompt" the plain mean: the
    first below the second means the budget leans to hard prompts, above it to easy ones.
    """
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    names = [f"[{low}, {high})" for low, high in zip(PASS_RATE_EDGES[:-2], PASS_RATE_EDGES[1:-1], strict=True)]
    names.append(f"[{PASS_RATE_EDGES[-2]}, 1.0]")
    rows = [
        "| arm | epoch | F_t (epoch mean) | " + " | ".join(names) + " | peak bin | p per rollout | p per prompt |",
        "|---|---|---|" + "---|" * (len(names) + 3),
    ]
    for arm, arm_runs in runs.items():
        if arm in UNIFORM_ARMS:
            continue
        failure = [round_series(r, "coba/failure_rate") for r in arm_runs]
        for epoch in shown_epochs(len(arm_runs[0]["rounds"]) // epoch_rounds):
            start = (epoch - 1) * epoch_rounds
            means = bin_means(arm_runs, start, epoch_rounds)
            rates, sizes = _epoch_rounds(arm_runs, start, epoch_rounds)
            seen = ~np.isnan(rates)
            cells = " | ".join("" if np.isnan(m) else f"{m:.1f}" for m in means)
            peak = names[int(np.nanargmax(means))] if np.isfinite(means).any() else ""
            weighted = np.average(rates[seen], weights=sizes[seen]) if seen.any() else np.nan
            rows.append(
                f"| `{arm}` | {epoch} | {_epoch_mean(failure, start, epoch_rounds)} | {cells} | "
                f"{peak} | {weighted:.3f} | {np.mean(rates[seen]) if seen.any() else np.nan:.3f} |"
            )
    return rows


def _paired_rows(runs: dict, baseline: str = "grpo") -> list[str]:
    """Per-seed differences against the baseline (same seed = same prompt order): final greedy, curve mean, avg@16."""
    rows = [
        f"| arm | final greedy - `{baseline}`, per seed | mean [min, max] | seeds ahead | "
        f"mean over the curve - `{baseline}` | sampled avg@16 - `{baseline}` |",
        "|---|---|---|---|---|---|",
    ]
    if baseline not in runs:
        return rows
    reference = {r["seed"]: r for r in runs[baseline]}
    for arm, arm_runs in runs.items():
        pairs = [(r, reference[r["seed"]]) for r in arm_runs if r["seed"] in reference and arm != baseline]
        if not pairs:
            continue
        final = np.array([a["final_accuracy"] - b["final_accuracy"] for a, b in pairs])
        over = np.array([curve([a])[1].mean() - curve([b])[1].mean() for a, b in pairs])
        sampled = np.array(
            [np.mean(a["heldout_sampled_after"]) - np.mean(b["heldout_sampled_after"]) for a, b in pairs]
        )
        rows.append(
            f"| `{arm}` | {', '.join(f'{d:+.3f}' for d in final)} | {final.mean():+.3f} [{final.min():+.3f}, "
            f"{final.max():+.3f}] | {int((final > 0).sum())} of {len(final)} | {over.mean():+.3f} "
            f"[{over.min():+.3f}, {over.max():+.3f}] | {sampled.mean():+.3f} [{sampled.min():+.3f}, {sampled.max():+.3f}] |"
        )
    return rows


def _regime_rows(runs: dict, protocol: dict) -> list[str]:
    """The regime gate per arm and seed: F_t of round 1, mean F_t over epoch 1 and over the last epoch."""
    epoch_rounds = protocol["num_train_prompts"] // protocol["prompts_per_round"]
    rows = [
        "| arm | seed | F_t round 1 | F_t epoch 1 | F_t last epoch | start > 0.5 and end <= 0.35 |",
        "|---|---|---|---|---|---|",
    ]
    for arm, arm_runs in runs.items():
        for run in arm_runs:
            failure = round_series(run, "coba/failure_rate")
            if failure.size < 2 * epoch_rounds:
                continue
            first, epoch, last = failure[0], failure[:epoch_rounds].mean(), failure[-epoch_rounds:].mean()
            met = "yes" if min(first, epoch) > 0.5 and last <= 0.35 else "no"
            rows.append(f"| `{arm}` | {run['seed']} | {first:.2f} | {epoch:.2f} | {last:.2f} | {met} |")
    return rows


def verdict(differences: np.ndarray) -> str:
    """The pre-registered rule: ahead on average and on all but at most one seed of 4 or more (all of 3 or fewer)."""
    needed = len(differences) - 1 if len(differences) >= 4 else len(differences)
    if differences.mean() > 0 and (differences > 0).sum() >= needed:
        return "beats"
    if differences.mean() < 0 and (differences < 0).sum() >= needed:
        return "loses to"
    return "no difference shown against"


def _decision_rows(runs: dict, comparisons) -> list[str]:
    """Each pre-registered comparison of final greedy accuracy, paired by seed, and the rule's verdict."""
    rows = ["| comparison | paired differences (final greedy) | mean | verdict |", "|---|---|---|---|"]
    for arm, baseline in comparisons:
        if arm not in runs or baseline not in runs:
            continue
        reference = {r["seed"]: r["final_accuracy"] for r in runs[baseline]}
        diffs = np.array([r["final_accuracy"] - reference[r["seed"]] for r in runs[arm] if r["seed"] in reference])
        if diffs.size:
            rows.append(
                f"| `{arm}` vs `{baseline}` | {', '.join(f'{d:+.3f}' for d in diffs)} | {diffs.mean():+.3f} | "
                f"`{arm}` {verdict(diffs)} `{baseline}` |"
            )
    return rows


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
            label = f"epoch {epoch}, F {_epoch_mean(failure, start, epoch_rounds)}"
            axis.plot(centers, means, marker="o", color=colors(index / (len(epochs) + 1)), label=label)
        axis.set(title=arm, xlabel="pooled pass rate S_i / N_i")
        axis.grid(alpha=0.3)
        if len(epochs):  # no epoch after the first (a short run): nothing drawn, no legend
            axis.legend(fontsize=6)
    if arms:
        axes[0][0].set_ylabel("mean rollouts per prompt")
    _save(figure, path)


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
    _save(figure, path)


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
    _save(figure, path)


def plot_zero_std(runs: dict, path: str) -> None:
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for arm, arm_runs in runs.items():
        values = np.mean([round_series(r, "frac_reward_zero_std") for r in arm_runs], axis=0)
        axis.plot(values, color=COLORS.get(arm), label=arm)
    axis.set(xlabel="round", ylabel="share of groups", title="Zero-variance groups (all correct or all wrong)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def _save(figure, path: str) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


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
    _save(figure, path)


def plot_round_time(runs: dict, protocol: dict, path: str) -> None:
    """Training seconds per round (seed median), one line per arm."""
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for arm, arm_runs in runs.items():
        values = np.array([round_seconds(r, protocol["steps_per_generation"]) for r in arm_runs])
        axis.plot(np.median(values, axis=0), color=COLORS.get(arm), label=arm, linewidth=0.9)
    axis.set(xlabel="generation round", ylabel="seconds", title="Training seconds per round (seed median)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


EXTRA_SECTIONS = ("wall_time", "phases")


def _extra_lines(extras, runs: dict, protocol: dict, prefix: str, docs_dir: str, written: list) -> list[str]:
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


def write_report(output_dir: str, docs_dir: str = "docs", name: str = "results", extras=()) -> list[str]:
    """Rewrite the generated section `name` of `docs_dir/results.md` and its plots; returns the written paths.

    `extras` names optional sections (`EXTRA_SECTIONS`); without them the report is exactly the earlier studies'.
    """
    with open(os.path.join(output_dir, "protocol.json")) as handle:
        recorded = json.load(handle)
    protocol = recorded["protocol"]
    with open(os.path.join(output_dir, "warm_start", "before_rl.json")) as handle:
        before = json.load(handle)
    runs = load_runs(output_dir, recorded["arms"])
    if not runs:
        raise ValueError(f"No runs in {output_dir}/runs: run benchmarks/compare_allocators.py first.")
    prefix = "compare" if name == "results" else name
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    script = "compare_allocators.py" if name == "results" else f"compare_{name}.py"
    num_levels = max(before["train_levels"]) + 1
    os.makedirs(docs_dir, exist_ok=True)
    plots = {
        "accuracy": lambda p: plot_accuracy(runs, p),
        "budget_by_pass_rate": lambda p: plot_budget(runs, protocol, p),
        "zero_std": lambda p: plot_zero_std(runs, p),
        "failure_rate": lambda p: plot_failure(runs, p),
        "paired": lambda p: plot_paired(runs, p),
    }
    written = []
    for key, plot in plots.items():
        plot(os.path.join(docs_dir, f"{prefix}_{key}.png"))
        written.append(os.path.join(docs_dir, f"{prefix}_{key}.png"))
    before_solved = np.array(before["train_pass_rates"])
    lines = [
        begin,
        f"*Generated by `python benchmarks/{script} --report_only` from the raw runs.*",
        "",
        f"Warm-start model (every arm's start): held-out accuracy {before['heldout']['accuracy']:.3f}; training "
        f"prompts unsolved {np.mean(before_solved == 0):.3f}, partly solved "
        f"{np.mean((before_solved > 0) & (before_solved < 1)):.3f}, solved {np.mean(before_solved == 1):.3f} "
        f"({protocol['conversion_samples']} samples each); training prompts right by greedy decoding "
        f"{np.mean(before['train_greedy_correct']):.3f}; held-out sampled accuracy (avg@"
        f"{protocol['conversion_samples']}, temperature 1.0) {np.mean(before['heldout_sampled']):.3f}.",
        "",
        "### Regime check (F_t logged by each arm's allocator)",
        *_regime_rows(runs, protocol),
        "",
        "### Pre-registered comparisons (final held-out greedy accuracy, paired by seed)",
        *_decision_rows(runs, COMPARISONS),
        "",
        "### Summary per arm",
        *_summary_rows(runs, protocol),
        "",
        "### Held-out accuracy at equal rollouts (seed mean)",
        *_equal_rollout_rows(runs),
        "",
        f"![accuracy vs rollouts]({prefix}_accuracy.png)",
        "",
        "### Paired differences against `grpo` (same seed: same prompts in the same order, same start)",
        *_paired_rows(runs),
        "",
        f"![paired differences]({prefix}_paired.png)",
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
        "### Budget by pooled pass rate S_i / N_i per epoch (mean group size, seeds pooled) and F_t",
        "",
        "*p per rollout*: rollout-weighted mean of the prompts' S_i / N_i; *p per prompt*: its plain mean (the first "
        "below the second: the budget leans to hard prompts). Epochs after 6 are shown every 4th.",
        "",
        *_bin_rows(runs, protocol),
        "",
        f"![budget by pass rate]({prefix}_budget_by_pass_rate.png)",
        "",
        f"![failure rate]({prefix}_failure_rate.png)",
        "",
        f"![zero-variance groups]({prefix}_zero_std.png)",
    ]
    if extras:
        lines += ["", *_extra_lines(extras, runs, protocol, prefix, docs_dir, written)]
        if lines[-1] == "":
            lines.pop()
    lines.append(end)
    path = os.path.join(docs_dir, "results.md")
    text = ""
    if os.path.exists(path):
        with open(path) as handle:
            text = handle.read()
    generated = "\n".join(lines)
    if begin in text and end in text:
        text = text[: text.index(begin)] + generated + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n## Results\n\n" + generated + "\n"
    with open(path, "w") as handle:
        handle.write(text)
    return [path, *written]
