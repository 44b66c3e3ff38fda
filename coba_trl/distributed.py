"""Steps that run on some processes only, with their errors shared: when one process fails, every process raises.

Process 0 plans each round, writes the allocation log and trims it on resume; the other processes wait for it in the
next collective. An exception raised there on process 0 alone would leave them blocked until the launcher's or
NCCL's timeout (up to 30 minutes of idle GPUs on a cluster). `shared_call` runs the step, then exchanges every
process's outcome in one collective, so all of them raise the same error within seconds. A check that every
process makes of what it alone holds (the rows its dataloader loaded) runs through `checked_everywhere`, for the same
reason: a failure seen on one process stops every process with the same message.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

from accelerate.utils import gather_object


def shared_call(fn: Callable[[], Any], accelerator, run_here: bool | None = None) -> Any:
    """Run `fn` where `run_here` (default: on process 0) and return process 0's result on every process.

    All processes must call it at the same point. If `fn` raised anywhere, every process raises: the failing process
    its own exception, the others a copy of the first failure (or a `RuntimeError` naming it when it cannot be
    copied), with a note saying which process failed and its traceback.
    """
    run_here = accelerator.is_main_process if run_here is None else run_here
    if accelerator.num_processes == 1:
        return fn() if run_here else None
    return _exchanged(fn, accelerator, run_here)[0]


def checked_everywhere(fn: Callable[[], Any], accelerator) -> Any:
    """Run `fn` on every process and return this process's own result; if it raised on any process, every process
    raises, as with `shared_call`. For a check of what each process holds (its dataloader's rows, say)."""
    if accelerator.num_processes == 1:
        return fn()
    return _exchanged(fn, accelerator, True)[accelerator.process_index]


def _exchanged(fn: Callable[[], Any], accelerator, run_here: bool) -> list:
    """Run `fn` where `run_here` and exchange every process's outcome in one collective: each process's result, in
    process order, or the failure every process raises."""
    outcome, error = (True, None), None
    if run_here:
        try:
            outcome = (True, fn())
        except Exception as caught:
            error = caught
            outcome = (False, _portable(caught, accelerator.process_index))
    outcomes = gather_object([outcome])
    if error is not None:
        raise error
    failures = [value for ok, value in outcomes if not ok]
    if failures:
        raise failures[0]
    return [value for _, value in outcomes]


def _portable(error: Exception, rank: int) -> Exception:
    """A copy of `error` that survives pickling, noting the process and the traceback where it was raised."""
    note = f"Raised on process {rank}:\n{''.join(traceback.format_exception(error))}"
    try:
        copy = pickle.loads(pickle.dumps(error))
    except Exception:
        copy = RuntimeError(f"{type(error).__name__} on process {rank}: {error}")
    copy.add_note(note)
    return copy


def leave_multiprocess_cpu_run() -> None:
    """On a multi-process CPU (gloo) run, destroy the process group and exit without interpreter finalization, which a
    gloo worker thread still releasing a collective can abort after the results are written (a PyTorch bug; see
    docs/training.md, "Teardown"). Single-process runs return normally."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"):
        return
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
