"""The training sampler of `CoBAGRPOTrainer`: each round's distinct prompts, epoch-aware, for any number of processes.

TRL's `RepeatSampler` draws a new permutation from one generator at every pass, so a run resumed in epoch e replays
epoch 0's order (docs/training.md, "Checkpoints and exact resume"). `RoundSampler` computes epoch e's order from the
seed and e alone: the (e + 1)-th permutation drawn from a generator seeded with `seed`, which is exactly the order an
uninterrupted `RepeatSampler` yields in epoch e. Uniform CoBA therefore still sees GRPO's prompts in GRPO's order, and a
resumed run sees the prompts the uninterrupted run saw.

A round is M distinct prompts (mini_repeat_count 1: the allocator sets the repeats). Each process loads
ceil(M / P) of them; when P does not divide M the round is padded with repeats of its own first prompts, and the
trainer drops the padding after gathering (the gathered order is the sampler's order). Every round is yielded
`repeat_count` times in a row (steps_per_generation * num_iterations), as TRL's sampler does, so the Trainer's step
counting holds: the dataloader batch of micro-step s belongs to round s // repeat_count of the run.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import Sampler


class RoundSampler(Sampler[int]):
    """Yields, per round, `prompts_per_round` distinct dataset indices padded to a multiple of `num_processes`.

    Args:
        num_samples: Length of the dataset. Trailing prompts that do not fill a round are dropped each epoch.
        prompts_per_round: M, the distinct prompts of one generation round.
        num_processes: P; a round occupies `P * ceil(M / P)` sampler positions.
        repeat_count: How many times each round is yielded in a row (steps_per_generation * num_iterations).
        shuffle: Draw a permutation per epoch (else dataset order).
        seed: Seed of the permutations; epoch e uses the (e + 1)-th draw.
    """

    def __init__(
        self,
        num_samples: int,
        prompts_per_round: int,
        num_processes: int = 1,
        repeat_count: int = 1,
        shuffle: bool = True,
        seed: int = 0,
    ):
        if num_samples < prompts_per_round:
            raise ValueError(
                f"train_dataset has {num_samples} prompts, fewer than the {prompts_per_round} distinct prompts of one "
                "generation round (generation_batch_size / num_generations). Add prompts or lower "
                "per_device_train_batch_size / steps_per_generation."
            )
        self.num_samples = num_samples
        self.prompts_per_round = prompts_per_round
        self.num_processes = num_processes
        self.repeat_count = repeat_count
        self.shuffle = shuffle
        self.seed = seed
        self.per_process = math.ceil(prompts_per_round / num_processes)
        self.rounds_per_epoch = num_samples // prompts_per_round
        self.epoch = 0
        self._cached: tuple[int, list[int]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer (through accelerate) before each epoch, including the epoch a run resumes in."""
        self.epoch = epoch

    def permutation(self, epoch: int) -> list[int]:
        """The dataset order of `epoch`: the same on every process and in every run with this seed."""
        if self._cached is None or self._cached[0] != epoch:
            if self.shuffle:
                generator = torch.Generator()
                generator.manual_seed(self.seed)
                for _ in range(epoch):
                    torch.randperm(self.num_samples, generator=generator)
                order = torch.randperm(self.num_samples, generator=generator).tolist()
            else:
                order = list(range(self.num_samples))
            self._cached = (epoch, order)
        return self._cached[1]

    def round_indices(self, epoch: int, round_in_epoch: int) -> list[int]:
        """The M distinct dataset indices of one round, in batch order (without padding)."""
        start = round_in_epoch * self.prompts_per_round
        return self.permutation(epoch)[start : start + self.prompts_per_round]

    def scheduled_ids(self, micro_step: int, rank: int, local_prompts: list, dataset_prompts) -> list[int]:
        """The dataset indices of the round at `micro_step`, after checking that the `local_prompts` process `rank`
        loaded (positions [rank * b, (rank + 1) * b) of the padded round) are those rows of `dataset_prompts`."""
        indices = self.round_indices(*self.locate(micro_step))
        for position, row in enumerate(local_prompts, start=rank * self.per_process):
            if dataset_prompts[indices[position % len(indices)]] != row["prompt"]:
                raise RuntimeError(
                    f"At micro-step {micro_step} the dataloader's prompts are not the ones the round sampler "
                    "scheduled, so dataset row indices cannot identify them (a resume with ignore_data_skip=True "
                    "does this). Set prompt_id_column to a column of stable prompt ids, or resume without "
                    "ignore_data_skip."
                )
        return indices

    def locate(self, micro_step: int) -> tuple[int, int]:
        """(epoch, round within the epoch) of the dataloader batch consumed at training micro-step `micro_step`."""
        round_number = micro_step // self.repeat_count
        return divmod(round_number, self.rounds_per_epoch)

    def fast_forward_micro_step(self, global_step: int, gradient_accumulation_steps: int) -> int:
        """The micro-step at which the Trainer's fast-forward puts the dataloader when it resumes after `global_step`
        optimizer steps: whole epochs of `rounds_per_epoch * repeat_count` batches (the last optimizer step of an
        epoch takes the batches left over), then `gradient_accumulation_steps` batches per step. That is
        `global_step * gradient_accumulation_steps` whenever an epoch's batches divide by it."""
        batches = self.rounds_per_epoch * self.repeat_count
        epochs, steps = divmod(global_step, max(math.ceil(batches / gradient_accumulation_steps), 1))
        return epochs * batches + steps * gradient_accumulation_steps

    def __iter__(self):
        epoch = self.epoch
        self.epoch = epoch + 1  # without set_epoch (a plain loop) each pass moves on one epoch, like RepeatSampler
        padded_size = self.per_process * self.num_processes
        for round_in_epoch in range(self.rounds_per_epoch):
            indices = self.round_indices(epoch, round_in_epoch)
            padded = [indices[i % len(indices)] for i in range(padded_size)]
            for _ in range(self.repeat_count):
                yield from padded

    def __len__(self) -> int:
        return self.rounds_per_epoch * self.per_process * self.num_processes * self.repeat_count
