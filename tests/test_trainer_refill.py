"""Spending rollouts only where they teach: `zero_variance_groups="refill"` (dynamic sampling), `skip_settled_prompts`
(GRESO-style skipping) and their pilot-and-commit form with two phases, checked through the public API.

The reward (`scripts.refill_runs.settled_reward`) makes a third of the prompts always solved, a third never and the
rest mixed. Each check compares what the reward saw (every generated completion) and what reached the loss (each
round's batch) with the logged figures and the allocation log."""

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scripts.refill_runs import LEVEL_SKIP, MODES, SpendingRecorder, kind_dataset, refill_trainer, settled
from scripts.two_processes import launch, run_ranks

from coba_trl import CoBAConfig
from coba_trl.rounds.log import read_rounds
from coba_trl.rounds.refill import replacement_count
from coba_trl.rounds.skipping import SettledPromptSkipper

SCRIPT = Path(__file__).parent / "scripts" / "refill_runs.py"


def _logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def _drawn(record):
    """The prompts a round took from the epoch's order, in order: its first batch, then each refill batch (skipped
    prompts are listed apart, so this is the generated ones)."""
    return list(record["prompt_ids"]) + [i for refill in record["refills"] for i in refill["prompt_ids"]]


def _visited(record):
    """Every prompt a round took from the epoch's order, skipped or generated."""
    batches = [record, *record["refills"]]
    return [uid for batch in batches for uid in [*batch["skipped_prompts"], *batch["prompt_ids"]]]


def _skipped(records) -> list:
    """Every prompt the rounds of `records` visited without generating it in that round."""
    return [uid for record in records for uid in _visited(record) if uid not in _drawn(record)]


def _assert_trained_rows_have_spread(recorder, trainer):
    rows = trainer.args.generation_batch_size // trainer.accelerator.num_processes
    reached = _logged(trainer, "coba/refill_bound_reached")
    for batch, bound in zip(recorder.batches, reached, strict=True):
        advantages, tokens = np.array(batch["advantages"]), np.array(batch["trained_tokens"])
        assert (
            len(advantages) == rows
        )  # every process trains generation_batch_size / P rows, as TRL's batching expects
        if not bound:  # a group without spread has advantage 0 on every row
            assert (advantages != 0).all()
        else:  # rows of discarded groups only fill the batch, out of the loss
            assert (tokens[advantages == 0] == 0).all()
        if trainer.accelerator.num_processes == 1:  # TRL's token normaliser counts the trained rows only
            assert batch["num_items_in_batch"] == tokens.sum()


def _on_two_processes(out_dir, mode: str) -> list[dict]:
    """`refill_runs.py` in `mode` on two processes: what each rank wrote."""
    out_dir.mkdir()
    return run_ranks(SCRIPT, out_dir, mode)


@pytest.fixture(scope="module")
def refill_run(tmp_path_factory):
    trainer = refill_trainer(tmp_path_factory.mktemp("refill"))
    recorder = SpendingRecorder(trainer)
    trainer.train()
    return trainer, recorder


def test_refill_trains_only_rows_of_groups_with_spread_and_logs_what_it_generated(refill_run):
    trainer, recorder = refill_run
    _assert_trained_rows_have_spread(recorder, trainer)
    assert not any(_logged(trainer, "coba/refill_bound_reached"))  # the mixed prompts always fill the round
    generated = sum(len(call) for call in recorder.seen)
    assert sum(_logged(trainer, "coba/rollouts_generated")) == generated == trainer.rollouts_generated
    assert generated > trainer.args.generation_batch_size * trainer.state.global_step  # refill generated more
    assert _logged(trainer, "coba/rows_trained") == [trainer.args.generation_batch_size] * trainer.state.global_step


def test_refill_consumes_the_epochs_prompts_in_order_and_observes_every_group(refill_run):
    trainer, recorder = refill_run
    records = read_rounds(trainer.args.output_dir)
    drawn = [i for record in records for i in _drawn(record)]
    assert [uid for call in recorder.seen for uid in dict.fromkeys(call)] == drawn  # generated in the logged order
    for epoch in range(len(drawn) // 12):  # each epoch shows each of the 12 prompts once, refills included
        assert sorted(drawn[12 * epoch : 12 * (epoch + 1)]) == sorted(f"q{i}" for i in range(12))
    for record in records:  # a discarded group is one without spread: a settled prompt's
        discarded = [record["prompt_ids"][g] for g in record["discarded"]]
        discarded += [r["prompt_ids"][g] for r in record["refills"] for g in r["discarded"]]
        assert all(settled(uid) for uid in discarded)
    history = trainer.pass_rate_history
    assert history.pass_rates(["q0", "q1"]).tolist() == [1.0, 0.0]  # discarded groups were observed too


def test_refill_stops_at_its_bound_and_says_so(tmp_path):
    trainer = refill_trainer(tmp_path, max_refill_phases=0, max_steps=3)
    recorder = SpendingRecorder(trainer)
    trainer.train()
    reached = _logged(trainer, "coba/refill_bound_reached")
    assert any(reached)  # 2 prompts a round: a settled one leaves the round short
    assert _logged(trainer, "coba/refill_phases") == [0.0] * 3
    _assert_trained_rows_have_spread(recorder, trainer)
    rows_trained = _logged(trainer, "coba/rows_trained")
    assert all(rows < 8 for rows, bound in zip(rows_trained, reached, strict=True) if bound)


def test_refill_with_two_phases_screens_the_replacement_prompts_too(tmp_path):
    trainer = refill_trainer(tmp_path, **MODES["refill-two-phase"])
    recorder = SpendingRecorder(trainer)
    trainer.train()
    _assert_trained_rows_have_spread(recorder, trainer)
    for record in read_rounds(tmp_path):
        for batch in [record, *record["refills"]]:
            assert batch["screen_rollouts"] == 2 and len(batch["screen_successes"]) == len(batch["prompt_ids"])


@pytest.fixture(scope="module")
def skipping_runs(tmp_path_factory):
    runs = {}
    for name, skip in (("refill", False), ("refill-skip", True)):
        trainer = refill_trainer(tmp_path_factory.mktemp(name), skip_settled_prompts=skip, max_steps=16)
        recorder = SpendingRecorder(trainer)
        trainer.train()
        runs[name] = trainer, recorder
    return runs


def test_skipping_generates_settled_prompts_on_fewer_visits_but_never_on_none(skipping_runs):
    trainer, _ = skipping_runs["refill-skip"]
    visits, generated, shown = Counter(), Counter(), 0
    for record in read_rounds(trainer.args.output_dir):
        if shown >= 12:  # after the first epoch every settled prompt has a run of groups without spread
            visits.update(_visited(record))
            generated.update(_drawn(record))
        shown += len(_visited(record))
    settled_ids = [uid for uid in visits if settled(uid)]
    assert all(generated[uid] == visits[uid] for uid in visits if not settled(uid))  # mixed: never skipped
    assert sum(generated[uid] for uid in settled_ids) < sum(visits[uid] for uid in settled_ids)
    for uid in settled_ids:  # skipped on at most max_skips_in_a_row visits in a row: back on a later one
        if visits[uid] > trainer.args.max_skips_in_a_row:
            assert generated[uid] > 0
    assert max(_logged(trainer, "coba/prompts_skipped")) > 0


def test_refill_with_skipping_spends_fewer_rollouts_per_row_with_spread(skipping_runs):
    ratios = {}
    for name, (trainer, recorder) in skipping_runs.items():
        _assert_trained_rows_have_spread(recorder, trainer)
        generated = sum(len(call) for call in recorder.seen)
        assert generated == trainer.rollouts_generated
        ratios[name] = generated / sum(_logged(trainer, "coba/rows_with_spread"))
    assert ratios["refill-skip"] < ratios["refill"]


def test_a_resume_inside_a_refill_round_equals_the_uninterrupted_run(tmp_path):
    full = refill_trainer(tmp_path / "full", **MODES["resume"])
    full.train()
    resumed = refill_trainer(tmp_path / "resumed", **MODES["resume"])
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))  # inside the second round
    assert os.path.exists(tmp_path / "full" / "checkpoint-3" / "coba_rows_0.pt")
    assert _logged(resumed, "loss") == _logged(full, "loss")
    assert read_rounds(tmp_path / "resumed") == read_rounds(tmp_path / "full")[2:]
    assert resumed.rollouts_generated == full.rollouts_generated
    assert resumed.round_runner.skipper.state_dict() == full.round_runner.skipper.state_dict()
    assert resumed.pass_rate_history.state_dict() == full.pass_rate_history.state_dict()


def test_a_resume_inside_a_keep_round_trains_its_saved_rows(tmp_path):
    # In every mode, a checkpoint saved inside a round carries its rows not yet trained: the losses are the same.
    overrides = dict(MODES["resume"], zero_variance_groups="keep", skip_settled_prompts=False, budget_allocator="coba")
    full = refill_trainer(tmp_path / "full", **overrides)
    full.train()
    resumed = refill_trainer(tmp_path / "resumed", **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    assert _logged(resumed, "loss") == _logged(full, "loss")


def test_replacement_prompts_fill_the_missing_rows_and_divide_over_processes():
    assert replacement_count(5, 4, 1) == 2
    assert replacement_count(4, 4, 1) == 1
    assert replacement_count(4, 3, 2) == 2  # 2 x 3 rows divide over 2 processes
    assert replacement_count(4, 4, 2, screen_rows=1) == 2  # and so do 2 x 1 screening rows


def test_a_skipped_prompt_is_skipped_more_often_the_longer_its_run_and_comes_back():
    skipper = SettledPromptSkipper(max_skips_in_a_row=3, seed=0)
    skipper.observe_round(["a", "b", "c"], [True, True, False], [2, 0, 1], [2, 2, 2], tune=False)
    assert skipper.skip_probability("a") == pytest.approx(0.5) == skipper.skip_probability("b")
    assert skipper.skip_probability("c") == 0.0  # a group with spread ends the run
    skipper.observe_round(["a"], [True], [2], [2], tune=False)
    assert skipper.skip_probability("a") == pytest.approx(0.75)
    skipper.runs["a"][1] = 50  # a long run: skipped on at most max_skips_in_a_row visits in a row
    visits = [skipper.visit("a") for _ in range(40)]
    assert sum(visits) > 20 and not any(all(visits[i : i + 4]) for i in range(37))
    before = dict(skipper.probability)
    skipper.observe_round(["a", "b", "c"], [True, False, False], [2, 1, 1], [2, 2, 2], tune=True)
    assert skipper.probability["solved"] < before["solved"]  # 1/3 all-solved reached its target: skip more
    assert skipper.probability["failed"] > before["failed"]  # no all-failed group: skip less


def test_the_skip_state_round_trips_through_json():
    skipper = SettledPromptSkipper(seed=1)
    skipper.observe_round([("a", 1), "b"], [True, True], [2, 0], [2, 2], tune=True)
    skipper.visit(("a", 1))
    restored = SettledPromptSkipper(seed=2)
    restored.load_state_dict(json.loads(json.dumps(skipper.state_dict())))
    assert restored.state_dict() == skipper.state_dict()
    assert [restored.visit("b") for _ in range(5)] == [skipper.visit("b") for _ in range(5)]


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("max_refill_phases", -1, "0 or more"),
        ("skip_target_zero_spread", 1.0, "strictly between 0 and 1"),
        ("max_skips_in_a_row", 0, "skip_settled_prompts=False"),
        ("skip_prior", "level", "must be one of"),
        ("skip_prior", "neighbourhood", "skip_rule='spread_chance'"),
    ],
)
def test_bad_spending_settings_are_refused_with_the_fix(tmp_path, field, value, fix):
    with pytest.raises(ValueError, match=fix):
        CoBAConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **{field: value})


def test_a_neighbourhood_prior_without_a_neighbour_column_is_refused_naming_both_fields(tmp_path):
    with pytest.raises(ValueError, match="pass_rate_neighbour_column is None.*--pass_rate_neighbour_column level"):
        CoBAConfig(
            output_dir=str(tmp_path), use_cpu=True, bf16=False, skip_settled_prompts=True, skip_rule="spread_chance",
            skip_prior="neighbourhood",
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_refill_and_skipping_hold_on_two_processes(tmp_path):
    results = _on_two_processes(tmp_path / "skip", "refill-skip")
    logs = [h for h in results[0]["logs"] if "coba/rollouts_generated" in h]
    seen = sum(len(call) for result in results for call in result["seen"])
    assert sum(h["coba/rollouts_generated"] for h in logs) == seen == results[0]["rollouts_generated"]
    reached = [h["coba/refill_bound_reached"] for h in logs]
    for result in results:  # each process trains 8 of the round's 16 rows, all from groups with spread
        for batch, bound in zip(result["batches"], reached, strict=True):
            assert len(batch["advantages"]) == 8
            assert bound or all(a != 0 for a in batch["advantages"])
    assert results[0]["history"] == results[1]["history"]
    assert sum(h["coba/prompts_skipped"] for h in logs) > 0
    records = read_rounds(tmp_path / "skip")
    skipped = _skipped(records)
    assert skipped and all(settled(uid) for uid in skipped)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_a_resume_inside_a_refill_round_on_two_processes_equals_the_uninterrupted_run(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    full.mkdir()
    resumed.mkdir()
    uninterrupted = run_ranks(SCRIPT, full, "resume")
    continued = run_ranks(SCRIPT, resumed, "resume", str(full / "checkpoint-3"))
    for ours, theirs in zip(continued, uninterrupted, strict=True):
        assert ours["losses"] == theirs["losses"]
        assert ours["weights"] == theirs["weights"]
        assert ours["rollouts_generated"] == theirs["rollouts_generated"]
    assert read_rounds(resumed) == read_rounds(full)[2:]


def test_refill_and_skipping_on_a_stream_take_each_pass_in_order(tmp_path):
    from scripts.tiny_coba import prompt_dataset

    stream = prompt_dataset(12).to_iterable_dataset(num_shards=2)
    trainer = refill_trainer(tmp_path, train_dataset=stream, skip_settled_prompts=True, max_steps=10)
    recorder = SpendingRecorder(trainer)
    trainer.train()
    _assert_trained_rows_have_spread(recorder, trainer)
    visits = Counter(uid for record in read_rounds(tmp_path) for uid in _visited(record))
    assert sum(visits.values()) >= 24 and max(visits.values()) - min(visits.values()) <= 1  # pass after pass
    assert set(visits) == {f"q{i}" for i in range(12)}


@pytest.mark.parametrize("stream", [False, True], ids=["dataset", "stream"])
def test_the_cursor_takes_the_epochs_order_and_consumes_skipped_prompts(stream):
    from scripts.tiny_coba import prompt_dataset

    from coba_trl.rounds.source import RoundLayout, round_source

    dataset = prompt_dataset(6)
    source = round_source(dataset.to_iterable_dataset() if stream else dataset, RoundLayout(2, 1, 1, True, 0, "uid"))
    order = [source.draw(1)[1][0] for _ in range(12)]
    assert sorted(order[:6]) == sorted(order[6:]) == [f"q{i}" for i in range(6)] and order[:6] != order[6:]
    source.restore_cursor([0, 0])
    rows, ids, skipped = source.draw(3, skip=lambda uid, row: uid == order[1])
    assert ids == [order[0], order[2], order[3]] and skipped == [order[1]] and rows[0]["uid"] == order[0]
    source.restore_cursor([1, 4])  # a resumed run continues where the checkpoint left the cursor
    assert source.draw(2)[1] == order[10:12]


def _visits_in_order(records) -> dict:
    """Per prompt, its visits in the order the rounds drew them: True for a skipped visit, False for a generated one.
    (A batch draws each prompt at most once: its skipped and generated prompts are listed apart.)"""
    visits: dict = {}
    for record in records:
        for batch in [record, *record["refills"]]:
            for uid in batch["skipped_prompts"]:
                visits.setdefault(uid, []).append(True)
            for uid in batch["prompt_ids"]:
                visits.setdefault(uid, []).append(False)
    return visits


def _longest_run(flags: list[bool]) -> int:
    longest = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    return longest


@pytest.fixture(scope="module")
def long_skipping_run(tmp_path_factory):
    # 24 prompts (a third always solved, a third never, a third mixed), 2 prompts a round, 60 rounds: refill draws
    # past the end of epochs, so a round can visit a prompt twice (generated in one batch, skipped in a later one).
    trainer = refill_trainer(
        tmp_path_factory.mktemp("long"), num_prompts=24, skip_settled_prompts=True, max_skips_in_a_row=2, max_steps=60
    )
    trainer.train()
    return trainer, read_rounds(trainer.args.output_dir)


def test_no_prompt_is_skipped_on_more_visits_in_a_row_than_the_cap_over_many_epochs(long_skipping_run):
    trainer, records = long_skipping_run
    visits = _visits_in_order(records)
    assert min(len(flags) for flags in visits.values()) >= 6  # many epochs
    runs = {uid: _longest_run(flags) for uid, flags in visits.items()}
    assert max(runs.values()) == trainer.args.max_skips_in_a_row  # reached, never passed
    assert all(runs[uid] == 0 for uid in runs if not settled(uid))


def test_the_skip_probabilities_stay_at_their_start_through_the_first_epoch(long_skipping_run):
    trainer, records = long_skipping_run
    logged = [
        (h["coba/skip_p_solved"], h["coba/skip_p_failed"])
        for h in trainer.state.log_history
        if "coba/skip_p_solved" in h
    ]
    assert len(logged) == len(records)
    shown, first_epoch = 0, 0
    for record in records:  # a round that starts in the first epoch is not tuned, nor is the round after it
        if shown >= 24:
            break
        first_epoch += 1
        shown += sum(
            len(batch["skipped_prompts"]) + len(batch["prompt_ids"]) for batch in [record, *record["refills"]]
        )
    assert logged[: first_epoch + 1] == [(0.5, 0.5)] * (first_epoch + 1)
    assert logged[-1] != (0.5, 0.5)  # tuned from the second epoch on


def test_a_group_with_spread_ends_a_prompts_run_of_settled_groups():
    skipper = SettledPromptSkipper(seed=0)
    skipper.observe_round(["a", "a"], [True, True], [2, 2], [2, 2], tune=False)
    assert skipper.skip_probability("a") == pytest.approx(0.75)  # a run of two all-solved groups
    skipper.observe_round(["a"], [False], [1], [2], tune=False)
    assert skipper.skip_probability("a") == 0.0
    assert [skipper.visit("a") for _ in range(20)] == [False] * 20


def test_a_skip_after_a_generation_in_the_same_round_counts_towards_the_cap():
    # A prompt generated in a round's first batch and skipped in a later batch of the same round: the round's
    # observation records its group without forgetting that skip.
    skipper = SettledPromptSkipper(max_skips_in_a_row=2, seed=0)
    skipper.observe_round(["a"] * 10, [True] * 10, [2] * 10, [2] * 10, tune=False)  # a long all-solved run
    skipper.runs["a"][2] = 1  # skipped once after its generation in this round (`visit`)
    skipper.observe_round(["a"], [True], [2], [2], tune=False)
    assert skipper.runs["a"][2] == 1
    skipper.visit("a")  # whatever this visit decides, the next one after two skips in a row is generated
    if skipper.runs["a"][2] == 2:
        assert skipper.skip_probability("a") == 0.0


def cancelling_reward(completions, uid, **kwargs):
    """Even prompts: 1 and 0 by turns; odd prompts: the same."""
    return [float(position % 2 == 0) for position, _ in enumerate(uid)]


def mirror_reward(completions, uid, **kwargs):
    """Even prompts: the opposite of `cancelling_reward`, so that normalised and summed they cancel; odd: 0."""
    return [float(position % 2 == 1) if int(u[1:]) % 2 == 0 else 0.0 for position, u in enumerate(uid)]


def test_refill_replaces_groups_whose_rewards_cancel_under_normalize_then_sum(tmp_path):
    # Each reward varies inside every group; on even prompts they cancel once normalised, so every row's advantage
    # is 0: such a group teaches nothing, is discarded and replaced.
    trainer = refill_trainer(tmp_path, multi_objective_aggregation="normalize_then_sum", max_steps=4)
    trainer.reward_funcs[0] = cancelling_reward
    trainer.reward_funcs.append(mirror_reward)
    trainer.reward_func_names.append("mirror_reward")
    trainer.reward_weights = torch.ones(2)
    trainer.reward_processing_classes.append(None)
    recorder = SpendingRecorder(trainer)
    trainer.train()
    for batch, bound in zip(recorder.batches, _logged(trainer, "coba/refill_bound_reached"), strict=True):
        assert bound or (np.array(batch["advantages"]) != 0).all()
    for record in read_rounds(tmp_path):
        for batch in [record, *record["refills"]]:
            assert [batch["prompt_ids"][g] for g in batch["discarded"]] == [
                uid for uid in batch["prompt_ids"] if int(uid[1:]) % 2 == 0
            ]


def test_refill_with_batch_scaling_gives_a_rounds_rows_one_scale(tmp_path):
    # scale_rewards="batch": GRPO divides a generation batch by one std. A refill round's rows, chosen from several
    # batches, share the std of the rows trained: here 8 rows rewarded 1 and 0 by turns.
    trainer = refill_trainer(tmp_path, scale_rewards="batch", max_steps=6)
    recorder = SpendingRecorder(trainer)
    trainer.train()
    expected = 0.5 / (torch.tensor([1.0, 0.0] * 4).std().item() + 1e-4)
    assert sum(_logged(trainer, "coba/refill_phases")) > 0
    for batch in recorder.batches:
        np.testing.assert_allclose(np.abs(batch["advantages"]), expected, rtol=1e-5)


def test_filler_rows_past_the_bound_are_dealt_evenly_over_the_processes():
    from coba_trl.rounds.refill import ChosenRows, deal_chosen_rows

    rows = 8
    gathered = {
        "completion_ids": torch.arange(rows).unsqueeze(1),
        "completion_mask": torch.ones(rows, 1, dtype=torch.long),
        "advantages": torch.arange(rows, dtype=torch.float),
        "num_items_in_batch": torch.tensor(rows),
    }
    chosen = ChosenRows(np.array([0, 1, 2, 3, 4]), np.array([5, 6, 7]), np.arange(rows))
    shares = [deal_chosen_rows(gathered, chosen, rank, 2) for rank in range(2)]
    kept = [int(share["completion_mask"].sum()) for share in shares]
    assert kept == [3, 2]  # rows with spread per process differ by at most one
    dealt = sorted(int(i) for share in shares for i in share["completion_ids"].flatten())
    assert dealt == list(range(rows))  # every chosen row once
    assert all(int(share["num_items_in_batch"]) == 5 for share in shares)  # the kept rows' tokens


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_on_two_processes_the_rows_trained_are_disjoint_and_are_the_rounds_rows_with_spread(tmp_path):
    results = _on_two_processes(tmp_path / "refill", "refill")
    rounds = len(results[0]["batches"])
    assert rounds == len(results[1]["batches"]) >= 6
    for r in range(rounds):
        trained = [Counter(tuple(ids) for ids in result["batches"][r]["trained"]) for result in results]
        assert [sum(t.values()) for t in trained] == [8, 8]  # each process trains half of the round's 16 rows
        assert not trained[0] & trained[1]  # no row trained twice
        with_spread = Counter(
            tuple(ids) for result in results for uid, ids in result["generated"][r] if not settled(uid)
        )
        assert not (trained[0] + trained[1]) - with_spread  # every trained row is a generated row with spread
        # Rows from the other process were padded to this one's widths: still on TRL's sides, the prompt on the left
        # and the completion on the right, so the model reads prompt and completion next to each other.
        for result in results:
            for prompt_mask, completion_mask in result["batches"][r]["trained_masks"]:
                assert prompt_mask == sorted(prompt_mask) and prompt_mask[-1] == 1
                assert completion_mask == sorted(completion_mask, reverse=True) and completion_mask[0] == 1


def never_solved(completions, uid, **kwargs):
    return [0.0] * len(uid)


def test_refill_on_a_reward_that_never_succeeds_warns_once_and_the_run_ends_with_its_totals(tmp_path, caplog, capsys):
    trainer = refill_trainer(tmp_path, reward=never_solved, max_refill_phases=2, max_steps=4)
    with caplog.at_level("WARNING"):
        trainer.train()
    warnings = [r.getMessage() for r in caplog.records if "teaches nothing" in r.getMessage()]
    assert len(warnings) == 1  # given once, in the first round
    assert "max_refill_phases=2" in warnings[0] and "'never_solved'" in warnings[0]
    assert _logged(trainer, "coba/refill_bound_reached") == [1.0] * 4
    generated = int(sum(_logged(trainer, "coba/rollouts_generated")))
    assert generated == trainer.rollouts_generated == 4 * 3 * 8  # each round: its batch and 2 refill batches
    line = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[coba]")]
    assert line == [
        f"[coba] {generated} completions generated in 4 rounds, 0 rows trained, 0 with spread (n/a generated per "
        "trained row with spread), 0 prompt visits skipped, 4 rounds at the refill bound"
    ]


def test_refill_at_its_bound_three_rounds_in_a_row_warns(tmp_path, caplog):
    # A few rows with spread each round, never enough: the bound is reached round after round.
    trainer = refill_trainer(tmp_path, max_refill_phases=0, max_steps=4, num_prompts=12)
    with caplog.at_level("WARNING"):
        trainer.train()
    reached = _logged(trainer, "coba/refill_bound_reached")
    streaks = [all(reached[i : i + 3]) for i in range(len(reached) - 2)]
    warnings = [r.getMessage() for r in caplog.records if "teaches nothing" in r.getMessage()]
    if any(streaks) or 0.0 in _logged(trainer, "coba/rows_with_spread"):
        assert len(warnings) == 1 and "max_refill_phases=0" in warnings[0]
    else:
        assert warnings == []


def test_skipping_by_the_chance_of_spread_skips_settled_prompts_only_and_saves_rollouts(tmp_path, skipping_runs):
    trainer = refill_trainer(tmp_path, skip_settled_prompts=True, skip_rule="spread_chance", max_steps=16)
    recorder = SpendingRecorder(trainer)
    trainer.train()
    _assert_trained_rows_have_spread(recorder, trainer)
    skipped = [
        uid
        for record in read_rounds(tmp_path)
        for batch in [record, *record["refills"]]
        for uid in batch["skipped_prompts"]
    ]
    assert skipped and all(settled(uid) for uid in skipped)
    assert _first_visit_skips(read_rounds(tmp_path)) == []  # the population prior never skips an unseen prompt
    assert "coba/skip_prior_strength" in trainer.state.log_history[0]
    refill, _ = skipping_runs["refill"]
    per_row = trainer.rollouts_generated / sum(_logged(trainer, "coba/rows_with_spread"))
    assert per_row < refill.rollouts_generated / sum(_logged(refill, "coba/rows_with_spread"))


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_skipping_by_the_chance_of_spread_agrees_on_two_processes(tmp_path):
    results = _on_two_processes(tmp_path / "spread", "refill-spread")
    assert results[0]["history"] == results[1]["history"]
    for result in results:  # each process trains 8 of the round's 16 rows
        assert all(len(batch["advantages"]) == 8 for batch in result["batches"])
    records = read_rounds(tmp_path / "spread")
    skipped = _skipped(records)
    assert skipped and all(settled(uid) for uid in skipped)


def _first_visit_skips(records) -> list:
    """The prompts skipped before any group of theirs was generated, in the order visited."""
    generated, skipped = set(), []
    for record in records:
        for batch in [record, *record["refills"]]:
            skipped += [uid for uid in batch["skipped_prompts"] if uid not in generated]
            generated.update(batch["prompt_ids"])
    return skipped


def test_skipping_by_a_neighbourhood_prior_skips_unseen_prompts_of_settled_neighbourhoods_only(tmp_path):
    trainer = refill_trainer(
        tmp_path, train_dataset=kind_dataset(12), skip_settled_prompts=True, max_steps=8, **LEVEL_SKIP
    )
    recorder = SpendingRecorder(trainer)
    trainer.train()
    _assert_trained_rows_have_spread(recorder, trainer)
    records = read_rounds(tmp_path)
    first_visit_skips = _first_visit_skips(records)
    # Prompts of the always-solved and never-solved kinds are skipped before any group of theirs was generated,
    # once two of their kind were seen; no mixed prompt is ever skipped.
    assert first_visit_skips and all(settled(uid) for uid in first_visit_skips)
    skipped = _skipped(records)
    assert all(settled(uid) for uid in skipped)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_skipping_by_a_neighbourhood_prior_agrees_on_two_processes(tmp_path):
    results = _on_two_processes(tmp_path / "level", "refill-level")
    assert results[0]["history"] == results[1]["history"]
    assert results[0]["losses"] == results[1]["losses"] and results[0]["weights"] == results[1]["weights"]
    for result in results:  # each process trains 8 of the round's 16 rows
        assert all(len(batch["advantages"]) == 8 for batch in result["batches"])
    records = read_rounds(tmp_path / "level")
    skipped = _skipped(records)
    assert skipped and all(settled(uid) for uid in skipped)
    config = dict(MODES["refill-level"], per_device_train_batch_size=16)  # one process, the same 16-row rounds
    single = refill_trainer(tmp_path / "one", train_dataset=kind_dataset(12), **config)
    single.train()
    # The same prompts visited, skipped and generated as on one process: the decisions read only the shared history.
    one = read_rounds(tmp_path / "one")
    assert [(_visited(r), _drawn(r)) for r in one] == [(_visited(r), _drawn(r)) for r in records]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_two_phase_refill_on_two_processes_gives_every_trained_row_its_own_groups_advantage(tmp_path):
    # Each process trains rows that any process generated, screened and refilled in two phases: a mixed prompt's
    # row rewarded 1 must carry a positive advantage and one rewarded 0 a negative one, whoever trains it.
    results = _on_two_processes(tmp_path / "two-phase", "refill-two-phase")
    checked = 0
    for r in range(len(results[0]["batches"])):
        rewards = {}
        for result in results:
            for uid, ids, reward in result["rewarded"][r]:
                rewards.setdefault((uid, tuple(ids)), set()).add(reward)
        for result in results:
            for uid, ids, advantage in result["batches"][r]["trained_rows"]:
                seen = rewards[(uid, tuple(ids))]
                assert not settled(uid)  # only groups with spread are trained
                if len(seen) == 1:  # the same completion rewarded both ways in one round tells nothing
                    assert (advantage > 0) == (seen.pop() == 1.0) and advantage != 0
                    checked += 1
    assert checked >= 40


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_process_that_draws_other_prompts_than_process_0_stops_the_run_with_the_cause(tmp_path):
    # With refill or skipping every process draws the round's prompts from its own cursor; process 1's dataset in
    # another order must not train prompts the plan and the history never saw.
    (tmp_path / "diverge").mkdir()
    result = launch(SCRIPT, tmp_path / "diverge", "diverge", timeout=300)
    assert result.returncode != 0
    for rank in range(2):
        error = (tmp_path / "diverge" / f"rank{rank}.error").read_text()
        assert error.startswith("Process 1 holds other prompts for this round than process 0")
        assert "same seed" in error and "same train_dataset in the same order" in error
    assert not (tmp_path / "diverge" / "rank0.json").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(skip_rule="spread_chance"),  # the skipper's fitted prior decides the first visits after the resume
        dict(zero_variance_groups="keep"),  # skipping without refill draws from the cursor too
        LEVEL_SKIP,  # the neighbourhoods and their fitted priors decide the first visits after the resume
    ],
    ids=["spread-chance", "skip-without-refill", "neighbourhood-prior"],
)
def test_a_resume_with_skipping_equals_the_uninterrupted_run(tmp_path, overrides):
    config = dict(MODES["resume"], max_steps=12, **overrides)  # 3 rounds an epoch: the resume is in the second
    dataset = kind_dataset(12) if "pass_rate_neighbour_column" in overrides else None
    full = refill_trainer(tmp_path / "full", train_dataset=dataset, **config)
    full.train()
    resumed = refill_trainer(tmp_path / "resumed", train_dataset=dataset, **config)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-7"))  # inside the fourth round
    assert sum(_logged(full, "coba/prompts_skipped")) > 0
    assert _logged(resumed, "loss") == _logged(full, "loss")
    resumed_logs = [
        {k: v for k, v in h.items() if k.startswith("coba/") and "time" not in k} for h in resumed.state.log_history
    ]
    full_logs = [
        {k: v for k, v in h.items() if k.startswith("coba/") and "time" not in k} for h in full.state.log_history
    ]
    assert resumed_logs == full_logs[-len(resumed_logs) :]  # what each round logged, the skipper's prior included
    assert read_rounds(tmp_path / "resumed") == read_rounds(tmp_path / "full")[4:]
    assert resumed.round_runner.skipper.state_dict() == full.round_runner.skipper.state_dict()
    assert resumed.pass_rate_history.state_dict() == full.pass_rate_history.state_dict()
    for ours, theirs in zip(resumed.model.parameters(), full.model.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_a_second_pass_over_a_refilled_round_is_off_policy_against_the_logps_each_row_was_generated_with(tmp_path):
    """`num_iterations=2` (study 9's reuse arms) with refill and skipping by a level's chance of spread: every row that
    reaches the loss, refill rows included, carries the log-probabilities of the policy that generated it, so TRL's
    ratio is 1 on a round's first pass and the clipped off-policy ratio on its second (not 1 again, as it would be if
    the row fell back to its own detached log-probabilities)."""
    trainer = refill_trainer(
        tmp_path, train_dataset=kind_dataset(), num_iterations=2, skip_settled_prompts=True, max_steps=8, **LEVEL_SKIP
    )
    passes = []
    compute_loss = trainer._compute_loss

    def record(model, inputs):
        old = inputs.get("old_per_token_logps")
        if old is not None:
            with torch.no_grad():
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
                mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
                now, _, _ = trainer._get_per_token_logps_and_entropies(
                    model, ids, mask, inputs["completion_ids"].size(1)
                )
            trained = inputs["completion_mask"].bool()
            passes.append(((now - old).abs()[trained].max().item(), len(inputs["advantages"])))
        else:
            passes.append(None)
        return compute_loss(model, inputs)

    trainer._compute_loss = record
    trainer.train()
    assert None not in passes and len(passes) == 8  # every optimizer step: old log-probabilities on every row
    assert all(rows == trainer.args.generation_batch_size for _, rows in passes)
    assert max(gap for gap, _ in passes[0::2]) < 1e-5  # first pass: the generating policy, ratio 1
    assert min(gap for gap, _ in passes[1::2]) > 1e-4  # second pass: the policy moved, the ratio is not 1
    assert sum(_logged(trainer, "coba/refill_phases")) > 0  # refill rows were among them
