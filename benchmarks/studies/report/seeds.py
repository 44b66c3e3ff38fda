"""The report of a study with one warm start and RL seeds as units (`Study.analysis == "seeds"`: studies 1 and 2):
the sign rule's comparisons, the tables of `tables.py` and the plots of `plots.py`."""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from studies.declaration import Study
from studies.report.plots import plot_accuracy, plot_budget, plot_failure, plot_paired, plot_zero_std
from studies.report.tables import (
    bin_rows,
    budget_rows,
    conversion_rows,
    decision_rows,
    equal_rollout_rows,
    paired_rows,
    regime_rows,
    rollout_share_rows,
    summary_rows,
)


def load_runs(output_dir: str, arm_order) -> dict[str, list[dict]]:
    """Runs by arm, in the declaration's arm order, each arm's runs by unit (warm-start seed, then RL seed)."""
    runs: dict[str, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "runs", "*.json"))):
        with open(path) as handle:
            run = json.load(handle)
        runs.setdefault(run["arm"], []).append(run)
    order = {arm: runs[arm] for arm in arm_order if arm in runs}
    return {
        arm: sorted(arm_runs, key=lambda r: (r.get("warm_start_seed", 0), r["seed"]))
        for arm, arm_runs in order.items()
    }


def seed_sections(study: Study, recorded: dict, output_dir: str, docs_dir: str) -> tuple[list[str], list[str]]:
    """Studies 1 and 2: one warm start, RL seeds as units, the sign rule; tables and plots under `docs_dir`."""
    protocol = recorded["protocol"]
    with open(os.path.join(output_dir, "warm_start", "before_rl.json")) as handle:
        before = json.load(handle)
    runs = load_runs(output_dir, recorded["arms"])
    if not runs:
        raise ValueError(
            f"No runs in {output_dir}/runs: run `python benchmarks/studies/runner.py {study.name}` first."
        )
    prefix, label = study.plot_prefix, study.label
    num_levels = max(before["train_levels"]) + 1
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
        f"Warm-start model (every arm's start): held-out accuracy {before['heldout']['accuracy']:.3f}; training "
        f"prompts unsolved {np.mean(before_solved == 0):.3f}, partly solved "
        f"{np.mean((before_solved > 0) & (before_solved < 1)):.3f}, solved {np.mean(before_solved == 1):.3f} "
        f"({protocol['conversion_samples']} samples each); training prompts right by greedy decoding "
        f"{np.mean(before['train_greedy_correct']):.3f}; held-out sampled accuracy (avg@"
        f"{protocol['conversion_samples']}, temperature 1.0) {np.mean(before['heldout_sampled']):.3f}.",
        "",
        f"#### {label}: regime check (F_t logged by each arm's allocator)",
        *regime_rows(runs, protocol),
        "",
        f"#### {label}: pre-registered comparisons (final held-out greedy accuracy, paired by seed)",
        *decision_rows(runs, study.comparisons),
        "",
        f"#### {label}: summary per arm",
        *summary_rows(runs, protocol),
        "",
        f"#### {label}: held-out accuracy at equal rollouts (seed mean)",
        *equal_rollout_rows(runs),
        "",
        f"![accuracy vs rollouts]({prefix}_accuracy.png)",
        "",
        f"#### {label}: paired differences against `grpo` (same seed: same prompts in the same order, same start)",
        *paired_rows(runs),
        "",
        f"![paired differences]({prefix}_paired.png)",
        "",
        f"#### {label}: conversion of the 256 training prompts (before RL = the warm-start model; seed mean +- sd)",
        *conversion_rows(runs, before),
        "",
        f"#### {label}: where the rollouts went after epoch 1: share by the historical pass rate p_i the allocator saw",
        *rollout_share_rows(runs, protocol),
        "",
        f"#### {label}: budget by difficulty level per epoch (seed mean of the mean group size)",
        *budget_rows(runs, protocol, before, num_levels),
        "",
        f"#### {label}: budget by pooled pass rate S_i / N_i per epoch (mean group size, seeds pooled) and F_t",
        "",
        "*p per rollout*: rollout-weighted mean of the prompts' S_i / N_i; *p per prompt*: its plain mean (the first "
        "below the second: the budget leans to hard prompts). Epochs after 6 are shown every 4th.",
        "",
        *bin_rows(runs, protocol),
        "",
        f"![budget by pass rate]({prefix}_budget_by_pass_rate.png)",
        "",
        f"![failure rate]({prefix}_failure_rate.png)",
        "",
        f"![zero-variance groups]({prefix}_zero_std.png)",
    ]
    return lines, written
