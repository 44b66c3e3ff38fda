"""Skipping settled prompts before generation, in plain numpy: GRESO's rule (`SettledPromptSkipper`) and one by the
chance of a group with spread (`SpreadChanceSkipper`). Both keep the same interface (`visit`, `observe_round`,
`metrics`, `state_dict`), so the round runner does not know which one it has.

GRESO's selective rollout (arXiv 2506.02177):

A prompt whose latest groups were all solved (or all failed) is likely to be so again: GRESO skips it, before any
completion is generated, with probability `1 - max(p^c, 0.01)`, `c` being its run of such groups in a row and `p` the
exploration probability of its kind (one for all-solved, one for all-failed prompts, both starting at 0.5). After each
round from the second epoch on, each `p` moves by 0.01 within [0.05, 0.95]: down (skip more) when the round's share of
generated groups of that kind reached its target, up otherwise. The targets split `skip_target_zero_spread` a third
to all-solved and two thirds to all-failed groups (all-failed prompts are the likelier to change as the model
improves). A group judged zero-spread (as `drop` judges it) counts as all-solved when every scored completion
succeeded, as all-failed otherwise; a group with spread ends the run. A skipped prompt keeps its run, so it is
skipped as likely on its next visit, and comes back in a later epoch (exploration); `max_skips_in_a_row` bounds how
many visits in a row it can miss, counted over visits in the order they happen (a round that generates a prompt and
then skips it in a later batch counts that skip).

The state (runs, both `p`, the random generator) is the same on every process, changes only through `visit` and
`observe_round`, and is saved in every checkpoint (`state_dict`), so a resumed run skips what the uninterrupted run
skips.
"""

from __future__ import annotations

import numpy as np

from coba_trl.allocation.history import PassRateHistory, prompt_id_from_json
from coba_trl.allocation.neighbours import NeighbourhoodPrior
from coba_trl.allocation.spread import population_prior, spread_chance

START_PROBABILITY = 0.5  # GRESO's p_easy and p_hard at the start
PROBABILITY_STEP = 0.01  # GRESO's adjustment per step
PROBABILITY_BOUNDS = (0.05, 0.95)  # GRESO's min_p, max_p
MIN_KEEP = 0.01  # a settled prompt is generated with probability at least this on each visit
KINDS = ("solved", "failed")
TARGET_SPLIT = {"solved": 1 / 3, "failed": 2 / 3}


class SettledPromptSkipper:
    """Decides, per visit of a prompt, whether to skip it; learns the runs of settled groups from each round."""

    def __init__(self, target_zero_spread: float = 0.25, max_skips_in_a_row: int = 3, seed: int = 0):
        self.target_zero_spread = target_zero_spread
        self.max_skips_in_a_row = max_skips_in_a_row
        self.probability = dict.fromkeys(KINDS, START_PROBABILITY)
        self.runs: dict = {}  # prompt id -> [kind, groups in a row of that kind, visits skipped in a row]
        self.rng = np.random.default_rng(seed)

    def skip_probability(self, prompt_id) -> float:
        """The chance that a visit of `prompt_id` is skipped now (0 for a prompt without a settled run)."""
        run = self.runs.get(prompt_id)
        if run is None or run[2] >= self.max_skips_in_a_row:
            return 0.0
        kind, count, _ = run
        return 1.0 - max(self.probability[kind] ** count, MIN_KEEP)

    def visit(self, prompt_id, row: dict | None = None) -> bool:
        """Whether this visit of `prompt_id` is skipped; draws from the generator only for prompts that can be.
        `row` (the prompt's dataset row) is not read: GRESO's rule knows prompts by their own groups only."""
        chance = self.skip_probability(prompt_id)
        if chance == 0.0:
            if prompt_id in self.runs:
                self.runs[prompt_id][2] = 0
            return False
        skipped = bool(self.rng.random() < chance)
        self.runs[prompt_id][2] = self.runs[prompt_id][2] + 1 if skipped else 0
        return skipped

    def observe_round(self, prompt_ids: list, zero_spread, successes, scored, tune: bool) -> dict[str, float]:
        """Record a round's generated groups (runs), then, with `tune`, move each `p` towards its target. Returns the
        round's shares of all-solved and all-failed groups."""
        zero_spread, successes, scored = (np.asarray(a) for a in (zero_spread, successes, scored))
        counted = {kind: 0 for kind in KINDS}
        for prompt_id, flat, wins, tries in zip(prompt_ids, zero_spread, successes, scored, strict=True):
            if tries == 0:  # no success reward: tells nothing about the prompt
                continue
            if not flat:
                self.runs.pop(prompt_id, None)
                continue
            kind = "solved" if wins == tries else "failed"
            counted[kind] += 1
            run = self.runs.get(prompt_id)
            count = run[1] + 1 if run is not None and run[0] == kind else 1
            # Its visits skipped in a row stay as `visit` left them: a round can generate a prompt in one batch and
            # skip it in a later one (refill drawing past the end of an epoch), and that skip counts.
            self.runs[prompt_id] = [kind, count, 0 if run is None else run[2]]
        shares = {kind: counted[kind] / max(len(prompt_ids), 1) for kind in KINDS}
        if tune:
            low, high = PROBABILITY_BOUNDS
            for kind in KINDS:
                step = (
                    -PROBABILITY_STEP
                    if shares[kind] >= self.target_zero_spread * TARGET_SPLIT[kind]
                    else PROBABILITY_STEP
                )
                self.probability[kind] = float(min(max(self.probability[kind] + step, low), high))
        return shares

    def metrics(self) -> dict[str, float]:
        """What a round logs of the skipper: both exploration probabilities."""
        return {f"coba/skip_p_{kind}": p for kind, p in self.probability.items()}

    def state_dict(self) -> dict:
        return {
            "probability": dict(self.probability),
            "runs": [[prompt_id, *run] for prompt_id, run in self.runs.items()],
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.probability = {kind: float(state["probability"][kind]) for kind in KINDS}
        self.runs = {
            prompt_id_from_json(prompt_id): [kind, int(count), int(skips)]
            for prompt_id, kind, count, skips in state["runs"]
        }
        self.rng.bit_generator.state = state["rng"]


SPREAD_WINDOW = 4  # a prompt's latest appearances the chance of spread is estimated from


class SpreadChanceSkipper:
    """Skips a visit of a prompt whose chance that a group of `group_size` has spread is below `min_chance`
    (`skip_rule="spread_chance"`; docs/spending.md).

    The chance is the posterior mean over the prompt's pass rate (`coba_trl.allocation.spread`): a Beta prior,
    updated with the prompt's successes over its latest `SPREAD_WINDOW` appearances (every completion of its groups,
    two-phase pilots included). The prior is fitted to every prompt seen so far (`skip_prior="population"`) or, with
    a `neighbour_column` (`skip_prior="neighbourhood"`), to the seen prompts of the prompt's own neighbourhood (a
    level, a topic), refitted after every round, so a neighbourhood that starts succeeding brings its prompts back.
    A prompt never seen is never skipped under the population prior; under the neighbourhood prior it is skipped by
    its neighbourhood's chance once two of its neighbours have been seen, from the first epoch on. A prompt skipped on
    `max_skips_in_a_row` visits in a row is generated on the next, so it is seen again however settled it looked. No
    random draw: the decision is a function of the shared history, the same on every process.
    """

    def __init__(
        self,
        group_size: int,
        min_chance: float = 0.5,
        max_skips_in_a_row: int = 3,
        neighbour_column: str | None = None,
    ):
        self.group_size, self.min_chance, self.max_skips_in_a_row = group_size, min_chance, max_skips_in_a_row
        self.history = PassRateHistory(window=SPREAD_WINDOW)
        self.skips: dict = {}  # prompt id -> visits skipped in a row
        self.prior = population_prior([], [])
        self.neighbour_column = neighbour_column
        self.neighbours = NeighbourhoodPrior() if neighbour_column is not None else None
        self.neighbourhood_priors: dict = {}  # neighbourhood -> its fitted (a, b), once two of its prompts were seen

    def _prior_of(self, prompt_id) -> tuple[float, float] | None:
        """The prior `prompt_id` is judged under; None where its neighbourhood has none yet."""
        if self.neighbours is None:
            return self.prior
        return self.neighbourhood_priors.get(self.neighbours.neighbourhood_of(prompt_id))

    def chance(self, prompt_id) -> float:
        """The chance that a group of `group_size` of `prompt_id` has spread now (NaN: never seen, and no
        neighbourhood prior to judge it by)."""
        successes, rollouts = self.history.counts([prompt_id])
        prior = self._prior_of(prompt_id)
        if rollouts[0] == 0 and (self.neighbours is None or prior is None):
            return float("nan")
        prior = self.prior if prior is None else prior  # seen, in a neighbourhood without a prior yet
        return float(spread_chance(successes, rollouts, self.group_size, prior)[0])

    def visit(self, prompt_id, row: dict | None = None) -> bool:
        """Whether this visit of `prompt_id` is skipped; with a neighbourhood prior `row` (the prompt's dataset
        row) names its neighbourhood."""
        if self.neighbours is not None:
            self.neighbours.register([prompt_id], [row[self.neighbour_column]], self.neighbour_column)
        chance = self.chance(prompt_id)
        skipped = chance < self.min_chance and self.skips.get(prompt_id, 0) < self.max_skips_in_a_row
        self.skips[prompt_id] = self.skips.get(prompt_id, 0) + 1 if skipped else 0
        return skipped

    def observe_round(self, prompt_ids: list, zero_spread, successes, scored, tune: bool = True) -> None:
        """Record a round's generated groups, then refit the priors (`tune` is GRESO's; unused here)."""
        self.history.update(prompt_ids, successes, scored)
        self.prior = population_prior(*self.history.counts(self.history.prompt_ids()))
        if self.neighbours is not None:
            self.neighbourhood_priors = {}
            for neighbourhood, members in self.neighbours.members().items():
                successes, rollouts = self.history.counts(members)
                if (rollouts > 0).sum() >= 2:
                    self.neighbourhood_priors[neighbourhood] = population_prior(successes, rollouts)

    def metrics(self) -> dict[str, float]:
        """What a round logs: the fitted population prior's mean and strength (a + b)."""
        a, b = self.prior
        return {"coba/skip_prior_mean": a / (a + b), "coba/skip_prior_strength": a + b}

    def state_dict(self) -> dict:
        state = {
            "history": self.history.state_dict(),
            "skips": [[prompt_id, count] for prompt_id, count in self.skips.items()],
            "prior": list(self.prior),
        }
        if self.neighbours is not None:
            state["neighbourhoods"] = self.neighbours.state_dict()
            state["neighbourhood_priors"] = [[key, *prior] for key, prior in self.neighbourhood_priors.items()]
        return state

    def load_state_dict(self, state: dict) -> None:
        self.history.load_state_dict(state["history"])
        self.skips = {prompt_id_from_json(prompt_id): int(count) for prompt_id, count in state["skips"]}
        self.prior = tuple(float(value) for value in state["prior"])
        if self.neighbours is not None:
            self.neighbours.load_state_dict(state["neighbourhoods"])
            self.neighbourhood_priors = {key: (float(a), float(b)) for key, a, b in state["neighbourhood_priors"]}
