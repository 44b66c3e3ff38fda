"""What a checkpoint carries besides TRL's files (`coba_state.json`, written atomically), and when it is complete.

Two calls: `saving` wraps TRL's save, `restore` reads a checkpoint back into the round runner
(`coba_trl.rounds.runner.RoundRunner`). Besides TRL's own files a CoBA checkpoint holds what the next allocations
depend on: the allocator (F_t window -> alpha_t, beta_t), the pass-rate history p_i, TRL's micro-step counter (not
checkpointed by TRL, so a resumed run would otherwise put its round boundaries in the wrong place), the plan of the
round in progress, what the run generated and trained so far and, for rounds that draw their prompts (refill,
skipping), the round source's cursor and the skip state, and the batch layout (`batch_layout`). A checkpoint saved
inside a round also holds each process's rows not yet trained (`coba_rows_<rank>.pt`), which a run resumed with the
same layout trains on; without them it regenerates that round with the same group sizes for the same prompts,
without observing it a second time (docs/training.md, "Checkpoints and exact resume"). A run resumed with another
layout (processes, batch size, steps per generation, ...) never trains the saved rows: it regenerates the round for
its own layout where TRL's dataloader resumes, as GRPOTrainer does.

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
import math
import os
import re
import tempfile
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import torch
from safetensors import safe_open
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from coba_trl.allocation.history import prompt_id_from_json
from coba_trl.distributed import shared_call

STATE_FILE = "coba_state.json"
STATE_VERSION = 2
MARKED_KEY = "complete_marker"  # in the CoBA state of a save that ends by writing COMPLETE_FILE
COMPLETE_FILE = "coba_complete.json"  # written last: the checkpoint's files and their sizes
TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME, the last file its save writes

logger = logging.getLogger(__name__)


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


ROWS_FILE = "coba_rows_{rank}.pt"  # a process's generated rows not yet trained, in a checkpoint saved inside a round


def save_buffered_rows(directory: str, rank: int, batches: list[dict]) -> None:
    """Save process `rank`'s rows of the round in progress that are not yet trained (TRL's buffered micro-batches)."""
    os.makedirs(directory, exist_ok=True)
    cpu = [{k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()} for batch in batches]
    torch.save(cpu, os.path.join(directory, ROWS_FILE.format(rank=rank)))


def load_buffered_rows(directory: str, rank: int, num_processes: int) -> list[dict] | None:
    """Process `rank`'s saved rows, or None when the checkpoint has none for this number of processes (a checkpoint
    saved at a round's end, by an earlier coba-trl, or with another number of processes): the round is regenerated."""
    names = {name for name in os.listdir(directory) if re.fullmatch(r"coba_rows_\d+\.pt", name)}
    if names != {ROWS_FILE.format(rank=r) for r in range(num_processes)}:
        if names:
            logger.warning(
                f"{directory} holds the rows of a round in progress saved by {len(names)} process(es), not "
                f"{num_processes}: the round is generated again."
            )
        return None
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
    """Begin a checkpoint save into `directory`: drop what would make a half-rewritten folder look complete (the
    marker and `trainer_state.json` of an earlier save into the same folder, which this save replaces), then write
    the CoBA state."""
    for name in (COMPLETE_FILE, TRAINER_STATE_FILE):
        if os.path.exists(os.path.join(directory, name)):
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


# What a process's saved rows of a round depend on: a resume with other values regenerates the round.
LAYOUT_FIELDS = (
    "per_device_train_batch_size",
    "steps_per_generation",
    "num_iterations",
    "gradient_accumulation_steps",
    "num_generations",
)


def batch_layout(args, num_processes: int) -> dict:
    """The batch layout of a run: its number of processes and the `LAYOUT_FIELDS` of its config."""
    return {"num_processes": num_processes, **{name: int(getattr(args, name)) for name in LAYOUT_FIELDS}}


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


def restore(checkpoint: str, runner, layout: dict, accelerator, global_step: int, warn=logger.warning):
    """Load `checkpoint`'s CoBA state into `runner`; returns (TRL's micro-step counter, this process's rows of the
    round in progress to train, on the accelerator's device, or None to generate the next round)."""
    state = load_state(checkpoint)
    resumed_at = runner.source.fast_forward_micro_step(global_step, layout["gradient_accumulation_steps"])
    if state is None:
        warn(
            f"{os.path.join(checkpoint, STATE_FILE)} not found: resuming with an empty pass-rate history and "
            "capability estimate."
        )
    else:
        runner.load_state_dict(state)
    if state is None or "micro_step" not in state:
        # No saved micro-step (no CoBA state, or one from coba-trl 0.1): continue from where the Trainer's
        # fast-forward puts the dataloader, so the round sampler's schedule still names the prompts it loads.
        warn(f"{checkpoint} has no saved micro-step: a round interrupted by it is allocated afresh.")
        return resumed_at, None
    saved = {**layout, **state.get("layout", {})}  # a checkpoint without a layout: this run's
    changed = [f"{name} {saved[name]} -> {value}" for name, value in layout.items() if saved[name] != value]
    micro_step = resumed_at if changed else state["micro_step"]
    if state["micro_step"] % (saved["steps_per_generation"] * saved["num_iterations"]) == 0:
        return micro_step, None  # saved at a round's end
    if changed:
        warn(
            f"{checkpoint} was saved inside a round with another batch layout ({', '.join(changed)}): its rows are "
            "not trained; the resumed run generates its rounds for this layout from where the dataloader resumes, "
            "as GRPOTrainer does."
        )
    else:
        rows = load_buffered_rows(checkpoint, accelerator.process_index, accelerator.num_processes)
        if rows is not None:
            device = accelerator.device
            moved = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()} for batch in rows]
            return micro_step, moved
        if runner.draws_prompts:
            warn(
                f"{checkpoint} was saved inside a round without this run's saved rows of it: the resumed run goes on "
                "with the next prompts of the epoch."
            )
    if not runner.draws_prompts and state["round"] is not None:  # regenerated with its saved plan, if it recurs
        runner.replay_round = state["round"]
    return micro_step, None
