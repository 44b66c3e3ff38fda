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


def _folder(regime: str) -> str:
    """A table's regime cell -> its run's folder: "frontier p3 (seed 1)" -> frontier_p3_seed1."""
    return regime.replace(" (seed ", "_seed").rstrip(")").replace(" ", "_")


def test_every_row_of_the_preview_table_is_its_calibration_runs_figures():
    rows = _rows()
    for regime, arm_cell, _points, posterior, measured, ratio in rows:
        folder = _folder(regime)
        calibration = json.loads((RESULTS / folder / "calibration.json").read_text())
        arm = arm_cell.split("`")[1]
        figures = calibration["arms"][arm]
        assert arm_cell == f"`{arm}` (`{MODES[arm]}`)" and figures["preview_mode"] == MODES[arm]
        assert posterior == f"{figures['predicted']:.3f}", (regime, arm)
        assert measured == f"{figures['generated_per_row_with_spread']:.3f}", (regime, arm)
        assert ratio == f"{figures['generated_per_row_with_spread'] / figures['predicted']:.3f}", (regime, arm)
    folders = {path.parent.name for path in RESULTS.glob("*/calibration.json")}
    assert len(rows) == 3 * len(folders)  # every committed run is in the table, each with its three arms


def test_the_epoch_end_previews_are_those_the_calibration_runs_wrote():
    # docs/benchmarks.md gives, for the runs that previewed the model their first epoch ended with, that preview beside
    # the warm start's and the measured epoch.
    rows = {}
    for line in PAGE[PAGE.index("| regime | warm start, previewed |") :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    folders = {path.parent.parent.name for path in RESULTS.glob("*/epoch_end/allocation_preview.json")}
    assert {_folder(regime) for regime in rows} == folders
    for regime, (start, measured, end) in rows.items():
        folder = _folder(regime)
        calibration = json.loads((RESULTS / folder / "calibration.json").read_text())
        preview = json.loads((RESULTS / folder / "epoch_end" / "allocation_preview.json").read_text())
        keep = calibration["arms"]["grpo"]
        assert start == f"{keep['predicted']:.3f}" and measured == f"{keep['generated_per_row_with_spread']:.3f}"
        ends = [
            r
            for r in preview["rollouts_per_trained_row_with_spread"]
            if (r["allocator"], r["mode"]) == ("uniform", "keep")
        ]
        assert (
            end
            == f"{calibration['epoch_end']['predicted']:.3f}"
            == f"{ends[0]['generated_per_trained_row_with_spread']:.3f}"
        )
