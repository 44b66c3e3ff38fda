"""A prompt's pass-rate prior from its neighbours: the prompts that share its neighbourhood (a difficulty level, a
topic, a source; `CoBAConfig.pass_rate_neighbour_column`). A project extension, off by default.

The neighbourhood mean of a prompt is the plain mean, over the prompts of its neighbourhood that have a pass-rate
history (itself included), of their pooled empirical rates S_j / N_j (`PassRateHistory.counts`, the latest `window`
appearances of each). It serves as the prompt's prior pass rate (`PassRateHistory.pass_rates(..., prior=...)`):

- a prompt never seen starts from it, so an allocator can act from the second round of the first epoch on, once any
  neighbour was seen, instead of splitting the whole first epoch uniformly;
- with `pass_rate_prior_strength` s > 0 every prompt is shrunk towards it, p_i = (S_i + s m) / (N_i + s): a prompt
  last seen unsolved (0 of 8) reads as (2 m) / 10 with s = 2, so when its neighbours start succeeding its estimate
  leaves 0 and the allocator gives it budget again, where the released estimate keeps it at 0 until it is drawn
  and succeeds by itself.

from coba_trl.allocation import NeighbourhoodPrior, PassRateHistory

neighbours = NeighbourhoodPrior()
neighbours.register(prompt_ids, levels, "level")   # every round, before allocating
prior = neighbours.prior(history, prompt_ids)      # NaN where no neighbour has history yet
pass_rates = history.pass_rates(prompt_ids, prior=prior)
"""

import math
from collections.abc import Hashable, Sequence

import numpy as np

from .history import PassRateHistory, _plain, prompt_id_from_json

_UNREGISTERED = object()


def neighbourhood_key(value, column: str, where: str = "") -> Hashable | None:
    """The key `value` of `pass_rate_neighbour_column` `column` is kept under: itself as a Python scalar, None for
    None or NaN (no neighbourhood); a `ValueError` naming the column and the fix for anything else."""
    value = _plain(value)
    if isinstance(value, float) and math.isnan(value):  # a missing value in a float column
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(
        f"pass_rate_neighbour_column {column!r} holds {type(value).__name__} values ({value!r}{where}); a "
        "neighbourhood must be a str, int, float or None (no neighbourhood). Map it to one, e.g. "
        f"`dataset.map(lambda row: {{{column!r}: str(row[{column!r}])}})`."
    )


class NeighbourhoodPrior:
    """Which neighbourhood each prompt is in, and each neighbourhood's current mean pass rate (module docstring).

    A prompt's neighbourhood is the one it was last registered with; a prompt registered with `None` (or NaN) has
    none (its prior is NaN). The state is the prompt -> neighbourhood map (`state_dict`), the same on every process
    when every process registers the same round.
    """

    def __init__(self):
        self._neighbourhood: dict[Hashable, Hashable] = {}
        self._members: dict[Hashable, dict[Hashable, None]] = {}  # neighbourhood -> its prompts, in registration order

    def register(self, prompt_ids: Sequence[Hashable], neighbourhoods: Sequence, column: str) -> None:
        """Record the neighbourhood of each prompt (`None` or NaN: none); `column` is named in the error on a value
        that cannot be a neighbourhood (`neighbourhood_key`)."""
        if len(prompt_ids) != len(neighbourhoods):
            raise ValueError(
                f"register needs one neighbourhood per prompt id, got {len(neighbourhoods)} for {len(prompt_ids)}."
            )
        for prompt_id, neighbourhood in zip(prompt_ids, neighbourhoods, strict=True):
            prompt_id = _plain(prompt_id)
            self._assign(prompt_id, neighbourhood_key(neighbourhood, column, f" for prompt {prompt_id!r}"))

    def _assign(self, prompt_id: Hashable, neighbourhood: Hashable | None) -> None:
        old = self._neighbourhood.get(prompt_id, _UNREGISTERED)
        if old is not _UNREGISTERED and old == neighbourhood:
            return
        if old is not _UNREGISTERED and old is not None:
            self._members[old].pop(prompt_id, None)
        self._neighbourhood[prompt_id] = neighbourhood
        if neighbourhood is not None:
            self._members.setdefault(neighbourhood, {})[prompt_id] = None

    def neighbourhood_of(self, prompt_id: Hashable) -> Hashable | None:
        """The neighbourhood `prompt_id` was last registered with (None: none, or never registered)."""
        return self._neighbourhood.get(_plain(prompt_id))

    def members(self) -> dict[Hashable, list]:
        """Each neighbourhood's prompts, in registration order."""
        return {neighbourhood: list(prompts) for neighbourhood, prompts in self._members.items()}

    def means(self, history: PassRateHistory, neighbourhoods) -> dict[Hashable, float]:
        """Each of `neighbourhoods`' mean pass rate over its prompts with history (NaN: none has history yet)."""
        means = {}
        for neighbourhood in neighbourhoods:
            successes, rollouts = history.counts(list(self._members.get(neighbourhood, ())))
            seen = rollouts > 0
            means[neighbourhood] = float(np.mean(successes[seen] / rollouts[seen])) if seen.any() else float("nan")
        return means

    def prior(self, history: PassRateHistory, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        """The neighbourhood mean of each prompt (float64; NaN for a prompt without a neighbourhood, or whose
        neighbourhood has no prompt with history). Prompts must be registered first."""
        missing = [prompt_id for prompt_id in prompt_ids if _plain(prompt_id) not in self._neighbourhood]
        if missing:
            raise ValueError(f"prompt ids {missing[:3]} were never registered: call register() with their round.")
        keys = [self._neighbourhood[_plain(prompt_id)] for prompt_id in prompt_ids]
        means = self.means(history, dict.fromkeys(key for key in keys if key is not None))
        return np.array([np.nan if key is None else means[key] for key in keys], dtype=np.float64)

    def state_dict(self) -> dict:
        """JSON-serialisable: [prompt id, neighbourhood] pairs in registration order."""
        return {"neighbourhoods": [[prompt_id, key] for prompt_id, key in self._neighbourhood.items()]}

    def load_state_dict(self, state: dict) -> None:
        self._neighbourhood, self._members = {}, {}
        for prompt_id, neighbourhood in state["neighbourhoods"]:  # checked when registered
            self._assign(prompt_id_from_json(prompt_id), neighbourhood)


def combined_prior(offline: np.ndarray | None, neighbours: np.ndarray | None) -> np.ndarray | None:
    """A prompt's prior pass rate: its offline prior (`prior_pass_rate_column`) where it has one, else its
    neighbourhood mean, else NaN; None when neither is configured."""
    if neighbours is None:
        return offline
    if offline is None:
        return neighbours
    return np.where(np.isnan(offline), neighbours, offline)
