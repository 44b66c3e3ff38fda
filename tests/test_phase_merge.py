"""Two-phase rounds merge TRL's two row batches key by key: each (B, T) tensor padded on the side and with the value
TRL pads it with, and any key whose padding is unknown refused rather than guessed."""

import pytest
import torch
from trl import GRPOTrainer

from coba_trl.rounds.phases import MULTIMODAL, PADDING, merge_phase_outputs

PAD = 9


def _phase(rows: int, prompt_width: int, completion_width: int, **extra) -> dict:
    return {
        "prompt_ids": torch.full((rows, prompt_width), 5),
        "prompt_mask": torch.ones(rows, prompt_width, dtype=torch.long),
        "completion_ids": torch.full((rows, completion_width), 6),
        "completion_mask": torch.ones(rows, completion_width, dtype=torch.long),
        "advantages": torch.arange(rows, dtype=torch.float32),
        "num_items_in_batch": torch.tensor(rows * completion_width),
        **extra,
    }


def test_every_known_key_is_padded_on_its_side_with_its_value():
    def per_token(rows, width):
        return {
            "tool_mask": torch.zeros(rows, width, dtype=torch.long),
            "old_per_token_logps": torch.full((rows, width), -1.0),
            "ref_per_token_logps": torch.full((rows, width), -2.0),
            "sampling_per_token_logps": torch.full((rows, width), -3.0),
            "importance_sampling_ratio": torch.full((rows, width), 2.0),
        }

    merged = merge_phase_outputs([_phase(2, 3, 1, **per_token(2, 1)), _phase(1, 1, 2, **per_token(1, 2))], PAD)
    assert set(merged) == set(PADDING) | {"advantages", "num_items_in_batch"}
    assert merged["prompt_ids"].tolist() == [[5, 5, 5], [5, 5, 5], [PAD, PAD, 5]]  # left, pad token
    assert merged["prompt_mask"].tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1]]  # left, 0
    assert merged["completion_ids"].tolist() == [[6, PAD], [6, PAD], [6, 6]]  # right, pad token
    assert merged["completion_mask"].tolist() == [[1, 0], [1, 0], [1, 1]]  # right, 0
    assert merged["tool_mask"].tolist() == [[0, 1], [0, 1], [0, 0]]  # right, 1 like TRL
    assert merged["old_per_token_logps"].tolist() == [[-1, 0], [-1, 0], [-1, -1]]
    assert merged["importance_sampling_ratio"].tolist() == [[2, 1], [2, 1], [2, 2]]  # right, 1 like TRL
    assert merged["advantages"].tolist() == [0, 1, 0]
    assert merged["num_items_in_batch"].item() == 2 + 2


def test_vespo_gamma_weights_of_every_row_survive_the_merge():
    # TRL's VESPO weights sum the log of the per-token importance ratio over every position, mask or not: a row of
    # the phase with shorter completions must get the weight TRL gives it in its own phase, not one shrunk by padding.
    torch.manual_seed(0)
    phases, weights = [], []
    for rows, width in ((2, 3), (3, 6)):
        mask = torch.ones(rows, width, dtype=torch.long)
        mask[0, width - 1 :] = 0  # TRL's ratio is exp(0) = 1 at a masked position
        ratio = torch.where(mask.bool(), torch.exp(0.05 * torch.randn(rows, width)), 1.0)
        phase = _phase(rows, 1, width, completion_mask=mask, importance_sampling_ratio=ratio)
        phases.append(phase)
        weights.append(_gamma_weights(phase))
    merged = merge_phase_outputs(phases, PAD)
    torch.testing.assert_close(_gamma_weights(merged), torch.cat(weights))
    assert _gamma_weights(merged).min() > 0.5  # near 1 for ratios near 1 (padding with 0 gave about 1e-15)


def _gamma_weights(batch):
    """TRL's VESPO gamma weights phi(w) of each row, with the policy equal to the old policy (log ratio 0)."""
    mask = batch["completion_mask"]
    return GRPOTrainer.get_gamma_weights(
        advantages=batch["advantages"].unsqueeze(1),
        log_ratio_per_token=torch.zeros(mask.shape),
        mask=mask,
        importance_sampling_ratio=batch["importance_sampling_ratio"],
    )


def test_a_per_sequence_importance_ratio_keeps_its_single_column():
    ratio = {"importance_sampling_ratio": torch.ones(2, 1)}
    merged = merge_phase_outputs([_phase(2, 1, 1, **ratio), _phase(2, 1, 3, **ratio)], PAD)
    assert merged["importance_sampling_ratio"].shape == (4, 1)


def test_a_key_returned_as_none_stays_none():
    merged = merge_phase_outputs(
        [_phase(1, 1, 1, old_per_token_logps=None), _phase(1, 1, 1, old_per_token_logps=None)], 0
    )
    assert merged["old_per_token_logps"] is None


def test_an_unknown_key_is_refused_not_padded_by_a_guess():
    # A key a newer TRL might add: left- or right-padded, a guess could misalign every row silently.
    extra = {"new_per_token_field": torch.zeros(1, 2)}
    with pytest.raises(ValueError, match=r"'new_per_token_field'.*does not know how to pad.*two_phase_rounds=False"):
        merge_phase_outputs([_phase(1, 1, 1, **extra), _phase(1, 1, 1, **extra)], PAD)


@pytest.mark.parametrize("key", MULTIMODAL)
def test_multimodal_inputs_are_refused(key):
    extra = {key: torch.zeros(1, 2)}
    with pytest.raises(ValueError, match=rf"'{key}'.*multimodal"):
        merge_phase_outputs([_phase(1, 1, 1, **extra), _phase(1, 1, 1, **extra)], PAD)
