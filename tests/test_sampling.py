"""The round sampler: GRPO's order in every epoch, an order a resume can recompute, and rounds for any process count."""

import numpy as np
import pytest
from trl.trainer.utils import RepeatSampler

from coba_trl.rounds.grouping import deal_groups
from coba_trl.rounds.sampling import RoundSampler


def test_one_process_matches_trls_sampler_epoch_after_epoch():
    ours = RoundSampler(num_samples=13, prompts_per_round=4, repeat_count=3, seed=5)
    theirs = RepeatSampler(range(13), mini_repeat_count=1, batch_size=4, repeat_count=3, seed=5)
    for _ in range(4):  # an uninterrupted run: one pass per epoch, no set_epoch
        assert list(ours) == list(theirs)


def test_an_epoch_is_recomputed_from_the_seed_alone():
    uninterrupted = RoundSampler(num_samples=10, prompts_per_round=5, seed=1)
    epochs = [list(uninterrupted) for _ in range(3)]
    resumed = RoundSampler(num_samples=10, prompts_per_round=5, seed=1)
    resumed.set_epoch(2)  # what the Trainer does when it resumes in epoch 2
    assert list(resumed) == epochs[2] != epochs[0]
    assert [resumed.round_indices(2, r) for r in range(2)] == [epochs[2][:5], epochs[2][5:]]


def test_a_resume_without_a_saved_micro_step_continues_where_the_trainer_fast_forwards():
    # The Trainer skips whole epochs of batches, then gradient_accumulation_steps batches per optimizer step; the last
    # step of an epoch takes the batches left over (here 5 rounds x 2 repeats = 10 batches: steps of 3, 3, 3 and 1).
    sampler = RoundSampler(num_samples=10, prompts_per_round=2, repeat_count=2)
    assert [sampler.fast_forward_micro_step(step, 3) for step in (0, 3, 4, 5, 9)] == [0, 9, 10, 13, 23]
    assert sampler.fast_forward_micro_step(7, 2) == 7 * 2  # an epoch's batches divide by the accumulation steps


def test_micro_steps_map_to_rounds_and_epochs():
    sampler = RoundSampler(num_samples=8, prompts_per_round=4, repeat_count=2)  # 2 rounds per epoch, 2 steps each
    assert [sampler.locate(step) for step in (0, 1, 2, 3, 4, 7)] == [(0, 0), (0, 0), (0, 1), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize(("prompts", "processes"), [(3, 2), (4, 8), (5, 3), (1, 4)])
def test_rounds_are_padded_so_every_process_loads_the_same_count(prompts, processes):
    # e.g. 8 GPUs, per-device batch 2, G = 16, steps_per_generation 4: 64 completions, 4 distinct prompts per round.
    sampler = RoundSampler(num_samples=20, prompts_per_round=prompts, num_processes=processes, repeat_count=2, seed=0)
    order = list(sampler)
    per_process = -(-prompts // processes)
    span = per_process * processes
    assert len(order) == len(sampler) == (20 // prompts) * span * 2
    for round_number in range(20 // prompts):
        padded = order[round_number * span * 2 : round_number * span * 2 + span]
        # accelerate hands process p the p-th batch of `per_process`; gathering them restores this order, and the
        # trainer keeps the first M entries: the round's distinct prompts.
        assert padded[:prompts] == sampler.round_indices(0, round_number)
        assert set(padded[prompts:]) <= set(padded[:prompts])
    total = 16 * processes  # completions per round: a multiple of the processes, as GRPOConfig ensures
    group_sizes = np.full(prompts, total // prompts)
    group_sizes[0] += total - group_sizes.sum()
    dealt = deal_groups(group_sizes, processes)
    assert {len(rows) for rows in dealt} == {16}


def test_a_dataset_smaller_than_a_round_is_refused():
    with pytest.raises(ValueError, match="fewer than the 8 distinct prompts"):
        RoundSampler(num_samples=5, prompts_per_round=8)


def test_rows_off_the_schedule_on_one_process_stop_every_process_with_the_same_error():
    # Process 1 loaded other rows than the sampler scheduled (its own copy of the dataset, in another order): process
    # 0 must not go on alone into the round's next collective, where it would wait for process 1 until a timeout.
    from datasets import Dataset
    from scripts.fake_collectives import World

    from coba_trl import distributed
    from coba_trl.rounds.source import IndexedRounds, RoundLayout

    dataset = Dataset.from_dict({"prompt": [f"Question {i}:" for i in range(8)]})
    source = IndexedRounds(dataset, RoundLayout(4, 2, 1, True, 0, None))
    scheduled = [dataset[i] for i in source.sampler.round_indices(0, 0)]
    loaded = [scheduled[:2], scheduled[:2]]  # process 1 loaded process 0's share, not its own
    world = World(2, timeout=5)

    def process(rank):
        try:
            return source.prompt_ids(0, world.accelerator(rank), loaded[rank], scheduled)
        except RuntimeError as error:
            return str(error)

    with world.patch(distributed):
        errors = world.run(lambda: process(0), lambda: process(1))
    assert errors[0] == errors[1]
    assert errors[0].startswith("At micro-step 0 the dataloader's prompts are not the ones the round sampler")
