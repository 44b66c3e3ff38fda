"""Progress of long work outside training (sampling an evaluation): a bar on a terminal, plain lines in a log.

On a terminal this is transformers' own tqdm bar (`transformers.utils.logging.tqdm`), as the weight-loading bar and
TRL's trainer show. A bar redraws itself with carriage returns, which a redirected stderr (`> run.log 2>&1`, a job
scheduler's log) keeps as fragments; there `ProgressLines` prints a whole line each time another tenth of the work is
done, with the time left. Both follow transformers' switch: `transformers.utils.logging.disable_progress_bar()` or
`HF_HUB_DISABLE_PROGRESS_BARS=1` silences them. The short steps around it (loading weights, writing a file) show
transformers' and datasets' own bars; `no_bars_in_a_log` turns those off in a log.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time

from tqdm import tqdm


class ProgressLines:
    """A counter with tqdm's `update` / `close` that writes `desc: done/total unit (p%), elapsed, about T left` to
    stderr each time another `every` share of `total` is done, and once at the end."""

    def __init__(self, total: int, desc: str, unit: str, every: float = 0.1):
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.done, self.shown, self.start = 0, 0, time.monotonic()

    def update(self, n: int = 1):
        self.done += n
        step = math.floor(self.done / self.total / self.every + 1e-9)
        if self.done >= self.total or step > self.shown:
            self.shown = step
            elapsed = time.monotonic() - self.start
            left = elapsed * (self.total - self.done) / self.done
            print(
                f"{self.desc}: {self.done}/{self.total} {self.unit} ({self.done / self.total:.0%}), "
                f"{tqdm.format_interval(elapsed)} elapsed, about {tqdm.format_interval(left)} left",
                file=sys.stderr,
                flush=True,
            )

    def close(self):
        pass


def progress(total: int, desc: str, unit: str):
    """transformers' tqdm bar over `total` units on a terminal, `ProgressLines` when stderr is not one, nothing when
    transformers' progress bars are disabled."""
    from transformers.utils import logging

    if logging.is_progress_bar_enabled() and not sys.stderr.isatty():
        return ProgressLines(total, desc, unit)
    return logging.tqdm(total=total, desc=desc, unit=f" {unit}")


@contextlib.contextmanager
def no_bars_in_a_log():
    """Inside, transformers' and datasets' own progress bars are off when stderr is not a terminal; after, as before."""
    import datasets
    from transformers.utils import logging

    switches = [
        (logging.is_progress_bar_enabled, logging.disable_progress_bar, logging.enable_progress_bar),
        (datasets.is_progress_bar_enabled, datasets.disable_progress_bars, datasets.enable_progress_bars),
    ]
    off = [] if sys.stderr.isatty() else [(disable, enable) for enabled, disable, enable in switches if enabled()]
    for disable, _ in off:
        disable()
    try:
        yield
    finally:
        for _, enable in off:
            enable()
