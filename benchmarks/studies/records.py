"""What a study run records besides TRL's log: each round's prompts and group sizes, and clocks without evaluations."""

from __future__ import annotations

import time

import numpy as np

from coba_trl.trainer import CoBAGRPOTrainer


class RecordingTrainer(CoBAGRPOTrainer):
    """Keeps every round's prompt ids, group sizes and historical pass rates (budget by difficulty over time).

    `rounds`: [global step, prompt ids, group sizes, the allocator's p_i, the pooled S_i / N_i] per round; the plans
    of a round's refill phases (the same global step) extend its entry.
    `generation_times`: [global step, seconds of each generation phase] per round (timing only).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rounds, self.generation_times = [], []
        plan_batch = self.round_runner.plan

        def recorded_plan(*plan_args, **plan_kwargs):
            plan = plan_batch(*plan_args, **plan_kwargs)
            self._record_plan(plan)
            return plan

        self.round_runner.plan = recorded_plan

    def _generate_rows(self, *args, **kwargs):
        phase_start = time.perf_counter()
        output = super()._generate_rows(*args, **kwargs)
        seconds = round(time.perf_counter() - phase_start, 4)
        if self.generation_times and self.generation_times[-1][0] == self.state.global_step:
            self.generation_times[-1][1].append(seconds)  # a further phase of the same round
        else:
            self.generation_times.append([self.state.global_step, [seconds]])
        return output

    def _record_plan(self, plan) -> None:
        # The p_i this round was allocated from, and the plain pooled rate (they differ with a prior strength).
        successes, rollouts = self.pass_rate_history.counts(plan.prompt_ids)
        pooled = [None if n == 0 else s / n for s, n in zip(successes.tolist(), rollouts.tolist(), strict=True)]
        rates = [None if rate != rate else float(rate) for rate in plan.pass_rates]
        entry = [self.state.global_step, list(plan.prompt_ids), plan.group_sizes.tolist(), rates, pooled]
        if self.rounds and self.rounds[-1][0] == entry[0]:  # a further plan of the same round (refill phases)
            for kept, more in zip(self.rounds[-1][1:], entry[1:], strict=True):
                kept.extend(more)
        else:
            self.rounds.append(entry)


ROUND_KEYS = {  # compact record key: TRL / trainer log key of the round's first step
    "F_t": "coba/failure_rate",
    "alpha": "coba/alpha",
    "beta": "coba/beta",
    "reward": "reward",
    "zero_std": "frac_reward_zero_std",
    "completion_length": "completions/mean_length",
}
OPTION_KEYS = {  # kept only where the trainer logs them (rescue, drop; refill and skipping, where the trainer has them)
    "rescued_groups": "coba/rescued_groups",
    "rescued_rows": "coba/rescued_rows",
    "rescued_with_spread": "coba/rescued_with_spread",
    "dropped_groups": "coba/dropped_groups",
    "dropped_tokens": "coba/dropped_tokens",
    "rollouts_generated": "coba/rollouts_generated",
    "rows_trained": "coba/rows_trained",
    "rows_with_spread": "coba/rows_with_spread",
    "prompts_skipped": "coba/prompts_skipped",
    "refill_phases": "coba/refill_phases",
    "refill_bound_reached": "coba/refill_bound_reached",
}


def compact_rounds(log_history: list[dict], rounds: list, generation_times: list) -> list[dict]:
    """One small record per generation round: F_t, alpha_t, beta_t, reward, zero-variance share, mean completion
    length, the counts of the rescue, the drop, the refill and the skipping where the trainer logs them, the seconds
    of each generation phase, and the group sizes' summary: min / mean / max / sd, and p per rollout against p per
    prompt (the rollout-weighted and the plain mean of the pass rates the allocator saw; the first below the second:
    the budget went to harder prompts). NaN-free: a missing or unseen value is None.
    """
    logs = [record for record in log_history if "budget/mean" in record]
    records = []
    for log, (step, _, sizes, rates, _), (_, seconds) in zip(logs, rounds, generation_times, strict=True):
        sizes = np.array(sizes, dtype=float)
        seen = np.array([rate is not None for rate in rates])
        known = np.array([rate for rate in rates if rate is not None], dtype=float)
        record = {"step": step, **{key: _rounded(log.get(source)) for key, source in ROUND_KEYS.items()}}
        record.update({key: _rounded(log[source]) for key, source in OPTION_KEYS.items() if source in log})
        record["generation_s"] = seconds  # phase 1 (with two phases: the screening), phase 2
        record["sizes"] = [
            int(sizes.min()),
            round(float(sizes.mean()), 3),
            int(sizes.max()),
            round(float(sizes.std()), 3),
        ]
        record["p_per_rollout"] = _rounded(np.average(known, weights=sizes[seen]) if seen.any() else None)
        record["p_per_prompt"] = _rounded(known.mean() if seen.any() else None)
        records.append(record)
    return records


def _rounded(value, digits: int = 4):
    return None if value is None or value != value else round(float(value), digits)


def timing_callbacks(samples: int = 0):
    """A clock of `trainer.train()` that leaves out the held-out evaluations, and the evaluation callback it times.

    With `samples`, the curve is held-out avg@`samples` (temperature 1.0, `task.sampled_pass_rates`) instead of greedy
    accuracy, and the callback keeps each evaluation's per-level value in `by_level` (one dict per evaluation).
    """
    from transformers import TrainerCallback

    from coba_trl.demo.run import HeldoutAccuracyCallback
    from studies.task import level_means, sampled_pass_rates

    class Clock(TrainerCallback):
        def __init__(self):
            self.start, self.eval_seconds, self.steps = None, 0.0, []

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()  # fires before the step-0 evaluation (this callback comes first)

        def on_step_end(self, args, state, control, **kwargs):
            # The evaluation of this step comes later (at its log), so it is not in eval_seconds yet.
            elapsed = time.perf_counter() - self.start - self.eval_seconds
            self.steps.append([state.global_step, round(elapsed, 3), round(self.eval_seconds, 3)])

    class Timed(HeldoutAccuracyCallback):
        def __init__(self, clock, *args):
            super().__init__(*args)
            self.clock, self.by_level = clock, []

        def _accuracy(self) -> float:
            eval_start = time.perf_counter()
            try:
                if not samples:
                    return super()._accuracy()
                rates = sampled_pass_rates(self.model, self.tokenizer, self.problems, samples, self.max_new_tokens)
                means = level_means(rates, self.problems)
                self.by_level.append({level: round(float(value), 4) for level, value in means.items()})
                return float(np.mean(rates))
            finally:
                self.clock.eval_seconds += time.perf_counter() - eval_start

    return Clock, Timed
