"""Graded cases for the math rewards: what a careful human grader would accept, in both answer formats."""

import functools
import os
import subprocess
import sys
import time

import pytest

from coba_trl.rewards import boxed_accuracy_reward, dapo_accuracy_reward, grade
from coba_trl.rewards.extraction import extract_boxed_answer, extract_dapo_answer, last_boxed
from coba_trl.rewards.normalize import normalize_answer
from coba_trl.rewards.pool import TimeLimitedPool

LIMIT = 60.0  # grading, not the time limit, is checked with it: no load makes a check this slow

# (completion, ground truth, expected reward) for the DAPO `Answer:` grader.
DAPO_CASES = [
    ("Answer: 12", "12", 1),
    ("answer: 12", "12", 1),
    ("ANSWER:12", "12", 1),
    ("Answer: 13", "12", 0),
    ("So we get\nAnswer: -7", "-7", 1),
    ("Answer: 7", "-7", 0),
    ("Answer: \u22127", "-7", 1),
    ("Answer: -\\frac{1}{2}", "-0.5", 1),
    ("Answer: \\frac{-1}{2}", "-0.5", 1),
    ("Answer: $\\frac{1}{2}$", "0.5", 1),
    ("Answer: 1/2", "\\frac{1}{2}", 1),
    ("Answer: 0.5", "\\frac12", 1),
    ("Answer: 3/6", "1/2", 1),
    ("Answer: \\dfrac{3}{4}", "0.75", 1),
    ("Answer: 0.76", "\\frac{3}{4}", 0),
    ("Answer: 1,000", "1000", 1),
    ("Answer: 1{,}000", "1000", 1),
    ("Answer: 1\\,000", "1000", 1),
    ("Answer: 12,345,678", "12345678", 1),
    ("Answer: 12345", "12,345", 1),
    ("Answer: 1,2", "12", 0),
    ("Answer: 2\\sqrt{3}", "\\sqrt{12}", 1),
    ("Answer: \\sqrt{12}", "2\\sqrt3", 1),
    ("Answer: 3\\sqrt{2}", "2\\sqrt{3}", 0),
    ("Answer: \\sqrt2/2", "\\frac{\\sqrt{2}}{2}", 1),
    ("Answer: 42 cm", "42", 1),
    ("Answer: 42\\text{ cm}", "42", 1),
    ("Answer: 60 km/h", "60", 1),
    ("Answer: \\$42", "42", 1),
    ("Answer: 42 dollars", "42", 1),
    ("Answer: 30^\\circ", "30", 1),
    ("Answer: 30\u00b0", "30", 1),
    ("Answer: 50\\%", "50", 1),
    ("Answer: 9 square units", "9", 1),
    ("Answer: 5 \\text{ ways}", "5", 1),
    ("Answer: $x = 5$", "5", 1),
    ("Answer: x=5", "5", 1),
    ("Answer: x = 3 or x = -3", "-3", 0),
    ("Answer: **17**", "17", 1),
    ("**Answer:** 17", "17", 1),
    ("Answer: 17.", "17", 1),
    ("Answer: 17.0", "17", 1),
    ("Answer: 017", "17", 1),
    ("Answer: 0", "0", 1),
    ("Answer: -0", "0", 1),
    ("Answer: \\left(3\\right)", "3", 1),
    ("Answer: 5\nwait, no.\nAnswer: 6", "6", 1),
    ("Answer: 5\nwait, no.\nAnswer: 6", "5", 0),
    ("Answer:\n204", "204", 1),
    ("Answer\uff1a204", "204", 1),
    ("\u7b54\u6848\uff1a204", "204", 1),
    ("Answer: The final answer is 88", "88", 1),
    ("Final Answer: 88", "88", 1),
    ("Answer: 12 and 13", "12", 0),
    ("Answer: \\boxed{12}", "12", 1),
    ("Answer: $\\boxed{12}$", "12", 1),
    ("Answer: 2^{10}", "1024", 1),
    ("Answer: 10^{3}", "1000", 1),
    ("Answer: 1e3", "1000", 1),
    ("Answer: 3 + 4", "7", 1),
    ("Answer: \\frac{22}{7}", "\\pi", 0),
    ("Answer: (C)", "C", 1),
    ("Answer: \\text{(C)}", "C", 1),
    ("The answer is \\boxed{204}.", "204", 1),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1),
    ("\\boxed{20} then \\boxed{21}", "21", 1),
    ("\\boxed{20} then \\boxed{21}", "20", 0),
    ("\\boxed{2^{10}}", "1024", 1),
    ("x" * 400 + "Answer: 12", "12", 1),
    ("Answer: 12\n" + "y" * 400, "12", 0),
    ("I think it's 42.", "42", 0),
    ("", "42", 0),
    ("Answer:", "42", 0),
    ("\\boxed{", "42", 0),
    ("\\boxed{42", "42", 0),
    ("Answer: \x00\ufffd\ufffd", "5", 0),
    ("Answer: 12", 12, 1),
    ("Answer: 27", 27.0, 1),
    ("Answer: 3\\frac{1}{2}", "3.5", 1),
    ("Answer: 3 \\frac{1}{2}", "7/2", 1),
    ("Answer: 12 apples", "12", 1),
    ("Answer: 5x", "5", 0),
    ("Answer: 12<|im_end|>", "12", 1),
    ("Answer: (-5)", "-5", 1),
    ("Answer: \\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", 1),
]

# Evaluation grader: last \boxed{} (or an answer: marker), symbolic equivalence.
BOXED_CASES = [
    ("so \\boxed{\\frac{2}{3}}", "\\frac{2}{3}", 1),
    ("\\boxed{\\dfrac{1}{3}}", "\\frac13", 1),
    ("\\boxed{0.6667}", "\\frac{2}{3}", 0),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1),
    ("\\boxed{(3,\\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1),
    ("\\boxed{(3, \\pi)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 0),
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", 1),
    ("\\boxed{Evelyn}", "\\text{Evelyn}", 1),
    ("\\boxed{Frank}", "\\text{Evelyn}", 0),
    ("\\boxed{2, -2}", "2, -2", 1),
    ("\\boxed{-2, 2}", "2, -2", 1),
    ("\\boxed{2}", "2, -2", 0),
    ("\\boxed{5\\sqrt{2}}", "5 \\sqrt{2}", 1),
    ("\\boxed{\\sqrt{50}}", "5 \\sqrt{2}", 1),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1),
    ("\\boxed{x^2+2x}", "(x+1)^2", 0),
    ("\\boxed{[1, 2)}", "[1,2)", 1),
    ("\\boxed{x \\le 3}", "(-\\infty,3]", 1),
    ("\\boxed{x < 3}", "(-\\infty,3]", 0),
    ("\\boxed{\\frac{\\pi r^2}{2}}", "\\frac{r^2\\pi}{2}", 1),
    ("\\boxed{6.0 \\times 10^{3}}", "6000", 1),
    ("\\boxed{\\{1,2,3\\}}", "\\{1,2,3\\}", 1),
    ("\\boxed 5", "5", 1),
    ("\\fbox{7}", "7", 1),
    ("The final answer: 27", "27", 1),
    ("no answer here 27", "27", 0),
    ("\\boxed{\\boxed{8}}", "8", 1),
    ("\\boxed{4\\frac{2}{3}}", "\\frac{14}{3}", 1),
    ("\\boxed{\\sqrt{117}}", "3\\sqrt{13}", 1),
    ("\\boxed{(x+2)(x+5)}", "x^2+7x+10", 1),
    ("\\boxed{(-2, 1)}", "(1,-2)", 0),
    ("\\boxed{\\begin{pmatrix}-1\\\\2\\end{pmatrix}}", "\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}", 1),
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}", 0),
    ("\\boxed{-2x+3}", "y=-2x+3", 1),
    ("\\boxed{(-\\infty, -2) \\cup (3, \\infty)}", "(-\\infty,-2)\\cup(3,\\infty)", 1),
    ("\\boxed{\\sqrt[3]{2}}", "2^{1/3}", 1),
    ("\\boxed{\\frac{3}{2}\\text{ hours}}", "1.5", 1),
    ("\\boxed{5 \\text{ and } 7}", "5, 7", 1),
    ("$\\boxed{\\frac{a}{b}}$ done, \\boxed{unclosed", "\\frac{a}{b}", 1),
]

CHAT_CASES = [
    ([{"role": "assistant", "content": "Answer: 12"}], "12", 1),
    ([{"role": "assistant", "content": "Answer: 11"}], "12", 0),
    ([{"role": "assistant", "content": [{"type": "text", "text": "\\boxed{12}"}]}], "12", 1),
    ([{"role": "assistant", "content": "Let me think."}, {"role": "assistant", "content": "Answer: 4"}], "4", 1),
    ([{"role": "tool", "content": "Answer: 4"}, {"role": "assistant", "content": "no idea"}], "4", 0),
    ([], "4", 0),
    (None, "4", 0),
]


def test_dapo_reward_grades_like_a_human():
    rewards = dapo_accuracy_reward([c for c, _, _ in DAPO_CASES], [g for _, g, _ in DAPO_CASES], time_limit=LIMIT)
    wrong = [(c[:60], g, e, r) for (c, g, e), r in zip(DAPO_CASES, rewards, strict=True) if r != e]
    assert not wrong


def test_boxed_reward_grades_like_a_human():
    rewards = boxed_accuracy_reward([c for c, _, _ in BOXED_CASES], [g for _, g, _ in BOXED_CASES], time_limit=LIMIT)
    wrong = [(c[:60], g, e, r) for (c, g, e), r in zip(BOXED_CASES, rewards, strict=True) if r != e]
    assert not wrong


@pytest.mark.parametrize("reward", [dapo_accuracy_reward, boxed_accuracy_reward])
def test_chat_completions_are_graded(reward):
    rewards = reward([c for c, _, _ in CHAT_CASES], [g for _, g, _ in CHAT_CASES], time_limit=LIMIT)
    assert rewards == [float(e) for _, _, e in CHAT_CASES]


def test_rewards_are_floats_one_per_completion_and_named_for_trl():
    rewards = dapo_accuracy_reward(["Answer: 1", "Answer: 2", "nothing"], ["1", "1", "1"])
    assert rewards == [1.0, 0.0, 0.0]
    assert all(type(r) is float for r in rewards)
    assert dapo_accuracy_reward.__name__ == "dapo_accuracy_reward"
    assert boxed_accuracy_reward.__name__ == "boxed_accuracy_reward"
    assert dapo_accuracy_reward([], []) == []


def test_trl_keyword_arguments_are_accepted_and_metrics_logged():
    metrics, extras = {}, {}
    rewards = dapo_accuracy_reward(
        prompts=["p"] * 3,
        completions=["Answer: 3", "no answer", "Answer: \\frac{6}{2}"],
        completion_ids=[[1], [2], [3]],
        solution=["3", "3", "3"],
        prompt_id=["a", "a", "a"],
        trainer_state=None,
        log_metric=metrics.__setitem__,
        log_extra=extras.__setitem__,
    )
    assert rewards == [1.0, 0.0, 1.0]
    assert metrics == {"rewards/dapo_accuracy_reward/timeouts": 0.0, "rewards/dapo_accuracy_reward/unparsable": 1.0}
    assert extras["dapo_accuracy_reward/answer"] == ["3", None, "\\frac{6}{2}"]


def test_partial_sets_the_time_limit_and_keeps_the_name():
    from trl.trainer.utils import get_callable_name

    reward = functools.partial(dapo_accuracy_reward, time_limit=1.0)
    assert get_callable_name(reward) == "dapo_accuracy_reward"
    assert reward(["Answer: 2^{3}"], ["8"]) == [1.0]


@pytest.mark.timeout(60)  # a check run to the end would not finish: the bomb must be stopped at its limit
def test_sympy_bomb_times_out_and_is_counted():
    metrics = {}
    rewards = dapo_accuracy_reward(
        ["Answer: 10^{10^{10^{10}}}", "Answer: 5"], ["5", "5"], time_limit=1.0, log_metric=metrics.__setitem__
    )
    assert rewards == [0.0, 1.0]
    assert metrics["rewards/dapo_accuracy_reward/timeouts"] == 1.0


def test_sequential_grading_matches_the_pool():
    completions = [c for c, _, _ in DAPO_CASES[:30]]
    solutions = [g for _, g, _ in DAPO_CASES[:30]]
    pooled = grade(completions, solutions, extract_dapo_answer, LIMIT)
    sequential = grade(completions, solutions, extract_dapo_answer, LIMIT, in_process=True)
    assert pooled.rewards == sequential.rewards
    assert pooled.answers == sequential.answers
    assert pooled.timeouts == sequential.timeouts == 0


def test_mismatched_lengths_and_a_missing_solution_column_are_clear_errors():
    with pytest.raises(ValueError, match="one `solution` per completion"):
        dapo_accuracy_reward(["Answer: 1"], ["1", "2"])
    with pytest.raises(ValueError, match="need a `solution` column"):
        boxed_accuracy_reward(completions=["Answer: 1"], prompts=["p"])


def test_dapo_extraction_reads_only_the_last_300_characters():
    assert extract_dapo_answer("Answer: 1\n" + "z" * 300 + "Answer: 2") == "2"
    assert extract_dapo_answer("Answer: 1\n" + "z" * 300) is None
    assert extract_dapo_answer("Answer: 1\n" + "z" * 300 + "\\boxed{3}") == "3"


def test_boxed_extraction_balances_braces():
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{{a}{b}}") == "{a}{b}"
    assert last_boxed("\\boxed{5} \\boxed{") == "5"
    assert last_boxed("no box") is None
    assert extract_boxed_answer("\\boxed{7}\nAnswer: 8") == "7"
    assert extract_boxed_answer("Answer: 8") == "8"


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("x = \\$1,000 \\text{ dollars}.", "1000"),
        ("\\frac12", "\\frac{1}{2}"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("$\\dfrac{3}{4}$", "\\frac{3}{4}"),
        ("\\pi r^2", "\\pi r^2"),
        ("\\text{(B)}", "B"),
        ("+007.50", "7.5"),
    ],
)
def test_normalisation(raw, normalised):
    assert normalize_answer(raw) == normalised


# The pool tests map standard-library functions (`time.sleep`, `os._exit`): a worker unpickles them without importing
# this test module, whose import (pytest included) would be charged to its first item and can outlast a short limit on
# a loaded machine.


def test_pool_kills_and_replaces_workers_that_run_over():
    pool = TimeLimitedPool(max_workers=2)
    try:
        results = pool.map(time.sleep, [(30,), (0,), (30,), (0,)], time_limit=0.5, min_items_per_worker=1)
        assert [r.status for r in results] == ["timeout", "ok", "timeout", "ok"]
        assert all(0.5 <= r.seconds < 30 for r in results if r.status == "timeout")  # stopped, not waited for
        assert pool.workers_replaced == 2
        assert [r.status for r in pool.map(time.sleep, [(0,), (0,)], time_limit=5)] == ["ok", "ok"]
    finally:
        pool.shutdown()


def test_items_queued_behind_a_timed_out_item_are_still_answered():
    pool = TimeLimitedPool(max_workers=1)
    try:
        results = pool.map(time.sleep, [(0,), (30,), (0,), (0,), (30,), (0,)], time_limit=0.5)
        assert [r.status for r in results] == ["ok", "timeout", "ok", "ok", "timeout", "ok"]
        # Charged from when a worker took them: an item is never charged the limit of the one it queued behind.
        assert all(r.seconds < 0.5 for r in results if r.status == "ok")
    finally:
        pool.shutdown()


def test_a_pool_runs_items_side_by_side():
    # Compared with a baseline measured here: the time the items were charged, i.e. what running them one after
    # another would take. Two ready workers finish four half-second items in about half of it.
    pool = TimeLimitedPool(max_workers=2)
    try:
        pool.map(time.sleep, [(0.5,), (0.5,)], time_limit=60, min_items_per_worker=1)  # start both workers
        start = time.monotonic()
        results = pool.map(time.sleep, [(0.5,)] * 4, time_limit=60, min_items_per_worker=1)
        wall = time.monotonic() - start
        assert [r.status for r in results] == ["ok"] * 4
        assert wall < sum(r.seconds for r in results)
    finally:
        pool.shutdown()


def test_pool_survives_a_worker_that_dies():
    pool = TimeLimitedPool(max_workers=1)
    try:
        results = pool.map(os._exit, [(3,), (3,)], time_limit=5)
        assert [r.status for r in results] == ["error", "error"]
        assert pool.map(time.sleep, [(0,)], time_limit=5)[0].status == "ok"
    finally:
        pool.shutdown()


def test_worker_start_up_does_not_count_against_the_item():
    pool = TimeLimitedPool(max_workers=1)
    try:
        # A worker's start (imports, about a second, longer under load) would exceed the 0.2 s limit if it counted.
        result = pool.map(time.sleep, [(0,)], time_limit=0.2)[0]
        assert result.status == "ok"
    finally:
        pool.shutdown()


def test_pool_arguments_are_checked():
    with pytest.raises(ValueError, match="max_workers"):
        TimeLimitedPool(max_workers=0)


def test_worker_count_is_shared_between_local_ranks(monkeypatch):
    from coba_trl.rewards.pool import default_num_workers

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_num_workers() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert default_num_workers() == 1


def test_unguarded_script_runs_its_top_level_once_and_grades_symbolic_answers(tmp_path):
    # Workers are fresh interpreters: a training script without `if __name__ == "__main__":` is not re-run in them.
    marker = tmp_path / "runs.txt"
    script = tmp_path / "train.py"
    script.write_text(
        "from coba_trl.rewards import dapo_accuracy_reward\n"
        f"open({str(marker)!r}, 'a').write('run\\n')\n"
        "print(dapo_accuracy_reward(['Answer: \\\\sqrt{8}', 'Answer: 3'], ['2\\\\sqrt{2}', '4']))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[1.0, 0.0]"
    assert marker.read_text() == "run\n"
