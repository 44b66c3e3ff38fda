"""What the demo's command-line flags mean beyond their `CoBAConfig` field: where a run writes, and what it refuses.

- Output folder: the demo without flags writes to ``outputs/cpu_demo``. A run with flags that change the defaults,
  and no ``--output_dir``, writes to a folder named after those flags
  (``--budget_allocator knapsack --max_steps 40`` -> ``outputs/cpu_demo-budget_allocator_knapsack-max_steps_40``);
  a resumed run writes next to its checkpoint. No run replaces a finished run's results (``demo_summary.json``)
  unless ``--overwrite_output_dir`` is given.
- ``--save_steps N`` alone turns on step saving (the demo's default ``save_strategy`` is ``"no"``).
- ``--max_steps`` must be a positive number of RL steps.
- ``--resume_from_checkpoint DIR`` must name a checkpoint of a demo run: it holds the model, the CoBA state and the
  held-out accuracy measured before RL, so the warm start is not run again, and a model of the size the
  ``--demo_hidden_size``, ``--demo_num_layers`` and ``--demo_num_heads`` flags build. ``--resume_from_checkpoint true`` (the
  trainer's ``resume_from_checkpoint=True``) resumes from the latest complete checkpoint in the output folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from coba_trl.checkpoint import STATE_FILE, latest_complete_checkpoint
from coba_trl.demo.config import DEMO_OUTPUT_DIR, MODEL_SIZE, DemoArguments

SUMMARY_FILE = "demo_summary.json"
BEFORE_RL_FILE = "demo_before_rl.json"  # in every demo checkpoint: the accuracy before RL, for a resumed run
# Fields that say where a run writes or where it resumes from, not what it trains: they do not name its folder.
PLACEMENT_FIELDS = ("output_dir", "overwrite_output_dir", "resume_from_checkpoint", "config")
LONGEST_FOLDER_NAME = 120


def _slug(value) -> str:
    if isinstance(value, bool):  # as typed on the command line: --skip_settled_prompts true
        return str(value).lower()
    text = "_".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "none"


def flagged_output_dir(changed: dict[str, object], base: str = DEMO_OUTPUT_DIR) -> str:
    """The folder of a demo run whose flags changed the fields `changed` (name -> value, in the order given) from
    the run that writes to `base` (the demo's folder, or a recipe's)."""
    parts = [f"{name}_{_slug(value)}" for name, value in changed.items() if name not in PLACEMENT_FIELDS]
    if not parts:
        return base
    base = os.path.normpath(base)
    name = "-".join([os.path.basename(base), *parts])
    if len(name) > LONGEST_FOLDER_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: LONGEST_FOLDER_NAME - 9]}-{digest}"
    return os.path.join(os.path.dirname(base), name)


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuse to replace a finished run's results, unless `overwrite` (the ``--overwrite_output_dir`` flag)."""
    summary = os.path.join(output_dir, SUMMARY_FILE)
    if os.path.isfile(summary) and not overwrite:
        raise ValueError(
            f"output_dir {output_dir!r} already holds a finished demo run ({SUMMARY_FILE}). Pass --output_dir NEW_DIR "
            "to keep it, or --overwrite_output_dir to replace its results."
        )


def check_max_steps(max_steps: int) -> None:
    if max_steps <= 0:
        raise ValueError(
            f"max_steps is {max_steps}: the demo trains for a set number of RL steps. Pass a positive --max_steps "
            "(the demo's default is 100; its first epoch, 32 steps, splits the budget uniformly)."
        )


def resumes_latest(checkpoint: str | None) -> bool:
    """Whether ``--resume_from_checkpoint`` says ``true``: the latest complete checkpoint in the output folder, as
    `train(resume_from_checkpoint=True)` (a folder named ``true`` is still that folder)."""
    return checkpoint is not None and checkpoint.lower() == "true" and not os.path.isdir(checkpoint)


def check_resume(checkpoint: str | None, output_dir: str, demo_args: DemoArguments) -> None:
    """``--resume_from_checkpoint`` names a complete demo checkpoint (``true``: `output_dir` holds one) of a model
    of the size `demo_args` builds."""
    if not checkpoint:
        return
    if resumes_latest(checkpoint):
        checkpoint = latest_complete_checkpoint(output_dir, warn=lambda message: None)  # the run names what it skips
    check_checkpoint(checkpoint)
    check_model_size(checkpoint, demo_args)


def check_model_size(checkpoint: str, demo_args: DemoArguments) -> None:
    """The demo model saved in `checkpoint` has the size `demo_args` builds (an adapter's checkpoint is not read)."""
    path = os.path.join(checkpoint, "config.json")
    if not os.path.isfile(path):
        return
    with open(path) as handle:
        saved = json.load(handle)
    differ = {
        name: saved[key]
        for name, key in MODEL_SIZE.items()
        if saved.get(key, getattr(demo_args, name)) != getattr(demo_args, name)
    }
    if differ:
        both = ", ".join(f"{name} {getattr(demo_args, name)} (saved: {value})" for name, value in differ.items())
        raise ValueError(
            f"resume_from_checkpoint {checkpoint} holds a demo model of another size: {both}. Resume with "
            f"{' '.join(f'--{name} {value}' for name, value in differ.items())}, or start a new run (without "
            "--resume_from_checkpoint)."
        )


def check_checkpoint(checkpoint: str) -> None:
    """A demo checkpoint holds the CoBA state and the accuracy before RL (written when the demo saves)."""
    missing = [name for name in (STATE_FILE, BEFORE_RL_FILE) if not os.path.isfile(os.path.join(checkpoint, name))]
    if missing and os.path.isfile(os.path.join(checkpoint, SUMMARY_FILE)):
        raise ValueError(
            f"resume_from_checkpoint {checkpoint} is a finished demo run's output folder, not a checkpoint, and that "
            "run saved none (no checkpoint-N folder). Pass a checkpoint-N folder of a run made with --save_steps N."
        )
    if missing:
        raise ValueError(
            f"resume_from_checkpoint {checkpoint!r} is not a checkpoint of the CPU demo (missing: {', '.join(missing)}). "
            "Pass a checkpoint-N folder written by a demo run with --save_steps N."
        )
