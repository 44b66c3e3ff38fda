"""The optional sections of an `"intervals"` study's report, in the order the report gives them
(`Study.report_extras`): rollouts and seconds to an accuracy (`crossings.py`), spending and reach (`spending.py`), wall time (`wall_time.py`), zero-variance groups
(`zero_variance.py`)."""

from __future__ import annotations

from studies.report.crossings import crossing_lines
from studies.report.spending import spending_lines
from studies.report.wall_time import wall_time_rows
from studies.report.zero_variance import phase_rows


def extra_lines(extras, runs: dict, protocol: dict, heading: str) -> list[str]:
    """The optional sections a study asks for (`Study.report_extras`): `"crossings"`, `"wall_time"`, `"phases"` and those of
    `spending.py` (`"spending"`, `"reach"`), each under a heading that starts with `heading`."""
    lines = crossing_lines(runs, protocol, heading) if "crossings" in extras else []
    lines += spending_lines(extras, runs, protocol, heading)
    if "wall_time" in extras:
        lines += [
            f"{heading}wall time",
            "",
            "Median [min, max] over units; runs two at a time, one torch thread each. *Training s*: seconds inside `trainer.train()` with the held-out evaluations left out; *run wall s*: the "
            "whole run (loading, evaluations, avg@16 sampling). Generation seconds: each round's generation-and-"
            "scoring calls (mean over rounds and units), phase 1 (with two phases, the screening) and phase 2.",
            "",
            *wall_time_rows(runs, protocol),
            "",
        ]
    if "phases" in extras:
        lines += [
            f"{heading}zero-variance groups, drops and rescues",
            "",
            "Mean over units of the per-round values.",
            "",
            *phase_rows(runs, protocol),
            "",
        ]
    return lines
