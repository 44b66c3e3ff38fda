"""Two real processes (torchrun, CPU, gloo): a layout whose prompts do not divide over the processes trains (dropping
the groups without spread from the loss on whichever process holds them), the ranks agree on everything, a resume
inside a round continues the uninterrupted run exactly, and uniform allocation is GRPOTrainer step for step."""

import json
from pathlib import Path

import numpy as np
import pytest
import transformers
from packaging.version import Version
from scripts.two_processes import launch, run_ranks

from coba_trl.checkpoint import COMPLETE_FILE
from coba_trl.rounds.log import read_rounds

SCRIPT = Path(__file__).parent / "scripts" / "tiny_coba.py"


def _launch(out_dir: Path, *script_args: str) -> list[dict]:
    return run_ranks(SCRIPT, out_dir, *script_args)


def _ranks_agree(ranks: list[dict], *keys: str) -> None:
    """Both processes saw the same of each of `keys` (the plans, history, allocator state...)."""
    for key in keys:
        assert ranks[0][key] == ranks[1][key], key


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_three_prompts_per_round_over_two_processes(tmp_path):
    ranks = _launch(tmp_path, "scripted")
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 6
    assert ranks[0]["rows"] == ranks[1]["rows"] == [6, 6, 6]  # 12 completions per round, dealt 6 + 6
    assert ranks[0]["rewards"] == ranks[1]["rewards"]  # both ranks hold the same gathered rewards
    assert ranks[0]["rounds"] == ranks[1]["rounds"]
    assert [sizes for _, sizes in ranks[0]["rounds"]] == [[1, 9, 2], [2, 3, 7], [6, 5, 1]]
    assert all(len(set(ids)) == 3 for ids, _ in ranks[0]["rounds"])  # padding rows never reach the plan
    assert ranks[0]["history"] == ranks[1]["history"]
    assert ranks[0]["allocator"] == ranks[1]["allocator"]
    seen = [tries for _, appearances in ranks[0]["history"]["records"] for _, tries in appearances]
    assert sum(seen) == 36 and max(seen) == 9  # the scripted group sizes reach the history (window 3 keeps all)
    # Row alignment: every process's rows carry their own group's advantages. Pooled over both processes, each
    # prompt has its planned number of rows, rows rewarded alike share one advantage, a better reward gets a higher
    # one, and a group's advantages sum to 0.
    dropped = 0
    for round_index, (ids, sizes) in enumerate(ranks[0]["rounds"]):
        rows = ranks[0]["local_rows"][round_index] + ranks[1]["local_rows"][round_index]
        assert sum(reward for _, reward, _ in rows) == sum(r[0] for r in ranks[0]["rewards"][round_index])
        for uid, size in zip(ids, sizes, strict=True):
            group = [(reward, advantage) for prompt, reward, advantage in rows if prompt == f"Question {uid[1:]}:"]
            assert len(group) == size
            by_reward = {reward: {round(a, 5) for r, a in group if r == reward} for reward, _ in group}
            assert all(len(advantages) == 1 for advantages in by_reward.values())
            if len(by_reward) == 2:
                assert by_reward[1.0].pop() > 0 > by_reward[0.0].pop()
            assert abs(sum(advantage for _, advantage in group)) < 1e-4
        # zero_variance_groups="drop": the rows of every group rewarded alike (a group of one always is) leave the loss
        # on whichever process holds them, and TRL's token normaliser counts what both processes train, on both.
        flat = {}
        for prompt, reward, _ in rows:
            flat.setdefault(prompt, set()).add(reward)
        for rank in range(2):
            tokens = ranks[rank]["trained_tokens"][round_index]
            for (prompt, _, _), trained in zip(ranks[rank]["local_rows"][round_index], tokens, strict=True):
                assert (trained == 0) == (len(flat[prompt]) == 1), (round_index, rank, prompt)
                dropped += trained == 0
        trained_tokens = sum(sum(ranks[rank]["trained_tokens"][round_index]) for rank in range(2))
        assert ranks[0]["num_items"][round_index] == ranks[1]["num_items"][round_index] == trained_tokens
    assert dropped >= 2  # the groups of one in the first and last rounds at least


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    Version(transformers.__version__) < Version("5.18"),
    reason="transformers before 5.18 load the optimizer state of a multi-process CPU run onto 'cpu:0', which torch "
    "cannot restore: resuming such a run needs transformers 5.18 or later",
)
def test_two_process_resume_inside_a_round_is_exact(tmp_path):
    full = _launch(tmp_path / "full", "coba")
    resumed = _launch(tmp_path / "resumed", "coba", str(tmp_path / "full" / "checkpoint-3"))
    for run in (full, resumed):
        assert run[0]["rounds"] == run[1]["rounds"] and run[0]["history"] == run[1]["history"]
    assert len(full[0]["rounds"]) == 4
    # checkpoint-3 lies inside round 1 (steps 2 and 3): its rows not yet trained are in it, and the resumed run trains
    # them instead of planning that round again.
    assert resumed[0]["rounds"] == full[0]["rounds"][2:]
    assert resumed[0]["history"] == full[0]["history"]
    assert resumed[0]["allocator"] == full[0]["allocator"]
    for rank in range(2):  # each process trained its own saved rows: the same losses and weights
        assert any(loss != 0 for loss in full[rank]["losses"])
        assert resumed[rank]["losses"] == full[rank]["losses"]
        assert resumed[rank]["weights"] == full[rank]["weights"]
    assert resumed[0]["global_step"] == full[0]["global_step"] == 8
    for step in range(1, 9):  # marked complete once both processes had saved their random state
        listed = json.loads((tmp_path / "full" / f"checkpoint-{step}" / COMPLETE_FILE).read_text())["files"]
        assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json", "model.safetensors"} <= set(listed)
        assert ({"coba_rows_0.pt", "coba_rows_1.pt"} <= set(listed)) == (step % 2 == 1)  # inside a round


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_neighbourhood_priors_agree_over_two_processes(tmp_path):
    ranks = _launch(tmp_path, "neighbours")
    _ranks_agree(ranks, "rounds", "neighbours", "history", "allocator")  # every process registered every level
    assert len(ranks[0]["rounds"]) == 4
    assert sorted(key for _, key in ranks[0]["neighbours"]["neighbourhoods"]) == [0, 0, 0, 1, 1, 1]
    # The second round's prompts start from their level's mean once a prompt of that level was seen, else unseen.
    first_ids, second_ids = ranks[0]["rounds"][0][0], ranks[0]["rounds"][1][0]
    seen_levels = {int(uid[1:]) % 2 for uid in first_ids}
    second = ranks[0]["pass_rates"][1]
    assert [int(uid[1:]) % 2 in seen_levels for uid in second_ids] == [rate == rate for rate in second]  # NaN: unseen


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_two_phase_rounds_agree_over_two_processes(tmp_path):
    ranks = _launch(tmp_path, "two-phase")
    _ranks_agree(ranks, "rounds", "rows", "rewards", "history", "allocator")
    assert len(ranks[0]["rounds"]) == 4
    assert ranks[0]["rows"] == [6] * 4  # screening 3 + the rest 3 on each process, per round
    assert all(sum(sizes) == 12 and min(sizes) >= 2 for _, sizes in ranks[0]["rounds"])
    # process 0 wrote the allocation log: the same plans, one line per round
    logged = read_rounds(str(tmp_path))
    assert [[str(i) for i in r["prompt_ids"]] for r in logged] == [ids for ids, _ in ranks[0]["rounds"]]
    assert [r["group_sizes"] for r in logged] == [sizes for _, sizes in ranks[0]["rounds"]]
    assert all(len(r["screen_successes"]) == 3 for r in logged)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_failure_on_process_0_stops_every_process_with_its_error(tmp_path):
    # The allocator runs on process 0 only; when it raises, the other process must not wait in the next collective
    # until a launcher or NCCL timeout: both raise the same error, and the launch ends.
    result = launch(SCRIPT, tmp_path, "fail", timeout=120)
    assert result.returncode != 0
    errors = [(tmp_path / f"rank{rank}.error").read_text() for rank in range(2)]
    assert errors[0] == errors[1] == "ValueError: the allocator failed in round 2"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
def test_uniform_allocation_over_two_processes_is_grpo_step_for_step(tmp_path):
    # 3 prompts of 4 completions per round over 2 processes: each process holds GRPO's contiguous slice of the round
    # (the middle group split at the boundary), generates the same completions, and the run trains as GRPOTrainer.
    coba, grpo = _launch(tmp_path / "coba", "uniform"), _launch(tmp_path / "grpo", "grpo")
    assert coba[0]["global_step"] == grpo[0]["global_step"] == 6
    logged = read_rounds(str(tmp_path / "coba"))
    assert len(logged) == 3 and all(record["group_sizes"] == [4, 4, 4] for record in logged)
    # the allocation log says what each process generated: GRPO's slices, the middle prompt split at the boundary
    assert all(record["process_groups"] == [[[[0, 4], [1, 2]], [[1, 2], [2, 4]]]] for record in logged)
    for rank in range(2):
        ours, theirs = coba[rank], grpo[rank]
        assert ours["rows"] == theirs["rows"] == [6, 6, 6]
        assert ours["completions"] == theirs["completions"]  # the same rows on the same process, sampled alike
        assert [[row[:2] for row in round_rows] for round_rows in ours["local_rows"]] == [
            [row[:2] for row in round_rows] for round_rows in theirs["local_rows"]
        ]
        np.testing.assert_allclose(
            [row[2] for rows in ours["local_rows"] for row in rows],
            [row[2] for rows in theirs["local_rows"] for row in rows],
            atol=1e-6,
        )  # advantages
        np.testing.assert_allclose(ours["rewards"], theirs["rewards"], atol=0)
        np.testing.assert_allclose(ours["losses"], theirs["losses"], atol=1e-6)
        np.testing.assert_allclose(ours["weights"], theirs["weights"], atol=1e-6)
        assert [len({prompt for prompt, _, _ in rows}) for rows in ours["local_rows"]] == [2, 2, 2]
    assert coba[0]["weights"] == coba[1]["weights"]
