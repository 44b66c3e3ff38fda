"""Console output of the CPU demo: one short line per logging step instead of TRL's full metrics dict.

TRL's progress callback prints every logged metric (about 55 keys) at every step. The demo swaps it for a callback
that prints what a person follows, on the main process only:

    [rl] step 10/100  reward 0.512  held-out acc 0.480  F_t 0.49  budget min/mean/max 2/8.0/32

and, in runs that refill or skip, what the round spent on that: `refills 2  skipped 3` (refill phases added, prompt
visits skipped).

In a log file or pipe the progress bar is left out (its redraws would be glued to the lines). Only the console
changes: every metric still goes to ``trainer_state.json`` (the log history) and to every
``report_to`` backend, whose callbacks run before this one.
"""

from __future__ import annotations

import sys

from transformers import PrinterCallback, ProgressCallback, Trainer


def format_log_line(logs: dict, step: int, max_steps: int) -> str | None:
    """The console line of one log record, or None for records that say nothing to follow."""
    if "train_runtime" in logs:
        return f"[rl] done: {step} steps in {logs['train_runtime']:.1f} s"
    parts = [f"[rl] step {step}/{max_steps}"]
    if "reward" in logs:
        parts.append(f"reward {logs['reward']:.3f}")
    if "heldout_accuracy" in logs:
        parts.append(f"held-out acc {logs['heldout_accuracy']:.3f}")
    if "coba/failure_rate" in logs:
        parts.append(f"F_t {logs['coba/failure_rate']:.2f}")
    if "budget/mean" in logs:
        parts.append(
            f"budget min/mean/max {logs['budget/min']:.0f}/{logs['budget/mean']:.1f}/{logs['budget/max']:.0f}"
        )
    elif "loss" in logs:
        parts.append("(no new rollouts: another update on the latest round's)")
    if "coba/refill_phases" in logs:
        parts.append(f"refills {logs['coba/refill_phases']:.0f}")
    if "coba/prompts_skipped" in logs:
        parts.append(f"skipped {logs['coba/prompts_skipped']:.0f}")
    return "  ".join(parts) if len(parts) > 1 else None


class CompactProgressCallback(ProgressCallback):
    """TRL's progress bar, with `format_log_line` written under it instead of the metrics dict."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        line = format_log_line(logs or {}, state.global_step, state.max_steps)
        if state.is_world_process_zero and self.training_bar is not None and line:
            self.training_bar.write(line)


class CompactPrinterCallback(PrinterCallback):
    """`format_log_line` for runs with ``disable_tqdm`` (no progress bar)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        line = format_log_line(logs or {}, state.global_step, state.max_steps)
        if state.is_world_process_zero and line:
            print(line, flush=True)


def use_compact_console(trainer: Trainer) -> None:
    """Replace the trainer's progress or printer callback with its compact version (added last, so it sees the
    held-out accuracy that the demo's accuracy callback adds to the record). Where the progress bar would not reach a
    terminal (a log file, a pipe), the lines are printed without it: a bar redrawn in a file leaves its fragments
    before every line."""
    bar = CompactProgressCallback if sys.stderr.isatty() else CompactPrinterCallback
    for stock, compact in ((ProgressCallback, bar), (PrinterCallback, CompactPrinterCallback)):
        if trainer.pop_callback(stock) is not None:
            trainer.add_callback(compact)
