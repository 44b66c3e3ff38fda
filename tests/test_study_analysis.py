"""The default analysis of a study (`benchmarks/studies/analysis.py`): warm starts as units, 95% t-intervals with
n_warm_starts - 1 degrees of freedom, p-values, Holm's correction and the verdict words, on numbers a reader can
check by hand (Student's t with 2 degrees of freedom: P(|T| <= t) = t / sqrt(2 + t^2))."""

import math

import pytest
from scripts.benchmarks import load_benchmark

# Per (warm-start seed, RL seed): arm minus baseline. Each warm start's mean over its two RL seeds is round:
# a: -0.04, -0.03, -0.02; b: 0.000, 0.005, 0.010; c: -0.002, 0.000, 0.002; d: -0.012, -0.010, -0.008.
DIFFERENCES = {
    "a": {(0, 0): -0.05, (0, 1): -0.03, (1, 0): -0.02, (1, 1): -0.04, (2, 0): -0.01, (2, 1): -0.03},
    "b": {(0, 0): -0.002, (0, 1): 0.002, (1, 0): 0.005, (1, 1): 0.005, (2, 0): 0.012, (2, 1): 0.008},
    "c": {(0, 0): -0.003, (0, 1): -0.001, (1, 0): 0.001, (1, 1): -0.001, (2, 0): 0.002, (2, 1): 0.002},
    "d": {(0, 0): -0.014, (0, 1): -0.010, (1, 0): -0.010, (1, 1): -0.010, (2, 0): -0.006, (2, 1): -0.010},
}
T_2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # t(0.975, 2) = 4.3027


def two_sided(t: float) -> float:
    return 1 - abs(t) / math.sqrt(2 + t * t)


def known_case():
    """Four arms against a baseline on three warm starts x two RL seeds, analysed as the report does."""
    intervals, analysis = load_benchmark("studies.report.intervals"), load_benchmark("studies.analysis")
    runs = {"base": {unit: {"final_accuracy": 0.5} for unit in DIFFERENCES["a"]}}
    for arm, differences in DIFFERENCES.items():
        runs[arm] = {unit: {"final_accuracy": 0.5 + d} for unit, d in differences.items()}
    cells = []
    for arm in DIFFERENCES:
        units, differences = intervals.unit_differences(runs, arm, "base", "final_accuracy", "warm_start")
        test = analysis.paired_test(differences, 0.02)
        cells.append(analysis.Cell("regime", arm, "base", "final_accuracy", tuple(units), test))
    return runs, analysis.with_holm(cells)


def test_warm_starts_are_the_units_and_their_intervals_use_two_degrees_of_freedom():
    runs, (a, b, c, d) = known_case()
    assert a.units == (0, 1, 2)
    assert a.test.differences == pytest.approx((-0.04, -0.03, -0.02))  # RL seeds averaged, not counted
    half = T_2 * 0.01 / math.sqrt(3)  # sd 0.01 over 3 warm starts
    assert (a.test.mean, a.test.low, a.test.high) == pytest.approx((-0.03, -0.03 - half, -0.03 + half))
    assert (b.test.low, b.test.high) == pytest.approx((0.005 - half / 2, 0.005 + half / 2))  # sd 0.005
    assert (c.test.low, c.test.high) == pytest.approx((-half / 5, half / 5))  # sd 0.002
    assert (d.test.low, d.test.high) == pytest.approx((-0.01 - half / 5, -0.01 + half / 5))  # inside +-0.02
    runs_as_units = load_benchmark("studies.report.intervals").unit_differences(
        runs, "a", "base", "final_accuracy", "run"
    )
    assert len(runs_as_units[0]) == 6  # the pre-registered analysis of studies 3 and 4 counts every run


def test_p_values_holm_order_and_verdicts_of_the_known_case():
    analysis = load_benchmark("studies.analysis")
    _, (a, b, c, d) = known_case()
    # t = mean / (sd / sqrt(3)): a -3 sqrt(3), b sqrt(3), c 0, d -5 sqrt(3).
    assert a.test.p_difference == pytest.approx(two_sided(3 * math.sqrt(3)))  # 0.0351
    assert b.test.p_difference == pytest.approx(two_sided(math.sqrt(3)))  # 0.2254
    assert c.test.p_difference == pytest.approx(1.0)
    assert d.test.p_difference == pytest.approx(two_sided(5 * math.sqrt(3)))  # 0.0131
    # Equivalence (margin 0.02): twice the larger one-sided p. b's nearer edge is +0.02, at t = (0.005 - 0.02) /
    # (0.005 / sqrt(3)) = -3 sqrt(3); both of c's edges at t = 0.02 / (0.002 / sqrt(3)) = 10 sqrt(3); d's nearer
    # edge is -0.02, at t = 0.01 / (0.002 / sqrt(3)) = 5 sqrt(3).
    assert b.test.p_equivalence == pytest.approx(two_sided(3 * math.sqrt(3)))  # 0.0351
    assert c.test.p_equivalence == pytest.approx(two_sided(10 * math.sqrt(3)))  # 0.0033
    assert d.test.p_equivalence == pytest.approx(two_sided(5 * math.sqrt(3)))  # 0.0131
    assert a.test.p_equivalence == 1.0  # the interval lies beyond -0.02
    # Holm over the 4 p-values of a difference: the smallest (d) times 4, then a times 3, b times 2, c times 1.
    assert [d.holm_difference, a.holm_difference, b.holm_difference, c.holm_difference] == pytest.approx(
        [4 * d.test.p_difference, 3 * a.test.p_difference, 2 * b.test.p_difference, 1.0]
    )
    assert analysis.holm([0.01, 0.04, 0.012]) == pytest.approx([0.03, 0.04, 0.03])  # 2 x 0.012 < 0.03: kept at 0.03
    # Unadjusted, the verdicts are the pre-registered interval rule.
    assert [cell.word for cell in (a, b, c, d)] == ["behind", "equivalent", "equivalent", "behind"]
    assert [analysis.interval_verdict(x.test.low, x.test.high, 0.02) for x in (a, b, c, d)] == [
        cell.word for cell in (a, b, c, d)
    ]
    # After Holm neither "behind" survives (a: 0.105, d: 0.0523, both above 0.05): a's interval reaches beyond
    # -0.02, so not detected; d's lies inside +-0.02, so equivalent. Equivalence is not adjusted: b stays equivalent
    # although 2 x its 0.0351 would exceed 0.05.
    assert [cell.holm_word for cell in (a, b, c, d)] == ["not detected", "equivalent", "equivalent", "equivalent"]


def test_the_report_table_shows_both_verdicts_and_the_adjusted_p_values():
    intervals = load_benchmark("studies.report.intervals")
    _, cells = known_case()
    table = intervals.warm_start_lines(cells)
    assert table[0].endswith("| p (Holm) | p equivalence | verdict | verdict after Holm |")
    assert table[2].startswith("| `regime` | `a` - `base` | final held-out greedy accuracy | -0.040, -0.030, -0.020 |")
    assert table[2].endswith("| -0.030 [-0.055, -0.005] | 0.0351 (0.105) | 1 | behind | **not detected** |")
    assert table[5].endswith("| -0.010 [-0.015, -0.005] | 0.0131 (0.0523) | 0.0131 | behind | **equivalent** |")
    report = intervals.holm_lines(cells)
    assert "| warm starts as units | 0 | 2 | 2 | 0 | 0.0131 (`regime`, `d` - `base`, final" in "\n".join(report)
    assert "| warm starts as units, Holm | 0 | 0 | 3 | 1 | |" in report
    assert intervals.holm_lines([]) == [  # a study stopped before 2 warm starts completed reports no interval
        "No comparison has 2 warm starts that both of its arms completed: no interval over warm starts."
    ]


def test_t_distribution_matches_its_closed_forms():
    analysis = load_benchmark("studies.analysis")
    assert analysis.t_quantile(0.975, 2) == pytest.approx(T_2, abs=1e-9)
    assert analysis.t_quantile(0.975, 5) == pytest.approx(2.5706, abs=1e-4)
    assert analysis.t_upper_tail(1.0, 1) == pytest.approx(0.25)  # Cauchy: atan(1) = pi / 4
    assert analysis.t_upper_tail(-2.0, 2) == pytest.approx(1 - 0.5 * two_sided(2.0))
    with pytest.raises(ValueError, match="at least 2 units"):
        analysis.paired_test([0.01], 0.02)
