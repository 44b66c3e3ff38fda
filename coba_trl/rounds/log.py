"""The allocation log: one JSON line per generation round in `<output_dir>/coba_rounds.jsonl` (process 0 writes it).

Each line holds what the round's allocation was computed from and what it decided, so anyone can recompute it
independently (for instance with `coba_trl.allocation.coba_allocate` and the logged `alpha` / `beta`) and compare
runs round by round:

- `micro_step`, `global_step`: where the round started (TRL's micro-step counter and optimizer step);
- `prompt_ids`: the round's distinct prompts in batch order (dataset row indices without `prompt_id_column`);
- `prior_pass_rates`: the offline priors (`prior_pass_rate_column`), `null` without that column;
- `screen_rollouts`, `screen_successes`: with `two_phase_rounds`, the phase-1 completions per prompt and their
  successes (`null` otherwise);
- `pass_rates`: the estimates the allocator received (history + prior, and phase 1's results with two phases;
  `null` = unseen);
- `allocator`: the allocator's metrics for this decision: F_t and the smoothed F_bar it used, `alpha` / `beta` for
  CoBA, and what it reported (`unallocated`, band counts, ...);
- `allocated`: the allocator's counts as returned; `group_sizes`: the round's final group sizes (after the top-up of
  stranded units and, with `rescue`, the rescue); `rescued`: the prompts the rescue gave rows to (`null` unless
  `rescue`);
- `group_weighting`: `"row"` or `"prompt"` (how much each group weighed in the loss);
- `successes`: successes per prompt over the whole group (all phases), and `scored_rollouts`: its rows that had a
  success reward (not NaN): the values the pass-rate history recorded;
- `process_groups`: per generation phase (one, or the screening and the rest with `two_phase_rounds`), per process,
  the `[prompt position, rows]` of each group it generated: the prompts its backend prefilled (a group split over
  two processes appears on both);
- rounds that draw their prompts (`zero_variance_groups="refill"`, `skip_settled_prompts`) also give
  `skipped_prompts` (skipped while drawing the batch), `discarded` (with refill: the groups without spread) and
  `refills` (each further batch of replacement prompts, with the keys above), `rows_trained` and `bound_reached`.

A run resumed from a checkpoint keeps the lines of the rounds that started before the checkpoint's optimizer step
(`global_step`, which never runs backwards; micro-steps restart elsewhere when a resume changes
`gradient_accumulation_steps`) and continues the file; the round it was saved inside of (trained from its saved rows,
or regenerated with the same plan and not observed again) is not written twice. So the file of a resumed run has the
same plans as the file of the run it continues. A fresh run starts a new file.

A run killed while appending a line can leave that last line half-written. A round's line is written during the
round's first micro-step, before any checkpoint the run could resume from inside or after that round, so a resumed
run regenerates that round and writes its line anew: `RoundLog.start` and `read_rounds` skip a torn last line with a
warning. A line that does not parse anywhere else means the file was edited or damaged: that is a `ValueError` naming
the file and the line.
"""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np

ROUNDS_FILE = "coba_rounds.jsonl"

logger = logging.getLogger(__name__)


def plain(values) -> list | None:
    """A JSON-ready list: numpy scalars as Python numbers, NaN as null; None stays None."""
    if values is None:
        return None
    return [None if isinstance(value, float) and math.isnan(value) else value for value in np.asarray(values).tolist()]


def finite(metrics: dict) -> dict:
    """The finite numeric entries of an allocator's metrics (NaN = not computed this round)."""
    return {key: float(value) for key, value in metrics.items() if value is not None and math.isfinite(value)}


class RoundLog:
    """Appends round records to `directory/coba_rounds.jsonl`; `start` decides between a fresh and a resumed file."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, ROUNDS_FILE)

    def start(self, resume_global_step: int | None = None) -> None:
        """A fresh run empties the file; a resumed one keeps the rounds that started before optimizer step
        `resume_global_step`, the checkpoint's."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        kept = []
        if resume_global_step is not None and os.path.exists(self.path):
            kept = [line for line, record in _parse(self.path) if record["global_step"] < resume_global_step]
        temporary = f"{self.path}.tmp"
        with open(temporary, "w") as f:
            f.writelines(kept)
        os.replace(temporary, self.path)

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def read_rounds(directory_or_file: str) -> list[dict]:
    """The records of an allocation log (a run's output_dir or the file itself), in round order."""
    path = directory_or_file
    if os.path.isdir(path):
        path = os.path.join(path, ROUNDS_FILE)
    return [record for _, record in _parse(path)]


def generation_batches(records: list[dict]):
    """Every generation batch of an allocation log's `records`, in the order generated: each round's own batch (its
    record) and then its refill batches (`refills`), each with its `prompt_ids`, `group_sizes`, `successes`,
    `scored_rollouts` and `pass_rates`."""
    for record in records:
        yield record
        yield from record.get("refills", [])


def _parse(path: str) -> list[tuple[str, dict]]:
    """Each line of the file at `path` with its record, without a torn last line (skipped with a warning)."""
    with open(path) as f:
        lines = [(number, line) for number, line in enumerate(f, start=1) if line.strip()]
    records = []
    for position, (number, line) in enumerate(lines):
        try:
            records.append((line if line.endswith("\n") else line + "\n", json.loads(line)))
        except json.JSONDecodeError as error:
            if position == len(lines) - 1:
                logger.warning(
                    f"{path}: line {number}, the last one, is incomplete (a run stopped while writing it); skipping it."
                )
                break
            raise ValueError(
                f"{path}: line {number} of {len(lines)} is not a JSON record ({error}), and it is not the last line, "
                "so it is not a write a stopped run left unfinished: the file was edited or damaged. Restore the "
                "file, or delete that line to keep the other rounds' records."
            ) from error
    return records
