"""The chance that a group of n completions has a spread of rewards, from a prompt's observed successes: a Beta
posterior over its pass rate, in plain numpy.

A prompt with pass rate p gives a group of n right-or-wrong completions without spread with probability
p^n + (1 - p)^n (all solved or all failed), so the group has spread with probability q(p) = 1 - p^n - (1 - p)^n.
A point estimate of p from a few samples overstates how settled a prompt is: 0 of 8 gives p = 0 and q = 0, yet many
prompts that go 0 of 8 have p = 5% and a group with spread one time in three. Here p is uncertain: with a Beta(a, b)
prior and S successes out of N observed completions, p ~ Beta(a + S, b + N - S), and the chance of spread is the
posterior mean of q,

    E[q] = 1 - E[p^n] - E[(1 - p)^n],   E[p^n] = prod_{k=0}^{n-1} (a' + k) / (a' + b' + k)

(the Beta moments, exact for integer n). The prior is fitted to the population of prompts (empirical Bayes, the
method of moments on their observed rates, `population_prior`): on a task where most prompts are never solved it
is concentrated near 0, so one failed group already says much; on a task of middling prompts it is broad.
"""

from __future__ import annotations

import numpy as np

MIN_STRENGTH, MAX_STRENGTH = 0.5, 50.0  # bounds of the fitted prior's a + b (pseudo-completions)
DEFAULT_PRIOR = (1.0, 1.0)  # uniform, while fewer than two prompts have been seen


def beta_power_mean(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """E[p^n] for p ~ Beta(a, b), elementwise (a, b > 0, integer n >= 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    steps = np.arange(n, dtype=np.float64)
    return np.prod((a[..., None] + steps) / (a[..., None] + b[..., None] + steps), axis=-1)


def spread_chance(successes, rollouts, group_size: int, prior: tuple[float, float] = DEFAULT_PRIOR) -> np.ndarray:
    """The posterior chance that a group of `group_size` has spread, per prompt, from its `successes` out of
    `rollouts` observed completions and the Beta `prior` (a, b). A prompt never observed gets the prior's chance."""
    successes, rollouts = np.asarray(successes, dtype=np.float64), np.asarray(rollouts, dtype=np.float64)
    a, b = prior
    posterior_a, posterior_b = a + successes, b + rollouts - successes
    solved = beta_power_mean(posterior_a, posterior_b, group_size)
    failed = beta_power_mean(posterior_b, posterior_a, group_size)
    return np.clip(1.0 - solved - failed, 0.0, 1.0)


def population_prior(successes, rollouts) -> tuple[float, float]:
    """A Beta(a, b) prior fitted to the prompts with rollouts by the beta-binomial method of moments.

    The observed rates S_i / N_i vary more than the pass rates do, by the binomial noise of N_i samples: with mean m,
    Var(S_i / N_i) = Var(p) + (m (1 - m) - Var(p)) E[1 / N_i], so Var(p) = (v - m (1 - m) E[1 / N]) / (1 - E[1 / N])
    from the observed variance v, and a + b = m (1 - m) / Var(p) - 1, kept within [0.5, 50]. The mean is the pooled
    rate with one pseudo-success and one pseudo-failure, so prompts that all failed (or all succeeded) give a strong
    prior near 0 (or 1), not a point mass. Uniform while fewer than two prompts have rollouts."""
    successes, rollouts = np.asarray(successes, dtype=np.float64), np.asarray(rollouts, dtype=np.float64)
    seen = rollouts > 0
    if seen.sum() < 2:
        return DEFAULT_PRIOR
    rates = successes[seen] / rollouts[seen]
    mean = float((successes[seen].sum() + 1) / (rollouts[seen].sum() + 2))
    noise = float(np.mean(1.0 / rollouts[seen]))  # E[1 / N]: 1 when every prompt was seen once
    spread = mean * (1 - mean)
    variance = (float(rates.var()) - spread * noise) / (1 - noise) if noise < 1 else 0.0
    variance = max(variance, spread / (MAX_STRENGTH + 1))
    strength = float(np.clip(spread / variance - 1, MIN_STRENGTH, MAX_STRENGTH))
    return mean * strength, (1 - mean) * strength
