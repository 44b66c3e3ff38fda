"""CoBAAllocator against a plain, loop-based transcription of docs/algorithm.md, "Capability" and
"Allocating one round" (test-only code)."""

import heapq
import math

import numpy as np
import pytest

from coba_trl.allocation import CoBAAllocator


def transcribed_alpha_beta(failures, kappa, gamma, window):
    """Section 3: F_bar over the last `window` rounds, Psi, alpha = clip(1 + (kappa - 2) F_tilde, 1, kappa - 1)."""
    if not failures:
        return kappa - 2, 2.0
    recent = failures[-window:]
    f_bar = sum(recent) / len(recent)
    f_tilde = 1 / (1 + math.exp(-gamma * (f_bar - 0.5))) if f_bar <= 0.5 else f_bar
    alpha = min(max(1 + (kappa - 2) * f_tilde, 1), kappa - 1)
    return alpha, kappa - alpha


def transcribed_value(budget, p, alpha, beta, tau):
    """Section 4: V(B, p) = (1 - exp(-(B / tau) p~ (1 - p~))) w(p~), the density through lgamma.

    p~ and 1 - p~ are taken as exact complements (min of the two rounded to 12 decimals): with alpha == beta,
    p and 1 - p have equal gains and section 5 sends the tie to the lower index, which float noise in
    1 - 0.8 = 0.19999999999999996 would otherwise decide.
    """
    pt = min(max(p, 0.01), 0.99)
    low = round(min(pt, 1 - pt), 12)
    pt, complement = (low, 1 - low) if pt <= 0.5 else (1 - low, low)
    q = pt * complement
    log_pdf = (alpha - 1) * math.log(pt) + (beta - 1) * math.log(complement)
    log_pdf -= math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    try:
        w = math.exp(log_pdf)
    except OverflowError:
        w = 1e-10
    return (1 - math.exp(-(budget / tau) * q)) * w


def transcribed_allocation(rates, total, alpha, beta, b_low, b_up, tau=None, heap_fraction=None, hard=0.05, easy=0.99):
    """Section 5, one step at a time, with a Python heap."""
    m = len(rates)
    if all(math.isnan(r) for r in rates) or total < m * b_low:
        return [total // m + (1 if i < total % m else 0) for i in range(m)]
    p = [0.5 if math.isnan(r) else r for r in rates]
    counts = [b_low] * m
    rest = total - m * b_low
    very_hard = [i for i in range(m) if p[i] < hard]
    very_easy = [i for i in range(m) if p[i] > easy]
    explore = [i for i in range(m) if hard <= p[i] <= easy]
    if heap_fraction is None:
        share = 0.8 if len(explore) > m / 2 else 0.6 + (0.8 - 0.6) * ((len(explore) / m) * 2)
    else:
        share = heap_fraction
    heap_budget = int(rest * share)
    given = 0
    if explore:
        if tau is None:
            clipped = [min(max(p[i], 0.01), 0.99) for i in explore]
            mean = sum(clipped) / len(clipped)
            variance = sum((x - mean) ** 2 for x in clipped) / len(clipped)
            tau = 3 + 9 * min(max(variance / 0.1667, 0), 1)

        def gain(i):
            return transcribed_value(counts[i] + 1, p[i], alpha, beta, tau) - transcribed_value(
                counts[i], p[i], alpha, beta, tau
            )

        heap = [(-gain(i), i) for i in explore if counts[i] < b_up]
        heapq.heapify(heap)
        while given < heap_budget and heap:
            _, i = heapq.heappop(heap)
            counts[i] += 1
            given += 1
            if counts[i] < b_up:
                heapq.heappush(heap, (-gain(i), i))
    left = rest - given
    for members in (very_hard, explore, very_easy):
        if left <= 0:
            break
        if not members:
            continue
        taking = [i for i in members if counts[i] < b_up]
        if not taking:
            continue
        weights = [1 - min(max(p[i], 1e-6), 1 - 1e-6) for i in taking]
        total_weight = sum(weights)
        for i, w in zip(taking, weights, strict=True):
            extra = min(int(left * w / total_weight), b_up - counts[i])  # `left` shrinks after every prompt
            counts[i] += extra
            left -= extra
        open_ = [i for i in taking if counts[i] < b_up]
        if open_:
            each, first = left // len(open_), left % len(open_)
            for j, i in enumerate(open_):
                extra = min(each + (1 if j < first else 0), b_up - counts[i])
                counts[i] += extra
                left -= extra
    return counts


def history_rates(rng, n_prompts):
    """Pass rates as a history produces them: s / n for small n, some exactly 0 or 1, some unseen (NaN)."""
    n = rng.choice([1, 2, 4, 8, 16, 3, 5, 12], size=n_prompts)
    rates = rng.binomial(n, rng.beta(0.5, 0.5, size=n_prompts)) / n
    rates[rng.random(n_prompts) < rng.choice([0.0, 0.1, 0.5])] = np.nan
    return rates


@pytest.mark.parametrize("seed", range(6))
def test_allocator_matches_transcription(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        m = int(rng.integers(1, 40))
        kappa = float(rng.choice([3.0, 7.0, 11.0, 20.0]))
        window = int(rng.integers(1, 4))
        b_low = int(rng.choice([1, 2, 4]))
        b_up = int(rng.choice([b_low, 8, 32, 128, 300]))
        b_up = max(b_up, b_low)
        paper = rng.random() < 0.2
        options = dict(hard_threshold=0.0, easy_threshold=1.0, heap_fraction=1.0) if paper else {}
        tau = None if rng.random() < 0.7 else float(rng.uniform(1, 15))
        allocator = CoBAAllocator(b_low, b_up, kappa=kappa, window=window, tau=tau, **options)
        failures = []
        for _ in range(int(rng.integers(0, 4))):
            step = rng.integers(0, 17, size=int(rng.integers(1, 20))) / 16
            allocator.observe(step)
            failures.append(1 - sum(step.tolist()) / len(step))
        alpha, beta = transcribed_alpha_beta(failures, kappa, 10.0, window)
        assert allocator.alpha == pytest.approx(alpha, rel=1e-12, abs=1e-12)
        assert allocator.beta == pytest.approx(beta, rel=1e-12, abs=1e-12)
        rates = history_rates(rng, m)
        total = int(rng.integers(0, m * b_up + m * 8 + 2))
        expected = transcribed_allocation(
            rates.tolist(),
            total,
            allocator.alpha,
            allocator.beta,
            b_low,
            b_up,
            tau=tau,
            heap_fraction=options.get("heap_fraction"),
            hard=options.get("hard_threshold", 0.05),
            easy=options.get("easy_threshold", 0.99),
        )
        assert allocator.allocate(rates, total).tolist() == expected
