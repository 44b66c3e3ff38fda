"""Before a resumed run loads anything: what it may change from the run that saved its checkpoint.

Not the allocator: the pass-rate state a checkpoint holds is the one its allocator reads, so another
`budget_allocator` is refused, naming both. The batch layout may change (docs/training.md, "Exact resume"): the
resumed run then generates its rounds for its own layout rather than continuing the saved run's rounds exactly, and
says so in one line.
"""

from __future__ import annotations

from coba_trl.checkpoint import load_state
from coba_trl.rounds.resume import batch_layout, layout_changes


def check_resumed_settings(checkpoint: str, args, num_processes: int) -> str | None:
    """A `ValueError` when `checkpoint` was saved by a run with another `budget_allocator` than `args`; the one line
    naming the batch-layout fields that differ (saved -> now) when some do, else None."""
    state = load_state(checkpoint)
    if state is None:
        return None
    saved = state.get("allocator", {}).get("allocator", args.budget_allocator)
    if saved != args.budget_allocator:
        raise ValueError(
            f"budget_allocator is {args.budget_allocator!r}, but resume_from_checkpoint {checkpoint} was saved by a "
            f"run with budget_allocator {saved!r}, whose pass-rate state only that allocator reads. Resume with "
            f"--budget_allocator {saved}, or start a new run (without --resume_from_checkpoint)."
        )
    changed = layout_changes(state, batch_layout(args, num_processes))
    if not changed:
        return None
    return (
        f"resume_from_checkpoint {checkpoint} was saved with another batch layout ({', '.join(changed)}): the "
        "resumed run generates its rounds for this layout from where the dataloader resumes, as GRPOTrainer does, "
        "so it does not repeat the rounds the saved run would have made."
    )
