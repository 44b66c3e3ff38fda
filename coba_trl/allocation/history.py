"""Per-prompt pass-rate history p_i: pooled success rate over the last `window` appearances (docs/algorithm.md,
"Pass rate of a prompt").

Optionally shrunk towards a prior mean by a Beta posterior (`prior_strength` > 0), so a group of two does not say
p = 0 or p = 1 (docs/algorithm.md, "Known weak points"; a project extension, off by default).
"""

import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from .validation import check_float, check_int


def _plain(prompt_id: Hashable) -> Hashable:
    """numpy scalars -> Python scalars, so ids hash, compare and serialise like the ints/strs they are."""
    return prompt_id.item() if isinstance(prompt_id, np.generic) else prompt_id


def prompt_id_from_json(prompt_id):
    """Undo JSON's tuple -> list conversion for tuple ids."""
    return tuple(prompt_id_from_json(part) for part in prompt_id) if isinstance(prompt_id, list) else prompt_id


class PassRateHistory:
    """Success and rollout counts of each prompt's last `window` appearances, keyed by any hashable prompt id.

    With the default `prior_strength=0`, `pass_rates(ids)` is the released estimate: the pooled empirical rate
    S_i / N_i, with S_i successes out of N_i rollouts summed over the prompt's last `window` appearances.

    With `prior_strength` s > 0 it is the mean of a Beta posterior instead: the prompt starts from a Beta prior worth s
    pseudo-rollouts centred on a prior mean m_i, and each observed rollout adds one real count, so

        p_i = (S_i + s * m_i) / (N_i + s).

    Few rollouts leave p_i near m_i; many let the data dominate (a prompt that went 0/2 with s = 2 and m_i = 0.6 gets
    0.3, not 0; one that went 0/32 gets 0.035). The prior mean m_i is the prompt's *offline prior pass rate* when the
    caller passes one (`pass_rates(ids, prior=...)`, e.g. `prior_pass_rate_column`), else the *latest round's mean
    pass rate* `round_mean`: the unweighted mean over the prompts of the last `update` call of their success rates in
    that call, i.e. 1 - F_t of the latest round (docs/algorithm.md, "Capability"), the freshest estimate of how often the
    current model succeeds on a typical prompt. So the offline prior sets *where* a prompt's estimate starts and
    `prior_strength` sets *how much* that start still weighs once rollouts exist; for a prompt without rollouts
    p_i is its offline prior, or NaN (unseen) without one, whatever s is.

    Appearances with zero rollouts are not recorded, and a prompt listed several times in one `update` call counts as
    one appearance with the summed counts.
    """

    def __init__(self, window: int = 1, prior_strength: float = 0.0):
        self.window = check_int("window", window, minimum=1)
        self.prior_strength = check_float("prior_strength", prior_strength, low=0.0)
        self.round_mean = math.nan
        self._records: dict[Hashable, deque[tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, prompt_id: Hashable) -> bool:
        return _plain(prompt_id) in self._records

    def prompt_ids(self) -> list:
        """Every prompt id with a recorded appearance."""
        return list(self._records)

    def update(self, prompt_ids: Sequence[Hashable], successes, rollouts) -> None:
        """Record one appearance per prompt: `successes[i]` correct rollouts out of `rollouts[i]`.

        Call it once per generation round with the whole round: it also sets `round_mean`.
        """
        merged, round_mean = merge_appearances(prompt_ids, successes, rollouts)
        if not math.isnan(round_mean):
            self.round_mean = round_mean
        for prompt_id, appearance in merged.items():
            self._records.setdefault(prompt_id, deque(maxlen=self.window)).append(appearance)

    def pass_rates_after(self, prompt_ids: Sequence[Hashable], successes, rollouts, prior=None) -> np.ndarray:
        """The pass rates `prompt_ids` would have after `update(prompt_ids, successes, rollouts)`; nothing recorded.

        Equal, bit for bit, to updating a copy of the history and calling its `pass_rates(prompt_ids, prior)`, at the
        cost of the round's prompts only (a two-phase round estimates its prompts from their screening this way,
        before the round is observed).
        """
        ids = [_plain(prompt_id) for prompt_id in prompt_ids]
        merged, round_mean = merge_appearances(ids, successes, rollouts)
        if math.isnan(round_mean):
            round_mean = self.round_mean
        records = {prompt_id: self._records.get(prompt_id, ()) for prompt_id in ids}
        for prompt_id, appearance in merged.items():
            records[prompt_id] = deque(records[prompt_id], maxlen=self.window)
            records[prompt_id].append(appearance)
        successes, rollouts = _pooled(ids, records)
        return self._estimate(successes, rollouts, prior, round_mean)

    def counts(self, prompt_ids: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
        """Pooled successes S_i and rollouts N_i over each id's last `window` appearances (0, 0 for unseen ids)."""
        return _pooled(prompt_ids, self._records)

    def pass_rates(self, prompt_ids: Sequence[Hashable], prior=None) -> np.ndarray:
        """Estimated pass rate p_i per id (float64), as the class docstring says.

        `prior` is the offline prior pass rate of each id in [0, 1] (NaN = none): the estimate of an id without
        rollouts, and its prior mean m_i when `prior_strength` > 0. Ids with neither rollouts nor a prior get NaN.
        """
        successes, rollouts = self.counts(prompt_ids)
        return self._estimate(successes, rollouts, prior, self.round_mean)

    def _estimate(self, successes: np.ndarray, rollouts: np.ndarray, prior, round_mean: float) -> np.ndarray:
        """p_i from pooled counts, the offline prior (or None) and the round mean, as the class docstring says."""
        if prior is not None:
            prior = np.asarray(prior, dtype=np.float64)
            if prior.shape != successes.shape:
                raise ValueError(f"prior must have one value per prompt id ({successes.shape}), got {prior.shape}.")
            if np.any((prior < 0) | (prior > 1)):
                raise ValueError("prior must lie in [0, 1] or be NaN (no prior).")
        else:
            prior = np.full(successes.shape, np.nan)
        seen = rollouts > 0
        strength = self.prior_strength
        prior_mean = np.where(np.isnan(prior), round_mean, prior)
        if strength > 0 and np.isnan(prior_mean[seen]).any():
            raise ValueError(
                "prior_strength > 0 needs a prior mean: pass an offline prior for these prompts or record a round "
                "with update() first."
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            shrunk = (successes + strength * np.nan_to_num(prior_mean)) / (rollouts + strength)
        return np.where(seen, shrunk, prior)

    def state_dict(self) -> dict:
        """JSON-serialisable: a list of [id, [[successes, rollouts], ...]], so int and str ids keep their type."""
        return {
            "window": self.window,
            "round_mean": None if math.isnan(self.round_mean) else self.round_mean,
            "records": [[prompt_id, [list(pair) for pair in record]] for prompt_id, record in self._records.items()],
        }

    def load_state_dict(self, state: dict) -> None:
        self._records = {
            prompt_id_from_json(prompt_id): deque((tuple(pair) for pair in record), maxlen=self.window)
            for prompt_id, record in state["records"]
        }
        round_mean = state.get("round_mean")  # absent in states saved before the prior strength existed
        if round_mean is None and self._records:
            round_mean = float(np.mean([record[-1][0] / record[-1][1] for record in self._records.values()]))
        self.round_mean = math.nan if round_mean is None else float(round_mean)


def _pooled(prompt_ids: Sequence[Hashable], records: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """S_i and N_i: each id's (successes, rollouts) appearances in `records` summed (0, 0 for an id not in it)."""
    appearances = [records.get(_plain(prompt_id), ()) for prompt_id in prompt_ids]
    successes = np.array([sum(success for success, _ in record) for record in appearances], dtype=np.int64)
    rollouts = np.array([sum(rollout for _, rollout in record) for record in appearances], dtype=np.int64)
    return successes, rollouts


def merge_appearances(prompt_ids: Sequence[Hashable], successes, rollouts) -> tuple[dict, float]:
    """A round's (successes, rollouts) per distinct id with rollouts (a listed-twice id sums its counts), and the
    round's mean pass rate over those ids (NaN when none has rollouts); checks the inputs."""
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
    observed = {prompt_id: (success, rollout) for prompt_id, (success, rollout) in merged.items() if rollout > 0}
    if not observed:
        return observed, math.nan
    return observed, sum(success / rollout for success, rollout in observed.values()) / len(observed)
