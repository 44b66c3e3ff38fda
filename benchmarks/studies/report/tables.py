"""The tables of a study's report under the `"seeds"` analysis (studies 1 and 2): summary, pre-registered sign rule,
paired differences, conversion of the training prompts, and where the budget went by difficulty and pass rate."""

from __future__ import annotations

import numpy as np

UNIFORM_ARMS = ("grpo", "grpo_2x", "grpo_drop")


PASS_RATE_EDGES = (0.0, 0.05, 0.2, 0.4, 0.6, 0.8, 1.0)


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


def summary_rows(runs: dict, protocol: dict) -> list[str]:
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


def conversion_rows(runs: dict, before: dict) -> list[str]:
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


def rollout_share_rows(runs: dict, protocol: dict) -> list[str]:
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


def equal_rollout_rows(runs: dict) -> list[str]:
    """Accuracy of every arm at each rollout count the base arms evaluated (grpo_2x reaches them twice as fast)."""
    base = next(iter(runs.values()))
    marks, _ = curve(base)
    rows = ["| arm | " + " | ".join(str(int(x)) for x in marks) + " |", "|---|" + "---|" * len(marks)]
    for arm, arm_runs in runs.items():
        xs, accuracies = curve(arm_runs)
        lookup = dict(zip(xs.tolist(), accuracies.mean(axis=0).tolist(), strict=True))
        rows.append(f"| `{arm}` | " + " | ".join(f"{lookup[x]:.3f}" if x in lookup else "" for x in marks) + " |")
    return rows


def budget_rows(runs: dict, protocol: dict, before: dict, num_levels: int) -> list[str]:
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
            capability = [epoch_mean(values, start, epoch_rounds) for values in (failure, alpha)]
            rows.append(f"| `{arm}` | {epoch} | {cells} | {peak} | {reward:.3f} | " + " | ".join(capability) + " |")
    return rows


def epoch_mean(series: list[np.ndarray], start: int, length: int) -> str:
    """Mean over seeds of a per-round metric within one epoch ("" when the arm does not log it)."""
    if not all(values.size > start for values in series):
        return ""
    return f"{np.mean([values[start : start + length].mean() for values in series]):.2f}"


def _pooled_rate(round_record: list) -> list:
    """The plain pooled pass rate S_i / N_i of each prompt of a round (the allocator's p_i in older records)."""
    return round_record[4] if len(round_record) > 4 else round_record[3]


def epoch_rounds(arm_runs: list[dict], start: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Pooled pass rates (NaN = unseen) and group sizes of rounds [start, start + length) of every seed."""
    rounds = [rnd for run in arm_runs for rnd in run["rounds"][start : start + length]]
    rates = np.array([np.nan if p is None else p for rnd in rounds for p in _pooled_rate(rnd)], dtype=float)
    return rates, np.array([size for rnd in rounds for size in rnd[2]], dtype=float)


def bin_means(arm_runs: list[dict], start: int, length: int) -> np.ndarray:
    """Mean group size per pooled pass-rate bin over rounds [start, start + length) of every seed (NaN: empty bin)."""
    rates, sizes = epoch_rounds(arm_runs, start, length)
    bins = np.digitize(rates, PASS_RATE_EDGES[1:-1])  # NaN (unseen) lands past the last bin
    return np.array(
        [sizes[bins == b].mean() if (bins == b).any() else np.nan for b in range(len(PASS_RATE_EDGES) - 1)]
    )


def shown_epochs(num_epochs: int) -> list[int]:
    """Epochs (1-based) of the budget tables and plots: every one after the first up to 8, else 2 to 6 and every 4th."""
    if num_epochs <= 8:
        return list(range(2, num_epochs + 1))
    return sorted({*range(2, 7), *range(10, num_epochs + 1, 4), num_epochs})


def bin_rows(runs: dict, protocol: dict) -> list[str]:
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
            rates, sizes = epoch_rounds(arm_runs, start, epoch_rounds)
            seen = ~np.isnan(rates)
            cells = " | ".join("" if np.isnan(m) else f"{m:.1f}" for m in means)
            peak = names[int(np.nanargmax(means))] if np.isfinite(means).any() else ""
            weighted = np.average(rates[seen], weights=sizes[seen]) if seen.any() else np.nan
            rows.append(
                f"| `{arm}` | {epoch} | {epoch_mean(failure, start, epoch_rounds)} | {cells} | "
                f"{peak} | {weighted:.3f} | {np.mean(rates[seen]) if seen.any() else np.nan:.3f} |"
            )
    return rows


def paired_rows(runs: dict, baseline: str = "grpo") -> list[str]:
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


def regime_rows(runs: dict, protocol: dict) -> list[str]:
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


def decision_rows(runs: dict, comparisons) -> list[str]:
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
