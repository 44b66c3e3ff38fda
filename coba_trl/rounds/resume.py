"""Where a resumed run picks up its rounds: the micro-step, the round a checkpoint was saved inside of, and its log.

Every decision about what a checkpoint keeps of the round in progress and how a run resumes from it is made here; the
checkpoint module only writes and reads the files. A checkpoint holds TRL's micro-step counter as the saving run
counted it (TRL does not save it), the plan of the round in progress and, saved inside a round, each process's rows
of it not yet trained (`rows_to_save`). With the saving run's batch layout (`batch_layout`) a resumed run continues
at the saved micro-step and trains the saved rows when every one of its processes has them; without them it
regenerates that round with its saved plan, not observing it a second time, or, when rounds draw their prompts
(refill, skipping), goes on with the epoch's next prompts. With another layout (processes, batch size, steps per
generation, ...) it never trains the saved rows nor replays the saved plan: it generates its rounds for its own
layout from where TRL's dataloader resumes, as GRPOTrainer does, and trains every row of each round it generates,
also of one generated where the dataloader resumes inside a round of the new layout. Either way the allocation log
keeps the rounds that started before the checkpoint's optimizer step, the one counter that never runs backwards
(micro-steps restart elsewhere when `gradient_accumulation_steps` changes), and nothing after them.
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


def saved_layout(state: dict, layout: dict) -> dict:
    """The batch layout of the run that saved CoBA `state`; for a field the state was saved without (every field of
    a state saved without its layout), the value of this run's `layout`."""
    return {**layout, **state.get("layout", {})}


def layout_changes(state: dict, layout: dict) -> list[str]:
    """The batch-layout fields a run of `layout` changes from the run that saved CoBA `state` (`saved_layout`), as
    "name saved -> now" (none for a state saved without its layout)."""
    saved = saved_layout(state, layout)
    return [f"{name} {saved[name]} -> {value}" for name, value in layout.items() if saved[name] != value]


def rows_to_save(micro_step: int, repeat_count: int, buffered: list[dict] | None) -> list[dict] | None:
    """What a checkpoint saved before training micro-step `micro_step` keeps of the round in progress: TRL's buffered
    micro-batches (`buffered`) when the save falls inside a round of `repeat_count` micro-steps, else None."""
    return buffered if inside_a_round(micro_step, repeat_count) else None


@dataclass(frozen=True)
class ResumePoint:
    """How a resumed run continues (module docstring)."""

    micro_step: int  # TRL's micro-step counter to continue from
    train_saved_rows: bool  # the checkpoint's rows of the round in progress are trained, not generated again
    replay_round: dict | None  # the saved plan, for the round regenerated at that micro-step
    log_until: int  # the allocation log keeps the rounds that started before this optimizer step


def resume_point(
    checkpoint: str,
    state: dict | None,
    layout: dict,
    global_step: int,
    resumed_at: int,
    saved_row_ranks: set[int],
    draws_prompts: bool,
) -> ResumePoint:
    """Where a run with batch `layout` resumes from `checkpoint`, saved after `global_step` optimizer steps, whose CoBA
    state is `state` (None: none saved); `resumed_at` is the micro-step where TRL's fast-forward puts the dataloader,
    `saved_row_ranks` the processes whose rows of a round in progress the checkpoint holds."""
    if state is None:
        logger.warning(
            f"{os.path.join(checkpoint, STATE_FILE)} not found: resuming with an empty pass-rate history and "
            "capability estimate."
        )
    if state is None or "micro_step" not in state:
        # No saved micro-step (no CoBA state, or one from coba-trl 0.1): continue from where the Trainer's
        # fast-forward puts the dataloader, so the round sampler's schedule still names the prompts it loads.
        logger.warning(f"{checkpoint} has no saved micro-step: a round interrupted by it is allocated afresh.")
        return ResumePoint(resumed_at, False, None, global_step)
    saved_at = state["micro_step"]
    saved = saved_layout(state, layout)
    changed = layout_changes(state, layout)
    if changed:  # rounds of this layout start where the dataloader resumes, each trained whole
        repeat_count = layout["steps_per_generation"] * layout["num_iterations"]
        micro_step = resumed_at - resumed_at % repeat_count
    else:
        micro_step = saved_at
    if not inside_a_round(saved_at, saved["steps_per_generation"] * saved["num_iterations"]):
        return ResumePoint(micro_step, False, None, global_step)
    if changed:
        logger.warning(
            f"{checkpoint} was saved inside a round with another batch layout ({', '.join(changed)}): its rows are "
            "not trained; the resumed run generates its rounds for this layout from where the dataloader resumes, "
            "as GRPOTrainer does."
        )
        return ResumePoint(micro_step, False, None, global_step)
    if saved_row_ranks == set(range(layout["num_processes"])):
        return ResumePoint(micro_step, True, None, global_step)
    if draws_prompts:
        logger.warning(
            f"{checkpoint} was saved inside a round without this run's saved rows of it: the resumed run goes on "
            "with the next prompts of the epoch."
        )
        return ResumePoint(micro_step, False, None, global_step)
    return ResumePoint(micro_step, False, state["round"], global_step)  # regenerated with its saved plan
