"""Two-phase rounds and zero-variance groups: screening results drive the allocation, advantages span both phases,
`drop` leaves exactly the zero-spread groups out of the loss normalisation, `rescue` helps only all-equal groups."""

import numpy as np
import pytest
import torch
from scripts.tiny_coba import (
    TINY_ARGS,
    Recorder,
    RoundRecorder,
    parity_reward,
    prompt_dataset,
    step_reward,
    tiny_model,
)

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.allocation import CoBAAllocator, coba_allocate
from coba_trl.rounds.log import read_rounds
from coba_trl.rounds.phases import merge_phase_outputs, rescue_counts


def _trainer(tmp_path, reward=parity_reward, **overrides):
    model, tokenizer = tiny_model()
    config = dict(
        per_device_train_batch_size=16,
        num_generations=4,
        max_steps=1,
        two_phase_rounds=True,
        prompt_id_column="uid",
        seed=5,
        **TINY_ARGS,
    )
    args = CoBAConfig(output_dir=str(tmp_path), **{**config, **overrides})
    return CoBAGRPOTrainer(model, reward, args=args, train_dataset=prompt_dataset(8), processing_class=tokenizer)


class OutputRecorder:
    """The batch `_generate_and_score_completions` returns each round (after CoBA's changes)."""

    def __init__(self, trainer):
        self.outputs = []
        generate = trainer._generate_and_score_completions

        def record(inputs):
            output = generate(inputs)
            self.outputs.append(
                {key: value.clone() if torch.is_tensor(value) else value for key, value in output.items()}
            )
            return output

        trainer._generate_and_score_completions = record


def _group_ids(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


def test_screening_results_drive_the_allocation(tmp_path):
    trainer = _trainer(tmp_path, reward=step_reward)
    seen = []
    allocate = trainer.allocator.allocate
    trainer.allocator.allocate = lambda rates, total: seen.append(rates.copy()) or allocate(rates, total)
    rounds = RoundRecorder(trainer)
    trainer.train()
    ((ids, sizes),) = rounds.rounds
    # step_reward at step 0: prompt q<i> succeeds iff i % 3 == 0, so its 2 screening completions give p = 1 or 0.
    expected_rates = [1.0 if int(uid[1:]) % 3 == 0 else 0.0 for uid in ids]
    np.testing.assert_array_equal(seen[0], expected_rates)  # no history: the screening alone is the estimate
    assert sizes == CoBAAllocator(2, 128, kappa=11.0).allocate(np.array(expected_rates), 16).tolist()
    assert sizes != [4, 4, 4, 4]  # without the screening the first round would be uniform (all prompts unseen)


def test_advantages_span_both_phases(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.allocator.allocate = lambda rates, total: np.array([2, 6, 3, 5])
    log = Recorder(trainer)
    trainer.train()
    screening, rest = (rewards[:, 0].numpy().astype(np.float64) for rewards in log.rewards)
    assert len(screening) == 8 and len(rest) == 8  # 4 prompts x 2, then the other 8 of the round's 16
    rewards = np.concatenate([screening, rest])
    groups = np.concatenate([_group_ids([2, 2, 2, 2]), _group_ids([0, 4, 1, 3])])
    expected = np.zeros_like(rewards)
    for group in range(4):
        r = rewards[groups == group]
        expected[groups == group] = (r - r.mean()) / (r.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(log.advantages[0].numpy(), expected, atol=1e-5)


def test_drop_removes_exactly_the_zero_spread_groups_from_the_normalisation(tmp_path):
    trainer = _trainer(tmp_path, two_phase_rounds=False, zero_variance_groups="drop", min_generations=1)
    sizes = [1, 7, 3, 5]
    trainer.allocator.allocate = lambda rates, total: np.array(sizes)
    log, outputs = Recorder(trainer), OutputRecorder(trainer)
    trainer.train()
    rewards, (output,) = log.rewards[0][:, 0].numpy(), outputs.outputs
    groups = _group_ids(sizes)
    zero = np.array([np.ptp(rewards[groups == g]) == 0 for g in range(4)])  # the group of one always has zero spread
    assert zero[0] and not zero.all()
    kept_rows = ~zero[groups]
    mask = output["completion_mask"]
    assert (mask[torch.as_tensor(~kept_rows)] == 0).all() and (mask[torch.as_tensor(kept_rows)].sum(1) > 0).all()
    assert output["num_items_in_batch"].item() == mask.sum().item()
    logs = trainer.state.log_history[0]
    assert logs["coba/dropped_groups"] == zero.sum()


def odd_reward(completions, **kwargs):
    """2 (1 - parity_reward): 2.0 for an odd-length completion."""
    return [2.0 * (len(c) % 2) for c in completions]


def test_drop_under_normalize_then_sum_drops_exactly_the_groups_flat_in_every_reward_function(tmp_path):
    # parity_reward + 0.5 * odd_reward is 1 for every completion, but each function normalised on its own gives the
    # groups of mixed parity an advantage: only the groups whose completions share a parity are flat and dropped.
    trainer = _trainer(
        tmp_path,
        reward=[parity_reward, odd_reward],
        two_phase_rounds=False,
        zero_variance_groups="drop",
        multi_objective_aggregation="normalize_then_sum",
        reward_weights=[1.0, 0.5],
        max_steps=4,
    )
    outputs = OutputRecorder(trainer)
    trainer.train()
    records, logs = read_rounds(str(tmp_path)), [h for h in trainer.state.log_history if "loss" in h]
    assert len(records) == len(logs) == len(outputs.outputs) == 4
    kept_rounds = 0
    for record, step, output in zip(records, logs, outputs.outputs, strict=True):
        sizes, even = np.array(record["group_sizes"]), np.array(record["successes"])  # parity_reward decides success
        flat = (even == 0) | (even == sizes)
        assert step["coba/dropped_groups"] == flat.sum() and step["frac_reward_zero_std"] == flat.mean()
        dropped_rows = (output["completion_mask"].sum(dim=1) == 0).numpy()
        np.testing.assert_array_equal(dropped_rows, flat[_group_ids(sizes)])
        assert (step["grad_norm"] > 0) == (not flat.all())  # the kept groups train the model
        kept_rounds += not flat.all()
    assert kept_rounds > 0


def test_rescue_gives_extra_rows_only_to_all_equal_groups(tmp_path):
    trainer = _trainer(tmp_path, zero_variance_groups="rescue", max_steps=2, per_device_train_batch_size=32)
    planned = []
    allocate = trainer.allocator.allocate
    trainer.allocator.allocate = lambda rates, total: planned.append(allocate(rates, total)) or planned[-1]
    log, rounds = Recorder(trainer), RoundRecorder(trainer)
    trainer.train()
    for index, (_, sizes) in enumerate(rounds.rounds):
        screening = log.rewards[2 * index][:, 0].numpy().reshape(8, 2)  # 8 prompts x 2 screening rows, in order
        all_equal = screening.min(1) == screening.max(1)
        gained = np.array(sizes) > planned[index]
        assert not gained[~all_equal].any()  # only all-equal groups gain rows...
        assert (np.array(sizes)[all_equal] >= 4).all()  # ...each at least min_generations more than its screening
        assert sum(sizes) == 32


def test_rescue_counts_by_hand():
    counts = np.array([2, 10, 2, 6])  # the allocator's plan, floor 2, each rescued group wants 2 more
    rescued = np.array([True, False, True, False])
    # each takes 2 rows from the largest other group in turn: 10 -> 8 -> 6
    assert rescue_counts(counts, rescued, floor=2, cap=16, extra=2).tolist() == [4, 6, 4, 6]
    # nobody but rescued groups above the target: the rescue takes what it can, totals unchanged
    assert rescue_counts(np.array([2, 5, 3]), np.array([True, True, False]), 2, 16, 2).tolist() == [3, 4, 3]
    # an all-equal group the allocator funded generously gives too: the largest group donates, rescued or not
    counts, rescued = np.array([12, 2, 6]), np.array([True, True, False])
    assert rescue_counts(counts, rescued, floor=2, cap=16, extra=2).tolist() == [10, 4, 6]


def test_phase_outputs_merge_with_their_padding():
    first = {
        "prompt_ids": torch.tensor([[0, 5], [6, 7]]),
        "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 3], [4, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]),
        "advantages": torch.zeros(2),
        "num_items_in_batch": torch.tensor(4),
        "old_per_token_logps": None,
    }
    second = {
        "prompt_ids": torch.tensor([[8, 9, 9]]),
        "prompt_mask": torch.tensor([[1, 1, 1]]),
        "completion_ids": torch.tensor([[5]]),
        "completion_mask": torch.tensor([[1]]),
        "advantages": torch.zeros(1),
        "num_items_in_batch": torch.tensor(1),
        "old_per_token_logps": None,
    }
    merged = merge_phase_outputs([first, second], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[0, 0, 5], [0, 6, 7], [8, 9, 9]]  # prompts padded on the left
    assert merged["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]  # completions on the right
    assert merged["num_items_in_batch"].item() == 5 and merged["old_per_token_logps"] is None


def test_rescue_needs_two_phases():
    with pytest.raises(ValueError, match="two_phase_rounds=True"):
        CoBAConfig(output_dir="unused", zero_variance_groups="rescue", **TINY_ARGS)


def test_the_allocation_log_lets_anyone_recompute_two_phase_allocations(tmp_path):
    # Window 1, no prior: a two-phase estimate is the screening alone, S / min_generations; the CoBA counts then
    # follow from the logged alpha_t, beta_t with the released defaults.
    trainer = _trainer(tmp_path, reward=step_reward, max_steps=3)
    trainer.train()
    records = read_rounds(str(tmp_path))
    assert [r["micro_step"] for r in records] == [0, 1, 2] and records[0]["screen_rollouts"] == 2
    for record in records:
        screened = np.array(record["screen_successes"]) / record["screen_rollouts"]
        np.testing.assert_array_equal(record["pass_rates"], screened)
        alpha, beta = record["allocator"]["alpha"], record["allocator"]["beta"]
        counts, _ = coba_allocate(screened, 16, alpha, beta, 2, 128)
        assert record["allocated"] == record["group_sizes"] == counts.tolist()
        assert sum(record["group_sizes"]) == 16 and record["rescued"] is None
        # successes over the whole group: step_reward makes a prompt all-right or all-wrong at a given step
        assert all(s in (0, n) for s, n in zip(record["successes"], record["group_sizes"], strict=True))


def test_two_phase_failure_rate_comes_from_the_screening(tmp_path):
    # Group sizes depend on the screening's own results, so whole-group rates are biased; F_t uses the screening,
    # which has min_generations rows for every prompt.
    trainer = _trainer(tmp_path, max_steps=2)
    trainer.train()
    first, second = read_rounds(str(tmp_path))
    screened = np.array(first["screen_successes"]) / first["screen_rollouts"]
    assert second["allocator"]["failure_rate"] == pytest.approx(1 - screened.mean())
