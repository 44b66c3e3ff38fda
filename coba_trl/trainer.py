"""`CoBAGRPOTrainer`: TRL's GRPOTrainer with a per-prompt number of generations (CoBA-RL, arXiv 2602.03048).

Glue around TRL's own methods, never a copy of them (docs/training.md, "How a round runs"):
1. the round source (`coba_trl.rounds.source`: a sampler for a dataset, a reshaped stream) yields each round's
   M = `generation_batch_size / num_generations` *distinct* prompts, each process loading ceil(M / P) of them;
2. `_generate_and_score_completions` hands the round to the round runner (`coba_trl.rounds.runner`), which draws,
   plans, generates, scores, refills, chooses the rows for the loss and records the round; it calls back into the
   trainer only through `_generate_rows`, which runs TRL's own generation and scoring with `num_generations = 1`, so
   every backend (transformers, vLLM colocate, vLLM server) makes one completion per row, and `_calculate_rewards`
   keeps the rewards TRL gathered for the advantages over variable-size groups;
3. checkpoints carry the runner's state, TRL's micro-step counter and the round in progress (`coba_trl.checkpoint`),
   so a run resumed from any checkpoint makes the allocations of the run it continues.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
from accelerate.logging import get_logger
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from coba_trl import checkpoint
from coba_trl.compat import check_trl_compatibility
from coba_trl.config import CoBAConfig
from coba_trl.generation.vllm_backend import built_by_trl, check_vllm_installed
from coba_trl.model_card import PAPER, complete_model_card
from coba_trl.rounds.resume import batch_layout, rows_to_save
from coba_trl.rounds.rollouts import RolloutGroups, grouped_rollout
from coba_trl.rounds.runner import RoundRunner
from coba_trl.rounds.scoring import Phase, Scoring
from coba_trl.rounds.source import RoundLayout, round_source
from coba_trl.validation import check_construction, check_context_length, check_success_reward, checked_reward_funcs

check_trl_compatibility()

logger = get_logger(__name__)

STATE_FILE = checkpoint.STATE_FILE
__all__ = ["STATE_FILE", "CoBAGRPOTrainer", "Phase"]


class CoBAGRPOTrainer(GRPOTrainer):
    """
    [`~trl.GRPOTrainer`] whose prompts get different numbers of completions, chosen each generation round by CoBA-RL
    (capability-oriented budget allocation, arXiv 2602.03048), Knapsack-RL or a uniform split (plain GRPO).

    Takes the same arguments as [`~trl.GRPOTrainer`], with `args` a [`CoBAConfig`]; `train_dataset` is a
    [`~datasets.Dataset`], or an [`~datasets.IterableDataset`] with `prompt_id_column` set. `environment_factory` and
    `tools` run TRL's tool loop on every row, and a `rollout_func` written for GRPOTrainer works unchanged
    (`coba_trl.rounds.rollouts`; docs/setups.md). The allocator and the pass-rate history are public
    (`trainer.allocator`, `trainer.pass_rate_history`) and saved in every checkpoint; `trainer.rollout_groups` tells a
    custom rollout which group each of its rows is in, while one is generated. `trainer.reward_funcs` holds each
    synchronous reward function wrapped in a check of what it returns (`coba_trl.validation.rewards.CheckedReward`); the
    function passed is its `__wrapped__`.

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
        columns = (args.prompt_id_column, args.prior_pass_rate_column, args.pass_rate_neighbour_column)
        self._coba_columns = list(dict.fromkeys(c for c in columns if c is not None))
        with built_by_trl() if args.use_vllm else nullcontext():  # TRL builds coba-trl's vLLM backend (generation/)
            super().__init__(model, checked_reward_funcs(reward_funcs), args, train_dataset, **kwargs)
        check_context_length(self.model, self.processing_class, train_dataset, args)
        # GRPOConfig makes generation_batch_size a multiple of the processes and of steps_per_generation.
        layout = RoundLayout(
            args.prompts_per_round,
            self.accelerator.num_processes,
            self._generate_every,
            self.shuffle_dataset,
            args.seed,
            args.prompt_id_column,
        )
        if self.rollout_func is not None:  # called once per group size, as GRPOTrainer calls it (coba_trl.rounds)
            self.rollout_func = grouped_rollout(self.rollout_func)
        self.rollout_groups: RolloutGroups | None = None  # the generation phase in progress (docs/setups.md)
        self._success_indices = check_success_reward(args.success_reward_func, self.reward_func_names)
        source = round_source(train_dataset, layout)  # where each round's prompts come from
        self.round_runner = RoundRunner(args, source, self.accelerator, self.reward_func_names, self._success_indices)
        self._captured_rewards = None  # the rewards TRL gathered in the latest generation call

    @property
    def allocator(self):
        """The budget allocator (saved in every checkpoint); any object with its interface may replace it."""
        return self.round_runner.allocator

    @allocator.setter
    def allocator(self, allocator) -> None:
        self.round_runner.allocator = allocator

    @property
    def pass_rate_history(self):
        """The pass-rate history p_i (saved in every checkpoint)."""
        return self.round_runner.history

    @pass_rate_history.setter
    def pass_rate_history(self, history) -> None:
        self.round_runner.history = history

    @property
    def rollouts_generated(self) -> int:
        """Completions generated in the run so far, every phase and process (saved in every checkpoint)."""
        return self.round_runner.spending.generated

    @property
    def _generate_every(self) -> int:
        """Micro-steps per round: TRL generates once every steps_per_generation * num_iterations."""
        return self.args.steps_per_generation * self.num_iterations

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if not resume_from_checkpoint:  # a fresh run starts a new allocation log; a resumed one trims it on load
            self.round_runner.start_log()
        if resume_from_checkpoint is True:  # the latest complete checkpoint, not the highest-numbered folder
            resume_from_checkpoint = checkpoint.latest_complete_checkpoint(self.args.output_dir, warn=logger.warning)
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.accelerator.num_processes > 1:
            self.accelerator.wait_for_everyone()  # every process is done with the run's collectives (docs/training.md)
        self.accelerator.print(self.round_runner.spending.summary_line())
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
        return self.round_runner.source.sampler

    def get_train_dataloader(self):
        # Each process loads its share of the round's distinct prompts (padded when P does not divide M); prompts a
        # round draws from the source's cursor have the columns the dataloader's rows have.
        source = self.round_runner.source
        if self.args.remove_unused_columns:
            self._set_signature_columns_if_needed()
            source.keep_columns(self._signature_columns)
        return self._get_dataloader(
            dataset=source.dataset,
            description="Training",
            batch_size=source.layout.per_process,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL returns the rewards gathered from all processes (N_global, num_funcs); keep them for the group advantages.
        self._captured_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._captured_rewards

    def _generate_and_score_completions(self, inputs):
        """One generation round, run by the round runner (`coba_trl.rounds.runner`); evaluation stays on TRL's path."""
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        batch = self.round_runner.run(
            inputs,
            self._step,
            self.state.global_step,
            Scoring.of(self),
            self._generate_rows,
            self._metrics["train"],
            self._logs["advantages"],
        )
        if self.use_vllm:
            self.vllm_generation.sleep()  # the round is done generating (sleep mode; a no-op otherwise)
        return batch

    def _generate_rows(self, rows: list[dict], groups: RolloutGroups, stay_awake: bool):
        """TRL's generation and scoring of this process's `rows`, one completion each (`GenerateRows`).

        `stay_awake`: another phase of this round follows, so a sleeping vLLM engine stays awake after generating.
        """
        self._captured_rewards = None  # set again by this call's `_calculate_rewards`, never carried over
        mean_group_size = self.num_generations
        self.num_generations = 1  # one completion per expanded row, in every generation backend
        if self.use_vllm:
            self.vllm_generation.stay_awake = stay_awake
        self.rollout_groups = groups
        try:
            output = super()._generate_and_score_completions(rows)
        finally:
            self.num_generations = mean_group_size
            self.rollout_groups = None
            if self.use_vllm:
                self.vllm_generation.stay_awake = False
        return output, self._captured_rewards

    def _tool_call_loop(self, *args, **kwargs):
        # A process whose rows stop calling tools leaves TRL's loop while others still generate: with a vLLM server
        # (a collective) it joins their generations with no rows until all are done (coba_trl.generation.row_shares).
        output = super()._tool_call_loop(*args, **kwargs)
        if self.use_vllm and self.vllm_mode == "server":
            self.vllm_generation.join_until_done()
        return output

    def _save_checkpoint(self, model, trial):
        # The CoBA state is written before TRL's save, which may start an asynchronous Hub upload of the folder.
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        state = {
            **self.round_runner.state_dict(),
            "micro_step": self._step,
            "layout": batch_layout(self.args, self.accelerator.num_processes),
        }
        rows = rows_to_save(self._step, self._generate_every, self._buffered_inputs)  # the round's untrained rows
        with checkpoint.saving(folder, state, rows, self.accelerator, self.args, self.state):
            super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, resume_from):
        super()._load_optimizer_and_scheduler(resume_from)
        if resume_from is None:
            return
        state = checkpoint.load_state(resume_from)
        ranks = checkpoint.saved_row_ranks(resume_from)
        layout = batch_layout(self.args, self.accelerator.num_processes)
        point = self.round_runner.resume(resume_from, state, ranks, layout, self.state.global_step)
        self._step = point.micro_step  # TRL does not checkpoint its micro-step counter: later rounds stay in place
        if point.train_saved_rows:  # saved inside a round: its rows not yet trained are trained, not generated again
            rows = checkpoint.load_buffered_rows(resume_from, self.accelerator.process_index)
            device = self.accelerator.device
            self._buffered_inputs = [
                {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()} for b in rows
            ]
