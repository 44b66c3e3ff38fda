"""A success reward that is not right-or-wrong: the once-only warning and the logged success rate per round."""

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scripts.tiny_coba import TINY_ARGS, Recorder, parity_reward, prompt_dataset, tiny_model

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.rounds.scoring import Phase, success_signal_warning


def reward_len(completions, **kwargs):
    """TRL's quickstart reward: completions near 20 characters score highest (0 at exactly 20, negative otherwise)."""
    return [-abs(20 - len(completion)) for completion in completions]


def _train(tmp_path, reward, **overrides):
    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=3,
        seed=3,
        **{**TINY_ARGS, **overrides},
    )
    trainer = CoBAGRPOTrainer(model, reward, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer)
    recorder = Recorder(trainer)
    trainer.train()
    return trainer, recorder


def _warnings(caplog):
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "success_threshold" in r.message
    ]


def _logged(trainer, key):
    return [record[key] for record in trainer.state.log_history if key in record]


@pytest.mark.parametrize(("threshold", "outcome"), [(1.0, "no completion reached"), (-100.0, "every completion")])
def test_a_continuous_reward_no_threshold_separates_warns_once_with_the_range(tmp_path, caplog, threshold, outcome):
    caplog.set_level(logging.WARNING)
    trainer, log = _train(tmp_path, reward_len, success_threshold=threshold)
    (message,) = _warnings(caplog)  # three rounds, one warning
    first = log.rewards[0][:, 0].numpy()  # the first round shows it: the range it names is that round's
    assert f"from {first.min():g} to {first.max():g}" in message
    assert outcome in message and "'reward_len'" in message and "success_reward_func=None" in message
    assert _logged(trainer, "coba/success_rate") == [0.0 if threshold == 1.0 else 1.0] * 3


def test_a_threshold_inside_the_range_gives_successes_and_no_warning(tmp_path, caplog):
    # This seed's completions are 6 to 8 characters long (rewards -14 to -12): -12.5 separates every round.
    caplog.set_level(logging.WARNING)
    trainer, log = _train(tmp_path, reward_len, success_threshold=-12.5, success_reward_func="reward_len")
    expected = [float(np.mean(rewards[:, 0].numpy() >= -12.5)) for rewards in log.rewards]
    assert all(0.0 < rate < 1.0 for rate in expected)
    assert _logged(trainer, "coba/success_rate") == pytest.approx(expected)
    assert _warnings(caplog) == []


def test_a_right_or_wrong_reward_never_warns_and_logs_its_success_rate(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    trainer, log = _train(tmp_path, parity_reward)
    assert _warnings(caplog) == []
    expected = [float(rewards[:, 0].mean()) for rewards in log.rewards]
    assert _logged(trainer, "coba/success_rate") == pytest.approx(expected)


def _phase_warning(rewards, threshold=1.0):
    scores = torch.tensor(rewards, dtype=torch.float32)[:, None]
    settings = SimpleNamespace(success_indices=(0,), success_threshold=threshold)
    return success_signal_warning([Phase({}, scores, np.zeros(len(rewards), dtype=int))], settings, "r", None)


def test_the_warning_needs_values_other_than_0_and_1_and_no_separation():
    assert _phase_warning([0.0, 0.0, float("nan")]) is None  # right-or-wrong, only failures: a hard round
    assert _phase_warning([1.0, 1.0]) is None
    assert _phase_warning([0.5, 1.0]) is None  # partial credit, some successes
    assert "from 0 to 0.5" in _phase_warning([0.0, 0.5, float("nan")])  # NaN left out of the range
    assert "every completion reached success_threshold (-3)" in _phase_warning([-2.0, 0.5], threshold=-3.0)
