"""How much a prompt's group weighs in TRL's loss: a 64-row group against a 2-row group, per loss type, per
`scale_rewards`, with `group_weighting` "row" and "prompt".

    python benchmarks/group_weight.py

The weight of a group is measured through TRL's own `_compute_loss`: one batch of 66 completion rows (a group of 64
and a group of 2, each half right, half wrong, all 8 completion tokens long), advantages as `CoBAGRPOTrainer` computes
them, on-policy (ratio 1); the per-token log-probabilities are a leaf tensor, and a group's weight is the summed
absolute gradient of the loss over its rows' tokens, i.e. how hard the update pushes that prompt's completions. The
table prints the 64-row group's weight over the 2-row group's. `beta` is 0: with `beta > 0` the KL term is added per
token and is not scaled by the advantages, so it weighs every row once in both modes.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

from coba_trl import CoBAConfig, CoBAGRPOTrainer  # noqa: E402
from coba_trl.rounds.plan import RoundPlan  # noqa: E402
from coba_trl.rounds.scoring import Phase, Scoring, score_round  # noqa: E402
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2  # noqa: E402

SIZES = np.array([64, 2])
LENGTH = 8
LOSS_TYPES = {  # loss type -> the settings TRL requires with it
    "grpo": {},
    "bnpo": {},
    "dr_grpo": {},
    "dapo": {},
    "cispo": {},
    "sapo": {},
    "luspo": {"importance_sampling_level": "sequence"},
}
SCALES = ("group", "batch", "none")


def _trainer(loss_type: str, scale_rewards: str, tmp: str) -> CoBAGRPOTrainer:
    tokenizer = build_byte_tokenizer()
    args = CoBAConfig(
        output_dir=tmp,
        per_device_train_batch_size=66,
        num_generations=33,
        min_generations=2,
        max_generations=64,
        max_completion_length=LENGTH,
        loss_type=loss_type,
        scale_rewards=scale_rewards,
        use_cpu=True,
        bf16=False,
        report_to="none",
        **LOSS_TYPES[loss_type],
    )
    dataset = Dataset.from_dict({"prompt": ["a", "b"]})
    model = build_tiny_qwen2(tokenizer, hidden_size=16)
    return CoBAGRPOTrainer(
        model,
        lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def group_weight_ratio(trainer: CoBAGRPOTrainer, group_weighting: str) -> float:
    """The 64-row group's summed |d loss / d log p| over the 2-row group's, through TRL's `_compute_loss`."""
    rows = int(SIZES.sum())
    rewards = torch.tensor([1.0, 0.0] * (rows // 2)).unsqueeze(1)
    phase = Phase({}, rewards, np.repeat(np.arange(len(SIZES)), SIZES))
    plan = RoundPlan(["a", "b"], SIZES, np.full(2, np.nan))
    settings = Scoring(torch.ones(1), trainer.scale_rewards, "sum_then_normalize", group_weighting, "keep", 0, 1.0, 0)
    advantages = score_round(plan, [phase], settings, rank=0).advantages
    logps = torch.zeros(rows, LENGTH, requires_grad=True)
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logps, torch.zeros(rows, LENGTH), None)
    inputs = {
        "prompt_ids": torch.ones(rows, 2, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
        "completion_ids": torch.ones(rows, LENGTH, dtype=torch.long),
        "completion_mask": torch.ones(rows, LENGTH, dtype=torch.long),
        "advantages": advantages,
        "num_items_in_batch": torch.tensor(float(rows * LENGTH)),
        "old_per_token_logps": None,
        "ref_per_token_logps": None,
    }
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() per accumulation window
    trainer._compute_loss(trainer.model, inputs).backward()
    per_row = logps.grad.abs().sum(dim=1)
    return float(per_row[: SIZES[0]].sum() / per_row[SIZES[0] :].sum())


def main() -> None:
    import tempfile

    print(f"torch {torch.__version__}, {sys.platform}; 64-row group weight / 2-row group weight, beta = 0")
    print('| `loss_type` | `scale_rewards` | `group_weighting="row"` | `group_weighting="prompt"` |')
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for loss_type in LOSS_TYPES:
            for scale in SCALES:
                trainer = _trainer(loss_type, scale, tmp)
                row, prompt = (group_weight_ratio(trainer, mode) for mode in ("row", "prompt"))
                print(f"| `{loss_type}` | `{scale}` | {row:.1f} | {prompt:.2f} |")


if __name__ == "__main__":
    main()
