"""End to end: TRL's GRPOTrainer calls the DAPO reward with its own keyword arguments and logs its counters."""

from pathlib import Path

import pytest

from coba_trl.data import load_dapo_math
from coba_trl.rewards import dapo_accuracy_reward


@pytest.mark.slow
def test_grpo_step_logs_reward_and_grading_counters(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    tokenizer = build_byte_tokenizer()
    dataset = load_dapo_math(str(Path(__file__).parent / "fixtures" / "dapo_verl.parquet")).select(range(4))
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=build_tiny_qwen2(tokenizer),
        args=args,
        reward_funcs=[dapo_accuracy_reward],
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    logged = trainer.state.log_history[0]
    assert "rewards/dapo_accuracy_reward/mean" in logged
    assert logged["rewards/dapo_accuracy_reward/timeouts"] == 0.0
    assert 0.0 <= logged["rewards/dapo_accuracy_reward/unparsable"] <= 4.0
