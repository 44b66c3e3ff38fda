"""docs/spending.md's diagnostic figures, recomputed from the JSON committed beside them."""

import json
import re
from pathlib import Path

import pytest
from scripts.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "rollout_savings_bench"
SPENDING = (ROOT / "docs" / "spending.md").read_text()

# The table's rows (the arm each names) and launches (the JSON each launch wrote), as the page's text says.
ROWS = {
    "GRPO (`keep`)": "grpo",
    "DAPO (`refill`)": "dapo",
    "GRESO (`refill` + skipping)": "greso",
    "Knapsack-RL (`keep`)": "knapsack",
    "Knapsack-RL + `refill` + skipping": "knapsack_skip",
    "CoBA + `refill` + skipping": "coba_skip",
    "CoBA pilot-and-commit + skipping": "coba_pilot",
    "DAPO + skipping by the chance of spread": "dapo_spread",
}
LAUNCHES = {"a": "demo_1proc.json", "b": "demo_1proc.json", "c": "hard_1proc.json", "d": "hard_1proc_spread.json"}


def _table() -> dict[str, list[str]]:
    start = SPENDING.index("| | demo's regime | hard regime |")
    rows = {}
    for line in SPENDING[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        label, *cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[label] = cells
    return rows


def test_every_cell_of_the_diagnostic_table_is_its_launchs_committed_figure():
    table = _table()
    assert set(ROWS) <= set(table)
    checked = 0
    for label, arm in ROWS.items():
        for cell in table[label]:
            for value, launch in re.findall(r"([0-9.]+)\*{0,2} \(([a-d])\)", cell):
                records = json.loads((RESULTS / LAUNCHES[launch]).read_text())
                (record,) = [r for r in records if r["arm"] == arm]
                assert f"{record['generated_per_row_with_spread']:.3f}" == value, (label, launch)
                checked += 1
    assert checked == 17  # 8 rows in 2 regimes, and DAPO twice in the hard regime (each launch has its own)


def test_the_first_epoch_floor_regenerates_from_the_committed_study_runs_and_the_page_quotes_it(tmp_path):
    bench = load_benchmark("first_epoch_floor")
    out = tmp_path / "floor.json"
    assert bench.main(["--json", str(out)]) == 0
    regenerated = json.loads(out.read_text())
    assert regenerated == json.loads((RESULTS / "first_epoch_floor.json").read_text())
    assert [len(regenerated[regime]["runs"]) for regime in ("hard", "demo")] == [5, 10]
    for run in regenerated["hard"]["runs"]:
        assert run["floor"] == pytest.approx(1 + run["first_epoch_rows_without_spread"] / run["rows_trained"])
    demo, hard = (f"{regenerated[r]['min']:.3f} to {regenerated[r]['max']:.3f}" for r in ("demo", "hard"))
    assert f"| first-epoch floor (GRPO's first epoch, see below) | {demo} | {hard} |" in SPENDING
    assert f"{hard} in the hard regime" in SPENDING and f"{demo} in the\ndemo's" in SPENDING
