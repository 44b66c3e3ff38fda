"""`CoBAGRPOTrainer`: TRL's GRPOTrainer with a per-prompt number of generations (CoBA-RL, arXiv 2602.03048).

Glue around TRL's own methods, never a copy of them (docs/training.md, "How a round runs"); the round machinery lives
in `coba_trl.rounds`:
1. the round source (`coba_trl.rounds.source`: a sampler for a dataset, a reshaped stream) yields each round's
   M = `generation_batch_size / num_generations` *distinct* prompts, each process loading ceil(M / P) of them;
2. `_generate_and_score_completions` gathers them, plans the round on process 0 (`coba_trl.rounds.plan`: the
   allocator's group size per prompt), shares the plan, deals each group's rows evenly over the processes and expands
   them into rows (`coba_trl.rounds.grouping`), and runs TRL's method with `num_generations = 1`, so every backend
   (transformers, vLLM colocate, vLLM server) makes one completion per row;
3. the rewards TRL gathers are captured in `_calculate_rewards` and scored per variable-size group
   (`coba_trl.rounds.scoring`), then the pass-rate history p_i and the capability F_t observe the round.
Checkpoints carry the allocator, the history, TRL's micro-step counter and the round in progress
(`coba_trl.checkpoint`), so a run resumed from any checkpoint makes the allocations of the run it continues.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import replace

import numpy as np
import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from datasets import Dataset
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from coba_trl.checkpoint import (
    STATE_FILE,
    encode_round,
    latest_complete_checkpoint,
    load_buffered_rows,
    load_state,
    save_buffered_rows,
    start_checkpoint,
    write_complete_marker,
)
from coba_trl.compat import check_trl_compatibility
from coba_trl.config import CoBAConfig
from coba_trl.distributed import shared_call
from coba_trl.generation.vllm_backend import built_by_trl, check_vllm_installed
from coba_trl.model_card import PAPER, complete_model_card
from coba_trl.rounds.grouping import deal_groups, expand_rows, expected_length_weight
from coba_trl.rounds.log import RoundLog
from coba_trl.rounds.metrics import log_round
from coba_trl.rounds.plan import RoundPlan, Screening, check_plan, plan_round, prior_pass_rates, replayed_plan
from coba_trl.rounds.refill import (
    GenerationBatch,
    choose_rows,
    combined,
    deal_chosen_rows,
    gather_round,
    replacement_count,
    round_record,
    rows_with_spread,
    spending_metrics,
)
from coba_trl.rounds.rollouts import RolloutGroups, grouped_rollout
from coba_trl.rounds.scoring import (
    Phase,
    Scoring,
    check_phase_rewards,
    observe_round,
    score_round,
    screen_round,
    success_signal_warning,
    unscored_groups_warning,
)
from coba_trl.rounds.skipping import SettledPromptSkipper
from coba_trl.rounds.source import RoundLayout, round_source
from coba_trl.validation import check_construction, check_context_length, check_success_reward

check_trl_compatibility()

logger = get_logger(__name__)

__all__ = ["STATE_FILE", "CoBAGRPOTrainer", "Phase", "RoundPlan"]


class CoBAGRPOTrainer(GRPOTrainer):
    """
    [`~trl.GRPOTrainer`] whose prompts get different numbers of completions, chosen each generation round by CoBA-RL
    (capability-oriented budget allocation, arXiv 2602.03048), Knapsack-RL or a uniform split (plain GRPO).

    Takes the same arguments as [`~trl.GRPOTrainer`], with `args` a [`CoBAConfig`]; `train_dataset` is a
    [`~datasets.Dataset`], or an [`~datasets.IterableDataset`] with `prompt_id_column` set. `environment_factory` and
    `tools` run TRL's tool loop on every row, and a `rollout_func` written for GRPOTrainer works unchanged
    (`coba_trl.rounds.rollouts`; docs/setups.md). The allocator and the pass-rate history are public
    (`trainer.allocator`, `trainer.pass_rate_history`) and saved in every checkpoint; `trainer.rollout_groups` tells a
    custom rollout which group each of its rows is in, while one is generated.

    What the training loop hands around differs from GRPO in one place: the `inputs` that `training_step` (and
    `_prepare_inputs`) receive from the dataloader are this process's share of the round's *distinct* prompts, one
    dataset row each, where GRPO passes every prompt repeated `num_generations` times; when the number of processes
    does not divide the round's prompts, a process's share is padded with repeats of the round's first prompts, which
    are dropped before allocation. The batches `_prepare_inputs` returns (and the loss sees) are completion rows, as
    in GRPO. No column is added to the dataset.

    Example:

    ```python
    >>> from coba_trl import CoBAConfig, CoBAGRPOTrainer
    >>> args = CoBAConfig(output_dir="out", num_generations=16, max_generations=128)
    >>> trainer = CoBAGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=accuracy_reward, args=args,
    ...                           train_dataset=dataset)
    >>> trainer.train()
    ```
    """

    _tag_names = ["trl", "grpo", "coba-rl"]
    _name = "CoBA-GRPO"
    _paper = PAPER

    def __init__(self, model, reward_funcs=None, args: CoBAConfig | None = None, train_dataset=None, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "") or "model"
            args = CoBAConfig(f"{name.split('/')[-1]}-CoBA")
        if not isinstance(args, CoBAConfig):
            raise ValueError(
                f"args must be a CoBAConfig, got {type(args).__name__}. Build it with "
                "`CoBAConfig(**your_grpo_config.to_dict())` or pass the CoBA fields to CoBAConfig directly."
            )
        check_construction(args, train_dataset, reward_funcs, kwargs)
        check_vllm_installed(args.use_vllm)
        # GRPOConfig makes generation_batch_size a multiple of the processes and of steps_per_generation.
        self._prompts_per_round = args.generation_batch_size // args.num_generations
        self._coba_columns = [c for c in (args.prompt_id_column, args.prior_pass_rate_column) if c is not None]
        with built_by_trl() if args.use_vllm else nullcontext():  # TRL builds coba-trl's vLLM backend (generation/)
            super().__init__(model, reward_funcs, args, train_dataset, **kwargs)
        check_context_length(self.model, self.processing_class, train_dataset, args)
        repeats = self.num_iterations * args.steps_per_generation
        layout = RoundLayout(
            self._prompts_per_round,
            self.accelerator.num_processes,
            repeats,
            self.shuffle_dataset,
            args.seed,
            args.prompt_id_column,
        )
        self._rounds = round_source(train_dataset, layout)  # where each round's prompts come from
        if self.rollout_func is not None:  # called once per group size, as GRPOTrainer calls it (coba_trl.rounds)
            self.rollout_func = grouped_rollout(self.rollout_func)
        self.rollout_groups: RolloutGroups | None = None  # the generation phase in progress (docs/setups.md)
        self._success_indices = check_success_reward(args.success_reward_func, self.reward_func_names)
        self.allocator = args.build_allocator()
        self.pass_rate_history = args.build_pass_rate_history()
        self._captured_rewards = None  # the rewards TRL gathered in the latest generation call
        self._warned: set[str] = set()  # the once-only warnings given (`coba_trl.rounds.scoring`)
        self._current_round: dict | None = None  # the round in progress, saved with every checkpoint
        self._replay_round: dict | None = None  # the round a resumed checkpoint was saved inside of
        self._round_log = RoundLog(args.output_dir) if args.log_allocations else None
        # Refill and skipping take a variable number of prompts per round, drawn from the source's cursor.
        self._draws_prompts = args.zero_variance_groups == "refill" or args.skip_settled_prompts
        self._skipper = None
        if args.skip_settled_prompts:
            self._skipper = SettledPromptSkipper(args.skip_target_zero_spread, args.max_skips_in_a_row, args.seed)
        self._skip = None if self._skipper is None else self._skipper.visit
        self.rollouts_generated = 0  # completions generated in the run so far, all processes (saved in checkpoints)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        # A fresh run starts a new allocation log; a resumed one trims it in `_load_optimizer_and_scheduler`.
        if self._round_log is not None and not resume_from_checkpoint:
            shared_call(self._round_log.start, self.accelerator)
        if resume_from_checkpoint is True:  # the latest complete checkpoint, not the highest-numbered folder
            resume_from_checkpoint = latest_complete_checkpoint(self.args.output_dir, warn=logger.warning)
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.accelerator.num_processes > 1:
            self.accelerator.wait_for_everyone()  # every process is done with the run's collectives (docs/training.md)
        return output

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's card, completed with a real title and usage example and the CoBA settings (`coba_trl.model_card`).

        `push_to_hub` calls this too, so a pushed card is always complete; `complete_model_card` can add results later.
        """
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        complete_model_card(self, dataset_name=dataset_name)

    def _set_signature_columns_if_needed(self):
        # Keep the prompt-id and prior columns when `remove_unused_columns=True`.
        super()._set_signature_columns_if_needed()
        self._signature_columns += [c for c in self._coba_columns if c not in self._signature_columns]

    def _get_train_sampler(self, dataset=None):
        # Distinct prompts per round, padded per process, each round repeated steps_per_generation * num_iterations
        # times like TRL's sampler, in an order computed from (seed, epoch) so a resume sees it too; None for a stream.
        return self._rounds.sampler

    @property
    def _generate_every(self) -> int:
        """Micro-steps per round: TRL generates once every steps_per_generation * num_iterations."""
        return self.args.steps_per_generation * self.num_iterations

    def get_train_dataloader(self):
        # Each process loads its share of the round's distinct prompts (padded when P does not divide M). A round
        # drawn from the cursor reads the same table the dataloader loads (unused columns removed as it removes them).
        if self._draws_prompts and isinstance(self._rounds.dataset, Dataset) and self.args.remove_unused_columns:
            self._rounds.use_rows(self._remove_unused_columns(self._rounds.dataset, description="Training"))
        return self._get_dataloader(
            dataset=self._rounds.dataset,
            description="Training",
            batch_size=self._rounds.layout.per_process,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL returns the rewards gathered from all processes (N_global, num_funcs); keep them for the group advantages.
        self._captured_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._captured_rewards

    def _generate_and_score_completions(self, inputs):
        """One generation round: draw, screen (two phases), plan, generate, score, refill, observe (`coba_trl.rounds`)."""
        if not self.model.training:  # evaluation stays on TRL's fixed-group path
            return super()._generate_and_score_completions(inputs)
        args, skipped = self.args, []
        if self._draws_prompts:  # every process draws the round's prompts from the source's cursor alike
            prompts, prompt_ids, first = self._rounds.draw(self._prompts_per_round, self._skip)
            skipped = [first]  # the prompts skipped while drawing each batch
        else:
            prompts = gather_object(inputs)[: self._prompts_per_round]  # gathered in sampler order: drop the padding
            prompt_ids = self._rounds.prompt_ids(self._step, self.accelerator.process_index, inputs, prompts)
        batches = [self._generate_batch(prompts, prompt_ids, args.generation_batch_size)]
        self._current_round = encode_round(prompt_ids, batches[0].plan.group_sizes, batches[0].plan.pass_rates)
        refill = args.zero_variance_groups == "refill"
        while refill and len(batches) <= args.max_refill_phases:  # replace the groups without spread
            missing = args.generation_batch_size - sum(rows_with_spread(batch) for batch in batches)
            if missing <= 0:
                break
            screen_rows = args.min_generations if args.two_phase_rounds else 0
            count = replacement_count(missing, self.num_generations, self.accelerator.num_processes, screen_rows)
            prompts, prompt_ids, more = self._rounds.draw(count, self._skip)
            skipped.append(more)
            batches.append(self._generate_batch(prompts, prompt_ids, count * self.num_generations))
        if self.use_vllm:
            self.vllm_generation.sleep()  # the round is done generating (sleep mode; a no-op otherwise)
        plan, scored, phases = combined(batches)
        chosen = None
        if refill:  # the rows with spread, dealt evenly over the processes
            chosen = choose_rows(batches, self.accelerator.num_processes, args.generation_batch_size)
            gathered = gather_round(batches, self._tokenizer.pad_token_id, self.accelerator)
            batch = deal_chosen_rows(gathered, chosen, self.accelerator.process_index, self.accelerator.num_processes)
            scored = replace(scored, batch=batch, dropped_groups=int(scored.zero_spread.sum().item()))
        metrics, logged = self._metrics["train"], self._logs["advantages"]
        log_round(metrics, logged, plan, scored, phases, self.reward_weights, self.reward_func_names)
        spent = spending_metrics(plan, scored, args.zero_variance_groups, chosen, len(batches) - 1)
        self.rollouts_generated += int(spent["coba/rollouts_generated"])
        if self._draws_prompts:
            spent["coba/prompts_skipped"] = float(sum(len(batch) for batch in skipped))
        if self._skipper is not None:
            spent.update({f"coba/skip_p_{kind}": p for kind, p in self._skipper.probability.items()})
        for key, value in spent.items():
            metrics[key].append(value)
        name = ", ".join(self.reward_func_names[index] for index in self._success_indices)
        warnings = {  # each checked every round, and given once: in the first round it applies to
            "signal": lambda: success_signal_warning(phases, Scoring.of(self), name, args.success_reward_func),
            "unscored": lambda: unscored_groups_warning(scored, plan.prompt_ids, name, args.success_reward_func),
        }
        for kind, warning in warnings.items():
            if kind not in self._warned and (message := warning()) is not None:
                logger.warning(message)
                self._warned.add(kind)
        if plan.observe:
            observe_round(self.pass_rate_history, self.allocator, plan, scored)
            if self._skipper is not None:  # tuned from the second epoch on, as GRESO does
                flat = scored.zero_spread.cpu().numpy()
                tune = self._rounds.cursor[0] > 0
                self._skipper.observe_round(plan.prompt_ids, flat, scored.successes, scored.scored, tune)
            if self._round_log is not None:
                record = round_record(batches, args.group_weighting, skipped, chosen, self._draws_prompts)
                record = {"micro_step": self._step, "global_step": self.state.global_step, **record}
                shared_call(lambda: self._round_log.write(record), self.accelerator)
        return scored.batch

    def _generate_batch(self, prompts: list[dict], prompt_ids: list, budget: int) -> GenerationBatch:
        """A batch of the round: screen (two phases), plan `budget` completions, generate and score them."""
        phases, screening = [], None
        more_may_follow = self.args.zero_variance_groups == "refill"  # a refill batch may follow: vLLM stays awake
        if self.args.two_phase_rounds:  # phase 1: min_generations completions for every prompt
            screen_sizes = np.full(len(prompts), self.args.min_generations)
            phases.append(self._generate_phase(prompts, screen_sizes, None, stay_awake=True))
            screening = screen_round(phases[0], Scoring.of(self), len(prompts), self.args.min_generations)
        plan = self._plan_round(prompts, prompt_ids, screening, budget)
        if plan.remaining.sum() > 0:
            phases.append(self._generate_phase(prompts, plan.remaining, plan.pass_rates, stay_awake=more_may_follow))
        scored = score_round(
            plan,
            phases,
            Scoring.of(self),
            rank=self.accelerator.process_index,
            num_processes=self.accelerator.num_processes,
            gather_sum=lambda n: self.accelerator.gather(n).sum(),
        )
        return GenerationBatch(plan, phases, scored)

    def _plan_round(
        self, prompts: list[dict], prompt_ids: list, screening: Screening | None = None, budget: int | None = None
    ) -> RoundPlan:
        """The plan of a batch of `budget` completions (default: the round's): a resumed round's saved one, else
        process 0's allocation, shared with every process."""
        budget = self.args.generation_batch_size if budget is None else budget
        plan, self._replay_round = replayed_plan(self._replay_round, prompt_ids, screening), None
        if plan is None:
            plan = shared_call(lambda: self._allocate(prompts, prompt_ids, screening, budget), self.accelerator)
        check_plan(plan, type(self.allocator).__name__, len(prompts), budget)
        return plan

    def _allocate(self, prompts: list[dict], prompt_ids: list, screening: Screening | None, budget: int) -> RoundPlan:
        """Process 0: the allocator's plan from the pass-rate history, the prompts' priors and the screening."""
        prior = prior_pass_rates(prompts, self.args.prior_pass_rate_column)
        rescue = self.args.zero_variance_groups == "rescue"
        cap = self.args.max_generations
        return plan_round(prompt_ids, self.allocator, self.pass_rate_history, budget, cap, prior, screening, rescue)

    def _generate_phase(
        self, prompts: list[dict], group_sizes: np.ndarray, pass_rates: np.ndarray | None, stay_awake: bool = False
    ) -> Phase:
        """Deal the rows of `group_sizes` over the processes and run TRL's generation and scoring on this one's.

        `stay_awake`: another phase of this round follows, so a sleeping vLLM engine stays awake after generating.
        """
        weights = None if pass_rates is None else expected_length_weight(pass_rates)
        dealt = deal_groups(group_sizes, self.accelerator.num_processes, weights)
        local_rows = expand_rows(prompts, dealt[self.accelerator.process_index])
        self._captured_rewards = None  # set again by this call's `_calculate_rewards`, never carried over
        mean_group_size = self.num_generations
        self.num_generations = 1  # one completion per expanded row, in every generation backend
        if self.use_vllm:
            self.vllm_generation.stay_awake = stay_awake
        self.rollout_groups = RolloutGroups(
            dealt[self.accelerator.process_index].tolist(), group_sizes.tolist(), inputs=local_rows
        )
        try:
            output = super()._generate_and_score_completions(local_rows)
        finally:
            self.num_generations = mean_group_size
            self.rollout_groups = None
            if self.use_vllm:
                self.vllm_generation.stay_awake = False
        rewards, group_ids = self._captured_rewards, np.concatenate(dealt)
        check_phase_rewards(rewards, len(group_ids), len(self.reward_funcs))
        return Phase(output, rewards, group_ids)

    def _tool_call_loop(self, *args, **kwargs):
        # A process whose rows stop calling tools leaves TRL's loop while others still generate: with a vLLM server
        # (a collective) it joins their generations with no rows until all are done (coba_trl.generation.row_shares).
        output = super()._tool_call_loop(*args, **kwargs)
        if self.use_vllm and self.vllm_mode == "server":
            self.vllm_generation.join_until_done()
        return output

    def _save_checkpoint(self, model, trial):
        # Written before TRL's save, which may start an asynchronous Hub upload of the folder (push_to_hub).
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        state = {
            "allocator": self.allocator.state_dict(),
            "pass_rate_history": self.pass_rate_history.state_dict(),
            "micro_step": self._step,
            "round": self._current_round,
            "rollouts_generated": self.rollouts_generated,
        }
        if self._draws_prompts:
            state["cursor"] = self._rounds.cursor_state()
        if self._skipper is not None:
            state["skipper"] = self._skipper.state_dict()
        shared_call(lambda: start_checkpoint(folder, state), self.accelerator, run_here=self.args.should_save)
        if self._step % self._generate_every and self._buffered_inputs is not None:
            # Inside a round: this process's rows not yet trained, which the resumed run trains on.
            save_buffered_rows(folder, self.accelerator.process_index, self._buffered_inputs)
        super()._save_checkpoint(model, trial)
        self.accelerator.wait_for_everyone()  # every process's files are written before the marker that says so
        shared_call(lambda: write_complete_marker(folder), self.accelerator, run_here=self.args.should_save)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        state = load_state(checkpoint)
        if state is not None:
            self.allocator.load_state_dict(state["allocator"])
            self.pass_rate_history.load_state_dict(state["pass_rate_history"])
            self.rollouts_generated = int(state.get("rollouts_generated", 0))
            if self._draws_prompts and "cursor" in state:
                self._rounds.load_cursor_state(state["cursor"])
            if self._skipper is not None and "skipper" in state:
                self._skipper.load_state_dict(state["skipper"])
        else:
            logger.warning(
                f"{os.path.join(checkpoint, STATE_FILE)} not found: resuming with an empty pass-rate history and "
                "capability estimate."
            )
        if state is None or "micro_step" not in state:
            # No saved micro-step (no CoBA state, or one from coba-trl 0.1): continue from where the Trainer's
            # fast-forward puts the dataloader, so the round sampler's schedule still names the prompts it loads.
            self._step = self._rounds.fast_forward_micro_step(
                self.state.global_step, self.args.gradient_accumulation_steps
            )
            logger.warning(f"{checkpoint} has no saved micro-step: a round interrupted by it is allocated afresh.")
        else:
            # TRL does not checkpoint its micro-step counter; restoring it keeps every later round where it was.
            self._step = state["micro_step"]
            if self._step % self._generate_every:  # saved inside a round: train its saved rows, else regenerate it
                rows = load_buffered_rows(checkpoint, self.accelerator.process_index, self.accelerator.num_processes)
                if rows is not None:
                    self._buffered_inputs = [
                        {
                            key: value.to(self.accelerator.device) if torch.is_tensor(value) else value
                            for key, value in batch.items()
                        }
                        for batch in rows
                    ]
                elif self._draws_prompts:  # its refills and skips depended on its samples: not regenerable
                    logger.warning(
                        f"{checkpoint} was saved inside a round without this run's saved rows of it (another number "
                        "of processes?): the resumed run goes on with the next prompts of the epoch."
                    )
                elif state["round"] is not None:
                    self._replay_round = state["round"]
        # The allocation log keeps the rounds that started before the checkpoint.
        if self._round_log is not None:
            shared_call(lambda: self._round_log.start(resume_micro_step=self._step), self.accelerator)
