"""Rounds of distinct prompts from a streaming `datasets.IterableDataset`: the counterpart of `coba_trl.rounds.sampling`.

A stream cannot be indexed, so no sampler orders it: `RoundStream` reshapes the stream itself, as TRL's
`repeat_iterable_dataset` does for GRPO, with CoBA's round layout:

- M = `prompts_per_round` consecutive rows of the stream form a round (mini_repeat_count 1: the allocator sets the
  repeats), padded to P * ceil(M / P) rows with repeats of its own first rows and yielded `repeat_count` times in a
  row (steps_per_generation * num_iterations), exactly the layout `RoundSampler` gives a map-style dataset (each
  rollout's row is then its own deep copy, `coba_trl.rounds.grouping.expand_rows`, as TRL deep-copies a stream's
  repeats). Rows are identified by `prompt_id_column`, so pass rates carry over from one pass to the next.
- The passes over the data are inside the stream: when the source ends, the next pass starts at once (with
  `set_epoch(pass)` forwarded to the source, so an upstream `shuffle` draws a new order each pass); a trailing partial
  round is dropped at the end of each pass. The Trainer therefore sees one endless epoch, bounded by `max_steps` (which
  transformers requires for a stream anyway), and a resumed run, whose Trainer skips the batches already consumed by
  iterating over them, crosses the same pass boundaries and continues exactly where the checkpoint left the stream.
- `RoundStream` is a torch `IterableDataset`, not a `datasets` one, on purpose: accelerate splits a
  `datasets.IterableDataset` that has at least P shards by shard (`IterableDataset.shard`), which would give the
  processes streams of different lengths and rows from different rounds. Wrapped, every process reads the whole
  stream and keeps its slice of each round (accelerate's `IterableDatasetShard`): rounds are the same on every process.
"""

from __future__ import annotations

import itertools
import math

from torch.utils.data import IterableDataset


class RoundStream(IterableDataset):
    """Yields the rows of `dataset`, round after round and pass after pass, in the layout of `RoundSampler`.

    Args:
        dataset: The stream (a `datasets.IterableDataset`, shuffled upstream when the trainer shuffles).
        prompts_per_round: M, the distinct prompts of one generation round.
        num_processes: P; a round occupies `P * ceil(M / P)` rows of the stream this yields.
        repeat_count: How many times each round is yielded in a row (steps_per_generation * num_iterations).
    """

    def __init__(self, dataset, prompts_per_round: int, num_processes: int = 1, repeat_count: int = 1):
        self.dataset = dataset
        self.prompts_per_round = prompts_per_round
        self.padded_size = math.ceil(prompts_per_round / num_processes) * num_processes
        self.repeat_count = repeat_count
        self.passes = 0  # passes started over the source, the one in progress included

    def set_epoch(self, epoch: int) -> None:
        """The Trainer's epoch: always 0, as the stream never ends; the passes over the source are counted here."""

    def __iter__(self):
        self.passes = 0
        while True:
            if hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(self.passes)
            self.passes += 1
            rows, rounds = iter(self.dataset), 0
            while len(round_rows := list(itertools.islice(rows, self.prompts_per_round))) == self.prompts_per_round:
                padded = [round_rows[i % self.prompts_per_round] for i in range(self.padded_size)]
                for _ in range(self.repeat_count):
                    yield from (dict(row) for row in padded)
                rounds += 1
            if rounds == 0:
                raise ValueError(
                    f"train_dataset streamed {len(round_rows)} rows in a pass, fewer than the {self.prompts_per_round} "
                    "distinct prompts of one generation round (generation_batch_size / num_generations). Stream more "
                    "prompts or lower per_device_train_batch_size / steps_per_generation."
                )


def round_stream(dataset, prompts_per_round: int, num_processes: int, repeat_count: int, shuffle: bool, seed: int):
    """The trainer's stream of rounds; shuffled first with the seed (a buffered shuffle, as TRL does for GRPO)."""
    if shuffle:
        dataset = dataset.shuffle(seed=seed)
    return RoundStream(dataset, prompts_per_round, num_processes, repeat_count)
