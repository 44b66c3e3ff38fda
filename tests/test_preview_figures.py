"""docs/benchmarks.md's preview-against-measurement table, recomputed from the calibration runs committed beside it."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "preview_calibration"
PAGE = (ROOT / "docs" / "benchmarks.md").read_text()
MODES = {"grpo": "keep", "dapo": "refill", "greso": "refill + skipping (first epoch)"}


def _rows() -> list[list[str]]:
    header = "| regime | arm (the preview's mode) |"
    start = PAGE.index(header)
    rows = []
    for line in PAGE[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_every_row_of_the_preview_table_is_its_calibration_runs_figures():
    rows = _rows()
    for regime, arm_cell, _points, posterior, measured, ratio in rows:
        folder = regime.replace(" (seed ", "_seed").rstrip(")")  # "frontier (seed 1)" -> frontier_seed1
        calibration = json.loads((RESULTS / folder / "calibration.json").read_text())
        arm = arm_cell.split("`")[1]
        figures = calibration["arms"][arm]
        assert arm_cell == f"`{arm}` (`{MODES[arm]}`)" and figures["preview_mode"] == MODES[arm]
        assert posterior == f"{figures['predicted']:.3f}", (regime, arm)
        assert measured == f"{figures['generated_per_row_with_spread']:.3f}", (regime, arm)
        assert ratio == f"{figures['generated_per_row_with_spread'] / figures['predicted']:.3f}", (regime, arm)
    folders = {path.parent.name for path in RESULTS.glob("*/calibration.json")}
    assert len(rows) == 3 * len(folders)  # every committed run is in the table, each with its three arms
