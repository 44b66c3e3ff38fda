"""The CoBA state a checkpoint carries (`coba_state.json`), written atomically.

Besides TRL's own files a CoBA checkpoint holds what the next allocations depend on: the allocator (F_t window ->
alpha_t, beta_t), the pass-rate history p_i, TRL's micro-step counter (not checkpointed by TRL, so a resumed run would
otherwise put its round boundaries in the wrong place) and the plan of the round in progress. A checkpoint saved
inside a round lets the resumed run regenerate that round with the same group sizes for the same prompts, without
observing it a second time (docs/training.md, "Checkpoints and exact resume").

The file says which layout it has (`version`). This code reads `STATE_VERSION` 2 and version 1, the file written
before exact resume (allocator and history only, no `version` key; a run resumed from it starts its next round
afresh). A file from a newer coba-trl is refused with the fix (upgrade), never read by a guess.
"""

from __future__ import annotations

import json
import math
import os
import tempfile

import numpy as np

from coba_trl.allocation.history import prompt_id_from_json

STATE_FILE = "coba_state.json"
STATE_VERSION = 2


def encode_round(prompt_ids: list, group_sizes, pass_rates) -> dict:
    """A round plan as plain JSON (NaN pass rates, i.e. unseen prompts, as null)."""
    return {
        "prompt_ids": list(prompt_ids),
        "group_sizes": [int(size) for size in group_sizes],
        "pass_rates": [None if math.isnan(rate) else float(rate) for rate in pass_rates],
    }


def decode_round(saved: dict, prompt_ids: list) -> tuple[np.ndarray, np.ndarray] | None:
    """The (group sizes, pass rates) of a saved round plan when it is the plan for `prompt_ids`, else None."""
    if [prompt_id_from_json(i) for i in saved["prompt_ids"]] != list(prompt_ids):
        return None
    pass_rates = np.array([np.nan if rate is None else rate for rate in saved["pass_rates"]], dtype=np.float64)
    return np.asarray(saved["group_sizes"], dtype=np.int64), pass_rates


def save_state(directory: str, state: dict) -> None:
    """Write `state` to `directory/coba_state.json` through a temporary file and an atomic rename.

    A crash mid-write leaves the previous file (or none), never a truncated one that would break a resume.
    """
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{STATE_FILE}.", dir=directory)
    try:
        with os.fdopen(handle, "w") as f:
            json.dump({"version": STATE_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, os.path.join(directory, STATE_FILE))
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def load_state(directory: str) -> dict | None:
    """The state saved in `directory` with its `version` (1 or 2), or None when the checkpoint has none (one written
    without coba-trl). A version this code does not know is a `ValueError` naming the file and the fix."""
    path = os.path.join(directory, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        state = json.load(f)
    version = state.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(
            f"{path} has the state version {version!r}, which no coba-trl writes: the file was edited or damaged. "
            "Restore it, or delete it to resume with an empty pass-rate history and capability estimate."
        )
    if version > STATE_VERSION:
        raise ValueError(
            f"{path} was written by a newer coba-trl (state version {version}; this one reads versions 1 to "
            f"{STATE_VERSION}). Upgrade coba-trl (`pip install -U coba-trl`) to resume from this checkpoint."
        )
    return {**state, "version": version}
