"""`python -m coba_trl.plot` on a synthetic log history."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from coba_trl.plot import find_trainer_state, plot_run, series


def synthetic_history(with_coba: bool = True) -> list[dict]:
    history = [{"step": 0, "heldout_accuracy": 0.3}]
    for step in range(1, 11):
        record = {"step": step, "loss": 0.1, "reward": 0.2 + step / 50, "budget/mean": 8.0}
        if with_coba:
            record.update(
                {"coba/alpha": 9 - step / 5, "coba/beta": 2 + step / 5, "coba/failure_rate": 0.8 - step / 50}
            )
            record.update({"coba/failure_rate_smoothed": 0.8 - step / 60})
            record["budget/mean_by_pass_rate/unseen" if step < 4 else "budget/mean_by_pass_rate/0.4-0.6"] = 12.0
            record.update({"coba/rollouts_generated": 300.0, "coba/rows_trained": 256.0})
            record["coba/rows_with_spread"] = 200.0 + step
        if step % 5 == 0:
            record["heldout_accuracy"] = 0.3 + step / 40
        history.append(record)
    return history


def write_state(directory, history):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "trainer_state.json").write_text(json.dumps({"log_history": history}))


def test_plot_run_writes_the_four_plots(tmp_path):
    write_state(tmp_path, synthetic_history())
    written = plot_run(str(tmp_path))
    assert sorted(p.rsplit("/", 1)[-1] for p in written) == [
        "budget_by_pass_rate.png",
        "capability.png",
        "reward_accuracy.png",
        "spending.png",
    ]
    for path in written:
        with open(path, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plots_without_coba_metrics_are_skipped(tmp_path):
    write_state(tmp_path, synthetic_history(with_coba=False))
    assert [p.rsplit("/", 1)[-1] for p in plot_run(str(tmp_path))] == ["reward_accuracy.png"]


def test_latest_checkpoint_is_used_when_the_run_did_not_finish(tmp_path):
    for step in (5, 10):
        write_state(tmp_path / f"checkpoint-{step}", [{"step": step, "reward": 0.5}])
    assert find_trainer_state(str(tmp_path)).endswith("checkpoint-10/trainer_state.json")
    with pytest.raises(ValueError, match="missing does not exist: pass the output_dir of a training run"):
        find_trainer_state(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no trainer_state.json, nor do any checkpoint-"):
        find_trainer_state(str(tmp_path / "empty"))


def test_series_skips_records_without_the_key():
    assert series(synthetic_history(), "heldout_accuracy") == ([0, 5, 10], [0.3, 0.3 + 5 / 40, 0.3 + 10 / 40])


def test_command_line(tmp_path):
    write_state(tmp_path, synthetic_history())
    result = subprocess.run([sys.executable, "-m", "coba_trl.plot", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(".png") == 4


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions would save, kept open for inspection."""
    import coba_trl.plot as plot

    kept = {}
    monkeypatch.setattr(plot, "_save", lambda figure, path: kept.setdefault(path.rsplit("/", 1)[-1], figure))
    yield kept
    plot.plt.close("all")


def test_every_axis_is_labelled_and_counts_whole_steps(tmp_path, figures):
    write_state(tmp_path, synthetic_history())
    plot_run(str(tmp_path))
    assert len(figures) == 4
    for figure in figures.values():
        for axis in figure.axes:
            assert axis.get_xlabel() and axis.get_ylabel()
            assert all(float(tick).is_integer() for tick in axis.get_xticks())


def test_a_single_logged_step_still_gets_integer_ticks(tmp_path, figures):
    write_state(tmp_path, [{"step": 3, "coba/failure_rate": 0.8, "coba/failure_rate_smoothed": 0.8}])
    plot_run(str(tmp_path))
    (axis,) = figures["capability.png"].axes
    low, high = axis.get_xlim()
    ticks = [tick for tick in axis.get_xticks() if low <= tick <= high]
    assert ticks == [3.0]


def test_a_run_without_alpha_beta_gets_only_the_failure_rate_panel(tmp_path, figures):
    history = synthetic_history()
    for record in history:
        record.pop("coba/alpha", None), record.pop("coba/beta", None)
    write_state(tmp_path, history)
    plot_run(str(tmp_path))
    (axis,) = figures["capability.png"].axes
    assert axis.get_title() == "Global failure rate"
    assert [line.get_label() for line in axis.get_lines()][::-1][0].startswith("F_t")  # F_t drawn on top


def test_pass_rate_bins_get_distinct_ordered_colours():
    from coba_trl.plot import PASS_RATE_BIN_NAMES, bin_color

    colours = [bin_color(name) for name in PASS_RATE_BIN_NAMES]
    assert len(set(colours)) == len(PASS_RATE_BIN_NAMES) and bin_color("unseen") == "grey"


def test_bins_differ_in_marker_and_line_style_not_only_colour(tmp_path, figures):
    history = [{"step": 1, "budget/mean": 8.0, "budget/mean_by_pass_rate/unseen": 8.0}]
    bins = {"0.0-0.2": 12.0, "0.2-0.4": 10.0, "0.4-0.6": 8.0, "0.6-0.8": 6.0, "0.8-1.0": 2.0, "1.0": 2.0}
    history.append({"step": 3, "budget/mean": 8.0, **{f"budget/mean_by_pass_rate/{k}": v for k, v in bins.items()}})
    write_state(tmp_path, history)
    plot_run(str(tmp_path))
    (axis,) = figures["budget_by_pass_rate.png"].axes
    lines = [line for line in axis.get_lines() if line.get_label().startswith(("p ", "unseen"))]
    assert len(lines) == 7 and len({(line.get_marker(), str(line.get_linestyle())) for line in lines}) == 7
    labels = [line.get_label() for line in lines]
    assert "p 0.8 to under 1.0" in labels and "p = 1 (always solved)" in labels
    # a 3-step run: each point carries its value, so single points read as numbers, not dots
    assert {text.get_text() for text in axis.texts} >= {"12", "2", "8"}


def test_failure_rate_labels_are_plain_words(tmp_path, figures):
    write_state(tmp_path, synthetic_history())
    plot_run(str(tmp_path))
    labels = [line.get_label() for axis in figures["capability.png"].axes for line in axis.get_lines()]
    assert any(label.startswith("F_bar_t: averaged over the last coba_window rounds") for label in labels)
    assert not any("window values" in label for label in labels)


def test_the_spending_plot_draws_generated_beside_trained_rows_per_round(tmp_path):
    from coba_trl.plot import plot_spending

    history = synthetic_history()
    assert plot_spending(history, str(tmp_path / "spending.png"))
    assert not plot_spending(synthetic_history(with_coba=False), str(tmp_path / "none.png"))
    import matplotlib.pyplot as plt

    captured = {}
    save = plt.Figure.savefig

    def keep_axes(figure, *args, **kwargs):
        captured["lines"] = {line.get_label(): list(line.get_ydata()) for line in figure.axes[0].get_lines()}
        return save(figure, *args, **kwargs)

    plt.Figure.savefig = keep_axes
    try:
        plot_spending(history, str(tmp_path / "again.png"))
    finally:
        plt.Figure.savefig = save
    lines = captured["lines"]
    assert lines["completions generated (every phase and refill)"] == [300.0] * 10
    assert lines["rows trained"] == [256.0] * 10
    assert lines["rows trained from groups with spread"] == [200.0 + step for step in range(1, 11)]


def test_the_spending_plot_names_one_line_where_every_generated_row_is_trained(tmp_path):
    """Without refill or drop, generated and trained rows are equal: one line labelled as both, none hidden."""
    import matplotlib.pyplot as plt

    from coba_trl.plot import plot_spending

    history = [
        {"step": step, "coba/rollouts_generated": 256.0, "coba/rows_trained": 256.0, "coba/rows_with_spread": 200.0}
        for step in range(1, 4)
    ]
    captured = {}
    save = plt.Figure.savefig

    def keep_labels(figure, *args, **kwargs):
        captured["labels"] = [line.get_label() for line in figure.axes[0].get_lines()]
        return save(figure, *args, **kwargs)

    plt.Figure.savefig = keep_labels
    try:
        plot_spending(history, str(tmp_path / "spending.png"))
    finally:
        plt.Figure.savefig = save
    assert captured["labels"] == ["completions generated = rows trained", "rows trained from groups with spread"]
