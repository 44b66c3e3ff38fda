"""The ceiling of selection: how few generated rollouts a mode that only chooses which groups to generate could need
to reach GRPO's thresholds, read from GRPO's own runs of a study (its raw JSON and allocation logs).

    python benchmarks/selection_ceiling.py   # study 9's grpo runs -> benchmarks/results/frontier_selection/ceiling.json

Per warm start, from the `grpo` run's allocation log (`<run>.rounds.jsonl.gz`: every group's prompt, size and
successes) and its held-out avg@16 curve:

- the flat share (groups all failed or all solved, over the rows scored), by quarter of the rounds and by level;
- at each of study 7's thresholds (`protocols/frontier.py`, `THRESHOLDS`, crossed by study 7's rule on `grpo`'s own
  curve, `report/crossings.py`): the rollouts `grpo` generated up to its crossing, G, and the rows of groups with
  spread among them, S;
- (a) perfect prediction, S / G: a selection that generated only the groups that had spread;
- (b) history only, (F + S_later) / G: every prompt's first visit paid in full as GRPO pays it (F rows; nothing is
  known of a prompt before it), after that only the groups that had spread (S_later rows).

Both assume that each row with spread a selection trains teaches what the same row taught GRPO, so the same rows
reach the same accuracy: a ceiling, not a prediction (a selection changes what the model learns, and so the groups
after). Over the warm starts: the geometric mean of each ratio with its 95% t-interval (t over the log ratios), and
the flat shares' means with theirs. The JSON is rounded and key-ordered: it regenerates byte for byte.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from studies.analysis import interval  # noqa: E402
from studies.paths import rounds_log_path, run_path  # noqa: E402
from studies.protocols.frontier import THRESHOLDS  # noqa: E402
from studies.report.crossings import crossing, curve, thresholds  # noqa: E402

STUDY_DIR = "benchmarks/results/frontier_selection"
REGIME = "frontier"


def groups(records: list[dict]) -> list[dict]:
    """Every generated group of an allocation log, in order: round index, the step its round started at, prompt,
    rows generated, successes and rows scored (refill batches belong to their round)."""
    found = []
    for index, record in enumerate(records):
        for batch in (record, *record.get("refills", [])):
            for prompt, size, wins, scored in zip(
                batch["prompt_ids"], batch["group_sizes"], batch["successes"], batch["scored_rollouts"], strict=True
            ):
                found.append({"round": index, "step": record["global_step"], "prompt": int(prompt), "size": int(size),
                              "successes": int(wins), "scored": int(scored)})  # fmt: skip
    return found


def outcome(group: dict) -> str:
    """ "all_failed", "all_solved" or "spread" (a group with nothing scored counts as all failed: it teaches nothing)."""
    if group["successes"] == 0:
        return "all_failed"
    return "all_solved" if group["successes"] == group["scored"] else "spread"


def flat_shares(chosen: list[dict]) -> dict:
    """Shares of the rows of `chosen` groups all failed, all solved and flat (either)."""
    rows = sum(group["size"] for group in chosen)
    failed = sum(group["size"] for group in chosen if outcome(group) == "all_failed")
    solved = sum(group["size"] for group in chosen if outcome(group) == "all_solved")
    return {"rows": rows, "all_failed": failed / rows, "all_solved": solved / rows, "flat": (failed + solved) / rows}


def by_quarter(found: list[dict], rounds: int) -> list[dict]:
    """`flat_shares` of each quarter of the rounds (round i in quarter floor(4 i / rounds))."""
    return [flat_shares([g for g in found if 4 * g["round"] // rounds == quarter]) for quarter in range(4)]


def by_level(found: list[dict], levels: list[int]) -> dict[str, dict]:
    """`flat_shares` of each level's groups, with the level's share of all flat rows."""
    flat_rows = sum(g["size"] for g in found if outcome(g) != "spread")
    shares = {}
    for level in sorted(set(levels)):
        chosen = [g for g in found if levels[g["prompt"]] == level]
        shares[str(level)] = flat_shares(chosen)
        level_flat = sum(g["size"] for g in chosen if outcome(g) != "spread")
        shares[str(level)]["share_of_flat_rows"] = level_flat / flat_rows if flat_rows else 0.0
    return shares


def selection_costs(found: list[dict], before_step: int) -> dict:
    """What the groups of the rounds that started before optimizer step `before_step` cost GRPO and would cost the
    two selections: rows generated, rows with spread, first-visit rows and the ratios (module docstring)."""
    seen, generated, spread, first, later_spread = set(), 0, 0, 0, 0
    for group in found:
        if group["step"] >= before_step:
            break
        generated += group["size"]
        has_spread = outcome(group) == "spread"
        spread += group["size"] if has_spread else 0
        if group["prompt"] in seen:
            later_spread += group["size"] if has_spread else 0
        else:
            seen.add(group["prompt"])
            first += group["size"]
    return {
        "generated": generated,
        "rows_with_spread": spread,
        "first_visit_rows": first,
        "perfect_prediction": spread / generated if generated else None,
        "history_only": (first + later_spread) / generated if generated else None,
    }


def warm_start_ceiling(run: dict, records: list[dict], levels: list[int]) -> dict:
    """One warm start's flat shares and, per threshold, the crossing and the selection costs before it."""
    if len(records) < 4:
        raise ValueError(f"{len(records)} rounds in the allocation log: quarters of the run need at least 4")
    found = groups(records)
    generated = sum(group["size"] for group in found)
    if generated != run["rollouts_generated"]:
        raise ValueError(f"the allocation log has {generated} rollouts, the run {run['rollouts_generated']}")
    points = curve(run)
    marks = {}
    for name, value in thresholds(run, THRESHOLDS).items():
        point = crossing(points, value)
        if point is None:
            marks[name] = {"threshold": value, "step": None}
            continue
        costs = selection_costs(found, point["step"])
        if costs["generated"] != point["generated"]:
            raise ValueError(f"{name}: {costs['generated']} rollouts before step {point['step']}, the curve says "
                             f"{point['generated']}")  # fmt: skip
        marks[name] = {"threshold": value, "step": point["step"], **costs}
    return {
        "rounds": len(records),
        "generated": generated,
        "flat": flat_shares(found),
        "flat_by_quarter": by_quarter(found, len(records)),
        "flat_by_level": by_level(found, levels),
        "thresholds": marks,
    }


def summary(values: list[float], geometric: bool) -> dict | None:
    """Mean (geometric: of the logs, back-transformed) and 95% t-interval over the warm starts; None if any is
    missing or, for a geometric mean, not positive."""
    if len(values) < 2 or any(value is None or (geometric and value <= 0) for value in values):
        return None
    mean, low, high = interval([math.log(v) for v in values] if geometric else values)
    if geometric:
        mean, low, high = math.exp(mean), math.exp(low), math.exp(high)
    return {"mean": mean, "low": low, "high": high}


def over_warm_starts(per_warm: dict) -> dict:
    units = list(per_warm.values())
    overall = {
        "flat": summary([unit["flat"]["flat"] for unit in units], geometric=False),
        "all_failed": summary([unit["flat"]["all_failed"] for unit in units], geometric=False),
        "flat_by_quarter": [
            summary([unit["flat_by_quarter"][q]["flat"] for unit in units], geometric=False) for q in range(4)
        ],
        "flat_by_level": {
            level: summary([unit["flat_by_level"][level]["flat"] for unit in units], geometric=False)
            for level in units[0]["flat_by_level"]
        },
        "thresholds": {},
    }
    for name in THRESHOLDS:
        marks = [unit["thresholds"][name] for unit in units]
        overall["thresholds"][name] = {
            key: summary([mark.get(key) for mark in marks], geometric=True)
            for key in ("perfect_prediction", "history_only")
        }
    return overall


def rounded(value):
    """Floats to 4 decimals, recursively (the JSON's digits do not depend on the last bits of a platform's maths)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def ceiling(study_dir: str) -> dict:
    """The ceiling over every warm start whose `grpo` run and allocation log are in `study_dir`."""
    from studies.task import problem_sets

    with open(os.path.join(study_dir, "protocol.json")) as handle:
        protocol = json.load(handle)["protocol"][REGIME]
    levels = [problem.level for problem in problem_sets(protocol)[0]]
    regime_dir, seed = os.path.join(study_dir, REGIME), protocol["seeds"][0]
    per_warm = {}
    for warm in protocol["warm_start_seeds"]:
        path = run_path(regime_dir, "grpo", seed, warm, legacy=False)
        if not os.path.exists(path):
            continue
        with open(path) as handle:
            run = json.load(handle)
        with gzip.open(rounds_log_path(regime_dir, "grpo", seed, warm, legacy=False), "rt") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
        per_warm[str(warm)] = warm_start_ceiling(run, records, levels)
    if len(per_warm) < 2:
        raise ValueError(f"{study_dir}: {len(per_warm)} grpo run(s) with an allocation log; the ceiling needs 2")
    return rounded({
        "source": f"{REGIME}/runs/grpo_warm*_seed{seed}.json and .rounds.jsonl.gz, beside protocol.json",
        "command": "python benchmarks/selection_ceiling.py",
        "assumption": "each row with spread a selection trains teaches what the same row taught grpo",
        "warm_starts": [int(warm) for warm in per_warm],
        "per_warm_start": per_warm,
        "over_warm_starts": over_warm_starts(per_warm),
    })  # fmt: skip


def table(result: dict) -> list[str]:
    """The figures as Markdown tables: flat shares, then the ratios per threshold and warm start."""
    warm = [str(w) for w in result["warm_starts"]]
    per, over = result["per_warm_start"], result["over_warm_starts"]

    def cell(summary_: dict | None) -> str:
        return "" if summary_ is None else f"{summary_['mean']:.3f} [{summary_['low']:.3f}, {summary_['high']:.3f}]"

    lines = ["| flat share (rows) | " + " | ".join(f"warm start {w}" for w in warm) + " | mean [95% interval] |",
             "|---|" + "---|" * (len(warm) + 1)]  # fmt: skip
    rows = [("whole run", lambda u: u["flat"]["flat"], over["flat"])]
    rows += [(f"quarter {q + 1}", lambda u, q=q: u["flat_by_quarter"][q]["flat"], over["flat_by_quarter"][q])
             for q in range(4)]  # fmt: skip
    rows += [("of which all failed, whole run", lambda u: u["flat"]["all_failed"], over["all_failed"])]
    rows += [(f"level {level}", lambda u, level=level: u["flat_by_level"][level]["flat"], value)
             for level, value in over["flat_by_level"].items()]  # fmt: skip
    for label, read, total in rows:
        lines.append(f"| {label} | " + " | ".join(f"{read(per[w]):.3f}" for w in warm) + f" | {cell(total)} |")
    lines += ["", "| threshold | per warm start: step, generated G, rows with spread S, first-visit rows F | "
              "(a) perfect prediction S / G | (b) history only (F + later S) / G |", "|---|---|---|---|"]  # fmt: skip
    for name in THRESHOLDS:
        marks = [per[w]["thresholds"][name] for w in warm]
        described = "; ".join(
            "not crossed" if m["step"] is None
            else f"{m['step']}, {m['generated']:,}, {m['rows_with_spread']:,}, {m['first_visit_rows']:,}"
            for m in marks
        )  # fmt: skip
        ratios = {
            key: ", ".join("" if m["step"] is None else f"{m[key]:.3f}" for m in marks)
            for key in ("perfect_prediction", "history_only")
        }
        totals = over["thresholds"][name]
        lines.append(
            f"| `{name}` | {described} | {ratios['perfect_prediction']}; geometric mean "
            f"{cell(totals['perfect_prediction'])} | {ratios['history_only']}; geometric mean "
            f"{cell(totals['history_only'])} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study_dir", default=STUDY_DIR, help="The study's raw results (protocol.json, runs).")
    parser.add_argument("--json", default=None, help="Where to write the figures (default: <study_dir>/ceiling.json).")
    options = parser.parse_args(argv)
    result = ceiling(options.study_dir)
    path = options.json or os.path.join(options.study_dir, "ceiling.json")
    with open(path, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print("\n".join(table(result)))
    print(path)


if __name__ == "__main__":
    main()
