"""A streaming `IterableDataset`: rounds of distinct prompts from the stream, pass rates carried from one pass over the
data to the next, exact resume through a pass boundary, and the same rounds on two processes."""

from collections import Counter
from pathlib import Path

import pytest
from scripts.streaming_coba import prompt_stream, stream_trainer
from scripts.two_processes import run_ranks

from coba_trl.rounds.log import read_rounds

SCRIPT = Path(__file__).parent / "scripts" / "streaming_coba.py"
PROMPTS = {f"q{i}" for i in range(8)}


def _assert_rounds_follow_the_stream(rounds, reward_calls, log):
    """Each round: 4 distinct prompts, each pass over the 8-prompt stream covers them all, the rows that reach the
    reward are the planned group sizes, and from the second pass on each pass rate is the previous pass's rate."""
    assert len(rounds) == len(log) == 6  # 3 passes of 2 rounds
    assert all(len(set(ids)) == 4 for ids, _ in rounds)
    for start in range(0, 6, 2):
        assert set(rounds[start][0]) | set(rounds[start + 1][0]) == PROMPTS
    for (ids, sizes), calls in zip(rounds, reward_calls, strict=True):
        assert calls == dict(zip(ids, sizes, strict=True))
    last_rate = {}
    for record in log:
        for uid, rate, successes, size in zip(
            record["prompt_ids"], record["pass_rates"], record["successes"], record["group_sizes"], strict=True
        ):
            assert rate == pytest.approx(last_rate.get(uid), nan_ok=True) if uid in last_rate else rate is None
            last_rate[uid] = successes / size
    assert any(len(set(record["group_sizes"])) > 1 for record in log)  # pass rates from earlier passes move budget


@pytest.mark.slow
def test_a_stream_trains_over_three_passes_with_pass_rates_carried_by_prompt_id(tmp_path):
    trainer, reward, rounds = stream_trainer(str(tmp_path))
    trainer.train()
    _assert_rounds_follow_the_stream(rounds.rounds, reward.calls, read_rounds(tmp_path))
    assert rounds.rounds[0][0] != rounds.rounds[2][0]  # each pass is shuffled anew


@pytest.mark.slow
def test_two_phase_rounds_screen_every_prompt_of_a_stream(tmp_path):
    """Two phases on a stream: each round screens its 4 prompts with min_generations rows, then generates the rest of
    each group; the rows that reach the reward over both phases are the logged group sizes."""
    trainer, reward, rounds = stream_trainer(str(tmp_path), two_phase_rounds=True, min_generations=2, max_steps=4)
    trainer.train()
    logged = read_rounds(tmp_path)
    assert len(logged) == len(rounds.rounds) == 4 and len(reward.calls) == 8
    for (ids, sizes), screen, rest, entry in zip(
        rounds.rounds, reward.calls[::2], reward.calls[1::2], logged, strict=True
    ):
        assert screen == {uid: 2 for uid in ids} and entry["screen_rollouts"] == 2
        assert dict(Counter(screen) + Counter(rest)) == dict(zip(ids, sizes, strict=True))
        assert entry["group_sizes"] == sizes


def test_a_stream_shorter_than_a_round_fails_with_the_fix(tmp_path):
    trainer, _, _ = stream_trainer(str(tmp_path), dataset=prompt_stream(3, split=2))
    with pytest.raises(ValueError, match="streamed 3 rows in a pass, fewer than the 4 distinct prompts"):
        trainer.train()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("checkpoint_step", "layout"),
    [(3, {}), (5, dict(per_device_train_batch_size=8, steps_per_generation=2, max_steps=12, by_step=True))],
    ids=["second-pass", "inside-a-round-of-the-second-pass"],
)
def test_a_resumed_stream_continues_where_the_checkpoint_left_it(tmp_path, checkpoint_step, layout):
    # Both checkpoints lie in the second pass: the Trainer skips the consumed batches by iterating through the first.
    # With two steps per round, checkpoint-5 falls inside round 3, whose rows not yet trained the checkpoint carries:
    # the resumed run trains them and plans the rounds after it (the reward depends on the prompt and step alone).
    full, _, full_rounds = stream_trainer(str(tmp_path / "full"), save_strategy="steps", save_steps=1, **layout)
    full.train()
    resumed, _, resumed_rounds = stream_trainer(str(tmp_path / "resumed"), **layout)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / f"checkpoint-{checkpoint_step}"))
    steps_per_round = layout.get("steps_per_generation", 1)
    assert len(full_rounds.rounds) == 6
    assert resumed_rounds.rounds == full_rounds.rounds[-(-checkpoint_step // steps_per_round) :]
    assert resumed.pass_rate_history.state_dict() == full.pass_rate_history.state_dict()
    assert resumed.allocator.state_dict() == full.allocator.state_dict()


def _launch(out_dir: Path, *script_args: str, env: dict | None = None) -> list[dict]:
    return run_ranks(SCRIPT, out_dir, *script_args, timeout=540, env=env)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_a_sharded_stream_gives_the_same_rounds_on_two_processes_and_resumes(tmp_path):
    # Two shards of 5 and 3 rows: split by shard, the processes would read streams of different lengths.
    ranks = _launch(tmp_path / "full")
    assert ranks[0]["rounds"] == ranks[1]["rounds"] and ranks[0]["global_step"] == 6
    assert ranks[0]["history"] == ranks[1]["history"] and ranks[0]["allocator"] == ranks[1]["allocator"]
    calls = [dict(Counter(a) + Counter(b)) for a, b in zip(*(r["reward_calls"] for r in ranks), strict=True)]
    _assert_rounds_follow_the_stream(ranks[0]["rounds"], calls, read_rounds(tmp_path / "full"))
    resumed = _launch(tmp_path / "resumed", str(tmp_path / "full" / "checkpoint-3"))
    assert resumed[0]["rounds"] == resumed[1]["rounds"] == ranks[0]["rounds"][3:]
    assert resumed[0]["history"] == ranks[0]["history"] and resumed[0]["allocator"] == ranks[0]["allocator"]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_rounds_that_do_not_divide_over_the_processes_are_padded_alike_and_resume(tmp_path):
    """3 prompts a round on two processes: each loads 2, the padding row is dropped, the rounds agree, each prompt's
    rows reach the reward as planned, and a resume continues the same rounds."""
    env = {"STREAM_PER_DEVICE": "6"}
    ranks = _launch(tmp_path / "full", env=env)
    assert ranks[0]["rounds"] == ranks[1]["rounds"] and ranks[0]["global_step"] == 6
    assert all(len(set(ids)) == 3 for ids, _ in ranks[0]["rounds"])
    calls = [dict(Counter(a) + Counter(b)) for a, b in zip(*(r["reward_calls"] for r in ranks), strict=True)]
    assert calls == [dict(zip(ids, sizes, strict=True)) for ids, sizes in ranks[0]["rounds"]]
    assert [entry["prompt_ids"] for entry in read_rounds(tmp_path / "full")] == [ids for ids, _ in ranks[0]["rounds"]]
    resumed = _launch(tmp_path / "resumed", str(tmp_path / "full" / "checkpoint-4"), env=env)
    assert resumed[0]["rounds"] == resumed[1]["rounds"] == ranks[0]["rounds"][4:]
    assert resumed[0]["history"] == ranks[0]["history"]


def test_a_stream_without_the_id_column_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="prompt_id_column is 'nope', but train_dataset has no such column"):
        stream_trainer(str(tmp_path), prompt_id_column="nope")
