"""examples/train_qwen.py: every recipe parses into the script's dataclasses, and the demo path runs end to end."""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coba_trl.checkpoint import COMPLETE_FILE

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(glob.glob(str(ROOT / "recipes" / "*.yaml")))
GPU_RECIPES = [r for r in RECIPES if not Path(r).stem.startswith("cpu_demo")]
PAPER_PROCESSES = 8


@functools.cache
def load_script():
    spec = importlib.util.spec_from_file_location("train_qwen", ROOT / "examples" / "train_qwen.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_qwen"] = module
    spec.loader.exec_module(module)
    return module


def test_recipes_exist():
    names = {Path(r).stem for r in RECIPES}
    for model in ("qwen2.5-7b-instruct", "qwen2.5-7b", "qwen2.5-math-7b", "qwen3-4b-base", "qwen3-1.7b-base"):
        assert f"{model}_coba" in names and f"{model}_grpo" in names
    assert {"qwen2.5-7b-instruct_grpo", "qwen2.5-7b-instruct_knapsack", "cpu_demo"} <= names
    assert any("vllm_server" in name for name in names)


@pytest.mark.parametrize("recipe", GPU_RECIPES, ids=lambda p: Path(p).stem)
def test_paper_recipe_parses_with_the_paper_numbers(recipe):
    # GPU recipes only need to parse here (bf16 on a GPU-less machine needs use_cpu to pass validation).
    script_args, args, model_args, _ = load_script().parse(["--config", recipe, "--use_cpu", "true"])
    assert model_args.model_name_or_path.startswith("Qwen/")
    assert script_args.dataset_name == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert args.generation_batch_size == 4096 and args.num_generations == 16
    assert (args.learning_rate, args.warmup_steps, args.num_train_epochs) == (1e-6, 10, 15)
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.beta) == ("dapo", 0.2, 0.28, 0.0)
    if "math-7b" in recipe:  # a 4,096-token context shared by prompt and completion
        assert (args.max_completion_length, args.vllm_max_model_length) == (3072, 4096)
    else:
        assert args.max_completion_length == 4096
    assert args.temperature == 1.0
    assert (args.min_generations, args.max_generations) == (2, 128)
    assert args.use_vllm and args.bf16 and args.activation_checkpointing
    assert args.prompt_id_column == "prompt_id"
    if args.budget_allocator == "coba":
        assert (args.coba_kappa, args.coba_window) == (11.0, 1)
    # The layout on the GPUs the recipe is written for: 256 prompts per round split over the processes, and
    # exactly 2 optimizer updates per generation round.
    processes = 4 if args.vllm_mode == "server" else PAPER_PROCESSES
    completions_per_update = args.per_device_train_batch_size * processes * args.gradient_accumulation_steps
    assert completions_per_update * 2 == args.generation_batch_size
    assert args.generation_batch_size // args.num_generations == 256


def test_no_arguments_means_the_cpu_demo_recipe():
    script = load_script()
    embedded = script.parse([])
    from_recipe = script.parse(["--config", str(ROOT / "recipes" / "cpu_demo.yaml")])
    for default, recipe in zip(embedded, from_recipe, strict=True):
        as_dict = getattr(default, "to_dict", None)
        assert (as_dict() if as_dict else vars(default)) == (recipe.to_dict() if as_dict else vars(recipe))
    assert embedded[2].model_name_or_path is None and embedded[0].dataset_name == "arithmetic"


@pytest.mark.parametrize("regime", ["demo", "hard", "frontier"])
def test_each_regimes_recipe_is_the_demo_with_the_regimes_declared_values(regime):
    import dataclasses

    from coba_trl.demo.config import REGIME_RECIPES, DemoArguments, regime_arguments

    script = load_script()
    training, demo = regime_arguments(regime)
    overrides = [f"--{name}={value}" for name, value in training.items() if not isinstance(value, list)]
    for name, default in vars(DemoArguments()).items():  # the regime's task, as flags
        value = getattr(demo, name)
        if value != default:
            overrides += [f"--{name}", *map(str, value)] if isinstance(value, list) else [f"--{name}={value}"]
    assert dataclasses.asdict(demo) != dataclasses.asdict(DemoArguments()) or regime == "demo"
    declared = script.parse(overrides)
    from_recipe = script.parse(["--config", str(ROOT / "recipes" / REGIME_RECIPES[regime])])
    for ours, theirs in zip(declared, from_recipe, strict=True):
        as_dict = getattr(ours, "to_dict", None)
        assert (as_dict() if as_dict else vars(ours)) == (theirs.to_dict() if as_dict else vars(theirs))


def test_flags_without_a_model_adjust_the_cpu_demo():
    script_args, args, model_args, demo_args = load_script().parse(
        ["--budget_allocator", "knapsack", "--max_steps", "3"]
    )
    assert model_args.model_name_or_path is None and script_args.dataset_name == "arithmetic"
    assert (args.budget_allocator, args.max_steps) == ("knapsack", 3)
    assert (
        args.output_dir == "outputs/cpu_demo-budget_allocator_knapsack-max_steps_3" and args.use_cpu and not args.bf16
    )
    assert (args.num_generations, args.max_generations, args.learning_rate) == (8, 32, 3e-4)
    assert args.ddp_find_unused_parameters is False
    # --use_peft: no LoRA dropout in the demo (the importance-sampling ratio stays readable); the flag still sets it
    assert model_args.lora_dropout == 0.0
    assert load_script().parse(["--use_peft", "--lora_dropout", "0.1"])[2].lora_dropout == 0.1


def test_a_flagged_demo_writes_to_its_own_folder_and_save_steps_alone_saves():
    script = load_script()
    assert script.parse([])[1].output_dir == "outputs/cpu_demo"
    assert script.parse(["--max_steps", "100", "--seed", "0"])[1].output_dir == "outputs/cpu_demo"  # the defaults
    assert script.parse(["--max_steps", "4", "--output_dir", "mine"])[1].output_dir == "mine"
    _, args, _, _ = script.parse(["--save_steps", "2", "--max_steps", "4"])
    assert (args.save_strategy.value, args.save_steps) == ("steps", 2)
    assert args.output_dir == "outputs/cpu_demo-save_steps_2-max_steps_4"
    _, args, _, _ = script.parse(["--save_steps", "2", "--resume_from_checkpoint", "outputs/run/checkpoint-2"])
    assert args.output_dir == "outputs/run"  # a resumed run writes next to its checkpoint


def test_flags_on_a_recipe_write_beside_the_recipes_folder_not_into_it():
    script = load_script()
    hard = ["--config", str(ROOT / "recipes" / "cpu_demo_hard.yaml")]
    assert script.parse(hard)[1].output_dir == "outputs/cpu_demo_hard"
    assert script.parse([*hard, "--max_steps", "100"])[1].output_dir == "outputs/cpu_demo_hard"  # the recipe's value
    _, args, _, _ = script.parse([*hard, "--budget_allocator", "uniform"])
    assert (args.output_dir, args.max_steps) == ("outputs/cpu_demo_hard-budget_allocator_uniform", 100)
    assert script.parse([*hard, "--budget_allocator", "uniform", "--output_dir", "x"])[1].output_dir == "x"


def test_the_demo_refuses_to_replace_a_finished_run_or_run_no_steps(tmp_path, capsys):
    script = load_script()
    (tmp_path / "demo_summary.json").write_text("{}")
    (tmp_path / "model").mkdir()
    for argv, says in (
        (["--max_steps", "2", "--output_dir", str(tmp_path)], "overwrite_output_dir"),
        (["--max_steps", "-3", "--output_dir", str(tmp_path / "new")], "max_steps is -3"),
        (["--resume_from_checkpoint", str(tmp_path / "model"), "--output_dir", str(tmp_path / "new")], "not a "
         "checkpoint of the CPU demo"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as stop:
            script.main(argv)
        assert stop.value.code == 2 and says in capsys.readouterr().err


def test_a_misspelled_flag_names_the_closest_options(capsys):
    with pytest.raises(SystemExit):
        load_script().main(["--max_stpes", "3"])
    assert "unknown option --max_stpes; did you mean --max_steps" in capsys.readouterr().err


def test_push_to_hub_offline_fails_before_the_warm_start(monkeypatch, tmp_path, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SystemExit) as stop:
        load_script().main(["--push_to_hub", "--output_dir", str(tmp_path)])
    assert stop.value.code == 2 and re.search("push_to_hub.*HF_HUB_OFFLINE", capsys.readouterr().err)


def test_a_model_name_gives_trl_defaults():
    _, args, model_args, _ = load_script().parse(["--model_name_or_path", "Qwen/Qwen2.5-0.5B", "--use_cpu", "true"])
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-0.5B"
    assert args.output_dir == "trainer_output" and args.learning_rate == 1e-6 and args.max_steps == -1
    assert model_args.lora_dropout == 0.05  # TRL's default


def test_help_opens_with_the_description_the_demo_default_and_examples(capsys):
    with pytest.raises(SystemExit):
        load_script().main(["--help"])
    head = capsys.readouterr().out[:4000]
    assert head.startswith("usage: python examples/train_qwen.py [--config FILE.yaml]")
    assert "offline CPU demo" in head and "--config FILE.yaml sets" in head
    coba_options = head.split("CoBA options")[1].split("options:")[0]
    assert "--budget_allocator" in coba_options and "--prior_pass_rate_column" in coba_options
    examples = head.split("examples:")[1].split("options:")[0]
    assert examples.count("examples/train_qwen.py") == 3


def test_command_line_overrides_the_recipe():
    _, args, _, demo_args = load_script().parse(
        [
            "--config",
            str(ROOT / "recipes" / "cpu_demo.yaml"),
            "--budget_allocator",
            "knapsack",
            "--demo_num_layers",
            "1",
        ]
    )
    assert args.budget_allocator == "knapsack" and demo_args.demo_num_layers == 1


def test_unknown_reward_name_is_an_error():
    with pytest.raises(ValueError, match="reward_funcs"):
        load_script().load_reward_funcs(["no_such_reward"])


def test_real_dataset_without_model_is_an_error(capsys):
    with pytest.raises(SystemExit) as stop:
        load_script().main(["--config", str(ROOT / "recipes" / "cpu_demo.yaml"), "--dataset_name", "x.parquet"])
    assert stop.value.code == 2 and "model_name_or_path is not set" in capsys.readouterr().err


SHORT_DEMO = [  # flags only: they adjust the demo's defaults
    "--max_steps", "4",
    "--demo_warm_start_steps", "5",
    "--demo_num_heldout", "20",
    "--demo_num_train_prompts", "8",
    "--per_device_train_batch_size", "16",
    "--demo_hidden_size", "16",
    "--demo_eval_steps", "2",
    "--disable_tqdm", "true",
]  # fmt: skip


@pytest.mark.slow
def test_short_demo_through_accelerate_launch(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "examples/train_qwen.py", *SHORT_DEMO]
    result = subprocess.run(
        [*command, "--output_dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "demo_summary.json").read_text())
    assert summary["steps"] == 4 and summary["rollouts"] == 2 * 32
    assert 0.0 <= summary["accuracy_before"] <= 1.0 and 0.0 <= summary["accuracy_after"] <= 1.0
    for plot in ("budget_by_pass_rate.png", "capability.png", "reward_accuracy.png"):
        assert (tmp_path / plot).stat().st_size > 0
    history = json.loads((tmp_path / "trainer_state.json").read_text())["log_history"]
    assert any("heldout_accuracy" in record for record in history)
    card = (tmp_path / "README.md").read_text()
    assert f"# Model Card for {tmp_path.name}" in card and "| `budget_allocator` | `coba` |" in card
    assert "before RL ->" in card
    quick_start = card.split("## Quick start\n\n```python\n")[1].split("```")[0]
    exec(compile(quick_start, "model card quick start", "exec"), {})  # loads the saved model, asks a training prompt
    assert "[rl] step 4/4  held-out acc" in result.stdout and "'loss'" not in result.stdout
    assert result.stdout.count("[demo] held-out accuracy") == 1


@pytest.fixture(scope="module")
def saved_demo(tmp_path_factory):
    """The short demo, saving a checkpoint every 2 of its 4 steps."""
    full = tmp_path_factory.mktemp("full")
    load_script().main([*SHORT_DEMO, "--save_steps", "2", "--output_dir", str(full)])
    return full


def _summaries(*runs):
    summaries = [json.loads((run / "demo_summary.json").read_text()) for run in runs]
    for summary in summaries:
        del summary["rl_wall_time_s"], summary["wall_time_s"]
    return summaries


@pytest.mark.slow
def test_a_resumed_demo_ends_where_the_uninterrupted_one_does(tmp_path, saved_demo):
    from safetensors.torch import load_file

    script = load_script()
    full, resumed = saved_demo, tmp_path / "resumed"
    checkpoint = str(full / "checkpoint-2")
    script.main(
        [*SHORT_DEMO, "--save_steps", "2", "--resume_from_checkpoint", checkpoint, "--output_dir", str(resumed)]
    )
    summaries = _summaries(full, resumed)
    assert summaries[0] == summaries[1]
    weights = [load_file(run / "model.safetensors") for run in (full, resumed)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    histories = [json.loads((run / "trainer_state.json").read_text())["log_history"] for run in (full, resumed)]
    assert [record.get("reward") for record in histories[0]] == [record.get("reward") for record in histories[1]]


@pytest.mark.slow
def test_the_demo_with_a_kl_term_keeps_the_warm_start_as_its_reference_when_resumed(tmp_path, saved_demo):
    # TRL loads the reference model from model.name_or_path, which the built-in model has not (an OSError at
    # construction before): the warm start goes to a folder, and a resumed run takes that folder, not the model in
    # memory (a fresh initialisation), so it ends where the uninterrupted run does.
    from safetensors.torch import load_file

    script = load_script()
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    kl = [*SHORT_DEMO, "--beta", "0.04", "--save_steps", "2"]
    script.main([*kl, "--output_dir", str(full)])
    assert (full / "warm_start_model" / "model.safetensors").exists()
    script.main([*kl, "--resume_from_checkpoint", str(full / "checkpoint-2"), "--output_dir", str(resumed)])
    assert not (resumed / "warm_start_model").exists()  # the first run's folder, beside its checkpoint
    summaries = _summaries(full, resumed)
    assert summaries[0] == summaries[1]
    weights = [load_file(run / "model.safetensors") for run in (full, resumed)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    # A run without the folder (beta 0, no vLLM) cannot give a KL term its reference when resumed.
    with pytest.raises(ValueError, match=r"beta \(0.04\).*warm-started model.*--beta 0"):
        script.main(
            [*kl, "--resume_from_checkpoint", str(saved_demo / "checkpoint-2"), "--output_dir", str(tmp_path / "x")]
        )


@pytest.mark.slow
def test_the_demo_relaunched_with_resume_true_skips_a_checkpoint_whose_save_was_cut_short(
    tmp_path, saved_demo, capsys
):
    # Stopped while saving checkpoint-4 (trainer_state.json and the marker never written): the same command with
    # --resume_from_checkpoint true resumes from checkpoint-2 in its folder and ends as the uninterrupted run.
    for step in (2, 4):
        shutil.copytree(saved_demo / f"checkpoint-{step}", tmp_path / f"checkpoint-{step}")
    for name in ("trainer_state.json", COMPLETE_FILE):
        (tmp_path / "checkpoint-4" / name).unlink()
    capsys.readouterr()
    load_script().main(
        [*SHORT_DEMO, "--save_steps", "2", "--resume_from_checkpoint", "true", "--output_dir", str(tmp_path)]
    )
    printed = capsys.readouterr().out
    assert f"Skipping {tmp_path / 'checkpoint-4'} (no trainer_state.json)" in printed
    assert f"[resume] from {tmp_path / 'checkpoint-2'}: no warm start" in printed
    summaries = _summaries(saved_demo, tmp_path)
    assert summaries[0] == summaries[1]
    for step in (2, 4):  # the demo's own file is in each checkpoint before the checkpoint is marked complete
        marker = saved_demo / f"checkpoint-{step}" / COMPLETE_FILE
        assert "demo_before_rl.json" in json.loads(marker.read_text())["files"]


def test_a_recipe_that_overflows_the_context_fails_before_training(tmp_path, capsys):
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16, max_position_embeddings=64).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    argv = [
        "--model_name_or_path",
        str(tmp_path / "model"),
        "--dataset_name",
        str(ROOT / "tests" / "fixtures" / "dapo_verl.jsonl"),
    ]
    argv += ["--max_completion_length", "64", "--num_generations", "4", "--per_device_train_batch_size", "8"]
    argv += ["--dtype", "float32", "--use_cpu", "true", "--bf16", "false", "--activation_checkpointing", "false"]
    argv += ["--report_to", "none", "--output_dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as stop:
        load_script().main(argv)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and re.search(
        r"plus max_completion_length \(64\).*max_position_embeddings \(64\)", line
    )
    assert not (tmp_path / "out" / "trainer_state.json").exists()


@pytest.mark.slow
def test_lora_training_on_a_local_dapo_file_saves_an_adapter_and_a_model_card(tmp_path):
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    tokenizer = build_byte_tokenizer()
    build_tiny_qwen2(tokenizer, hidden_size=16).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "out"
    load_script().main(
        [
            "--model_name_or_path", str(tmp_path / "model"),
            "--dataset_name", str(ROOT / "tests" / "fixtures" / "dapo_verl.jsonl"),
            "--max_train_samples", "8",
            "--prompt_id_column", "prompt_id",
            "--num_generations", "4",
            "--per_device_train_batch_size", "8",
            "--steps_per_generation", "2",
            "--max_steps", "2",
            "--max_completion_length", "8",
            "--learning_rate", "1e-3",
            "--use_peft", "true",
            "--lora_r", "4",
            "--lora_target_modules", "q_proj", "v_proj",
            "--dtype", "float32",
            "--use_cpu", "true",
            "--bf16", "false",
            "--activation_checkpointing", "false",
            "--save_strategy", "no",
            "--report_to", "none",
            "--disable_tqdm", "true",
            "--output_dir", str(out),
        ]
    )  # fmt: skip
    assert (out / "adapter_config.json").is_file()
    card = (out / "README.md").read_text()
    assert "CoBA-RL" in card and "dapo_verl.jsonl" in card


@pytest.mark.slow
def test_a_refill_demo_reports_the_completions_it_generated_everywhere(tmp_path, capsys):
    # The summary, the last lines and the model card count every completion generated (refill batches included),
    # not rounds x generation_batch_size; the per-step line shows the refills and skips.
    argv = [
        *SHORT_DEMO,
        "--zero_variance_groups",
        "refill",
        "--skip_settled_prompts",
        "true",
        "--max_refill_phases",
        "2",
    ]
    load_script().main([*argv, "--output_dir", str(tmp_path)])
    out = capsys.readouterr().out
    history = json.loads((tmp_path / "trainer_state.json").read_text())["log_history"]
    generated = int(sum(record.get("coba/rollouts_generated", 0) for record in history))
    rows = int(sum(record.get("coba/rows_trained", 0) for record in history))
    assert generated > 2 * 32  # more than the rounds' planned completions: refill generated more
    summary = json.loads((tmp_path / "demo_summary.json").read_text())
    assert summary["rollouts"] == generated and summary["rows_trained"] == rows
    skipped = int(sum(record.get("coba/prompts_skipped", 0) for record in history))
    spread = int(sum(record.get("coba/rows_with_spread", 0) for record in history))
    assert summary["prompt_visits_skipped"] == skipped and summary["rows_with_spread"] == spread
    assert f"after 4 RL steps ({generated} completions generated) in" in out
    assert f"[coba] {generated:,} completions generated in 2 rounds, {rows:,} rows trained" in out
    assert f"In all it generated {generated:,} completions in 2 rounds" in (tmp_path / "README.md").read_text()
    assert f"{generated} completions generated at temperature" in (tmp_path / "README.md").read_text()
    assert "refills " in out and "skipped " in out
    assert (tmp_path / "spending.png").stat().st_size > 0
