"""Per-round allocation metrics for the trainer's logs (wandb / trackio / tensorboard through TRL's `_metrics`)."""

from __future__ import annotations

import numpy as np

# Pass-rate bins for "mean budget per bin": unseen prompts, five half-open bins over [0, 1), and exactly 1.0.
PASS_RATE_BINS = (
    ("0.0-0.2", 0.0, 0.2),
    ("0.2-0.4", 0.2, 0.4),
    ("0.4-0.6", 0.4, 0.6),
    ("0.6-0.8", 0.6, 0.8),
    ("0.8-1.0", 0.8, 1.0),
)


def budget_metrics(group_sizes: np.ndarray, pass_rates: np.ndarray) -> dict[str, float]:
    """Budget min / mean / max and the mean budget of the prompts in each pass-rate bin (empty bins are left out)."""
    sizes = np.asarray(group_sizes, dtype=np.float64)
    rates = np.asarray(pass_rates, dtype=np.float64)
    metrics = {"budget/min": sizes.min(), "budget/mean": sizes.mean(), "budget/max": sizes.max()}
    masks = {"unseen": np.isnan(rates), "1.0": rates == 1.0}
    for name, low, high in PASS_RATE_BINS:
        masks[name] = (rates >= low) & (rates < high)
    for name, mask in masks.items():
        if mask.any():
            metrics[f"budget/mean_by_pass_rate/{name}"] = sizes[mask].mean()
    return {key: float(value) for key, value in metrics.items()}
