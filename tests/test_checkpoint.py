"""The checkpoint state says which layout it has: this code reads its own and the unversioned one written before exact
resume, and refuses a newer or an unknown one with the fix, never reading it by a guess. A checkpoint is complete
once its marker is written, and `resume_from_checkpoint=True` resumes from the latest complete one."""

import json

import pytest
import torch
from safetensors.torch import save_file

from coba_trl.checkpoint import (
    COMPLETE_FILE,
    STATE_FILE,
    STATE_VERSION,
    TRAINER_STATE_FILE,
    incomplete_reason,
    latest_complete_checkpoint,
    load_state,
    save_state,
    start_checkpoint,
    write_complete_marker,
)


def test_a_saved_state_loads_with_its_version(tmp_path):
    save_state(str(tmp_path), {"micro_step": 4, "round": None})
    assert load_state(str(tmp_path)) == {"version": STATE_VERSION, "micro_step": 4, "round": None}


def test_a_checkpoint_without_a_state_has_none(tmp_path):
    assert load_state(str(tmp_path)) is None


def test_an_unversioned_state_from_before_exact_resume_is_version_1(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"allocator": {}, "pass_rate_history": {}}))
    assert load_state(str(tmp_path)) == {"version": 1, "allocator": {}, "pass_rate_history": {}}


def test_a_state_from_a_newer_coba_trl_asks_for_an_upgrade(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": STATE_VERSION + 1, "micro_step": 4}))
    with pytest.raises(ValueError, match=rf"{STATE_FILE} was written by a newer coba-trl .*pip install -U coba-trl"):
        load_state(str(tmp_path))


@pytest.mark.parametrize("version", [0, "2", None, True])
def test_a_version_no_coba_trl_writes_is_refused(tmp_path, version):
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": version}))
    with pytest.raises(ValueError, match=rf"{STATE_FILE} has the state version .*edited or damaged"):
        load_state(str(tmp_path))


def _checkpoint(output_dir, step, marked=True):
    """A checkpoint folder as a save leaves it: weights, `trainer_state.json`, and the marker when `marked`."""
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir()
    save_file({"w": torch.zeros(4)}, str(folder / "model.safetensors"))
    (folder / TRAINER_STATE_FILE).write_text(json.dumps({"global_step": step}))
    if marked:
        write_complete_marker(str(folder))
    return folder


def test_the_marker_shows_a_file_cut_short_or_missing_after_it_was_written(tmp_path):
    folder = _checkpoint(tmp_path, 2)
    assert incomplete_reason(str(folder)) is None
    saved = (folder / "model.safetensors").stat().st_size
    with open(folder / "model.safetensors", "r+b") as f:
        f.truncate(10)
    assert incomplete_reason(str(folder)) == f"model.safetensors has 10 bytes, not the {saved} it was saved with"
    folder = _checkpoint(tmp_path, 3)
    (folder / TRAINER_STATE_FILE).unlink()
    assert incomplete_reason(str(folder)) == f"{TRAINER_STATE_FILE} is missing"


def test_a_checkpoint_without_the_marker_is_complete_when_its_trainer_state_and_weights_are_whole(tmp_path):
    # Stock TRL and earlier coba-trl write no marker: transformers' ordering (trainer_state.json last) decides.
    folder = _checkpoint(tmp_path, 2, marked=False)
    assert incomplete_reason(str(folder)) is None
    (folder / TRAINER_STATE_FILE).write_text('{"global_st')
    assert incomplete_reason(str(folder)) == f"{TRAINER_STATE_FILE} is cut short"


def test_resume_true_takes_the_highest_numbered_complete_checkpoint_with_one_warning(tmp_path):
    for step in (9, 10):
        _checkpoint(tmp_path, step)
    (tmp_path / "checkpoint-11").mkdir()  # a save stopped before it wrote anything but the CoBA state
    save_state(str(tmp_path / "checkpoint-11"), {"micro_step": 11})
    warnings = []
    assert latest_complete_checkpoint(str(tmp_path), warn=warnings.append) == str(tmp_path / "checkpoint-10")
    assert warnings == [
        f"Skipping {tmp_path / 'checkpoint-11'} (no {TRAINER_STATE_FILE}): a save cut short. Resuming from "
        f"{tmp_path / 'checkpoint-10'}, the latest complete one."
    ]


def test_resume_true_without_a_complete_checkpoint_says_which_folders_are_torn(tmp_path):
    with pytest.raises(ValueError, match=r"found no checkpoint-N folder in .*Train without resume_from_checkpoint"):
        latest_complete_checkpoint(str(tmp_path))
    (tmp_path / "checkpoint-1").mkdir()
    with pytest.raises(
        ValueError, match=rf"no complete checkpoint .*checkpoint-1 \(no {TRAINER_STATE_FILE}\).*Delete"
    ):
        latest_complete_checkpoint(str(tmp_path))


def test_a_save_into_a_complete_folder_leaves_it_incomplete_until_the_marker(tmp_path):
    # A resumed run saves again into the folder of the torn save it replaces (or of an earlier run): until this save
    # is done, the files there are a mix of two saves, so nothing may say they are complete.
    folder = _checkpoint(tmp_path, 2)
    start_checkpoint(str(folder), {"micro_step": 2})
    assert not (folder / COMPLETE_FILE).exists() and incomplete_reason(str(folder)) == f"no {TRAINER_STATE_FILE}"


def test_a_coba_save_stopped_before_its_marker_is_incomplete_even_with_whole_trl_files(tmp_path):
    # Killed after transformers wrote trainer_state.json (or while another process still saved): the CoBA state says
    # this save ends with the marker, so TRL's files alone do not make it complete.
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    start_checkpoint(str(folder), {"micro_step": 3})
    save_file({"w": torch.zeros(4)}, str(folder / "model.safetensors"))
    (folder / TRAINER_STATE_FILE).write_text(json.dumps({"global_step": 3}))
    assert incomplete_reason(str(folder)) == f"no {COMPLETE_FILE}: the save stopped before its end"
    write_complete_marker(str(folder))
    assert incomplete_reason(str(folder)) is None
