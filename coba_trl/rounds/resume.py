"""Where a resumed run picks up its rounds: the micro-step, the round a checkpoint was saved inside of, and its log.

A checkpoint holds TRL's micro-step counter as the saving run counted it (TRL does not save it), the plan of the round
in progress and, saved inside a round, each process's rows of it not yet trained (`coba_trl.checkpoint`). With the
saving run's batch layout (`batch_layout`) a resumed run continues at the saved micro-step and trains the saved rows;
without them it regenerates that round with its saved plan, not observing it a second time, or, when rounds draw their
prompts (refill, skipping), goes on with the epoch's next prompts. With another layout (processes, batch size,
steps per generation, ...) it never trains the saved rows nor replays the saved plan: it generates its rounds for its
own layout from where TRL's dataloader resumes, as GRPOTrainer does. Either way the allocation log keeps the rounds the
saving run had started when it saved (counted in its own micro-steps) and nothing after them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from coba_trl.checkpoint import STATE_FILE
from coba_trl.rounds.source import inside_a_round

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class ResumePoint:
    """How a resumed run continues (module docstring)."""

    micro_step: int  # TRL's micro-step counter to continue from
    train_saved_rows: bool  # the checkpoint's rows of the round in progress are trained, not generated again
    replay_round: dict | None  # the saved plan, for the round regenerated at that micro-step
    log_until: int  # the allocation log keeps the rounds that started before this micro-step of the saving run


def resume_point(
    checkpoint: str, state: dict | None, layout: dict, resumed_at: int, rows_saved: bool, draws_prompts: bool
) -> ResumePoint:
    """Where a run with batch `layout` resumes from `checkpoint`, whose CoBA state is `state` (None: none saved);
    `resumed_at` is the micro-step where TRL's fast-forward puts the dataloader, `rows_saved` whether the checkpoint
    holds this run's processes' rows of a round in progress."""
    if state is None:
        logger.warning(
            f"{os.path.join(checkpoint, STATE_FILE)} not found: resuming with an empty pass-rate history and "
            "capability estimate."
        )
    if state is None or "micro_step" not in state:
        # No saved micro-step (no CoBA state, or one from coba-trl 0.1): continue from where the Trainer's
        # fast-forward puts the dataloader, so the round sampler's schedule still names the prompts it loads.
        logger.warning(f"{checkpoint} has no saved micro-step: a round interrupted by it is allocated afresh.")
        return ResumePoint(resumed_at, False, None, resumed_at)
    saved_at = state["micro_step"]
    saved = {**layout, **state.get("layout", {})}  # a checkpoint without a layout: this run's
    changed = [f"{name} {saved[name]} -> {value}" for name, value in layout.items() if saved[name] != value]
    micro_step = resumed_at if changed else saved_at
    if not inside_a_round(saved_at, saved["steps_per_generation"] * saved["num_iterations"]):
        return ResumePoint(micro_step, False, None, saved_at)
    if changed:
        logger.warning(
            f"{checkpoint} was saved inside a round with another batch layout ({', '.join(changed)}): its rows are "
            "not trained; the resumed run generates its rounds for this layout from where the dataloader resumes, "
            "as GRPOTrainer does."
        )
        return ResumePoint(micro_step, False, None, saved_at)
    if rows_saved:
        return ResumePoint(micro_step, True, None, saved_at)
    if draws_prompts:
        logger.warning(
            f"{checkpoint} was saved inside a round without this run's saved rows of it: the resumed run goes on "
            "with the next prompts of the epoch."
        )
        return ResumePoint(micro_step, False, None, saved_at)
    return ResumePoint(micro_step, False, state["round"], saved_at)  # regenerated with its saved plan
