"""Where a round's prompts come from: one interface, two implementations (a map-style dataset, a stream).

A round is M = `generation_batch_size / num_generations` distinct prompts; each of P processes loads ceil(M / P) of
them (`per_process`), the round padded with repeats of its own first prompts, and every round is loaded
`repeat_count` = steps_per_generation * num_iterations times in a row, so the Trainer's step counting holds. The
trainer asks its `RoundSource` for what the dataloader loads (`dataset`, `sampler`), for the round's prompt ids
(`prompt_ids`) and for where a resumed run's dataloader starts (`fast_forward_micro_step`), and never branches on
which source it has:

- `IndexedRounds` (a `datasets.Dataset`): `RoundSampler` orders the rows; prompts are identified by
  `prompt_id_column`, else by dataset row index (checked against the rows the dataloader loaded).
- `StreamedRounds` (a `datasets.IterableDataset`): `RoundStream` cuts the stream into the same rounds; prompts are
  identified by `prompt_id_column`, which a stream requires.

When a round takes a variable number of prompts (`zero_variance_groups="refill"`, `skip_settled_prompts`), the
dataloader only keeps time: every process draws the round's prompts from the source's *cursor* instead (`draw`), the
same on every process, in the epoch's order (the sampler's permutation of epoch e, or pass e over the stream). A drawn
prompt is consumed, skipped or not, so the epoch does not show it again; an epoch's last prompts are drawn too, and
the next epoch's order follows at once. The cursor (epoch, position) is saved in every checkpoint (`cursor_state`,
`restore_cursor`), and drawn rows have the columns the dataloader's rows have (`keep_columns`).

A prompt id is any hashable value of the id column; a list (Arrow's list columns) is keyed as the tuple of its items,
the form the checkpoint's JSON gives back (`coba_trl.allocation.history.prompt_id_from_json`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from accelerate.utils import gather_object
from datasets import IterableDataset
from torch.utils.data import Sampler

from coba_trl.allocation.history import prompt_id_from_json
from coba_trl.distributed import checked_everywhere
from coba_trl.rounds.sampling import RoundSampler
from coba_trl.rounds.streaming import round_stream


def as_prompt_id(value, column: str, where: str = "in a row of the round"):
    """The key a prompt id value is kept under: itself, or for a list the tuple of its items (recursively). A value
    that cannot be a key (a dict, a set) is a `ValueError` naming the column and the fix; `where` says which row."""
    key = prompt_id_from_json(value)
    try:
        hash(key)
    except TypeError:
        raise ValueError(
            f"prompt_id_column {column!r} holds {type(value).__name__} values ({value!r} {where}), which cannot key "
            "the pass-rate history. Use a column of str, int or lists of those, e.g. `dataset.map(lambda row: "
            f"{{'prompt_id': json.dumps(row[{column!r}], sort_keys=True)}})`."
        ) from None
    return key


def inside_a_round(micro_step: int, repeat_count: int) -> bool:
    """Whether training micro-step `micro_step` lies inside a round rather than at its start: a round is loaded
    `repeat_count` (steps_per_generation * num_iterations) times in a row, and generated at its first micro-step."""
    return micro_step % repeat_count != 0


@dataclass
class RoundLayout:
    """What every source shares: M, P, the repeats of each round, the order (shuffle, seed) and the id column."""

    prompts_per_round: int
    num_processes: int
    repeat_count: int
    shuffle: bool
    seed: int
    id_column: str | None

    @property
    def per_process(self) -> int:
        """Prompts each process loads per round: ceil(M / P)."""
        return math.ceil(self.prompts_per_round / self.num_processes)


class PromptCursor:
    """What `IndexedRounds` and `StreamedRounds` share: drawing prompts from the cursor, and its checkpoint state.

    `cursor` is (epoch, position): for a dataset the epoch and the position in its permutation, for a stream the pass
    and the rows of it consumed; the next prompt `draw` takes is at it. `keep_columns` makes the drawn rows the rows
    the dataloader loads (TRL's `remove_unused_columns`)."""

    def __init__(self):
        self.cursor = (0, 0)
        self.columns: list[str] | None = None  # None: every column

    @property
    def epoch(self) -> int:
        """The epoch (pass over a stream) of the next prompt `draw` takes."""
        return self.cursor[0]

    def keep_columns(self, columns: list[str] | None) -> None:
        """Give drawn rows only these columns (those that exist), as the dataloader gives its rows; None: all."""
        self.columns = None if columns is None else list(columns)

    def draw(self, count: int, skip: Callable[[object, dict], bool] | None = None) -> tuple[list[dict], list, list]:
        """The next `count` prompts of the epoch's order that `skip` (a prompt id and its row -> bool) does not
        skip: their rows and ids, and the ids of the prompts skipped on the way (consumed too)."""
        rows, ids, skipped = [], [], []
        while len(rows) < count:
            row, key = self._next_prompt()
            if skip is not None and skip(key, row):
                skipped.append(key)
                continue
            rows.append(row if self.columns is None else {k: v for k, v in row.items() if k in self.columns})
            ids.append(key)
        return rows, ids, skipped

    def cursor_state(self) -> list[int]:
        return [int(value) for value in self.cursor]

    def restore_cursor(self, state) -> None:
        """Put the cursor where a checkpoint's `cursor_state` left it."""
        self.cursor = tuple(int(value) for value in state)


class IndexedRounds(PromptCursor):
    """Rounds of a map-style `datasets.Dataset`, in the order of `RoundSampler` (module docstring)."""

    def __init__(self, dataset, layout: RoundLayout):
        super().__init__()
        self.dataset, self.layout = dataset, layout
        self.sampler: Sampler = RoundSampler(
            num_samples=len(dataset),
            prompts_per_round=layout.prompts_per_round,
            num_processes=layout.num_processes,
            repeat_count=layout.repeat_count,
            shuffle=layout.shuffle,
            seed=layout.seed,
        )
        self._prompt_texts = None  # the prompt column, read once, to check rows against the sampler's schedule

    def prompt_ids(self, micro_step: int, accelerator, local_rows: list[dict], rows: list[dict]) -> list:
        """The ids of the round's prompts `rows` (gathered, padding dropped); `local_rows` are this process's. Rows
        that are not the sampler's schedule on any process stop every process with the same error."""
        if self.layout.id_column is not None:
            return [as_prompt_id(row[self.layout.id_column], self.layout.id_column) for row in rows]
        if "prompt" not in self.dataset.column_names:  # tasks whose environments write the prompt: no check
            return self.sampler.round_indices(*self.sampler.locate(micro_step))
        if self._prompt_texts is None:
            self._prompt_texts = self.dataset["prompt"]
        rank = accelerator.process_index
        return checked_everywhere(
            lambda: self.sampler.scheduled_ids(micro_step, rank, local_rows, self._prompt_texts), accelerator
        )

    def fast_forward_micro_step(self, global_step: int, gradient_accumulation_steps: int) -> int:
        """The micro-step where the Trainer's fast-forward puts the dataloader after `global_step` optimizer steps."""
        return self.sampler.fast_forward_micro_step(global_step, gradient_accumulation_steps)

    def _next_prompt(self) -> tuple[dict, object]:
        epoch, position = self.cursor
        order = self.sampler.permutation(epoch)
        if position >= len(order):
            epoch, position = epoch + 1, 0
            order = self.sampler.permutation(epoch)
        self.cursor = (epoch, position + 1)
        index = order[position]
        row = self.dataset[index]
        key = (
            index if self.layout.id_column is None else as_prompt_id(row[self.layout.id_column], self.layout.id_column)
        )
        return row, key


class StreamedRounds(PromptCursor):
    """Rounds of a streaming `datasets.IterableDataset`, cut by `RoundStream` (module docstring)."""

    sampler = None  # a stream is not ordered by a sampler

    def __init__(self, dataset, layout: RoundLayout):
        super().__init__()
        self.layout = layout
        self.dataset = round_stream(
            dataset, layout.prompts_per_round, layout.num_processes, layout.repeat_count, layout.shuffle, layout.seed
        )
        # The cursor reads its own copy of the (shuffled) stream, never the dataloader's iterator.
        self._source = dataset.shuffle(seed=layout.seed) if layout.shuffle else dataset
        self._reader = None  # the cursor's iterator over the current pass, opened at the cursor when first needed

    def prompt_ids(self, micro_step: int, accelerator, local_rows: list[dict], rows: list[dict]) -> list:
        return [as_prompt_id(row[self.layout.id_column], self.layout.id_column) for row in rows]

    def fast_forward_micro_step(self, global_step: int, gradient_accumulation_steps: int) -> int:
        # One endless epoch (`coba_trl.rounds.streaming`): the Trainer skips global_step * GA batches.
        return global_step * gradient_accumulation_steps

    def restore_cursor(self, state) -> None:
        super().restore_cursor(state)
        self._reader = None  # reopened at the restored cursor by the next draw

    def _next_prompt(self) -> tuple[dict, object]:
        passes, consumed = self.cursor
        if self._reader is None:  # a fresh pass, or the position a resumed run continues from
            if hasattr(self._source, "set_epoch"):
                self._source.set_epoch(passes)
            self._reader = itertools.islice(iter(self._source), consumed, None)
        row = next(self._reader, None)
        if row is None:
            if consumed == 0:
                raise ValueError("train_dataset streamed no rows: it cannot supply a round's prompts.")
            self.cursor, self._reader = (passes + 1, 0), None
            return self._next_prompt()
        self.cursor = (passes, consumed + 1)
        return dict(row), as_prompt_id(row[self.layout.id_column], self.layout.id_column)


def check_same_prompts(prompt_ids: list, accelerator) -> None:
    """Every process must hold the prompts of process 0, the ones the plan and the pass-rate history use; otherwise
    every process raises the same error (a mismatch seen on one process alone would leave the others waiting in the
    next collective)."""
    if accelerator.num_processes == 1:
        return
    drawn = gather_object([list(prompt_ids)])
    for rank, ids in enumerate(drawn[1:], start=1):
        if ids == drawn[0]:
            continue
        position = next((i for i, (a, b) in enumerate(zip(ids, drawn[0], strict=False)) if a != b), None)
        where = (
            f"{len(ids)} prompts instead of {len(drawn[0])}"
            if position is None
            else f"prompt {position} is {ids[position]!r} there, {drawn[0][position]!r} on process 0"
        )
        raise RuntimeError(
            f"Process {rank} holds other prompts for this round than process 0 ({where}), so it would train prompts "
            "the plan and the pass-rate history never saw. Every process takes a round's prompts from its own copy of "
            "the epoch's order (with zero_variance_groups='refill' or skip_settled_prompts, from the source's cursor), "
            "which must be the same everywhere: give every process the same seed (CoBAConfig.seed, never a "
            "per-process seed), the same train_dataset in the same order (no per-process shuffle, shard or filter "
            "before the trainer) and the trainer's own sampler."
        )


def round_source(dataset, layout: RoundLayout) -> IndexedRounds | StreamedRounds:
    """The source of `dataset`'s rounds: `StreamedRounds` for a stream, else `IndexedRounds`."""
    return StreamedRounds(dataset, layout) if isinstance(dataset, IterableDataset) else IndexedRounds(dataset, layout)
