"""Per-prompt pass-rate history p_i: pooled success rate over the last `window` appearances (algorithm.md section 2)."""

from collections import deque
from collections.abc import Hashable, Sequence

import numpy as np

from .validation import check_int


def _plain(prompt_id: Hashable) -> Hashable:
    """numpy scalars -> Python scalars, so ids hash, compare and serialise like the ints/strs they are."""
    return prompt_id.item() if isinstance(prompt_id, np.generic) else prompt_id


def prompt_id_from_json(prompt_id):
    """Undo JSON's tuple -> list conversion for tuple ids."""
    return tuple(prompt_id_from_json(part) for part in prompt_id) if isinstance(prompt_id, list) else prompt_id


class PassRateHistory:
    """Success and rollout counts of each prompt's last `window` appearances, keyed by any hashable prompt id.

    `pass_rates(ids)` is sum(successes) / sum(rollouts) over those appearances, NaN for prompts never seen
    (the allocators treat NaN as unseen). Appearances with zero rollouts are not recorded, and a prompt listed
    several times in one `update` call counts as one appearance with the summed counts.
    """

    def __init__(self, window: int = 1):
        self.window = check_int("window", window, minimum=1)
        self._records: dict[Hashable, deque[tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, prompt_id: Hashable) -> bool:
        return _plain(prompt_id) in self._records

    def update(self, prompt_ids: Sequence[Hashable], successes, rollouts) -> None:
        """Record one appearance per prompt: `successes[i]` correct rollouts out of `rollouts[i]`."""
        ids = [_plain(prompt_id) for prompt_id in prompt_ids]
        successes = np.asarray(successes)
        rollouts = np.asarray(rollouts)
        if successes.shape != (len(ids),) or rollouts.shape != (len(ids),):
            raise ValueError(
                f"prompt_ids ({len(ids)}), successes {successes.shape} and rollouts {rollouts.shape} must be "
                "1-D sequences of equal length."
            )
        for name, values in (("successes", successes), ("rollouts", rollouts)):
            if values.size and (values.dtype.kind not in "iuf" or np.any(values != np.round(values))):
                raise ValueError(f"{name} must hold whole numbers, got {values.tolist()}.")
            if np.any(values < 0):
                raise ValueError(f"{name} must be non-negative, got {values.tolist()}.")
        if np.any(successes > rollouts):
            raise ValueError("successes must not exceed rollouts for any prompt.")
        merged: dict[Hashable, list[int]] = {}
        for prompt_id, success, rollout in zip(ids, successes.tolist(), rollouts.tolist(), strict=True):
            totals = merged.setdefault(prompt_id, [0, 0])
            totals[0] += int(success)
            totals[1] += int(rollout)
        for prompt_id, (success, rollout) in merged.items():
            if rollout > 0:
                self._records.setdefault(prompt_id, deque(maxlen=self.window)).append((success, rollout))

    def pass_rates(self, prompt_ids: Sequence[Hashable], prior=None) -> np.ndarray:
        """Pooled pass rate per id (float64); unseen ids get NaN, or `prior[i]` where a prior is given and not NaN."""
        rates = np.full(len(prompt_ids), np.nan)
        for i, prompt_id in enumerate(prompt_ids):
            record = self._records.get(_plain(prompt_id))
            if record:
                rates[i] = sum(s for s, _ in record) / sum(n for _, n in record)
        if prior is not None:
            prior = np.asarray(prior, dtype=np.float64)
            if prior.shape != rates.shape:
                raise ValueError(f"prior must have one value per prompt id ({rates.shape}), got {prior.shape}.")
            if np.any((prior < 0) | (prior > 1)):
                raise ValueError("prior must lie in [0, 1] or be NaN (no prior).")
            rates = np.where(np.isnan(rates), prior, rates)
        return rates

    def state_dict(self) -> dict:
        """JSON-serialisable: a list of [id, [[successes, rollouts], ...]], so int and str ids keep their type."""
        return {
            "window": self.window,
            "records": [[prompt_id, [list(pair) for pair in record]] for prompt_id, record in self._records.items()],
        }

    def load_state_dict(self, state: dict) -> None:
        self._records = {
            prompt_id_from_json(prompt_id): deque((tuple(pair) for pair in record), maxlen=self.window)
            for prompt_id, record in state["records"]
        }
