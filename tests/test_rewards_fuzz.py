"""The rewards never raise and never charge an answer past its time limit, whatever the model writes.

The time checked is what `grade` charges each answer: its parsing in the calling process plus its symbolic check from
the moment a ready worker took it. A worker's start-up (a restart after a kill included), which a loaded machine slows
down, is never charged, so these bounds hold at any load; `SLACK` covers the parsing and the pool's reaction time.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coba_trl.rewards import boxed_accuracy_reward, dapo_accuracy_reward, grade
from coba_trl.rewards.extraction import extract_boxed_answer, extract_dapo_answer
from coba_trl.rewards.pool import get_pool

LIMIT = 1.0
SLACK = 1.0
REWARDS = [dapo_accuracy_reward, boxed_accuracy_reward]
EXTRACT = {dapo_accuracy_reward: extract_dapo_answer, boxed_accuracy_reward: extract_boxed_answer}

BOMBS = [
    "10^{10^{10}}",
    "9^{9^{9^{9}}}",
    "(10^{100})!",
    "2^{2^{2^{2^{2^{2}}}}}",
    "\\frac{1}{0}",
    "\\sum_{n=1}^{10^{12}} n^{n}",
    "\\int_0^\\infty e^{-x^{x^{x}}} dx",
    "x^{x^{x^{x^{x}}}} = 10^{10^{10}}",
    "\\begin{pmatrix}" + "&".join(["10^{10^5}"] * 30) + "\\end{pmatrix}",
    "1" + "0" * 5000,
]
HUGE = [
    "a" * 1_000_000 + "\nAnswer: 5",
    "\\boxed{" * 150_000,
    "{" * 1_000_000,
    "Answer:" * 150_000,
    "$" * 300_000 + "Answer: $5$",
    " " * 1_000_000,
    "\\boxed{" + "{" * 5_000 + "5" + "}" * 5_000 + "}",
    "\ufffd" * 200_000 + "Answer: \ufffd5",
    "".join(chr(c) for c in range(32)) * 10_000,
]
ODD_COMPLETIONS = [
    None,
    42,
    {"role": "assistant", "content": "Answer: 5"},
    [{"role": "assistant", "content": None}],
    [{"content": 5}],
    [{"role": "assistant", "content": [{"type": "image"}, {"type": "text", "text": None}]}],
    ["Answer: 5"],
    b"Answer: 5",
]

adversarial_text = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.sampled_from("\\{}^_$()[]0123456789-+*/=,.:!AaBbx \n\ufffd\x00"), max_size=400),
    st.builds(lambda s: "Answer: " + s, st.text(max_size=200)),
    st.builds(lambda s: "\\boxed{" + s, st.text(max_size=200)),
    st.builds(lambda s, t: f"{s}\\boxed{{{t}}}", st.text(max_size=100), st.text(max_size=100)),
    st.sampled_from(BOMBS).map(lambda b: "Answer: " + b),
)
golds = st.one_of(
    st.sampled_from(["5", "-3", "\\frac{1}{2}", "2, -2", "\\text{Evelyn}", "", "10^{10^{10}}"]), st.text()
)


def _graded(reward, completions, solution):
    """The rewards `reward` gives (it is `grade` with its extractor) and the largest time charged to one answer."""
    result = grade(completions, solution, EXTRACT[reward], time_limit=LIMIT)
    return result.rewards, max(result.seconds)


@pytest.fixture(scope="module", autouse=True)
def warm_pool():
    dapo_accuracy_reward(["Answer: \\sqrt{4}"], ["2"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=adversarial_text, gold=golds)
def test_random_and_adversarial_text_scores_within_the_limit(completion, gold):
    for reward in REWARDS:
        rewards, seconds = _graded(reward, [completion], [gold])
        assert rewards in ([0.0], [1.0])
        assert seconds < LIMIT + SLACK


@pytest.mark.parametrize("bomb", BOMBS)
def test_sympy_bombs_are_cut_off(bomb):
    rewards, seconds = _graded(dapo_accuracy_reward, ["Answer: " + bomb], ["5"])
    assert rewards == [0.0]
    assert seconds < LIMIT + SLACK


@pytest.mark.parametrize("reward", REWARDS)
def test_huge_and_broken_strings_score_zero_quickly(reward):
    for text in HUGE:
        rewards, seconds = _graded(reward, [text], ["7"])
        assert rewards == [0.0]
        assert seconds < LIMIT + SLACK


@pytest.mark.parametrize("reward", REWARDS)
def test_odd_completion_objects_never_raise(reward):
    rewards = reward(ODD_COMPLETIONS, ["5"] * len(ODD_COMPLETIONS), time_limit=LIMIT)
    assert len(rewards) == len(ODD_COMPLETIONS)
    assert set(rewards) <= {0.0, 1.0}


def test_a_batch_of_bombs_is_charged_one_limit_per_bomb():
    # Each bomb is stopped once, at its own limit; the answers queued behind it are graded and not charged its wait.
    pool = get_pool()
    replaced = pool.workers_replaced
    batch = ["Answer: " + b for b in BOMBS[:4]] + ["Answer: 5", "Answer: 10/2", "Answer: \\frac{10}{2}", "Answer: 6"]
    result = grade(batch, ["5"] * len(batch), extract_dapo_answer, time_limit=LIMIT)
    assert result.rewards == [0.0] * 4 + [1.0, 1.0, 1.0, 0.0]
    assert result.timeouts == 4 and pool.workers_replaced - replaced == 4
    assert all(LIMIT <= seconds < LIMIT + SLACK for seconds in result.seconds[:4])
    assert all(seconds < LIMIT for seconds in result.seconds[4:])
