"""The files a CoBA checkpoint adds to TRL's, written so that a save cut short never passes for a complete one.

This module only writes and reads files; what they hold is the round runner's (`coba_trl.rounds.runner.RoundRunner`,
`state_dict` / `resume`). `saving` wraps TRL's save: it writes the runner's state to `coba_state.json` (atomically)
and, in a checkpoint saved inside a round, each process's rows not yet trained to `coba_rows_<rank>.pt`. A save owns
what it writes: the files an earlier save into the same folder left (its marker, its rows, its random states) are
removed first, so rows or random states saved by a run with another number of processes can never be read back with
this run's state (docs/training.md, "Checkpoints and exact resume").

A checkpoint is complete once `coba_complete.json` is in it (written after every process has saved): it lists each
file with its size, so a file cut short, or missing, shows. TRL's deletion of older checkpoints (`save_total_limit`)
runs after the marker is written, so at every moment of a save some checkpoint is complete.
`resume_from_checkpoint=True` takes the latest complete checkpoint (`latest_complete_checkpoint`), not the
highest-numbered folder, and warns about a newer one a save left incomplete. A folder without the marker (stock TRL,
an earlier coba-trl) counts as complete when its `trainer_state.json`, which transformers writes last, reads as JSON
and its safetensors files are whole.

The state file says which layout it has (`version`). This code reads `STATE_VERSION` 2 and version 1, the file written
before exact resume (allocator and history only, no `version` key; a run resumed from it starts its next round
afresh). A file from a newer coba-trl is refused with the fix (upgrade), never read by a guess.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from contextlib import contextmanager

import torch
from safetensors import safe_open
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from coba_trl.distributed import shared_call

STATE_FILE = "coba_state.json"
STATE_VERSION = 2
MARKED_KEY = "complete_marker"  # in the CoBA state of a save that ends by writing COMPLETE_FILE
COMPLETE_FILE = "coba_complete.json"  # written last: the checkpoint's files and their sizes
TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME, the last file its save writes

logger = logging.getLogger(__name__)


ROWS_FILE = "coba_rows_{rank}.pt"  # a process's generated rows not yet trained, in a checkpoint saved inside a round
ROWS_PATTERN = r"coba_rows_(\d+)\.pt"
# transformers' random state: `rng_state.pth` from one process, `rng_state_<rank>.pth` from each of several; it loads
# whichever its number of processes names, if present.
RNG_PATTERN = r"rng_state(_\d+)?\.pth"


def save_buffered_rows(directory: str, rank: int, batches: list[dict]) -> None:
    """Save process `rank`'s rows of the round in progress that are not yet trained (TRL's buffered micro-batches)."""
    os.makedirs(directory, exist_ok=True)
    cpu = [{k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()} for batch in batches]
    torch.save(cpu, os.path.join(directory, ROWS_FILE.format(rank=rank)))


def saved_row_ranks(directory: str) -> set[int]:
    """The processes whose rows of a round in progress the checkpoint in `directory` holds (none: saved at a round's
    end, or by an earlier coba-trl)."""
    return {int(m.group(1)) for name in os.listdir(directory) if (m := re.fullmatch(ROWS_PATTERN, name))}


def load_buffered_rows(directory: str, rank: int) -> list[dict]:
    """Process `rank`'s saved rows of the round in progress."""
    return torch.load(os.path.join(directory, ROWS_FILE.format(rank=rank)), map_location="cpu", weights_only=True)


def _write_json_atomically(path: str, content: dict) -> None:
    """Write `content` to `path` through a synced temporary file and an atomic rename: a crash mid-write leaves the
    previous file (or none), never a truncated one."""
    directory, name = os.path.split(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(handle, "w") as f:
            json.dump(content, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def save_state(directory: str, state: dict) -> None:
    """Write `state` to `directory/coba_state.json` through a temporary file and an atomic rename.

    A crash mid-write leaves the previous file (or none), never a truncated one that would break a resume.
    """
    os.makedirs(directory, exist_ok=True)
    _write_json_atomically(os.path.join(directory, STATE_FILE), {"version": STATE_VERSION, **state})


def start_checkpoint(directory: str, state: dict) -> None:
    """Begin a checkpoint save into `directory`: remove what an earlier save into the same folder left that this save
    may not write again (its marker and `trainer_state.json`, which would make a half-rewritten folder look complete,
    and the rows of a round in progress and random states, which another number of processes may have saved), then
    write the CoBA state. Files written for this save before it starts (a callback's, say) are kept."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            stale = any(re.fullmatch(pattern, name) for pattern in (ROWS_PATTERN, RNG_PATTERN))
            if name in (COMPLETE_FILE, TRAINER_STATE_FILE) or stale:
                os.remove(os.path.join(directory, name))
    save_state(directory, {**state, MARKED_KEY: True})


def _checkpoint_files(directory: str) -> dict[str, int]:
    """Every file under `directory` but the marker, by path relative to it, with its size."""
    sizes = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if relative != COMPLETE_FILE:
                sizes[relative] = os.path.getsize(path)
    return dict(sorted(sizes.items()))


def write_complete_marker(directory: str) -> None:
    """Mark the checkpoint in `directory` complete: sync its files to disk, then write `coba_complete.json` (each
    file and its size) atomically. Call it once every process has finished saving."""
    sizes = _checkpoint_files(directory)
    for relative in sizes:
        with open(os.path.join(directory, relative), "rb") as f:
            os.fsync(f.fileno())
    _write_json_atomically(os.path.join(directory, COMPLETE_FILE), {"files": sizes})
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def incomplete_reason(directory: str) -> str | None:
    """Why the checkpoint in `directory` is incomplete (a save cut short), or None when it is complete.

    With the marker: every file it lists is there with its size. Without, a save that writes one (its CoBA state says
    so) was cut short; a checkpoint from stock TRL or an earlier coba-trl is complete when `trainer_state.json`, the
    last file transformers writes, reads as JSON and each safetensors file is whole (its header and size agree)."""
    marker = os.path.join(directory, COMPLETE_FILE)
    if os.path.exists(marker):
        try:
            with open(marker) as f:
                listed = json.load(f)["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"{COMPLETE_FILE} is unreadable"
        present = _checkpoint_files(directory)
        for relative, size in listed.items():
            if relative not in present:
                return f"{relative} is missing"
            if present[relative] != size:
                return f"{relative} has {present[relative]} bytes, not the {size} it was saved with"
        return None
    try:
        with open(os.path.join(directory, TRAINER_STATE_FILE)) as f:
            json.load(f)
    except FileNotFoundError:
        return f"no {TRAINER_STATE_FILE}"
    except (OSError, ValueError):
        return f"{TRAINER_STATE_FILE} is cut short"
    for relative in _checkpoint_files(directory):
        if relative.endswith(".safetensors"):
            try:
                with safe_open(os.path.join(directory, relative), framework="pt"):
                    pass
            except Exception:  # safetensors raises its own SafetensorError, or OSError
                return f"{relative} is cut short"
    try:
        with open(os.path.join(directory, STATE_FILE)) as f:
            marked = json.load(f).get(MARKED_KEY, False)
    except (OSError, ValueError, AttributeError):
        marked = False  # no CoBA state (stock TRL): judged by TRL's files alone
    return f"no {COMPLETE_FILE}: the save stopped before its end" if marked else None


def latest_complete_checkpoint(output_dir: str, warn: Callable[[str], None] = logger.warning) -> str:
    """The highest-numbered complete `checkpoint-N` folder in `output_dir`, what `resume_from_checkpoint=True` resumes.

    Newer folders a save left incomplete are skipped, with one warning line (`warn`) naming them and the checkpoint
    used instead. A `ValueError` when `output_dir` holds no checkpoint, or no complete one.
    """
    pattern = re.compile(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)")
    names = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    steps = {int(m.group(1)): name for name in names if (m := pattern.fullmatch(name))}
    folders = [os.path.join(output_dir, steps[step]) for step in sorted(steps, reverse=True)]
    folders = [folder for folder in folders if os.path.isdir(folder)]
    torn = []
    for folder in folders:
        reason = incomplete_reason(folder)
        if reason is None:
            if torn:
                warn(f"Skipping {'; '.join(torn)}: a save cut short. Resuming from {folder}, the latest complete one.")
            return folder
        torn.append(f"{folder} ({reason})")
    if torn:
        raise ValueError(
            f"resume_from_checkpoint=True found no complete checkpoint in {output_dir}: {'; '.join(torn)}, each a save "
            "cut short. Delete them to train from the start."
        )
    raise ValueError(
        f"resume_from_checkpoint=True found no {PREFIX_CHECKPOINT_DIR}-N folder in {output_dir}. Train without "
        "resume_from_checkpoint to start from the beginning."
    )


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


@contextmanager
def saving(folder: str, state: dict, rows: list[dict] | None, accelerator, args, trainer_state):
    """Wrap TRL's save of checkpoint `folder` (the `with` body): the CoBA `state` (and this process's `rows` of the
    round in progress) first, the completion marker once every process has saved, TRL's rotation of older
    checkpoints (`save_total_limit`) only then, so that at every moment some checkpoint is complete."""
    shared_call(lambda: start_checkpoint(folder, state), accelerator, run_here=args.should_save)
    if rows is not None:  # inside a round: this process's rows not yet trained, which a resumed run trains on
        save_buffered_rows(folder, accelerator.process_index, rows)
    limit, args.save_total_limit = args.save_total_limit, None  # TRL's save rotates nothing
    try:
        yield
    finally:
        args.save_total_limit = limit
    accelerator.wait_for_everyone()  # every process's files are written before the marker that says so
    shared_call(lambda: write_complete_marker(folder), accelerator, run_here=args.should_save)
    if args.should_save:  # as TRL's save does, after the marker
        best = trainer_state.best_model_checkpoint
        rotate_checkpoints(os.path.dirname(folder), limit, best_model_checkpoint=best, use_mtime=True)
