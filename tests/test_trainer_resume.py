"""Checkpoints carry the allocator state: a resumed run allocates exactly like an uninterrupted one."""

import json

from scripts.tiny_coba import TINY_ARGS, Recorder, prompt_dataset, step_reward, tiny_model

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.trainer import STATE_FILE


def _trainer(output_dir):
    model, tokenizer = tiny_model()
    args = CoBAConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=16,
        num_generations=4,
        max_steps=4,
        prompt_id_column="uid",
        seed=11,
        **{**TINY_ARGS, "save_strategy": "steps", "save_steps": 2},
    )
    dataset = prompt_dataset(8, repeats=2)  # 4 prompts per round: later rounds revisit prompts with history
    return CoBAGRPOTrainer(model, step_reward, args=args, train_dataset=dataset, processing_class=tokenizer)


def test_resume_restores_allocations_and_capability(tmp_path):
    uninterrupted = _trainer(tmp_path / "full")
    full_log = Recorder(uninterrupted)
    uninterrupted.train()
    checkpoint = tmp_path / "full" / "checkpoint-2"
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    assert saved["pass_rate_history"] and saved["allocator"]

    resumed = _trainer(tmp_path / "resumed")
    resumed_log = Recorder(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    assert len(full_log.allocations) == 4
    assert resumed_log.allocations == full_log.allocations[2:]
    assert resumed.allocator.state_dict() == uninterrupted.allocator.state_dict()
    assert resumed.pass_rate_history.state_dict() == uninterrupted.pass_rate_history.state_dict()
