"""The round machinery of `CoBAGRPOTrainer`: where a round's prompts come from, how they become rows, and how the
round is planned, scored and recorded. Plain functions and small classes; the trainer only wires them into TRL.

- `runner`: the one entry point, `RoundRunner.run`, which runs a whole round with everything below and calls back
  into the trainer only to generate and score rows with TRL's own method.

- `source`: one interface for where a round's prompts come from (`sampling` for a dataset, `streaming` for a stream):
  the per-process batch, the prompt ids, the resume position, and the cursor rounds of a variable number of prompts
  draw from.
- `batches`: what every round holds: its generation batches, all of them seen as one round, and its log record.
- `resume`: where a resumed run picks up its rounds (micro-step, the round in progress, the allocation log).
- `refill` and `skipping`: rounds of several generation batches that replace groups without spread (DAPO's dynamic
  sampling), and settled prompts skipped before generation (GRESO).
- `plan`: the allocator's group size per prompt (process 0), and the saved plan of a round a checkpoint was inside of.
- `grouping`: the deal of a round's rows over the processes in contiguous slices (GRPO's for equal groups), and their
  expansion into rows (a fresh copy each).
- `rollouts`: a `rollout_func` written for GRPOTrainer, called once per group size.
- `phases`: two-phase rounds (merging TRL's outputs) and zero-variance groups.
- `scoring` and `advantages`: advantages over groups of any size, successes, and the one place the pass-rate history
  and F_t change.
- `metrics` and `log`: what a round logs, and the allocation log (`coba_rounds.jsonl`).
- `spending`: what a round and the run generated and trained, the end-of-run line and the warning when refill runs
  away.
"""
