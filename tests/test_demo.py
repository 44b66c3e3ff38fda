"""The CPU demo's task, warm start and accuracy measure."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from transformers import get_scheduler

from coba_trl.demo.accuracy import extract_integer_answer, heldout_accuracy
from coba_trl.demo.flags import LONGEST_FOLDER_NAME, SUMMARY_FILE, check_output_dir, flagged_output_dir
from coba_trl.demo.run import generation_rounds
from coba_trl.demo.task import DIFFICULTY_LEVELS, demo_problem_sets, make_problems, to_prompt_dataset
from coba_trl.demo.warm_start import warm_start
from coba_trl.rewards import dapo_accuracy_reward
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2


def test_problem_sets_are_disjoint_and_share_the_level_mix():
    train, heldout, warm = demo_problem_sets(num_train=100, num_heldout=50, num_warm_start=500, seed=3)
    heldout_questions = {p.question for p in heldout}
    assert len(heldout_questions) == 50 and len({p.question for p in train}) == 100
    assert not heldout_questions & {p.question for p in train + warm}
    for problems in (train, heldout):
        assert set(Counter(p.level for p in problems).values()) == {len(problems) // len(DIFFICULTY_LEVELS)}


def test_problems_are_reproducible_and_correct():
    first, second = make_problems(20, seed=7), make_problems(20, seed=7)
    assert first == second
    for problem in first:
        operands = [int(x) for x in problem.question.rstrip("=").split("+")]
        assert len(operands) == DIFFICULTY_LEVELS[problem.level] and sum(operands) == problem.answer


def test_numbers_of_several_digits_and_a_warm_start_on_the_easiest_levels_only():
    operands = (2, 3, 4)
    train, heldout, warm = demo_problem_sets(
        60, 30, 300, seed=5, operands_per_level=operands, digits=2, warm_start_levels=2
    )
    numbers = [int(x) for p in train + heldout + warm for x in p.question.rstrip("=").split("+")]
    assert max(numbers) > 9 and max(numbers) <= 99
    for problem in train + heldout + warm:
        terms = [int(x) for x in problem.question.rstrip("=").split("+")]
        assert len(terms) == operands[problem.level] and sum(terms) == problem.answer
    assert {p.level for p in warm} == {0, 1} and {p.level for p in train} == {p.level for p in heldout} == {0, 1, 2}
    assert not {p.question for p in heldout} & {p.question for p in train + warm}
    # The defaults are the demo's own problems, unchanged.
    assert demo_problem_sets(60, 30, 300, seed=5) == demo_problem_sets(60, 30, 300, seed=5, digits=1)


def test_a_warm_start_on_the_easiest_levels_can_draw_a_share_of_its_problems_from_the_levels_above():
    operands = (4, 5, 6, 7)
    train, heldout, lower = demo_problem_sets(80, 40, 1000, seed=3, operands_per_level=operands, warm_start_levels=2)
    _, _, warm = demo_problem_sets(
        80, 40, 1000, seed=3, operands_per_level=operands, warm_start_levels=2, warm_start_upper_share=0.1
    )
    assert len(warm) == 1000 and warm[:900] == lower[:900]  # the easy levels' draws, 100 fewer of them
    upper = [p for p in warm if p.level >= 2]
    assert len(upper) == 100 and {p.level for p in upper} == {2, 3}
    for problem in warm:  # each labelled with its own level
        terms = [int(x) for x in problem.question.rstrip("=").split("+")]
        assert len(terms) == operands[problem.level] and sum(terms) == problem.answer
    assert not {p.question for p in heldout} & {p.question for p in warm}
    # Without the easiest levels picked, the warm start already sees every level: the share draws nothing more.
    assert (
        demo_problem_sets(80, 40, 100, seed=3, operands_per_level=operands, warm_start_upper_share=0.1)[2]
        == (demo_problem_sets(80, 40, 100, seed=3, operands_per_level=operands)[2])
    )


def test_a_level_with_too_few_distinct_questions_is_refused_up_front_rather_than_drawn_forever():
    from coba_trl.demo.config import DemoArguments

    # Sums of 2 single digits have 100 distinct questions: exactly enough for 60 training and 40 held-out ones.
    train, heldout, _ = demo_problem_sets(60, 40, 0, seed=1, operands_per_level=(2,))
    assert len({p.question for p in train + heldout}) == 100
    with pytest.raises(ValueError, match=r"2 numbers has 100 distinct questions, fewer than the 101"):
        demo_problem_sets(61, 40, 0, seed=1, operands_per_level=(2,))
    # The demo's flags say which level and which flags: levels take turns, so [2, 3] asks 150 + 256 of the sums of 2.
    with pytest.raises(ValueError, match=r"demo_operands \(\[2, 3\]\).*100 distinct.*406.*demo_num_train_prompts"):
        DemoArguments(demo_operands=[2, 3], demo_num_train_prompts=512, demo_num_heldout=300)
    DemoArguments(demo_operands=[2, 3], demo_num_train_prompts=128, demo_num_heldout=72)  # 64 + 36 = 100: fits
    # Where every level has the questions, any count is drawn: 3,000 held-out problems over the default levels (a
    # fixed cap of 500 a level refused them, naming neither the flag nor the fix).
    DemoArguments(demo_num_heldout=3000)
    # The warm start draws outside the held-out set: a level whose questions all went to it would be drawn forever.
    with pytest.raises(ValueError, match=r"level of 3 numbers .* 1000 distinct questions, fewer than the 1001"):
        DemoArguments(demo_operands=[7, 3], demo_num_train_prompts=1, demo_num_heldout=2000)
    with pytest.raises(ValueError, match=r"3 numbers has 1000 distinct questions, fewer than the 1001"):
        demo_problem_sets(1, 2000, 10, seed=0, operands_per_level=(7, 3))
    train, heldout, _ = demo_problem_sets(512, 3000, 0, seed=0)
    assert len(heldout) == 3000 and not {p.question for p in train} & {p.question for p in heldout}


@pytest.mark.parametrize(
    "name, value",
    [("demo_num_train_prompts", 0), ("demo_num_heldout", 0), ("demo_warm_start_steps", -1), ("demo_eval_steps", -5),
     ("demo_hidden_size", 0), ("demo_num_layers", 0), ("demo_num_heads", 0)],
)  # fmt: skip
def test_a_count_below_its_floor_is_refused_naming_the_flag_and_its_default(name, value):
    # 0 held-out problems divided by zero at the first evaluation; a negative warm start ran none, silently.
    from coba_trl.demo.config import DemoArguments

    with pytest.raises(
        ValueError, match=rf"^{name} \({value}\) must be a whole number of at least \d, e\.g\. --{name}"
    ):
        DemoArguments(**{name: value})
    DemoArguments(demo_warm_start_steps=0, demo_eval_steps=0)  # no warm start; held-out accuracy before and after RL


def test_a_task_setting_out_of_range_is_refused_naming_the_field():
    from coba_trl.demo.config import DemoArguments

    with pytest.raises(ValueError, match="demo_warm_start_levels"):
        DemoArguments(demo_operands=[3, 4], demo_warm_start_levels=3)
    with pytest.raises(ValueError, match="demo_operand_digits"):
        DemoArguments(demo_operand_digits=0)
    with pytest.raises(ValueError, match=r"demo_warm_start_upper_share \(1\.0\) must be at least 0 and below 1"):
        DemoArguments(demo_operands=[3, 4], demo_warm_start_levels=1, demo_warm_start_upper_share=1.0)
    for levels in (None, 2):  # no level above the warm start's: the share would draw from none
        with pytest.raises(ValueError, match=r"demo_warm_start_upper_share \(0\.1\).*--demo_warm_start_levels below"):
            DemoArguments(demo_operands=[3, 4], demo_warm_start_levels=levels, demo_warm_start_upper_share=0.1)
    # A head size that is not whole (64 / 3) or odd (66 / 2) failed inside the model's rotary embedding at the first
    # evaluation, after the warm start.
    for hidden, heads in ((64, 3), (66, 2)):
        with pytest.raises(ValueError, match=rf"demo_hidden_size \({hidden}\) / demo_num_heads \({heads}\).*even"):
            DemoArguments(demo_hidden_size=hidden, demo_num_heads=heads)
    DemoArguments(demo_hidden_size=60, demo_num_heads=3)  # head size 20
    with pytest.raises(ValueError, match=r"demo_warm_start_lr_scheduler_type \(cosine_with_restarts\).*constant"):
        DemoArguments(demo_warm_start_lr_scheduler_type="cosine_with_restarts")
    # transformers' decays never start within the 20 steps of warm-up: 20 cosine steps would end at 0.95 of the rate.
    with pytest.raises(ValueError, match=r"more than 20 warm-start steps \(demo_warm_start_steps is 20\)"):
        DemoArguments(demo_warm_start_lr_scheduler_type="cosine", demo_warm_start_steps=20)
    DemoArguments(demo_warm_start_lr_scheduler_type="linear", demo_warm_start_steps=21)
    DemoArguments(demo_warm_start_lr_scheduler_type="linear", demo_warm_start_steps=0)  # no warm start at all


@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
def test_the_warm_start_follows_the_learning_rate_schedule_asked_for(monkeypatch, schedule):
    import coba_trl.demo.warm_start as warm_start_module
    from coba_trl.demo.config import DemoArguments

    schedulers = []

    def spy(name, optimizer, **kwargs):
        schedulers.append((name, kwargs, get_scheduler(name, optimizer, **kwargs)))
        return schedulers[-1][2]

    monkeypatch.setattr(warm_start_module, "get_scheduler", spy)
    demo = DemoArguments(
        demo_hidden_size=16, demo_num_layers=1, demo_num_heads=1, demo_num_train_prompts=8, demo_num_heldout=5,
        demo_warm_start_steps=21, demo_warm_start_lr_scheduler_type=schedule,  # the fewest steps that decay
    )  # fmt: skip
    warm_start_module.warm_started_demo(0, demo)
    if schedule == "constant":
        assert schedulers == []  # the demo's own schedule: 20 steps of warm-up, then the rate as given
    else:
        [(name, kwargs, scheduler)] = schedulers
        assert (name, kwargs) == (schedule, {"num_warmup_steps": 20, "num_training_steps": 21})
        assert scheduler.get_last_lr() == [0.0]  # decayed to 0 at the last step


def test_reference_completions_score_one_with_the_dapo_reward():
    problems = make_problems(10, seed=0)
    dataset = to_prompt_dataset(problems)
    completions = [[{"role": "assistant", "content": p.completion}] for p in problems]
    assert dapo_accuracy_reward(completions, dataset["solution"]) == [1.0] * 10
    assert dataset["prompt_id"] == [str(i) for i in range(10)]


def test_extract_integer_answer():
    assert extract_integer_answer("12+3\nAnswer: 15") == 15
    assert extract_integer_answer("Answer: -4  ") == -4
    assert extract_integer_answer("Answer: 1\nthe end") is None
    assert extract_integer_answer("") is None


def test_warm_start_lowers_the_loss_and_accuracy_is_a_fraction():
    torch.manual_seed(0)
    tokenizer = build_byte_tokenizer()
    model = build_tiny_qwen2(tokenizer, hidden_size=16, num_hidden_layers=1)
    problems = make_problems(64, seed=0)
    losses = warm_start(model, tokenizer, problems, steps=30, batch_size=16, learning_rate=1e-2, log_every=0)
    assert sum(losses[-5:]) < sum(losses[:5])
    scores = heldout_accuracy(model, tokenizer, problems[:10], max_new_tokens=4)
    assert 0.0 <= scores["accuracy"] <= 1.0 and {f"level_{k}" for k in range(5)} <= set(scores)


def test_generation_rounds_counts_one_round_per_steps_per_generation():
    class Args:
        gradient_accumulation_steps, steps_per_generation, num_iterations = 1, 2, 1

    assert [generation_rounds(Args, steps) for steps in (1, 2, 3, 100)] == [1, 1, 2, 50]


def test_console_line_is_compact_and_skips_what_was_not_logged():
    from coba_trl.demo.console import format_log_line

    logs = {"loss": 0.0, "reward": 0.5123, "coba/failure_rate": 0.49, "budget/min": 2.0, "budget/mean": 8.0}
    logs.update({"budget/max": 32.0, "heldout_accuracy": 0.48, **{f"other/{i}": 1.0 for i in range(50)}})
    line = format_log_line(logs, 10, 100)
    assert line == "[rl] step 10/100  reward 0.512  held-out acc 0.480  F_t 0.49  budget min/mean/max 2/8.0/32"
    assert format_log_line({"loss": 0.0}, 11, 100).startswith("[rl] step 11/100  (no new rollouts")
    assert format_log_line({"train_runtime": 61.04}, 100, 100) == "[rl] done: 100 steps in 61.0 s"
    assert format_log_line({"epoch": 1.0}, 3, 100) is None


def test_a_flagged_run_gets_a_folder_named_after_its_flags():
    assert flagged_output_dir({}) == "outputs/cpu_demo"
    assert flagged_output_dir({"output_dir": "x", "resume_from_checkpoint": "y"}) == "outputs/cpu_demo"
    changed = {"budget_allocator": "knapsack", "max_steps": 40, "reward_funcs": ["a", "my.pkg/f"]}
    assert (
        flagged_output_dir(changed)
        == "outputs/cpu_demo-budget_allocator_knapsack-max_steps_40-reward_funcs_a_my.pkg_f"
    )
    long = flagged_output_dir({f"field_{i}": "value" * 5 for i in range(10)})
    assert len(os.path.basename(long)) == LONGEST_FOLDER_NAME and long != flagged_output_dir({"field_0": "other"})
    assert flagged_output_dir({"skip_settled_prompts": True}, "outputs/cpu_demo_hard/") == (
        "outputs/cpu_demo_hard-skip_settled_prompts_true"  # a recipe's folder, a flag as typed
    )


def test_a_finished_run_is_kept_unless_overwriting_is_asked_for(tmp_path):
    check_output_dir(str(tmp_path), overwrite=False)  # empty or unfinished: fine
    (tmp_path / SUMMARY_FILE).write_text("{}")
    with pytest.raises(ValueError, match="--output_dir NEW_DIR.*--overwrite_output_dir"):
        check_output_dir(str(tmp_path), overwrite=False)
    check_output_dir(str(tmp_path), overwrite=True)


def test_a_redirected_console_prints_the_lines_without_a_progress_bar(monkeypatch):
    """A bar redrawn into a log file leaves its fragments before each line: off a terminal, only the lines."""
    import io

    from transformers import ProgressCallback

    from coba_trl.demo.console import CompactPrinterCallback, CompactProgressCallback, use_compact_console

    class Trainer:
        def __init__(self):
            self.callbacks = [ProgressCallback]

        def pop_callback(self, callback):
            return self.callbacks.remove(callback) or callback if callback in self.callbacks else None

        def add_callback(self, callback):
            self.callbacks.append(callback)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stderr, shown in ((io.StringIO(), CompactPrinterCallback), (Terminal(), CompactProgressCallback)):
        monkeypatch.setattr("sys.stderr", stderr)
        trainer = Trainer()
        use_compact_console(trainer)
        assert trainer.callbacks == [shown]


def test_the_model_card_names_the_levels_the_warm_start_saw():
    from coba_trl.demo.run import card_results

    summary = {"accuracy_before": 0.1, "accuracy_after": 0.2, "heldout_problems": 300, "steps": 3, "rollouts": 768,
               "warm_start_steps": 300, "operands": [4, 6, 8, 10, 12]}  # fmt: skip
    assert card_results(summary, 1.0)["Warm start"] == "300 supervised steps on sums of 4, 6, 8, 10, 12 single digits"
    summary.update(warm_start_levels=2, operand_digits=2)
    assert card_results(summary, 1.0)["Warm start"] == "300 supervised steps on sums of 4, 6 numbers of up to 2 digits"
    summary.update(warm_start_upper_share=0.1)
    assert card_results(summary, 1.0)["Warm start"].endswith("2 digits (10% of its problems from 8, 10, 12)")
    summary.update(warm_start_lr_scheduler_type="cosine")
    assert card_results(summary, 1.0)["Warm start"].startswith("300 supervised steps (cosine learning-rate decay) on")


def test_a_resumed_run_without_a_saved_warm_start_gives_its_engine_a_folder_no_kl_term_can_take(tmp_path):
    # A colocated vLLM engine needs a model folder; the model in memory of a resumed run is a fresh initialisation,
    # which must not be written where a later run with a KL term looks for the warm start.
    from types import SimpleNamespace

    from coba_trl.demo.run import ENGINE_MODEL_DIR, engine_model_dir

    tokenizer = build_byte_tokenizer()
    model = build_tiny_qwen2(tokenizer, hidden_size=16, num_hidden_layers=1)
    args = SimpleNamespace(output_dir=str(tmp_path / "run"), beta=0.0, process_index=0)
    engine_model_dir(model, tokenizer, args, checkpoint=str(tmp_path / "first" / "checkpoint-2"))
    assert not (tmp_path / "run" / ENGINE_MODEL_DIR).exists()
    assert model.name_or_path == str(tmp_path / "run" / "engine_model")
    assert (tmp_path / "run" / "engine_model" / "config.json").exists()


def test_a_resume_of_the_tied_head_loads_without_a_missing_key_warning(tmp_path):
    from types import SimpleNamespace
    from unittest import mock

    from safetensors.torch import load_file
    from transformers import Trainer, trainer

    saved = build_tiny_qwen2(build_byte_tokenizer(), seed=1)
    saved.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in weights  # tied to the embedding, so never saved
    model = build_tiny_qwen2(build_byte_tokenizer())
    loaded = model.load_state_dict(weights, strict=False)  # what Trainer._load_from_checkpoint does on a resume
    with mock.patch.object(trainer.logger, "warning") as warning:
        Trainer._issue_warnings_after_load(SimpleNamespace(model=model), loaded)
    warning.assert_not_called()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.lm_head.weight, saved.model.embed_tokens.weight)
