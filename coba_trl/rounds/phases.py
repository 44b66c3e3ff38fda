"""Two-phase rounds and zero-variance groups: the pieces the trainer wires in (torch for merging, numpy for counts).

A two-phase round screens every prompt with `min_generations` completions, updates the pass-rate estimates with those
fresh results, and spends the rest of the round's budget from them. TRL's generation method runs once per phase; its
two outputs are merged here into the one batch of completion rows the loss sees (`merge_phase_outputs`), and the
rewards gathered in each phase into the round's rows (`round_rows`).

Zero-variance groups (every completion rewarded alike, as `coba_trl.rounds.advantages.zero_spread_groups` judges it) carry no
policy gradient: `drop` keeps them out of the loss and its token normalisation, as DAPO's dynamic-sampling filter does;
`rescue` gives the groups whose screening rows were all rewarded alike extra rollouts in phase 2 (`rescue_counts`) in
the hope of a non-zero spread.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

# How TRL's `_generate_and_score_completions` pads each per-row (B, T) tensor it returns: (side, fill), fill None = the
# tokenizer's pad token. The masked losses never read the fill of a padded completion position, but VESPO's gamma
# weights sum the log of `importance_sampling_ratio` over every position, mask or not: TRL's ratio is exp(0) = 1 at
# padding, and so is the merge's. The ratio is (B, T) per token or (B, 1) per sequence.
PADDING = {
    "prompt_ids": ("left", None),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "tool_mask": ("right", 1),
    "old_per_token_logps": ("right", 0),
    "ref_per_token_logps": ("right", 0),
    "sampling_per_token_logps": ("right", 0),
    "importance_sampling_ratio": ("right", 1),
}
# Per-row (B,) tensors: concatenated.
ROWS = ("advantages",)
# Per-batch scalars that add up over phases.
SUMMED = ("num_items_in_batch",)
# Inputs of multimodal models, which two-phase rounds do not support.
MULTIMODAL = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
    "num_images",
    "num_tiles",
)


def by_kind(batch: dict, pad_token_id: int, *, padded, rows, summed, unknown) -> dict:
    """`batch` (TRL's generation output) with each tensor replaced as its kind says, the one place that tells the kinds
    apart: `padded(key, value, side, fill)` for a (B, T) tensor of `PADDING` (`fill` the pad token for None),
    `rows(key, value)` for a per-row tensor of `ROWS`, `summed(key, value)` for a per-batch count of `SUMMED`. A key
    returned as None stays None; any other key raises `unknown(key)` (an exception) rather than being handled by a
    guess."""
    out = {}
    for key, value in batch.items():
        if value is None:
            out[key] = None
        elif key in SUMMED:
            out[key] = summed(key, value)
        elif key in ROWS:
            out[key] = rows(key, value)
        elif key in PADDING:
            side, fill = PADDING[key]
            out[key] = padded(key, value, side, pad_token_id if fill is None else fill)
        else:
            raise unknown(key)
    return out


def merge_phase_outputs(outputs: list[dict], pad_token_id: int) -> dict:
    """Concatenate the row batches TRL's `_generate_and_score_completions` returned for each phase.

    Every (B, T) tensor is padded to the widest phase on the side and with the value TRL pads it with (`PADDING`),
    per-row tensors are concatenated and `num_items_in_batch` (completion tokens over all processes) is summed. A key
    not listed here raises a `ValueError` rather than being merged by a guess: multimodal inputs (two phases do not
    support them) and any key a newer TRL adds, whose padding side is unknown.
    """

    def padded(key, _, side, fill):
        values = [output[key] for output in outputs]
        width = max(value.shape[1] for value in values)
        return torch.cat([pad_to(value, width, side, fill) for value in values])

    def unknown(key):
        if key in MULTIMODAL:
            return ValueError(
                f"two_phase_rounds cannot merge the generation output {key!r} (image or other multimodal inputs). "
                "Set two_phase_rounds=False for this dataset."
            )
        return ValueError(
            f"two_phase_rounds cannot merge the generation output {key!r}: this TRL version returns a key "
            "coba-trl does not know how to pad or concatenate. Install a TRL version coba-trl is tested with "
            "(see coba_trl.compat) or set two_phase_rounds=False."
        )

    return by_kind(
        outputs[0],
        pad_token_id,
        padded=padded,
        rows=lambda key, _: torch.cat([output[key] for output in outputs]),
        summed=lambda key, first: sum((output[key] for output in outputs[1:]), first),
        unknown=unknown,
    )


def pad_to(value: torch.Tensor, width: int, side: str, fill) -> torch.Tensor:
    """`value` (B, T) padded to `width` columns on `side` ("left" or "right") with `fill`."""
    missing = width - value.shape[1]
    return F.pad(value, (missing, 0) if side == "left" else (0, missing), value=fill)


def local_positions(phases: list, rank: int, num_processes: int) -> np.ndarray:
    """Positions, in the rows of `phases` gathered over processes (phase after phase, each in process order), of
    process `rank`'s rows, in the order of its local batch: TRL gives each process an equal slice of each phase."""
    local, offset = [], 0
    for phase in phases:
        rows = len(phase.group_ids) // num_processes
        local.append(np.arange(offset + rank * rows, offset + (rank + 1) * rows))
        offset += len(phase.group_ids)
    return np.concatenate(local)


def loss_mask(batch: dict) -> torch.Tensor:
    """The completion positions the loss counts: the completion mask, without tool outputs (`tool_mask`) if any."""
    mask = batch["completion_mask"]
    return mask if batch.get("tool_mask") is None else mask * batch["tool_mask"]


def round_rows(phases: list) -> tuple[torch.Tensor, torch.Tensor]:
    """A round's gathered rewards (rows, reward functions) and each row's group id, phases one after the other."""
    rewards = torch.cat([phase.rewards for phase in phases])
    group_ids = torch.as_tensor(np.concatenate([phase.group_ids for phase in phases]), device=rewards.device)
    return rewards, group_ids


def rescue_counts(counts: np.ndarray, rescued: np.ndarray, floor: int, cap: int, extra: int) -> np.ndarray:
    """Give each `rescued` group at least `extra` rows above `floor`, taken from the groups with the most rows.

    `counts` is the allocator's plan for the whole round (each >= floor = the phase-1 rows, summing to the budget). In
    batch order, a rescued group below floor + extra takes one row at a time from whichever group holds the most rows
    above floor + extra (rescued or not: an all-equal group the allocator already funded generously gives too; ties:
    the later group), until it reaches floor + extra or no group can give. The total is unchanged, no group exceeds
    `cap`, and the allocator's plan is kept wherever the rescue does not need rows. Deterministic.
    """
    counts = np.asarray(counts, dtype=np.int64).copy()
    target = min(floor + extra, cap)
    order = np.arange(len(counts))
    for group in np.flatnonzero(rescued):
        while counts[group] < target:
            donors = np.flatnonzero(counts > target)
            if donors.size == 0:
                break
            donor = donors[np.lexsort((-order[donors], -counts[donors]))[0]]
            counts[donor] -= 1
            counts[group] += 1
    return counts


def zero_completion_mask(batch: dict, rows: torch.Tensor) -> None:
    """Take `rows` (bool, B) of `batch` out of the loss: their completion mask becomes 0 (in place)."""
    mask = batch["completion_mask"]
    batch["completion_mask"] = torch.where(rows.unsqueeze(1), torch.zeros_like(mask), mask)


def drop_rows(output: dict, dropped_rows: torch.Tensor, gather_sum) -> int:
    """Take the local rows in `dropped_rows` (bool, B) out of the loss and out of its token normaliser (in place).

    Their completion mask becomes 0, and `num_items_in_batch` (completion tokens over all processes, TRL's
    normaliser for the token-level losses) loses their tokens; `gather_sum` sums a local count over processes.
    Returns the tokens dropped over all processes.
    """
    dropped = gather_sum(loss_mask(output)[dropped_rows].sum())
    zero_completion_mask(output, dropped_rows)
    output["num_items_in_batch"] = output["num_items_in_batch"] - dropped
    return int(dropped)
