"""The first-epoch floor of "completions generated per trained row with spread", from a study's GRPO runs.

    python benchmarks/first_epoch_floor.py --json benchmarks/results/rollout_savings_bench/first_epoch_floor.json

In the first epoch every prompt is new: no arm has a pass rate to size a group by or to skip a prompt on, so each
generates the epoch's groups as GRPO does, and their completions without spread are spent whatever the arm does
afterwards. An arm that trains R rows in the run then generates at least R + W completions per R rows with spread, W
being the first epoch's rows without spread: a floor of 1 + W / R on the metric (its true floor, every completion
trained with spread, is 1.000). W is read from GRPO's own first epoch in the raw runs of study 6 (the hard regime,
128 prompts: its first 4 rounds) and study 5 (the demo's regime, 512 prompts: its first 16 rounds), one floor a run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDIES = {  # regime: (GRPO's raw runs, rounds in the first epoch: prompts / 32 prompts a round)
    "hard": ("benchmarks/results/rollout_savings_hard/hard/runs/grpo_warm*_seed*.json", 4),
    "demo": ("benchmarks/results/rollout_savings/demo/runs/grpo_warm*_seed*.json", 16),
}


def floor(run: dict, first_epoch_rounds: int) -> dict:
    """One run's first-epoch rows without spread and the floor they put on the metric."""
    first = run["rounds"][:first_epoch_rounds]
    without_spread = sum(r["rows_trained"] - r["rows_with_spread"] for r in first)
    trained = sum(r["rows_trained"] for r in run["rounds"])
    return {
        "warm_start_seed": run["warm_start_seed"],
        "seed": run["seed"],
        "first_epoch_rows": sum(r["rows_trained"] for r in first),
        "first_epoch_rows_without_spread": without_spread,
        "rows_trained": trained,
        "floor": 1 + without_spread / trained,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--json", default=None, help="Write every run's floor here.")
    options = parser.parse_args(argv)
    result = {}
    for regime, (pattern, rounds) in STUDIES.items():
        runs = []
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            with open(path) as handle:
                runs.append({"run": os.path.relpath(path, ROOT), **floor(json.load(handle), rounds)})
        floors = [run["floor"] for run in runs]
        result[regime] = {"runs": runs, "min": min(floors), "max": max(floors)}
        print(f"{regime}: first-epoch floor {min(floors):.3f} to {max(floors):.3f} over {len(runs)} GRPO runs")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
