"""The preview's rollouts generated per trained row with spread: on the CPU demo's warm-start pass rates, against a
count by hand, and in the command's files.

tests/fixtures/demo_warm_pass_rates.json holds the `pass_rate` column that docs/training.md's two commands (the demo's
warm start, then `examples/evaluate.py --train_dataset arithmetic --k 8`) wrote on an Intel Xeon with the pinned
numerics: 512 prompts, mean 0.262, 93 at 0, none at 1. docs/training.md previews that file: uniform 22.73 expected
groups with spread a round, so 32 / 22.73 = 1.41 rollouts per row with spread for DAPO's refill at 8 completions, and
419 / (16 x 22.73) = 1.15 when only the prompts at 0 or 1 are skipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_trl.allocation import build_allocator
from coba_trl.preview import (
    ZERO_VARIANCE_MODES,
    allocation_preview,
    generated_per_spread_row,
    main,
    mixed_group_probability,
)

DEMO_PASS_RATES = Path(__file__).parent / "fixtures" / "demo_warm_pass_rates.json"


def _allocators():
    return {name: build_allocator(name, 2, 32) for name in ("coba", "knapsack", "uniform")}


def _demo_preview(num_generations: int):
    """The demo's rounds (32 prompts, 2 to 32 completions each) at `num_generations` completions per prompt."""
    rates = json.loads(DEMO_PASS_RATES.read_text())
    return rates, allocation_preview(rates, 32 * num_generations, num_generations, _allocators())


def _by_hand(rates, sizes, mode: str) -> tuple[float, float]:
    """(generated per trained row, per trained row with spread), one prompt at a time."""
    generated = trained = with_spread = 0.0
    for p, n in zip(rates, sizes, strict=True):
        if n == 0 or math.isnan(p):
            continue
        spread = 1.0 - p**n - (1.0 - p) ** n  # P(the group holds a success and a failure)
        generated_share = 1.0 - 0.5 * (1.0 - spread) if mode == "refill + skipping" else 1.0
        generated += generated_share * n
        with_spread += generated_share * n * spread
        trained += n if mode == "keep" else generated_share * n * spread
    return tuple(generated / rows if rows > 0 else math.inf for rows in (trained, with_spread))


@pytest.mark.parametrize(
    ("num_generations", "refill", "limit", "skip_certain"), [(8, 1.41, 1.01, 1.15), (4, 1.81, 1.14, 1.48)]
)
def test_on_the_demo_pass_rates_refill_needs_more_rollouts_than_the_limit(
    num_generations, refill, limit, skip_certain
):
    rates, preview = _demo_preview(num_generations)
    table = preview.rollouts_per_spread_row
    assert table["uniform"]["refill"][1] == pytest.approx(refill, abs=0.005)
    assert preview.oracle_per_spread_row == pytest.approx(limit, abs=0.005)  # a prompt at 0.5: 1 / (1 - 2 / 2^n)
    p = np.asarray(rates)
    certain = generated_per_spread_row(p, np.full(p.size, num_generations), weights=(p > 0) & (p < 1))
    assert certain == pytest.approx(skip_certain, abs=0.005)  # skipping only the prompts at pass rate 0 or 1
    assert preview.oracle_per_spread_row < certain < table["uniform"]["refill"][1]
    for name, modes in table.items():
        assert list(modes) == list(ZERO_VARIANCE_MODES)
        assert modes["keep"][0] == 1.0  # keep trains every row it generates
        assert modes["keep"][1] == modes["drop"][1] == modes["refill"][1]  # same rollouts per row with spread
        assert modes["drop"][0] == modes["refill"][0] == modes["refill"][1] > 1.0  # they train rows with spread only
        assert modes["refill + skipping"][1] < modes["refill"][1]
        assert modes["refill"][1] >= preview.oracle_per_spread_row, name


def test_refill_at_uniform_is_the_prompts_per_round_over_the_expected_groups_with_spread():
    """What ties the table to the preview's other figure (and the docs' 22.73 to 32 / 22.73 = 1.41)."""
    _, preview = _demo_preview(8)
    assert preview.rollouts_per_spread_row["uniform"]["refill"][1] == pytest.approx(
        32 / preview.expected_mixed_per_round["uniform"]
    )
    assert round(preview.expected_mixed_per_round["uniform"], 2) == 22.73
    assert round(32 / 22.73, 2) == 1.41 and round(419 / (16 * 22.73), 2) == 1.15


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from([0.0, 1.0, math.nan]), st.floats(0.0, 1.0)), min_size=8, max_size=60),
    st.sampled_from([(32, 8), (24, 4), (64, 16)]),
)
def test_the_table_matches_a_count_by_hand(rates, layout):
    budget, num_generations = layout
    preview = allocation_preview(rates, budget, num_generations, _allocators())
    for name, sizes in preview.group_sizes.items():
        for mode in ZERO_VARIANCE_MODES:
            expected = _by_hand(rates, sizes, mode)
            got = preview.rollouts_per_spread_row[name][mode]
            for value, want in zip(got, expected, strict=True):
                assert value == pytest.approx(want) if math.isfinite(want) else math.isinf(value)
    known = [p for p in rates if not math.isnan(p)]
    best = max((1.0 - p**num_generations - (1.0 - p) ** num_generations for p in known), default=0.0)
    assert preview.oracle_per_spread_row == (pytest.approx(1.0 / best) if best > 0 else math.inf)


def test_the_command_prints_and_writes_the_table(tmp_path, capsys):
    argv = [str(DEMO_PASS_RATES), "--generation_batch_size", "128", "--num_generations", "4"]
    main([*argv, "--max_generations", "32", "--preview_dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "Rollouts generated per trained row with spread" in out
    assert "| uniform | keep | 1.00 | 1.81 |" in out and "| uniform | refill | 1.81 | 1.81 |" in out
    assert "| limit | oracle | 1.14 | 1.14 |" in out
    rows = json.loads((tmp_path / "allocation_preview.json").read_text())["rollouts_per_trained_row_with_spread"]
    assert [(row["allocator"], row["mode"]) for row in rows] == [
        (name, mode) for name in ("coba", "knapsack", "uniform") for mode in ZERO_VARIANCE_MODES
    ] + [("limit", "oracle")]
    uniform_keep = next(row for row in rows if (row["allocator"], row["mode"]) == ("uniform", "keep"))
    assert uniform_keep["generated_per_trained_row"] == 1.0
    assert uniform_keep["generated_per_trained_row_with_spread"] == pytest.approx(1.81, abs=0.005)


def test_no_spread_at_all_is_none_in_the_json_and_in_the_table():
    preview = allocation_preview([0.0, 1.0] * 8, 32, 8, _allocators())
    assert "| uniform | refill | none | none |" in preview.to_markdown()
    rows = preview.to_json()["rollouts_per_trained_row_with_spread"]
    assert all(row["generated_per_trained_row_with_spread"] is None for row in rows)
    assert json.loads(json.dumps(rows, allow_nan=False))  # valid JSON: no NaN or Infinity


def test_with_the_samples_behind_each_pass_rate_a_prompt_that_went_0_of_k_can_still_spread(tmp_path, capsys):
    # Pass rates from 8 samples: 0 of 8 is uncertain, so the posterior chance of spread is above 0 where the point
    # estimate says 0, and DAPO's refill is expected to cost less than the point estimates say.
    rates = [0.0] * 20 + [0.125] * 6 + [0.5] * 6
    point = allocation_preview(rates, 64, 8, _allocators())
    uncertain = allocation_preview(rates, 64, 8, _allocators(), samples=8)
    assert mixed_group_probability([0.0], [8])[0] == 0.0 < mixed_group_probability(np.array(rates), 8, 8)[0]
    refill = [preview.rollouts_per_spread_row["uniform"]["refill"][1] for preview in (point, uncertain)]
    assert refill[1] < refill[0]
    assert (
        uncertain.rollouts_per_spread_row["uniform"]["refill + skipping (first epoch)"]
        == (uncertain.rollouts_per_spread_row["uniform"]["refill"])
    )
    assert uncertain.flat_share_keep["uniform"] == pytest.approx(
        1 - mixed_group_probability(np.array(rates), 8, 8).mean()
    )
    payload = uncertain.to_json()
    assert payload["settings"]["pass_rate_samples"] == 8 and "The allocator saves most" in payload["spending_rule"]
    main([str(DEMO_PASS_RATES), "--pass_rate_samples", "8", "--preview_dir", str(tmp_path)])
    assert "Groups without spread under keep, in the same model: coba" in capsys.readouterr().out
