"""Rollouts and seconds to a held-out accuracy (`Study.report_extras`: `"crossings"`; study 7).

Each run's curve is held-out avg@k (`protocol["curve_samples"]`) before RL, every `eval_steps` optimizer steps, and
at the stop (`heldout_sampled_accuracy`), each point with the completions generated and the training seconds
(evaluations left out) by then. Per warm start, the thresholds come from that warm start's `grpo` run
(`protocols/frontier.py`, `THRESHOLDS`): the avg@k before RL plus a share of `grpo`'s gain. The crossing is the first
point at or above a threshold. At the goal's threshold (`grpo_final`) each arm's log ratio of rollouts to `grpo`'s
gets a t-test over the warm starts, Holm-adjusted across the arms compared; the other thresholds are descriptive.
Also: each arm's avg@k at equal generated rollouts along the curve, where its rollouts went (by level and by the
pass rate a prompt had before the round, by quarter of the run) and `grpo`'s own frontier check.
"""

from __future__ import annotations

import math

import numpy as np

from studies.analysis import LEVEL, holm, paired_test
from studies.report.formats import median_range
from studies.run import PASS_RATE_BINS

GOAL = "grpo_final"
SHARES_OF_BUDGET = (0.25, 0.5, 0.75, 1.0)


def curve(run: dict) -> list[dict]:
    """The run's points: step, generated rollouts, training seconds and avg@k (the stop's measurement last)."""
    generated = {int(step): int(count) for step, count in run["generated_curve"]}
    seconds = {int(step): float(value) for step, value in run["step_seconds"]}
    points = [
        {"step": int(step), "generated": generated.get(int(step), 0), "seconds": seconds.get(int(step), 0.0),
         "avg": float(avg), "by_level": levels}
        for (step, _, avg), levels in zip(run["accuracy_curve"], run["curve_by_level"], strict=True)
    ]  # fmt: skip
    if points[-1]["step"] != run["optimizer_steps"]:  # stopped by the budget between two evaluations
        points.append({"step": int(run["optimizer_steps"]), "generated": int(run["rollouts_generated"]),
                       "seconds": float(run["train_time_s"]), "avg": float(run["heldout_sampled_accuracy"]),
                       "by_level": None})  # fmt: skip
    return points


def thresholds(grpo_run: dict, shares: dict[str, float]) -> dict[str, float]:
    """The warm start's thresholds: avg@k before RL plus each share of `grpo`'s gain (its avg@k at the stop)."""
    start, final = curve(grpo_run)[0]["avg"], float(grpo_run["heldout_sampled_accuracy"])
    return {name: start + share * (final - start) for name, share in shares.items()}


def crossing(points: list[dict], threshold: float) -> dict | None:
    """The first point at or above `threshold` (None: never)."""
    return next((point for point in points if point["avg"] >= threshold - 1e-12), None)


def crossings(runs: dict, shares: dict[str, float]) -> dict:
    """{arm: {threshold: {warm seed: point or None}}} over the warm starts `grpo` completed (one RL seed each)."""
    found = {}
    for arm, units in runs.items():
        found[arm] = {name: {} for name in shares}
        for unit, run in sorted(units.items()):
            if unit not in runs["grpo"]:
                continue
            marks = thresholds(runs["grpo"][unit], shares)
            points = curve(run)
            for name, value in marks.items():
                found[arm][name][unit[0]] = crossing(points, value)
    return found


def ratio_test(arm_points: dict, grpo_points: dict) -> dict:
    """Per warm start the ratio of rollouts to `grpo`'s; the geometric mean, its 95% interval and the p of a
    difference when every warm start has a ratio (reached by both, `grpo` not at 0)."""
    ratios = {}
    for warm, point in arm_points.items():
        base = grpo_points.get(warm)
        if point is None or base is None or base["generated"] == 0:
            ratios[warm] = None
        else:
            ratios[warm] = point["generated"] / base["generated"] if point["generated"] else 0.0
    result = {"ratios": ratios, "geo": None, "low": None, "high": None, "p": None}
    values = list(ratios.values())
    if len(values) >= 2 and all(value is not None and value > 0 for value in values):
        test = paired_test([math.log(value) for value in values], margin=0.0)
        result.update(geo=math.exp(test.mean), low=math.exp(test.low), high=math.exp(test.high), p=test.p_difference)
    return result


def _ratio_cell(test: dict) -> str:
    if test["geo"] is None:
        return ""
    return f"{test['geo']:.2f} [{test['low']:.2f}, {test['high']:.2f}]"


def _point_cell(point: dict | None, key: str) -> str:
    if point is None:
        return "not reached"
    return f"{point[key]:,.0f}"


def crossing_rows(runs: dict, protocol: dict, shares: dict[str, float]) -> list[str]:
    """The thresholds per warm start, then per arm and threshold its crossings and ratios to `grpo`, with the verdict
    at `GOAL` (Holm across the arms) and whether the goal's first half is met."""
    found = crossings(runs, shares)
    warm_seeds = sorted(found["grpo"][GOAL])
    rows = ["| warm start | avg@k before RL | " + " | ".join(f"`{name}`" for name in shares) + " |",
            "|---|---|" + "---|" * len(shares)]  # fmt: skip
    for warm in warm_seeds:
        grpo_run = runs["grpo"][(warm, protocol["seeds"][0])]
        marks = thresholds(grpo_run, shares)
        rows.append(
            f"| {warm} | {curve(grpo_run)[0]['avg']:.3f} | " + " | ".join(f"{v:.3f}" for v in marks.values()) + " |"
        )
    others = [arm for arm in runs if arm != "grpo"]
    tests = {arm: {name: ratio_test(found[arm][name], found["grpo"][name]) for name in shares} for arm in runs}
    p_values = [tests[arm][GOAL]["p"] if tests[arm][GOAL]["p"] is not None else 1.0 for arm in others]
    adjusted = dict(zip(others, holm(p_values), strict=True))
    goal_ratio = protocol.get("goal_ratio", 0.5)
    rows += ["", "| arm | threshold | warm starts that reach it | rollouts per warm start (" + ", ".join(map(str, warm_seeds))
             + ") | ratio to `grpo`'s, per warm start | geometric mean ratio [95% interval] | p (Holm) | verdict |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm in runs:
        for name in shares:
            points, test = found[arm][name], tests[arm][name]
            reached = sum(point is not None for point in points.values())
            word, p_cell = "", ""
            if name == GOAL and arm != "grpo":
                if reached < len(points):
                    word = "does not reach"
                else:
                    p_cell = "" if test["p"] is None else f"{test['p']:.3f} ({adjusted[arm]:.3f})"
                    word = "not detected" if adjusted[arm] >= LEVEL or test["geo"] is None else (
                        "fewer" if test["geo"] < 1 else "more")  # fmt: skip
            ratios = ", ".join("" if r is None else f"{r:.2f}" for r in test["ratios"].values())
            rows.append(
                f"| `{arm}` | `{name}` | {reached} of {len(points)} | "
                + ", ".join(_point_cell(points[w], "generated") for w in warm_seeds)
                + f" | {ratios} | {_ratio_cell(test)} | {p_cell} | {word} |"
            )
    met = [arm for arm in others if tests[arm][GOAL]["geo"] is not None and tests[arm][GOAL]["geo"] <= goal_ratio]
    shown = [arm for arm in met if tests[arm][GOAL]["high"] <= goal_ratio]
    best = min(
        (arm for arm in others if tests[arm][GOAL]["geo"] is not None),
        key=lambda a: tests[a][GOAL]["geo"],
        default=None,
    )
    rows += [
        "",
        f"**Goal, first half** (`{GOAL}` with at most {goal_ratio:g} of `grpo`'s rollouts, geometric mean, every warm "
        "start reaching it): "
        + (f"met by {', '.join(f'`{a}`' for a in met)}" if met else "met by no arm")
        + (f"; shown (upper end at most {goal_ratio:g}) by {', '.join(f'`{a}`' for a in shown)}" if shown else "")
        + (f". Lowest geometric mean ratio: `{best}`, {_ratio_cell(tests[best][GOAL])}." if best else "."),
    ]
    return rows


def seconds_rows(runs: dict, shares: dict[str, float]) -> list[str]:
    """Training seconds (evaluations left out) at each crossing: median [min, max] over the warm starts that reach
    it, and the median ratio to `grpo`'s own seconds in the same warm start."""
    found = crossings(runs, shares)
    rows = ["| arm | " + " | ".join(f"`{name}`: s (ratio to `grpo`)" for name in shares) + " |",
            "|---|" + "---|" * len(shares)]  # fmt: skip
    for arm in runs:
        cells = []
        for name in shares:
            points = {w: p for w, p in found[arm][name].items() if p is not None}
            ratios = [p["seconds"] / found["grpo"][name][w]["seconds"] for w, p in points.items()
                      if found["grpo"][name][w] is not None and found["grpo"][name][w]["seconds"] > 0]  # fmt: skip
            cell = median_range([p["seconds"] for p in points.values()]) if points else "not reached"
            cells.append(cell + (f" ({np.median(ratios):.2f})" if ratios else ""))
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows


def rows_with_spread_by(run: dict, step: int, steps_per_generation: int) -> float:
    """Rows from groups with spread the run had trained when optimizer step `step` ended: each round's rows (every
    phase) spread evenly over its `steps_per_generation` optimizer steps."""
    return sum(
        r["rows_with_spread"] * min(1.0, max(0.0, (step - r["step"]) / steps_per_generation))
        for r in run["rounds"]
        if r.get("rows_with_spread") is not None
    )


def decomposition_rows(runs: dict, protocol: dict) -> list[str]:
    """At `GOAL`, per arm the ratio of rollouts to `grpo`'s split into two factors whose product it is: trained rows
    with spread by the crossing (how many useful rows the arm needed) and generated rollouts per such row (what each
    cost). Medians over the warm starts where both reach it."""
    from studies.protocols.frontier import THRESHOLDS

    found = crossings(runs, {GOAL: THRESHOLDS[GOAL]})
    per_generation = protocol["steps_per_generation"]
    rows = ["| arm | warm starts | rollouts / `grpo`'s | rows with spread / `grpo`'s | rollouts per row with spread / "
            "`grpo`'s |", "|---|---|---|---|---|"]  # fmt: skip
    for arm, units in runs.items():
        factors = []
        for (warm, seed), run in units.items():
            mine, base = found[arm][GOAL].get(warm), found["grpo"][GOAL].get(warm)
            if mine is None or base is None or not base["generated"]:
                continue
            useful = rows_with_spread_by(run, mine["step"], per_generation)
            base_useful = rows_with_spread_by(runs["grpo"][(warm, seed)], base["step"], per_generation)
            if not useful or not base_useful:
                continue
            rollouts = mine["generated"] / base["generated"]
            factors.append((rollouts, useful / base_useful, rollouts / (useful / base_useful)))
        cells = [f"{np.median([f[i] for f in factors]):.2f}" for i in range(3)] if factors else ["", "", ""]
        rows.append(f"| `{arm}` | {len(factors)} | " + " | ".join(cells) + " |")
    return rows


def at_equal_rollouts_rows(runs: dict, protocol: dict) -> list[str]:
    """Mean avg@k over the warm starts at shares of the budget: each run's last point at or below that many
    generated rollouts (the stop's point for the whole budget)."""
    budget = next(iter(runs["grpo"].values()))["rollout_budget"]
    rows = ["| arm | " + " | ".join(f"{share:.0%} ({share * budget:,.0f})" for share in SHARES_OF_BUDGET) + " |",
            "|---|" + "---|" * len(SHARES_OF_BUDGET)]  # fmt: skip
    for arm, units in runs.items():
        cells = []
        for share in SHARES_OF_BUDGET:
            values = []
            for run in units.values():
                points = curve(run)
                if share == 1.0:
                    values.append(points[-1]["avg"])
                else:
                    values.append([p for p in points if p["generated"] <= share * budget][-1]["avg"])
            cells.append(f"{np.mean(values):.3f}")
        rows.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    return rows


def _quarter(index: int, count: int) -> int:
    return min(4 * index // max(count, 1), 3)


def where_rows(runs: dict) -> list[str]:
    """Per arm and quarter of its rounds: the share of its generated rollouts by level, and by the pooled pass rate
    the prompt had before the round (mean over warm starts)."""
    levels = sorted({level for units in runs.values() for run in units.values()
                     for record in run["level_rounds"] for level in record["by_level"]}, key=int)  # fmt: skip
    bins = PASS_RATE_BINS  # the bins the runs recorded
    rows = ["| arm | quarter | " + " | ".join(f"level {level}" for level in levels) + " | "
            + " | ".join(f"p {name}" for name in bins) + " |",
            "|---|---|" + "---|" * (len(levels) + len(bins))]  # fmt: skip
    for arm, units in runs.items():
        for quarter in range(4):
            by_level, by_rate = [], []
            for run in units.values():
                records = run["level_rounds"]
                chosen = [r for i, r in enumerate(records) if _quarter(i, len(records)) == quarter]
                total = sum(sum(r["by_level"].values()) for r in chosen) or 1
                by_level.append([sum(r["by_level"].get(level, 0) for r in chosen) / total for level in levels])
                by_rate.append([sum(r["by_pass_rate"].get(name, 0) for r in chosen) / total for name in bins])
            cells = [f"{v:.2f}" for v in np.mean(by_level, axis=0)] + [f"{v:.2f}" for v in np.mean(by_rate, axis=0)]
            rows.append(f"| `{arm}` | {quarter + 1} | " + " | ".join(cells) + " |")
    return rows


def frontier_rows(runs: dict) -> list[str]:
    """`grpo`'s frontier on this study's warm starts: zero-variance share by quarter of its rounds, avg@k by level
    before RL and at the stop, and its gain over the warm starts."""
    units = runs["grpo"]
    shares = np.array([[np.mean([r["zero_std"] for i, r in enumerate(run["rounds"])
                                 if _quarter(i, len(run["rounds"])) == q]) for q in range(4)]
                       for run in units.values()])  # fmt: skip
    starts = [curve(run)[0] for run in units.values()]
    gains = [
        float(run["heldout_sampled_accuracy"]) - start["avg"]
        for run, start in zip(units.values(), starts, strict=True)
    ]
    last_levels = [[p for p in curve(run) if p["by_level"] is not None][-1]["by_level"] for run in units.values()]
    levels = sorted(starts[0]["by_level"], key=int)
    halves = []
    for run in units.values():
        points = [p for p in curve(run) if p["by_level"] is not None]
        middle = min(points, key=lambda p: abs(p["step"] - run["optimizer_steps"] / 2))
        halves.append(float(run["heldout_sampled_accuracy"]) - middle["avg"])
    error = float(np.std(gains, ddof=1) / math.sqrt(len(gains))) if len(gains) > 1 else float("nan")
    in_errors = f"{np.mean(gains) / error:.1f} standard errors" if error > 0 else "no spread between warm starts"
    return [
        "| quarter of the rounds | 1 | 2 | 3 | 4 |",
        "|---|---|---|---|---|",
        "| groups without spread (mean over warm starts) | "
        + " | ".join(f"{v:.3f}" for v in shares.mean(axis=0))
        + " |",
        "",
        "| level | " + " | ".join(levels) + " |",
        "|---|" + "---|" * len(levels),
        "| avg@k before RL | "
        + " | ".join(f"{np.mean([s['by_level'][lv] for s in starts]):.3f}" for lv in levels)
        + " |",
        "| avg@k at the last evaluation | "
        + " | ".join(f"{np.mean([s[lv] for s in last_levels]):.3f}" for lv in levels)
        + " |",
        "",
        f"`grpo`'s avg@k gain: {np.mean(gains):+.3f} (standard error {error:.3f} over {len(gains)} warm starts: "
        f"{in_errors}); from the evaluation nearest the middle of the run to the stop "
        f"{np.mean(halves):+.3f}.",
    ]


def crossing_lines(runs: dict, protocol: dict, heading: str) -> list[str]:
    """The sections of study 7's report, each under a heading that starts with `heading`."""
    from studies.protocols.frontier import THRESHOLDS

    samples = protocol.get("curve_samples", 16)
    return [
        f"{heading}rollouts to each threshold",
        "",
        f"Held-out avg@{samples} curves (step 0, every {protocol['eval_steps']} optimizer steps, and the stop). "
        "Thresholds per warm start from its `grpo` run: avg@k before RL plus 50% and 90% of `grpo`'s gain, and "
        "`grpo`'s avg@k at its stop. The ratio is the arm's generated rollouts at its crossing over `grpo`'s in the "
        f"same warm start. Verdict at `{GOAL}` only: the t-test of the mean log ratio, Holm-adjusted across the "
        f"{len(runs) - 1} arms; *fewer* / *more* below 0.05, *not detected* otherwise.",
        "",
        *crossing_rows(runs, protocol, THRESHOLDS),
        "",
        f"{heading}training seconds to each threshold",
        "",
        "Training seconds at the crossing (evaluations left out), median [min, max] over the warm starts that reach "
        "it, with the median ratio to `grpo`'s seconds in the same warm start. Runs went two at a time, one torch "
        "thread each: seconds depend on what shared the machine. Descriptive.",
        "",
        *seconds_rows(runs, THRESHOLDS),
        "",
        f"{heading}what the rollouts to `grpo`'s final accuracy bought",
        "",
        "At each arm's crossing of `grpo_final`: its rollouts over `grpo`'s, split into the trained rows from groups "
        "with spread it needed by then over `grpo`'s (below 1: each useful row taught more) and the rollouts it "
        "generated per such row over `grpo`'s (below 1: less spent on groups without spread). The first factor times "
        "the second is the first column, per warm start; medians here. Descriptive.",
        "",
        *decomposition_rows(runs, protocol),
        "",
        f"{heading}accuracy at equal generated rollouts along the curve",
        "",
        f"Mean held-out avg@{samples} over the warm starts at each share of the budget (the run's last evaluation at "
        "or below that many generated rollouts; at 100%, its stop). Descriptive; the verdicts at the stop are above.",
        "",
        *at_equal_rollouts_rows(runs, protocol),
        "",
        f"{heading}where the rollouts went",
        "",
        "Share of each arm's generated rollouts (every phase) per quarter of its rounds, by level and by the pooled "
        "pass rate the prompt had before the round (*unseen*: not yet visited), mean over warm starts.",
        "",
        *where_rows(runs),
        "",
        f"{heading}GRPO's frontier on these warm starts",
        "",
        *frontier_rows(runs),
        "",
    ]
