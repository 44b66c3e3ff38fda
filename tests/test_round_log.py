"""The allocation log survives a run stopped mid-write: a torn last line is skipped with a warning, never fatal;
a damaged line elsewhere is an error that names the file, the line and the fix."""

import logging

import pytest

from coba_trl.rounds.log import ROUNDS_FILE, RoundLog, generation_batches, read_rounds


def _log_of_three_rounds(tmp_path) -> RoundLog:
    log = RoundLog(str(tmp_path))
    log.start()
    for step in (0, 2, 4):
        log.write({"micro_step": step, "global_step": step, "group_sizes": [3, 5], "pass_rates": [0.25, None]})
    return log


def _tear_last_line(path) -> None:
    text = path.read_text()
    last_line_start = text.rstrip("\n").rfind("\n") + 1
    path.write_text(text[: last_line_start + (len(text) - last_line_start) // 2])


def test_a_resume_after_a_torn_last_line_keeps_the_complete_rounds(tmp_path, caplog):
    log = _log_of_three_rounds(tmp_path)
    complete = (tmp_path / ROUNDS_FILE).read_text().splitlines(keepends=True)
    _tear_last_line(tmp_path / ROUNDS_FILE)
    with caplog.at_level(logging.WARNING, logger="coba_trl.rounds.log"):
        log.start(resume_global_step=100)
    assert (tmp_path / ROUNDS_FILE).read_text() == "".join(complete[:2])  # the two whole lines, byte for byte
    assert "line 3, the last one, is incomplete" in caplog.text
    log.write({"micro_step": 4, "global_step": 4, "group_sizes": [3, 5], "pass_rates": [0.25, None]})
    assert (tmp_path / ROUNDS_FILE).read_text() == "".join(complete)  # appending continues a clean file


def test_a_resume_trims_the_rounds_from_the_checkpoint_on(tmp_path):
    log = _log_of_three_rounds(tmp_path)
    _tear_last_line(tmp_path / ROUNDS_FILE)
    log.start(resume_global_step=2)
    assert [record["micro_step"] for record in read_rounds(str(tmp_path))] == [0]


def test_a_resume_keeps_the_rounds_before_the_checkpoints_optimizer_step_whatever_their_micro_steps(tmp_path):
    # Rounds of a run resumed with fewer gradient accumulation steps restart their micro-steps lower: (4, 2) was
    # trained before checkpoint-4 and stays; (4, 4) started at step 4 and goes.
    log = RoundLog(str(tmp_path))
    log.start()
    for micro_step, global_step in [(0, 0), (2, 1), (4, 2), (3, 3), (4, 4)]:
        log.write({"micro_step": micro_step, "global_step": global_step})
    log.start(resume_global_step=4)
    kept = [(r["micro_step"], r["global_step"]) for r in read_rounds(str(tmp_path))]
    assert kept == [(0, 0), (2, 1), (4, 2), (3, 3)]


def test_reading_a_log_with_a_torn_last_line_returns_the_complete_rounds(tmp_path, caplog):
    _log_of_three_rounds(tmp_path)
    _tear_last_line(tmp_path / ROUNDS_FILE)
    with caplog.at_level(logging.WARNING, logger="coba_trl.rounds.log"):
        assert [record["micro_step"] for record in read_rounds(str(tmp_path))] == [0, 2]
    assert "incomplete" in caplog.text


def test_a_damaged_line_before_the_last_is_an_error_naming_the_file_and_the_line(tmp_path):
    log = _log_of_three_rounds(tmp_path)
    lines = (tmp_path / ROUNDS_FILE).read_text().splitlines(keepends=True)
    (tmp_path / ROUNDS_FILE).write_text(lines[0] + lines[1][:10] + "\n" + lines[2])
    for read in (lambda: log.start(resume_global_step=100), lambda: read_rounds(str(tmp_path))):
        with pytest.raises(ValueError, match=r"coba_rounds\.jsonl: line 2 of 3 .*delete that line"):
            read()


def test_a_fresh_start_empties_the_log(tmp_path):
    log = _log_of_three_rounds(tmp_path)
    _tear_last_line(tmp_path / ROUNDS_FILE)
    log.start()
    assert read_rounds(str(tmp_path)) == []


def test_generation_batches_walks_each_rounds_own_batch_then_its_refills_in_the_order_generated(tmp_path):
    log = RoundLog(str(tmp_path))
    log.start()
    log.write({"prompt_ids": [0, 1], "refills": [{"prompt_ids": [2]}, {"prompt_ids": [3, 4]}]})
    log.write({"prompt_ids": [5]})  # a round that needed no refill
    batches = list(generation_batches(read_rounds(str(tmp_path))))
    assert [batch["prompt_ids"] for batch in batches] == [[0, 1], [2], [3, 4], [5]]
