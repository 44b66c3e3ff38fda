"""The checkpoint state says which layout it has: this code reads its own and the unversioned one written before exact
resume, and refuses a newer or an unknown one with the fix, never reading it by a guess."""

import json

import pytest

from coba_trl.checkpoint import STATE_FILE, STATE_VERSION, load_state, save_state


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
