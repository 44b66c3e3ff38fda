"""The model card of a run names the model, carries the CoBA settings and a quick start that asks a training prompt."""

from __future__ import annotations

from datasets import Dataset

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.model_card import BEGIN, complete_model_card, is_hub_id
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2


def always_right(completions, **kwargs):
    return [1.0] * len(completions)


def tiny_trainer(output_dir, **overrides) -> CoBAGRPOTrainer:
    tokenizer = build_byte_tokenizer()
    args = CoBAConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        report_to="none",
        **overrides,
    )
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"{i}+{i}="}] for i in range(4)]})
    return CoBAGRPOTrainer(
        build_tiny_qwen2(tokenizer, hidden_size=16), always_right, args, dataset, processing_class=tokenizer
    )


def test_card_of_a_model_built_in_memory_names_it_and_lists_the_coba_settings(tmp_path):
    trainer = tiny_trainer(tmp_path, budget_allocator="knapsack", max_generations=6)
    trainer.create_model_card(dataset_name="my arithmetic set")  # completes the card: no "None" in it any more
    assert "Model Card for None" not in (tmp_path / "README.md").read_text()
    complete_model_card(trainer, "my arithmetic set", results={"held-out accuracy": "0.2 -> 0.6"})
    card = (tmp_path / "README.md").read_text()
    assert f"# Model Card for {tmp_path.name}" in card and f"model_name: {tmp_path.name}" in card
    assert "huggingface.co/None" not in card and 'model="None"' not in card
    assert "huggingface.co/datasets/my arithmetic" not in card and "`my arithmetic set`" in card
    assert "| `budget_allocator` | `knapsack` |" in card and "| `max_generations` | `6` |" in card
    assert "coba_kappa" not in card  # the CoBA value-function fields only for the CoBA allocator
    assert "| held-out accuracy | 0.2 -> 0.6 |" in card
    assert f'model="{tmp_path}"' in card and "'content': '0+0='" in card
    assert "coba-rl" in card  # TRL's tags and citation stay
    assert "licence" not in card and "license: apache-2.0" in card  # built in memory: the project's licence
    procedure = card.split("## Training procedure\n\n")[1].split("\n")[0]
    assert procedure.startswith("Trained with GRPO through coba-trl") and "`knapsack` allocator" in procedure


def test_the_quick_start_runs_from_any_directory(tmp_path, monkeypatch):
    trainer = tiny_trainer(tmp_path / "run", max_steps=1)
    trainer.save_model()
    trainer.create_model_card(dataset_name="my arithmetic set")
    card = (tmp_path / "run" / "README.md").read_text()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    quick_start = card.split("## Quick start\n\n```python\n")[1].split("```")[0]
    exec(compile(quick_start, "model card quick start", "exec"), {})


def test_completing_twice_gives_the_same_card_and_hub_ids_are_linked(tmp_path):
    trainer = tiny_trainer(tmp_path, hub_model_id="me/tiny-coba")
    trainer.create_model_card(dataset_name="me/sums")
    complete_model_card(trainer, "me/sums", {"accuracy": "0.5"}, base_model="a tiny model")  # then a script
    first = (tmp_path / "README.md").read_text()
    complete_model_card(trainer, "me/sums", {"accuracy": "0.5"}, base_model="a tiny model")
    assert (tmp_path / "README.md").read_text() == first and first.count(BEGIN) == 1
    assert first.count("Trained with GRPO through coba-trl") == 1
    assert "# Model Card for me/tiny-coba" in first and 'model="me/tiny-coba"' in first
    assert "trained from a tiny model on the [me/sums](https://huggingface.co/datasets/me/sums) dataset." in first
    assert "| `coba_kappa` | `11.0` |" in first and "| accuracy | 0.5 |" in first


def test_is_hub_id(tmp_path):
    assert is_hub_id("Qwen/Qwen2.5-7B") and not is_hub_id("a b/c") and not is_hub_id("plain")
    (tmp_path / "x").mkdir()
    assert not is_hub_id(str(tmp_path / "x"))


def test_one_round_is_not_written_as_rounds(tmp_path):
    from coba_trl.model_card import settings_section
    from coba_trl.rounds.spending import Spending

    args = CoBAConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=8)
    one = settings_section(args, 1, spending=Spending(rounds=1, generated=8, rows_trained=8, rows_with_spread=4))
    assert "8 completions in 1 round and trained 8 rows" in one
    two = settings_section(args, 2, spending=Spending(rounds=2, generated=16, rows_trained=16, rows_with_spread=4))
    assert "16 completions in 2 rounds and trained 16 rows" in two
