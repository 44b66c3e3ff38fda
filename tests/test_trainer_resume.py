"""Exact resume: from any checkpoint, a resumed run plans the rounds of the uninterrupted run and ends in its state.

Each case trains once without interruption, saving a checkpoint every step, then resumes a fresh trainer from one
checkpoint. The reward depends only on the prompt and the step, so allocations are comparable even though the
resumed run's completions differ. The F_t window (3) and the pass-rate window (2) keep several observations, so a
round observed twice, or one skipped, would show in the final state.
"""

import json
import logging
import os
import shutil

import pytest
import torch
from scripts.tiny_coba import (
    TINY_ARGS,
    RoundRecorder,
    parity_reward,
    prompt_dataset,
    step_parity_reward,
    step_reward,
    tiny_model,
)

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.checkpoint import COMPLETE_FILE, STATE_FILE, incomplete_reason, load_state, save_state
from coba_trl.rounds.log import ROUNDS_FILE, read_rounds


def _trainer(output_dir, dataset, reward=step_reward, **overrides):
    model, tokenizer = tiny_model()
    config = dict(
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=8,
        coba_window=3,
        pass_rate_window=2,
        seed=11,
        **{**TINY_ARGS, "save_strategy": "steps", "save_steps": 1},
    )
    args = CoBAConfig(output_dir=str(output_dir), **{**config, **overrides})
    return CoBAGRPOTrainer(model, reward, args=args, train_dataset=dataset, processing_class=tokenizer)


def _assert_resume_is_exact(tmp_path, checkpoint_step, dataset, saved_rows=True, **overrides):
    """`saved_rows=False` deletes the rows of the round in progress from the checkpoint (as one saved by coba-trl
    0.2 or with another number of processes): the resumed run regenerates that round with its saved plan."""
    full = _trainer(tmp_path / "full", dataset, **overrides)
    full_rounds = RoundRecorder(full)
    full.train()
    checkpoint = tmp_path / "full" / f"checkpoint-{checkpoint_step}"
    rows = sorted(checkpoint.glob("coba_rows_*.pt"))
    if not saved_rows:
        for path in rows:
            path.unlink()
        (checkpoint / COMPLETE_FILE).unlink()
    resumed = _trainer(tmp_path / "resumed", dataset, **overrides)
    resumed_rounds = RoundRecorder(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    generate_every = resumed.args.steps_per_generation * resumed.num_iterations
    micro_steps = checkpoint_step * resumed.args.gradient_accumulation_steps
    first_round = micro_steps // generate_every  # the round the checkpoint fell in
    inside = micro_steps % generate_every != 0
    assert bool(rows) == inside  # a checkpoint saved inside a round carries its rows not yet trained
    if inside and saved_rows:  # trained from them, not planned again
        first_round += 1
    assert len(full_rounds.rounds) >= first_round + 1
    assert resumed_rounds.rounds == full_rounds.rounds[first_round:]
    if saved_rows:  # the same rows and weights, and the same random state afterwards: the same losses
        assert [h["loss"] for h in resumed.state.log_history if "loss" in h] == [
            h["loss"] for h in full.state.log_history if "loss" in h
        ]
    assert resumed.state.global_step == full.state.global_step
    assert resumed.allocator.state_dict() == full.allocator.state_dict()
    assert resumed.pass_rate_history.state_dict() == full.pass_rate_history.state_dict()
    assert len(full.allocator.state_dict()["failure_rates"]) == 3
    return full_rounds.rounds


@pytest.mark.parametrize("checkpoint_step", [3, 4], ids=["inside-a-round", "round-boundary"])
def test_resume_inside_a_round_and_at_a_boundary(tmp_path, checkpoint_step):
    rounds = _assert_resume_is_exact(
        tmp_path, checkpoint_step, prompt_dataset(8, repeats=2), steps_per_generation=2, prompt_id_column="uid"
    )
    assert len({tuple(sizes) for _, sizes in rounds}) > 1  # the allocation is not uniform every round


def test_resume_in_a_later_epoch_sees_that_epochs_prompts(tmp_path):
    # 8 prompts, 4 per round: 2 rounds per epoch; checkpoint-5 lies in epoch 2. No id column: row indices identify
    # prompts, so the sampler's schedule must hold after the resume.
    rounds = _assert_resume_is_exact(tmp_path, 5, prompt_dataset(8), per_device_train_batch_size=16)
    epochs = [sorted(rounds[i][0] + rounds[i + 1][0]) for i in range(0, 8, 2)]
    assert all(epoch == [str(i) for i in range(8)] for epoch in epochs)  # each epoch sees every prompt once
    assert rounds[0][0] != rounds[2][0]  # and epochs are shuffled differently


@pytest.mark.parametrize("saved_rows", [True, False], ids=["saved-rows", "no-saved-rows"])
@pytest.mark.parametrize("zero_variance_groups", ["keep", "rescue"])
def test_resume_inside_a_two_phase_round(tmp_path, zero_variance_groups, saved_rows):
    # The resumed run trains the interrupted round's saved rows; without them, it regenerates the round with its
    # saved group sizes, whatever its screening gives.
    _assert_resume_is_exact(
        tmp_path,
        3,
        prompt_dataset(8, repeats=2),
        saved_rows=saved_rows,
        steps_per_generation=2,
        prompt_id_column="uid",
        two_phase_rounds=True,
        zero_variance_groups=zero_variance_groups,
    )


def test_a_run_resumed_in_its_folder_writes_the_allocation_log_of_the_uninterrupted_run(tmp_path):
    # The log keeps the rounds that started before checkpoint-3 (round 1 is in progress there and is not written
    # twice) and the resumed run appends the rest: the file ends as the uninterrupted run left it.
    overrides = dict(
        steps_per_generation=2, prompt_id_column="uid", two_phase_rounds=True, zero_variance_groups="rescue"
    )
    dataset = prompt_dataset(8, repeats=2)
    _trainer(tmp_path, dataset, **overrides).train()
    uninterrupted = (tmp_path / ROUNDS_FILE).read_text()
    assert len(uninterrupted.splitlines()) == 4
    _trainer(tmp_path, dataset, **overrides).train(resume_from_checkpoint=str(tmp_path / "checkpoint-3"))
    assert (tmp_path / ROUNDS_FILE).read_text() == uninterrupted
    _trainer(tmp_path, dataset, **overrides, max_steps=2).train()  # a fresh run in the same folder starts anew
    assert [r["micro_step"] for r in read_rounds(str(tmp_path))] == [0]


def test_a_run_stopped_while_writing_the_allocation_log_resumes_and_completes_it(tmp_path):
    # Stopped while appending the line of the round that starts at micro-step 4: the log ends in half a line and the
    # latest checkpoint is checkpoint-4. The resume skips the torn line and writes that round again.
    overrides = dict(steps_per_generation=2, prompt_id_column="uid")
    dataset = prompt_dataset(8, repeats=2)
    _trainer(tmp_path, dataset, **overrides).train()
    uninterrupted = (tmp_path / ROUNDS_FILE).read_text()
    lines = uninterrupted.splitlines(keepends=True)
    assert [json.loads(line)["micro_step"] for line in lines] == [0, 2, 4, 6]
    (tmp_path / ROUNDS_FILE).write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])
    _trainer(tmp_path, dataset, **overrides).train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert (tmp_path / ROUNDS_FILE).read_text() == uninterrupted


def test_a_checkpoint_without_coba_state_keeps_only_the_log_of_the_rounds_before_it(tmp_path):
    # A checkpoint from plain TRL (or with coba_state.json deleted): the resumed run cannot know its round plan, but
    # the allocation log must not keep the rounds the interrupted run made after the checkpoint.
    overrides = dict(steps_per_generation=2, prompt_id_column="uid")
    dataset = prompt_dataset(8, repeats=2)
    _trainer(tmp_path, dataset, **overrides).train()
    lines = (tmp_path / ROUNDS_FILE).read_text().splitlines(keepends=True)
    os.remove(tmp_path / "checkpoint-4" / STATE_FILE)
    _trainer(tmp_path, dataset, **overrides).train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    resumed = (tmp_path / ROUNDS_FILE).read_text().splitlines(keepends=True)
    assert resumed[:2] == lines[:2]  # the rounds that started at micro-steps 0 and 2
    assert len(resumed) == 4 and all(json.loads(line)["global_step"] >= 4 for line in resumed[2:])


@pytest.mark.parametrize("saved_state", ["none", "version-1"])
def test_a_checkpoint_without_a_saved_micro_step_resumes_where_the_trainer_fast_forwards(tmp_path, saved_state):
    # A plain TRL checkpoint (no coba_state.json) or one from coba-trl 0.1 (allocator and history, no micro-step),
    # without prompt_id_column: checkpoint-5 lies inside round 2, in the second epoch. The resumed run regenerates
    # that round for its prompts, allocated afresh, then follows the uninterrupted run's schedule to the end.
    dataset, overrides = prompt_dataset(8), dict(steps_per_generation=2)
    full = _trainer(tmp_path / "full", dataset, **overrides)
    full_rounds = RoundRecorder(full)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-5"
    state = load_state(str(checkpoint))
    os.remove(checkpoint / STATE_FILE)
    if saved_state == "version-1":
        (checkpoint / STATE_FILE).write_text(
            json.dumps({key: state[key] for key in ("allocator", "pass_rate_history")})
        )
    resumed = _trainer(tmp_path / "resumed", dataset, **overrides)
    resumed_rounds = RoundRecorder(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == full.state.global_step == 8
    assert len(full_rounds.rounds) == 4
    assert [ids for ids, _ in resumed_rounds.rounds] == [ids for ids, _ in full_rounds.rounds[2:]]
    assert all(sum(sizes) == 16 for _, sizes in resumed_rounds.rounds)
    # the regenerated round was planned from the saved history (all 8 prompts of epoch 0), or from none
    (first,) = [logs for logs in resumed.state.log_history if logs["step"] == 6 and "loss" in logs]
    assert first["coba/prompts_with_history"] == (8.0 if saved_state == "version-1" else 0.0)


def test_resume_with_iterations_and_gradient_accumulation(tmp_path):
    _assert_resume_is_exact(
        tmp_path,
        3,
        prompt_dataset(8, repeats=2),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_iterations=2,
        prompt_id_column="uid",
    )


def test_the_state_is_in_the_folder_before_the_hub_upload_starts(tmp_path):
    trainer = _trainer(tmp_path, prompt_dataset(8), max_steps=2)
    trainer.args.push_to_hub = True  # set after construction: no Hub repository is created offline
    seen = []
    trainer._push_from_checkpoint = lambda folder: seen.append(os.path.exists(os.path.join(folder, STATE_FILE)))
    trainer.train()
    assert seen == [True, True]
    state = load_state(str(tmp_path / "checkpoint-2"))
    assert state["micro_step"] == 2 and state["round"]["group_sizes"]


def test_a_crash_while_writing_leaves_the_previous_state(tmp_path, monkeypatch):
    save_state(str(tmp_path), {"allocator": {"a": 1}})
    before = (tmp_path / STATE_FILE).read_text()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", crash)
    with pytest.raises(KeyboardInterrupt):
        save_state(str(tmp_path), {"allocator": {"a": 2}})
    assert (tmp_path / STATE_FILE).read_text() == before
    assert os.listdir(tmp_path) == [STATE_FILE]  # no temporary file left behind


def _first_letter_reward(completions, **kwargs):
    """1.0 when a completion starts with an even byte: groups mix successes and failures, so every step learns."""
    return [float(bool(c) and ord(c[0]) % 2 == 0) for c in completions]


def _losses(trainer):
    return {logs["step"]: logs["loss"] for logs in trainer.state.log_history if "loss" in logs}


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A run of 8 steps with a checkpoint after each, its losses by step and its final weights."""
    output_dir = tmp_path_factory.mktemp("saved")
    trainer = _trainer(output_dir, prompt_dataset(8, repeats=2), _first_letter_reward, prompt_id_column="uid")
    trainer.train()
    return output_dir, _losses(trainer), {k: v.clone() for k, v in trainer.model.state_dict().items()}


def _cut_short(checkpoint, tear):
    """What a save stopped partway leaves: no marker, and `trainer_state.json` not written, or the weights cut short
    (with `trainer_state.json` kept, so only the weights give the tear away)."""
    os.remove(checkpoint / COMPLETE_FILE)
    if tear == "no-trainer-state":
        os.remove(checkpoint / "trainer_state.json")
    else:
        weights = checkpoint / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


@pytest.mark.parametrize("tear", ["no-trainer-state", "weights-cut-short"])
def test_resume_true_skips_a_checkpoint_whose_save_was_cut_short(tmp_path, saved_run, tear, caplog):
    # Stopped while writing checkpoint-6: checkpoints 7 and 8 were never written, checkpoint-6 is torn. The
    # relaunch (resume_from_checkpoint=True) resumes from checkpoint-5 and trains steps 6 to 8 as the run did.
    source, losses, weights = saved_run
    shutil.copytree(source, tmp_path, dirs_exist_ok=True)
    for step in (7, 8):
        shutil.rmtree(tmp_path / f"checkpoint-{step}")
    _cut_short(tmp_path / "checkpoint-6", tear)
    resumed = _trainer(tmp_path, prompt_dataset(8, repeats=2), _first_letter_reward, prompt_id_column="uid")
    with caplog.at_level(logging.WARNING):
        resumed.train(resume_from_checkpoint=True)
    assert _losses(resumed) == losses and sorted(losses) == [1, 2, 3, 4, 5, 6, 7, 8]
    retrained = [logs for logs in resumed.state.log_history if "loss" in logs and logs["step"] > 5]
    assert len(retrained) == 3 and all(logs["grad_norm"] > 0 for logs in retrained)  # steps 6 to 8 learned again
    assert all(torch.equal(value, weights[name]) for name, value in resumed.model.state_dict().items())
    (warning,) = [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()]
    assert str(tmp_path / "checkpoint-6") in warning and f"Resuming from {tmp_path / 'checkpoint-5'}," in warning
    assert "\n" not in warning
    assert incomplete_reason(str(tmp_path / "checkpoint-6")) is None  # saved again, whole this time


def _micro_batch_rows(trainer) -> list[int]:
    """Records the rows of every micro-batch the loss sees (what `_prepare_inputs` returns in training)."""
    rows, prepare = [], trainer._prepare_inputs

    def record(inputs):
        batch = prepare(inputs)
        if trainer.model.training:
            rows.append(len(batch["completion_ids"]))
        return batch

    trainer._prepare_inputs = record
    return rows


@pytest.mark.parametrize(
    ("field", "saved", "resumed"),
    [("steps_per_generation", 2, 4), ("per_device_train_batch_size", 4, 8)],
    ids=["steps_per_generation", "per_device_train_batch_size"],
)
@pytest.mark.parametrize("mode", ["keep", "refill"])
def test_a_resume_inside_a_round_with_another_layout_trains_rounds_of_the_new_layout(
    tmp_path, field, saved, resumed, mode, caplog
):
    # Stock GRPOTrainer regenerates the round on such a resume and trains micro-batches of the new size; the saved
    # rows of the old layout are never trained.
    layout = dict(steps_per_generation=2, per_device_train_batch_size=4, prompt_id_column="uid", max_steps=4)
    refill = {}
    if mode == "refill":  # a reward whose groups have spread, so that rounds refill and train their rows
        refill = dict(zero_variance_groups="refill", skip_settled_prompts=True, reward=parity_reward)
    dataset = prompt_dataset(16)
    full = _trainer(tmp_path / "full", dataset, **{**layout, **refill, field: saved})
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-3"
    assert sorted(p.name for p in checkpoint.glob("coba_rows_*.pt")) == ["coba_rows_0.pt"]  # inside a round
    trainer = _trainer(tmp_path / "resumed", dataset, **{**layout, **refill, field: resumed})
    rows = _micro_batch_rows(trainer)
    with caplog.at_level(logging.WARNING):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert rows == [trainer.args.per_device_train_batch_size] * (trainer.state.global_step - 3)
    assert trainer.state.global_step == 4
    assert f"another batch layout ({field} {saved} -> {resumed})" in caplog.text


def test_a_stop_right_after_trls_save_leaves_a_checkpoint_that_resumes_with_true(tmp_path, monkeypatch):
    # With save_total_limit=1, a run stopped after TRL's save of checkpoint-2 returned (before coba-trl marks it
    # complete) still has a complete checkpoint: the older one, which TRL's rotation deletes only after the marker.
    from trl import GRPOTrainer

    save = GRPOTrainer._save_checkpoint

    def stop_after_the_second_save(self, model, trial):
        save(self, model, trial)
        if self.state.global_step == 2:
            raise KeyboardInterrupt("stopped right after TRL's save")

    monkeypatch.setattr(GRPOTrainer, "_save_checkpoint", stop_after_the_second_save)
    dataset = prompt_dataset(8, repeats=2)
    stopped = _trainer(tmp_path, dataset, save_total_limit=1, max_steps=4, prompt_id_column="uid")
    with pytest.raises(KeyboardInterrupt):
        stopped.train()
    monkeypatch.setattr(GRPOTrainer, "_save_checkpoint", save)
    assert incomplete_reason(str(tmp_path / "checkpoint-1")) is None
    resumed = _trainer(tmp_path, dataset, save_total_limit=1, max_steps=4, prompt_id_column="uid")
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 4
    assert sorted(name for name in os.listdir(tmp_path) if name.startswith("checkpoint-")) == ["checkpoint-4"]
    assert incomplete_reason(str(tmp_path / "checkpoint-4")) is None


@pytest.mark.parametrize(
    ("checkpoint_step", "logged_after"),
    [(3, [(0, 0), (2, 2), (6, 3), (8, 4), (10, 5)]), (4, [(0, 0), (2, 2), (8, 4), (10, 5)])],
    ids=["inside-a-round", "round-boundary"],
)
def test_a_resume_with_another_gradient_accumulation_logs_the_rounds_of_both_layouts_once(
    tmp_path, checkpoint_step, logged_after, caplog
):
    # Saved with gradient_accumulation_steps=1, inside the round that started at micro-step 2 (checkpoint-3) or at the
    # end of it (checkpoint-4); resumed in the same folder with 2: the log keeps the rounds the saving run had
    # started, and the resumed run's rounds follow at its own micro-steps. The saved plan is not replayed for the new
    # layout's rounds.
    overrides = dict(steps_per_generation=2, prompt_id_column="uid", max_steps=6)
    dataset = prompt_dataset(8, repeats=2)
    _trainer(tmp_path, dataset, **overrides).train()
    assert [(r["micro_step"], r["global_step"]) for r in read_rounds(str(tmp_path))] == [(0, 0), (2, 2), (4, 4)]
    resumed = _trainer(tmp_path, dataset, **overrides, gradient_accumulation_steps=2)
    with caplog.at_level(logging.WARNING):
        resumed.train(resume_from_checkpoint=str(tmp_path / f"checkpoint-{checkpoint_step}"))
    assert [(r["micro_step"], r["global_step"]) for r in read_rounds(str(tmp_path))] == logged_after
    inside = checkpoint_step == 3
    assert ("another batch layout (gradient_accumulation_steps 1 -> 2)" in caplog.text) == inside
    assert "other prompts than the resumed round" not in caplog.text


def _generated_and_trained(trainer) -> tuple[list, list]:
    """Records, per round the trainer generates, its rows, and per micro-batch the loss sees, its rows (each row as
    its prompt and completion tokens)."""
    generated, trained = [], []
    generate, prepare = trainer._generate_and_score_completions, trainer._prepare_inputs

    def rows(batch) -> list[tuple]:
        return [tuple(row) for row in torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1).tolist()]

    def record_round(inputs):
        batch = generate(inputs)
        if trainer.model.training:
            generated.append(rows(batch))
        return batch

    def record_micro_batch(inputs):
        batch = prepare(inputs)
        if trainer.model.training:
            trained.append(rows(batch))
        return batch

    trainer._generate_and_score_completions, trainer._prepare_inputs = record_round, record_micro_batch
    return generated, trained


def test_resumes_that_change_gradient_accumulation_train_every_generated_row_and_log_every_trained_round(tmp_path):
    # Saved every step with gradient_accumulation_steps=2 (one round per step) and resumed in place with 1 from
    # checkpoint-3: the dataloader resumes at micro-step 3, inside a round of the new layout. That round is generated
    # there and trained whole, as the pass-rate history records it whole. Resumed in place again from checkpoint-4
    # (inside that round, same layout): the log keeps every round checkpoint-4's run trained, though its micro-steps
    # restarted lower than the first run's.
    overrides = dict(steps_per_generation=2, prompt_id_column="uid", max_steps=6)
    dataset = prompt_dataset(8, repeats=2)
    _trainer(tmp_path, dataset, **{**overrides, "max_steps": 3}, gradient_accumulation_steps=2).train()
    first = _trainer(tmp_path, dataset, **overrides)
    generated, trained = _generated_and_trained(first)
    first.train(resume_from_checkpoint=str(tmp_path / "checkpoint-3"))
    assert len(generated) == 2 and len(trained) == 3
    assert sorted(trained[0] + trained[1]) == sorted(generated[0])  # every row of the first round, once
    logged = read_rounds(str(tmp_path))
    assert [(r["micro_step"], r["global_step"]) for r in logged] == [(0, 0), (2, 1), (4, 2), (2, 3), (4, 5)]
    _trainer(tmp_path, dataset, **overrides).train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert read_rounds(str(tmp_path)) == logged


def test_a_save_into_a_folder_another_process_count_used_owns_it_and_resumes_exactly(tmp_path):
    # A two-process run saved checkpoint-3 inside a round (coba_rows_0.pt and coba_rows_1.pt, rng_state_0.pth and
    # rng_state_1.pth); a one-process run in the same output folder saves checkpoint-3 again. Its resume must train
    # its own saved rows, as the uninterrupted run did, not regenerate the round because a second process's rows are
    # lying there, and no later two-process resume may load the other run's random states.
    overrides = dict(steps_per_generation=2, prompt_id_column="uid", reward=step_parity_reward)  # a non-zero loss
    dataset = prompt_dataset(8, repeats=2)
    reference = _trainer(tmp_path / "reference", dataset, **overrides)
    reference.train()
    used = tmp_path / "used"
    (used / "checkpoint-3").mkdir(parents=True)
    saved = tmp_path / "reference" / "checkpoint-3"
    shutil.copy(saved / "coba_rows_0.pt", used / "checkpoint-3" / "coba_rows_1.pt")
    for rank in range(2):
        shutil.copy(saved / "rng_state.pth", used / "checkpoint-3" / f"rng_state_{rank}.pth")
    _trainer(used, dataset, **overrides).train()
    random_states = sorted(p.name for p in (used / "checkpoint-3").glob("rng_state*.pth"))
    assert random_states == ["rng_state.pth"]
    listed = json.loads((used / "checkpoint-3" / COMPLETE_FILE).read_text())["files"]
    assert sorted(name for name in listed if name.startswith("rng_state")) == ["rng_state.pth"]
    resumed = _trainer(tmp_path / "resumed", dataset, **overrides)
    resumed.train(resume_from_checkpoint=str(used / "checkpoint-3"))
    losses = [h["loss"] for h in reference.state.log_history if "loss" in h]
    assert [h["loss"] for h in resumed.state.log_history if "loss" in h] == losses and any(losses)
    assert sorted(p.name for p in (used / "checkpoint-3").glob("coba_rows_*.pt")) == ["coba_rows_0.pt"]
