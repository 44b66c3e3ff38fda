"""Several trainers resident at once, trained one round at a time in an order the caller chooses (`gpu_check_speed`).

Each trainer's `train()` runs in a thread of its own that pauses at the end of every optimizer step (one generation
round here) until it is given its next turn, so at most one trainer runs at any moment and each keeps its model,
optimizer state and data order between its rounds. A round's time runs from the moment the turn is given to the end
of its optimizer step, the device synchronised: the trainer's own bookkeeping between two steps (logging, the next
batch) is counted in the round after it.
"""

from __future__ import annotations

import threading

import torch
from transformers import TrainerCallback

from gpu_check.trainers import clock


class Turn(TrainerCallback):
    """Hands control back at the start of training and at the end of every step, then waits for the next turn."""

    def __init__(self, device: torch.device):
        self.device = device
        self.go, self.done = threading.Event(), threading.Event()
        self.stop, self.ended_at = False, 0.0

    def pause(self) -> None:
        self.ended_at = clock(self.device)
        self.done.set()
        self.go.wait()
        self.go.clear()

    def on_train_begin(self, args, state, control, **kwargs):
        self.pause()

    def on_step_end(self, args, state, control, **kwargs):
        self.pause()
        if self.stop:
            control.should_training_stop = True


class Resident:
    """One trainer trained in its own thread, a round per `round()`; `run_part(name, function)` runs `train()` there
    (the speed section's `Parts.run`, so that an exception is recorded and the other trainers go on)."""

    def __init__(self, name: str, trainer, device: torch.device, run_part):
        self.name, self.trainer, self.device = name, trainer, device
        self.turn = Turn(device)
        trainer.add_callback(self.turn)
        self.finished = False
        self.thread = threading.Thread(target=self._train, args=(run_part,), name=f"arm-{name}", daemon=True)
        self.thread.start()
        self._wait()  # the trainer's set-up (dataloader, optimizer) runs now, before any other trainer's round

    def _train(self, run_part) -> None:
        try:
            run_part(self.name, self.trainer.train)
        finally:
            self.finished = True
            self.turn.done.set()

    def _wait(self) -> None:
        self.turn.done.wait()
        self.turn.done.clear()

    def round(self) -> dict | None:
        """Train one round: its seconds and, on CUDA, the peak memory it allocated above what was allocated when it
        began (every resident trainer's weights and optimizer state included in that start); None if the trainer
        raised or ended."""
        if self.finished:
            return None
        memory = None
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            memory = torch.cuda.memory_allocated(self.device)
        start = clock(self.device)
        self.turn.go.set()
        self._wait()
        if self.finished:
            return None
        result = {"round_s": self.turn.ended_at - start}
        if memory is not None:
            result["peak_above_round_start_gib"] = (torch.cuda.max_memory_allocated(self.device) - memory) / 2**30
        return result

    def close(self) -> None:
        """End training after the round it last trained and wait for its thread."""
        self.turn.stop = True
        self.turn.go.set()
        self.thread.join()
