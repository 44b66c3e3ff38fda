"""What a study declaration is: `Study` and its units (the declarations themselves are in `protocols/`).

    python benchmarks/studies/runner.py <name>                 # run the study declared in protocols/<name>.py
    python benchmarks/studies/runner.py <name> --report_only   # regenerate its page docs/studies/<name>.md and plots

A declaration fixes the protocol (sizes, schedule, units), the arms, the pre-registered comparisons and the analysis
whose verdict words the report uses; `runner.py` runs any declaration and `report/` renders any
declaration's raw results. A new study adds only its declaration here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Study:
    """One pre-registered comparison.

    Units: each pair (warm-start seed, RL seed). A protocol with `warm_start_seeds` crosses them with `seeds`; one
    without uses its single `warm_start_seed` (studies 1 and 2, whose raw files keep their `<arm>_seed<k>.json` names).
    `regimes` name protocol overrides run side by side (each its own warm starts and subfolder); `{"": {}}` is one.
    `analysis` picks the report's comparison rule: `"seeds"` (studies 1 and 2: sign of the per-seed differences) or
    `"intervals"` (95% t-intervals, verdicts ahead / behind / equivalent / not detected, `analysis.py`).
    `unit` is what an `"intervals"` analysis counts: `"warm_start"` (the default: each warm start's difference is the
    mean over its RL seeds, t with n_warm_starts - 1 df, Holm-adjusted verdicts beside the raw ones) or `"run"`
    (each (warm-start seed, RL seed) pair, as studies 3 and 4 were pre-registered; their report adds the warm-start
    re-analysis after the pre-registered one).
    """

    name: str  # the declaration's file name in benchmarks/studies/protocols/, and its page's
    title: str
    label: str  # the prefix of the report's headings on the study's page, e.g. "Study 4"
    protocol: dict
    arms: dict[str, dict]
    quick: dict  # the smoke test's overrides (CI)
    marker: str  # the page keeps the generated part between <!-- marker:begin --> and <!-- marker:end -->
    plot_prefix: str  # docs/studies/<plot_prefix>_<plot>.png
    output_dir: str  # raw results (per-run JSON); checkpoints too unless `scratch_dir` is set
    comparisons: tuple[tuple[str, str], ...]  # (arm, baseline) pairs the analysis reports, in order
    analysis: str = "seeds"
    unit: str = "warm_start"  # "warm_start" or "run" (an "intervals" analysis)
    regimes: dict[str, dict] = field(default_factory=lambda: {"": {}})
    report_extras: tuple[
        str, ...
    ] = ()  # `"intervals"` studies: "wall_time", "phases" (study 3), "spending", "reach" (5)
    record: str = "full"  # "compact": evaluations and per-round summaries only (small JSON meant to be committed)
    scratch_dir: str | None = None  # warm-start checkpoints and trainer folders, when not under `output_dir`


def units(protocol: dict) -> list[tuple[int, int]]:
    """(warm-start seed, RL seed) of every unit, RL seed outermost: a study cut short keeps every warm start."""
    warm_seeds = protocol["warm_start_seeds"] if "warm_start_seeds" in protocol else [protocol["warm_start_seed"]]
    return [(warm_seed, seed) for seed, warm_seed in itertools.product(protocol["seeds"], warm_seeds)]
