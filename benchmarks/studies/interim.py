"""An interim readout of a study with rollouts-to-accuracy crossings (study 7's rule) while some of its arms have not
run: for each arm that has, against `grpo`, per warm start, the ratio of generated rollouts at each threshold's
crossing and the paired difference of held-out avg@k when the run stops. No verdict: the pre-registered report
(`runner.py <study> --report_only`) needs every arm, and Holm's correction across all of its comparisons.

    python benchmarks/studies/interim.py frontier_selection
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from studies.analysis import paired_test  # noqa: E402
from studies.protocols import load_study  # noqa: E402
from studies.protocols.frontier import THRESHOLDS  # noqa: E402
from studies.report.crossings import crossings, curve, ratio_test  # noqa: E402


def readout(runs: dict, margin: float) -> list[str]:
    """Lines of the readout of `runs` ({arm: {(warm seed, RL seed): run}}), each arm against `grpo`."""
    found = crossings(runs, THRESHOLDS)
    lines = []
    for arm, units in runs.items():
        if arm == "grpo":
            continue
        lines.append(f"{arm} ({len(units)} warm starts)")
        for name in THRESHOLDS:
            test = ratio_test(found[arm][name], found["grpo"][name])
            ratios = ", ".join(
                f"{warm}: {'not reached' if ratio is None else f'{ratio:.3f}'}"
                for warm, ratio in test["ratios"].items()
            )
            mean = (
                ""
                if test["geo"] is None
                else f"; geometric mean {test['geo']:.3f} [{test['low']:.3f}, {test['high']:.3f}]"
            )
            lines.append(f"  rollouts to {name} / grpo's: {ratios}{mean}")
        shared = sorted(unit for unit in units if unit in runs["grpo"])
        diffs = [curve(units[unit])[-1]["avg"] - curve(runs["grpo"][unit])[-1]["avg"] for unit in shared]
        line = f"  avg@k at the stop - grpo's: {', '.join(f'{d:+.4f}' for d in diffs)}"
        if len(diffs) >= 2:
            test = paired_test(diffs, margin=margin)
            line += (
                f"; mean {test.mean:+.4f} [{test.low:+.4f}, {test.high:+.4f}], p {test.p_difference:.3f} before Holm"
            )
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="A declaration in benchmarks/studies/protocols/ with crossings, e.g. frontier.")
    options = parser.parse_args(argv)
    study = load_study(options.study)
    for regime in study.regimes:
        runs: dict = {}
        for path in sorted(glob.glob(os.path.join(study.output_dir, regime, "runs", "*.json"))):
            with open(path) as handle:
                run = json.load(handle)
            runs.setdefault(run["arm"], {})[(run["warm_start_seed"], run["seed"])] = run
        if "grpo" not in runs:
            parser.error(f"{study.output_dir}/{regime}/runs holds no grpo run: the thresholds are grpo's.")
        ordered = {arm: runs[arm] for arm in study.arms if arm in runs}
        print("\n".join(readout(ordered, study.protocol["equivalence_margin"])))


if __name__ == "__main__":
    main()
