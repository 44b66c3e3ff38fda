"""What a run spends and what reaches the loss: each round's counts, the run's totals, and the warnings about them.

`spending_metrics` are a round's logged counts (`coba/rollouts_generated`, `coba/rows_trained`,
`coba/rows_with_spread`, and with refill `coba/refill_phases`, `coba/refill_bound_reached`). `Spending` adds them up
over the run (saved in every checkpoint, so a resumed run goes on counting), gives the end-of-run line
(`summary_line`) and the warning a run gets when refill runs away (`runaway_warning`): its bound reached in
`RUNAWAY_ROUNDS` rounds in a row, or a round that trained no row from a group with spread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

RUNAWAY_ROUNDS = 3  # refill rounds in a row at their bound that earn a warning


def spending_metrics(plan, scored, mode: str, chosen, refill_phases: int) -> dict:
    """What a round spent and what reached the loss: `coba/rollouts_generated` (completions of every batch and phase,
    all processes), `coba/rows_trained` (rows whose loss mask is not zeroed), `coba/rows_with_spread` (trained rows
    of groups with spread) and, with refill (`chosen`, `coba_trl.rounds.refill.ChosenRows`), `coba/refill_phases`
    and `coba/refill_bound_reached`."""
    sizes = np.asarray(plan.group_sizes)
    flat = scored.zero_spread.cpu().numpy()
    generated, with_spread = float(sizes.sum()), float(sizes[~flat].sum())
    metrics = {"coba/rollouts_generated": generated}
    if chosen is not None:
        metrics["coba/rows_trained"] = metrics["coba/rows_with_spread"] = float(len(chosen.kept))
        metrics["coba/refill_phases"] = float(refill_phases)
        metrics["coba/refill_bound_reached"] = float(chosen.bound_reached)
    else:
        metrics["coba/rows_trained"] = with_spread if mode == "drop" else generated
        metrics["coba/rows_with_spread"] = with_spread
    return metrics


def counted(number: int, noun: str) -> str:
    """`number` and `noun`, plural unless it is 1: "1 round", "3 rounds"."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


@dataclass
class Spending:
    """The run's totals of the rounds' `spending_metrics` (all processes, every round since the run started)."""

    rounds: int = 0
    generated: int = 0  # completions generated, every phase and batch
    rows_trained: int = 0
    rows_with_spread: int = 0
    prompts_skipped: int = 0  # prompt visits skipped before generation
    bound_rounds: int = 0  # refill rounds that reached max_refill_phases
    bound_streak: int = 0  # the latest rounds, in a row, that reached it
    unspread_round: bool = False  # the latest round trained no row from a group with spread

    def add(self, metrics: dict) -> None:
        """Count one round's `spending_metrics` (with `coba/prompts_skipped` when the round drew its prompts)."""
        self.rounds += 1
        self.generated += int(metrics["coba/rollouts_generated"])
        self.rows_trained += int(metrics["coba/rows_trained"])
        self.rows_with_spread += int(metrics["coba/rows_with_spread"])
        self.prompts_skipped += int(metrics.get("coba/prompts_skipped", 0))
        bound = bool(metrics.get("coba/refill_bound_reached", 0))
        self.bound_rounds += bound
        self.bound_streak = self.bound_streak + 1 if bound else 0
        self.unspread_round = metrics["coba/rows_with_spread"] == 0

    def runaway_warning(self, refill: bool, max_refill_phases: int, success_name: str) -> str | None:
        """The warning for a run whose rounds teach nothing: refill at its bound `RUNAWAY_ROUNDS` rounds in a row, or a
        round without a trained row from a group with spread. None otherwise (the runner gives it once)."""
        if not (self.bound_streak >= RUNAWAY_ROUNDS or self.unspread_round):
            return None
        if self.unspread_round:
            what = f"Round {self.rounds} trained no row from a group with spread (every group was rewarded alike)"
        else:
            bound = f"its bound (max_refill_phases={max_refill_phases})"
            what = f"Refill reached {bound} in {self.bound_streak} rounds in a row"
        fix = "Check that the success reward"
        if refill:
            fix = (
                f"Refill generates up to max_refill_phases={max_refill_phases} more batches a round while groups "
                "have no spread: lower it to spend less on such rounds. Check that the success reward"
            )
        return (
            f"{what}: {self.generated:,} completions generated so far, {self.rows_with_spread:,} trained rows with "
            f"spread. {fix} {success_name!r} can both succeed and fail on these prompts (one that never succeeds, "
            "or always does, teaches nothing), and that success_threshold separates its values. This warning is "
            "given once."
        )

    def summary_line(self) -> str:
        """The end-of-run line: what the run generated, trained and skipped."""
        per_row = f"{self.generated / self.rows_with_spread:.2f}" if self.rows_with_spread else "n/a"
        return (
            f"[coba] {self.generated:,} completions generated in {counted(self.rounds, 'round')}, "
            f"{self.rows_trained:,} rows trained, {self.rows_with_spread:,} with spread ({per_row} generated per trained "
            f"row with spread), {counted(self.prompts_skipped, 'prompt visit')} skipped, "
            f"{counted(self.bound_rounds, 'round')} at the refill bound"
        )

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict | None, rollouts_generated: int = 0) -> None:
        """Restore the totals; a checkpoint of an earlier coba-trl has only its `rollouts_generated`."""
        if state is None:
            state = {"generated": int(rollouts_generated)}
        state = {key: value for key, value in state.items() if key in asdict(Spending())}  # "warned": the runner's
        for key, value in {**asdict(Spending()), **state}.items():
            setattr(self, key, type(getattr(Spending(), key))(value))
