"""`CoBAGRPOTrainer`: TRL's GRPOTrainer with a per-prompt number of generations (CoBA-RL, arXiv 2602.03048).

The trainer is glue around TRL's own methods (trl-seams.md, "A seam strategy that works"); it never copies them:
1. the sampler (`coba_trl.sampling`) yields each round's M = `generation_batch_size / num_generations` *distinct*
   prompts, in an order fixed by the seed and the epoch, each process loading ceil(M / P) of them;
2. `_generate_and_score_completions` gathers them, lets the allocator on process 0 choose a group size per prompt,
   broadcasts it, expands every prompt into its group of rows and deals the rows evenly over the processes
   (`coba_trl.grouping`), then runs TRL's method with `num_generations = 1`, so every backend (transformers,
   vLLM colocate, vLLM server) makes one completion per row;
3. the rewards TRL gathers are captured in `_calculate_rewards`, the advantages are recomputed per variable-size
   group (`coba_trl.advantages`), and the pass-rate history p_i and the capability F_t are updated (algorithm.md 2-3).
Checkpoints carry the allocator, the history, TRL's micro-step counter and the round in progress (`coba_trl.checkpoint`),
so a run resumed from any checkpoint makes the allocations of the run it continues.
"""

from __future__ import annotations

import atexit
import copy
import math
import os
import textwrap
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate.logging import get_logger
from accelerate.utils import broadcast_object_list, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from coba_trl.advantages import group_advantages, prompt_weights, segment_nanmean, zero_spread_groups
from coba_trl.allocation import fill_to_budget
from coba_trl.checkpoint import STATE_FILE, decode_round, encode_round, load_state, save_state
from coba_trl.compat import check_trl_compatibility
from coba_trl.config import CoBAConfig
from coba_trl.grouping import deal_groups, expected_length_weight
from coba_trl.model_card import complete_model_card
from coba_trl.phases import all_equal_groups, drop_rows, merge_phase_outputs, rescue_counts
from coba_trl.round_log import RoundLog, finite, plain
from coba_trl.sampling import RoundSampler
from coba_trl.telemetry import budget_metrics
from coba_trl.validation import (
    check_context_length,
    check_dataset,
    check_features,
    check_generation_kwargs,
    check_reward_columns,
    check_round_layout,
    check_success_reward,
    check_two_phase_layout,
)

check_trl_compatibility()

logger = get_logger(__name__)


def destroy_process_group_at_exit() -> None:
    """Tear torch.distributed down at exit, and give gloo's worker threads the GIL one last time.

    `destroy_process_group()` does not stop gloo's worker threads: the group object lives on while the trainer's DDP
    wrapper holds it, until the interpreter's final garbage collection. When a collective has just finished, its
    worker thread still has to take the GIL to release the collective's tensors; if the interpreter is finalizing by
    then, the thread is killed inside a C++ destructor and the process aborts ("terminate called without an active
    exception", SIGABRT; about one two-process CPU run in ten). `CoBAGRPOTrainer.train()` therefore ends with a barrier,
    whose own work holds no Python tensors; this hook covers collectives a script runs after `train()` by sleeping
    briefly, which leaves the GIL to such a thread. It must not collect the garbage itself: freeing the DDP wrapper
    destroys the group with the GIL held and deadlocks against a worker thread that waits for it.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    time.sleep(0.1)


__all__ = ["STATE_FILE", "CoBAGRPOTrainer", "Phase", "RoundPlan"]


@dataclass
class RoundPlan:
    """One generation round: its distinct prompts and their (final) group sizes."""

    prompt_ids: list
    group_sizes: np.ndarray
    pass_rates: np.ndarray  # the estimates the allocation used (NaN = unseen)
    observe: bool  # False when a resumed run regenerates a round its checkpoint had already observed


@dataclass
class Phase:
    """One generation pass of a round (two with `two_phase_rounds`)."""

    output: dict  # TRL's batch for this process's rows
    rewards: torch.Tensor  # gathered from all processes, (rows, reward functions)
    group_ids: np.ndarray  # group of each gathered row, in the order TRL gathers rows (process 0's rows first)
    local_rows: int  # rows each process holds


class CoBAGRPOTrainer(GRPOTrainer):
    """
    [`~trl.GRPOTrainer`] whose prompts get different numbers of completions, chosen each generation round by CoBA-RL
    (capability-oriented budget allocation, arXiv 2602.03048), Knapsack-RL or a uniform split (plain GRPO).

    Takes the same arguments as [`~trl.GRPOTrainer`], with `args` a [`CoBAConfig`]; `train_dataset` must be a
    map-style [`~datasets.Dataset`]. `rollout_func` and `environment_factory` are not supported. The allocator and the
    pass-rate history are public (`trainer.allocator`, `trainer.pass_rate_history`) and saved in every checkpoint.

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
    _paper = {
        "title": "CoBA-RL: Capability-Oriented Budget Allocation for Reinforcement Learning in LLMs",
        "id": "2602.03048",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{yao2026cobarl,
                title        = {{CoBA-RL: Capability-Oriented Budget Allocation for Reinforcement Learning in LLMs}},
                author       = {Zhiyuan Yao and Yi-Kai Zhang and Yuxin Chen and Yueqing Sun and Zishan Xu and Yu Yang and Tianhao Hu and Qi Gu and Hui Su and Xunliang Cai},
                year         = 2026,
                eprint       = {arXiv:2602.03048},
            }"""),
    }

    def __init__(self, model, reward_funcs=None, args: CoBAConfig | None = None, train_dataset=None, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "") or "model"
            args = CoBAConfig(f"{name.split('/')[-1]}-CoBA")
        if not isinstance(args, CoBAConfig):
            raise ValueError(
                f"args must be a CoBAConfig, got {type(args).__name__}. Build it with "
                "`CoBAConfig(**your_grpo_config.to_dict())` or pass the CoBA fields to CoBAConfig directly."
            )
        check_features(kwargs.get("rollout_func"), kwargs.get("environment_factory"))
        check_dataset(train_dataset, args.prompt_id_column, args.prior_pass_rate_column)
        check_reward_columns(reward_funcs, train_dataset.column_names)
        check_generation_kwargs(args.generation_kwargs, args.use_vllm)
        self._prompts_per_round = check_round_layout(
            args.generation_batch_size, args.num_generations, args.world_size, args.steps_per_generation
        )
        if args.two_phase_rounds:
            check_two_phase_layout(self._prompts_per_round, args.min_generations, args.world_size)
        self._coba_columns = [c for c in (args.prompt_id_column, args.prior_pass_rate_column) if c is not None]
        super().__init__(model, reward_funcs, args, train_dataset, **kwargs)
        check_context_length(self.model, self.processing_class, train_dataset, args)
        if self.accelerator.num_processes > 1:
            atexit.unregister(destroy_process_group_at_exit)  # registered once per process, however many trainers
            atexit.register(destroy_process_group_at_exit)
        self._success_index = check_success_reward(args.success_reward_func, self.reward_func_names)
        self.allocator = args.build_allocator()
        self.pass_rate_history = args.build_pass_rate_history()
        self._captured_rewards = None
        self._round_sampler: RoundSampler | None = None
        self._prompt_texts = None  # the train set's prompt column, to check rows against the sampler's schedule
        self._current_round: dict | None = None  # the round in progress, saved with every checkpoint
        self._replay_round: dict | None = None  # the round a resumed checkpoint was saved inside of
        self._round_log = RoundLog(args.output_dir) if args.log_allocations else None
        self._round_record: dict | None = None  # process 0: the round being generated, written once it is scored

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        # A fresh run starts a new allocation log; a resumed one trims it in `_load_optimizer_and_scheduler`.
        if self._round_log is not None and not resume_from_checkpoint and self.is_world_process_zero():
            self._round_log.start()
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.accelerator.num_processes > 1:
            # The last collective of `train()` (transformers' `store_flos` all-gather) finishes on a gloo worker thread
            # that still needs the GIL to release its tensors; the barrier's enqueue waits for that thread with the GIL
            # released, so no such thread is pending when a short script exits (see `destroy_process_group_at_exit`).
            self.accelerator.wait_for_everyone()
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
        # Distinct prompts per round, padded per process; each round repeated steps_per_generation * num_iterations
        # times like TRL's sampler, but with the epoch's order computed from (seed, epoch) so a resume sees it too.
        self._round_sampler = RoundSampler(
            num_samples=len(self.train_dataset if dataset is None else dataset),
            prompts_per_round=self._prompts_per_round,
            num_processes=self.accelerator.num_processes,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )
        return self._round_sampler

    def get_train_dataloader(self):
        # Each process loads its share of the round's distinct prompts (padded when P does not divide M).
        return self._get_dataloader(
            dataset=self.train_dataset,
            description="Training",
            batch_size=math.ceil(self._prompts_per_round / self.accelerator.num_processes),
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL returns the rewards gathered from all processes (N_global, num_funcs); keep them for the group advantages.
        self._captured_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._captured_rewards

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation stays on TRL's fixed-group path
            return super()._generate_and_score_completions(inputs)
        prompts = gather_object(inputs)[: self._prompts_per_round]  # gathered in sampler order: drop the padding
        prompt_ids = self._round_prompt_ids(inputs, prompts)
        replay = self._take_replay_round(prompt_ids)
        if not self.args.two_phase_rounds:
            plan = self._plan_round(prompts, prompt_ids, replay)
            return self._finish_round(plan, [self._generate_phase(prompts, plan.group_sizes, plan.pass_rates)])
        # Two phases: screen every prompt with min_generations completions, then allocate the whole round from the
        # fresh results (the screening rows count towards each group) and generate the rest.
        floor = self.args.min_generations
        screening = self._generate_phase(prompts, np.full(len(prompts), floor), None)
        screened = self._group_successes(screening.rewards, screening.group_ids, len(prompts))
        plan = self._plan_round(prompts, prompt_ids, replay, screened)
        phases = [screening]
        if plan.group_sizes.sum() > floor * len(prompts):
            phases.append(self._generate_phase(prompts, plan.group_sizes - floor, plan.pass_rates))
        return self._finish_round(plan, phases, screened)

    def _plan_round(self, prompts: list[dict], prompt_ids: list, replay=None, screened=None) -> RoundPlan:
        """The round's group sizes: a resumed round's saved plan, else the allocator's on process 0, broadcast."""
        if replay is not None:
            group_sizes, pass_rates = replay
            metrics = budget_metrics(group_sizes, pass_rates)
        else:
            payload = [self._allocate(prompts, prompt_ids, screened) if self.accelerator.is_main_process else None]
            broadcast_object_list(payload, from_process=0)
            group_sizes, pass_rates, metrics = payload[0]
        total = self.args.generation_batch_size
        floor = self.args.min_generations if self.args.two_phase_rounds else 1
        if group_sizes.shape != (len(prompts),) or group_sizes.sum() != total or group_sizes.min() < floor:
            raise ValueError(  # checked on every process, after the broadcast, so all of them stop
                f"The allocator {type(self.allocator).__name__} returned group sizes {group_sizes.tolist()}; expected "
                f"{len(prompts)} sizes >= {floor} summing to generation_batch_size ({total})."
            )
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        self._current_round = encode_round(prompt_ids, group_sizes, pass_rates)
        return RoundPlan(prompt_ids, group_sizes, pass_rates, observe=replay is None)

    def _generate_phase(self, prompts: list[dict], group_sizes: np.ndarray, pass_rates: np.ndarray | None) -> Phase:
        """Deal the rows of `group_sizes` over the processes and run TRL's generation and scoring on this one's."""
        weights = None if pass_rates is None else expected_length_weight(pass_rates)
        dealt = deal_groups(group_sizes, self.accelerator.num_processes, weights)
        local_rows = [dict(prompts[group]) for group in dealt[self.accelerator.process_index]]
        self._captured_rewards = None  # set again by this call's `_calculate_rewards`, never carried over
        mean_group_size = self.num_generations
        self.num_generations = 1  # one completion per expanded row, in every generation backend
        try:
            output = super()._generate_and_score_completions(local_rows)
        finally:
            self.num_generations = mean_group_size
        rewards, group_ids = self._captured_rewards, np.concatenate(dealt)
        expected = (len(group_ids), len(self.reward_funcs))
        if rewards is None or tuple(rewards.shape) != expected:
            found = None if rewards is None else tuple(rewards.shape)
            raise RuntimeError(
                f"The round's gathered rewards have shape {found}, but its plan has {expected[0]} completions for "
                f"{expected[1]} reward function(s). TRL's reward path no longer matches what CoBAGRPOTrainer "
                "expects; install a tested TRL version (see coba_trl.compat)."
            )
        return Phase(output, rewards, group_ids, len(local_rows))

    def _finish_round(self, plan: RoundPlan, phases: list[Phase], screened: np.ndarray | None = None) -> dict:
        """Advantages over each whole group (all phases), zero-variance handling, metrics and the observation."""
        rewards = torch.cat([phase.rewards for phase in phases])
        group_ids = torch.as_tensor(np.concatenate([phase.group_ids for phase in phases]), device=rewards.device)
        num_groups = len(plan.group_sizes)
        advantages = group_advantages(
            rewards, group_ids, num_groups, self.reward_weights, self.scale_rewards, self.multi_objective_aggregation
        )
        if self.args.group_weighting == "prompt":  # every prompt's rows together weigh one mean-size group
            weights = prompt_weights(plan.group_sizes, self.args.generation_batch_size / num_groups, rewards.device)
            advantages = advantages * weights[group_ids]
            self._metrics["train"]["coba/group_weight_min"].append(weights.min().item())
            self._metrics["train"]["coba/group_weight_max"].append(weights.max().item())
        rank, offset, local = self.accelerator.process_index, 0, []
        for phase in phases:  # this process's rows: its slice of each phase's gathered rows
            start = offset + rank * phase.local_rows
            local.append(torch.arange(start, start + phase.local_rows, device=rewards.device))
            offset += len(phase.group_ids)
        local = torch.cat(local)
        if len(phases) == 1:
            output = phases[0].output
        else:
            output = merge_phase_outputs([phase.output for phase in phases], self._tokenizer.pad_token_id)
        output["advantages"] = advantages[local]
        zero_spread = zero_spread_groups(rewards, group_ids, num_groups, self.reward_weights)
        metrics = self._metrics["train"]
        if self.args.zero_variance_groups == "drop":
            dropped = drop_rows(output, zero_spread[group_ids[local]], lambda n: self.accelerator.gather(n).sum())
            metrics["coba/dropped_groups"].append(zero_spread.sum().item())
            metrics["coba/dropped_tokens"].append(float(dropped))
        if self.args.zero_variance_groups == "rescue":
            was_equal = torch.as_tensor(all_equal_groups(screened, self.args.min_generations), device=rewards.device)
            metrics["coba/rescued_with_spread"].append((was_equal & ~zero_spread).sum().item())
        self._log_round(rewards, advantages, group_ids, num_groups, zero_spread, len(phases))
        if plan.observe:
            successes = self._observe_round(rewards, group_ids.cpu().numpy(), plan, screened)
            self._write_round_record(successes)
        return output

    def _round_prompt_ids(self, local_prompts: list[dict], prompts: list[dict]) -> list:
        """The round's prompt ids: the id column, else the dataset indices the sampler scheduled for this step."""
        if self.args.prompt_id_column is not None:
            return [row[self.args.prompt_id_column] for row in prompts]
        sampler = self._round_sampler
        indices = sampler.round_indices(*sampler.locate(self._step))
        # This process loaded positions [rank * b, (rank + 1) * b) of the padded round; check they are those rows.
        start = self.accelerator.process_index * sampler.per_process
        if self._prompt_texts is None:
            self._prompt_texts = self.train_dataset["prompt"]
        for position, row in enumerate(local_prompts, start=start):
            if self._prompt_texts[indices[position % len(indices)]] != row["prompt"]:
                raise RuntimeError(
                    f"At micro-step {self._step} the dataloader's prompts are not the ones the round sampler "
                    "scheduled, so dataset row indices cannot identify them (a resume with ignore_data_skip=True "
                    "does this). Set prompt_id_column to a column of stable prompt ids, or resume without "
                    "ignore_data_skip."
                )
        return indices

    def _take_replay_round(self, prompt_ids: list) -> tuple[np.ndarray, np.ndarray] | None:
        """The saved plan of the round a checkpoint was taken inside of, when this round is that round."""
        replay, self._replay_round = self._replay_round, None
        if replay is None:
            return None
        plan = decode_round(replay, prompt_ids)
        if plan is None:
            logger.warning(
                "The round in progress saved in the checkpoint has other prompts than the resumed round (was the "
                "dataset, the seed or the batch layout changed?): allocating the resumed round afresh.",
                main_process_only=True,
            )
        return plan

    def _allocate(self, prompts: list[dict], prompt_ids: list, screened: np.ndarray | None = None):
        """Group sizes for the round's prompts from their pass rates (history, else prior, else unseen).

        With two phases, `screened` holds each prompt's successes among its `min_generations` screening completions:
        they count as the prompt's latest appearance, so the estimate the allocator sees is fresh.
        """
        start = time.perf_counter()
        prior = None
        if self.args.prior_pass_rate_column is not None:
            column = self.args.prior_pass_rate_column
            prior = np.array([np.nan if row[column] is None else float(row[column]) for row in prompts])
        history = self.pass_rate_history
        if screened is not None:
            history = copy.deepcopy(history)
            history.update(prompt_ids, screened, np.full(len(prompt_ids), self.args.min_generations))
        pass_rates = history.pass_rates(prompt_ids, prior=prior)
        total = self.args.generation_batch_size
        allocated = np.asarray(self.allocator.allocate(pass_rates, total), dtype=np.int64)
        allocator_metrics = finite(self.allocator.metrics())
        group_sizes = allocated
        # The released CoBA fallback can strand a few units at B_up and reports them as `unallocated`; only those
        # are topped up, so an allocator that under-spends without saying so is still refused in `_plan_round`.
        stranded = int(allocator_metrics.get("unallocated", 0))
        if stranded:
            group_sizes = fill_to_budget(group_sizes, int(group_sizes.sum()) + stranded, self.args.max_generations)
        extra, rescued = {}, None
        if self.args.zero_variance_groups == "rescue":
            floor = self.args.min_generations
            rescued = all_equal_groups(screened, floor)
            group_sizes = rescue_counts(group_sizes, rescued, floor, self.args.max_generations, extra=floor)
            extra["coba/rescued_groups"] = float(rescued.sum())
        elapsed = time.perf_counter() - start
        metrics = {
            f"coba/{key}": value for key, value in allocator_metrics.items() if key not in ("budget_min", "budget_max")
        }  # budget min / max are logged with the mean below
        metrics.update(budget_metrics(group_sizes, pass_rates), **extra)
        metrics["coba/allocation_time"] = elapsed
        metrics["coba/prompts_with_history"] = float(len(self.pass_rate_history))
        self._round_record = {
            "micro_step": self._step,
            "global_step": self.state.global_step,
            "prompt_ids": list(prompt_ids),
            "prior_pass_rates": plain(prior),
            "screen_rollouts": None if screened is None else self.args.min_generations,
            "screen_successes": plain(screened),
            "pass_rates": plain(pass_rates),
            "allocator": allocator_metrics,
            "allocated": plain(allocated),
            "group_sizes": plain(group_sizes),
            "rescued": plain(rescued),
            "group_weighting": self.args.group_weighting,
        }
        return group_sizes, pass_rates, metrics

    def _log_round(self, rewards, advantages, group_ids, num_groups, zero_spread, num_phases):
        """Fix the stock metrics that saw groups of one (or two phases), and add prompt-weighted reward means.

        TRL's `reward` and `rewards/<name>/mean` average over completion rows, so under CoBA a prompt weighs as much as
        its group is large. `coba/reward_per_prompt` and `coba/rewards/<name>/mean_per_prompt` average each group's
        mean over prompts instead: the quantity GRPO's `reward` measures (all its groups are equal), for comparing curves.
        """
        metrics = self._metrics["train"]
        weighted = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        round_values = {"frac_reward_zero_std": zero_spread.float().mean().item()}
        if num_phases > 1:  # TRL logged each phase on its own: log the round as a whole instead
            round_values.update(reward=torch.nanmean(weighted).item(), reward_std=nanstd(weighted).item())
            for column, name in enumerate(self.reward_func_names):
                round_values[f"rewards/{name}/mean"] = torch.nanmean(rewards[:, column]).item()
                round_values[f"rewards/{name}/std"] = nanstd(rewards[:, column]).item()
        for key, value in round_values.items():
            del metrics[key][-num_phases:]
            metrics[key].append(value)
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        weighted[torch.isnan(rewards).all(dim=1)] = torch.nan  # TRL's `reward` above counts such rows as 0
        metrics["coba/reward_per_prompt"].append(
            torch.nanmean(segment_nanmean(weighted, group_ids, num_groups)).item()
        )
        for column, name in enumerate(self.reward_func_names):
            per_prompt = segment_nanmean(rewards[:, column], group_ids, num_groups)
            metrics[f"coba/rewards/{name}/mean_per_prompt"].append(torch.nanmean(per_prompt).item())

    def _group_successes(self, rewards: torch.Tensor, group_ids, num_groups: int) -> np.ndarray:
        """Successes per group: the success reward >= `success_threshold` (a NaN reward is a failure)."""
        scores = rewards[:, self._success_index].float().cpu().numpy()
        success = np.nan_to_num(scores, nan=-np.inf) >= self.args.success_threshold
        return np.bincount(np.asarray(group_ids), weights=success, minlength=num_groups).astype(np.int64)

    def _observe_round(self, rewards, group_ids: np.ndarray, plan: RoundPlan, screened=None) -> np.ndarray:
        """Update the pass-rate history and the capability estimate from the round's gathered correctness; returns
        the successes per group.

        Every process sees the same gathered rewards, so every process updates identically. A prompt listed twice in
        a round (duplicate rows) is one appearance with the summed counts. The history records each whole group. In a
        two-phase round the failure rate F_t comes from the screening alone (`screened`, `min_generations` per
        prompt): a group's size there depends on its own screening results, so whole-group rates are biased upwards
        (a prompt that went 2/2 stops at 1.0, one that went 0/2 gets more rows and regresses towards its true rate),
        and F_t would read the model as stronger than it is; the screening has the same size for every prompt.
        """
        successes = self._group_successes(rewards, group_ids, len(plan.group_sizes))
        self.pass_rate_history.update(plan.prompt_ids, successes, plan.group_sizes)
        observed, rollouts = successes, plan.group_sizes
        if screened is not None:
            observed, rollouts = screened, np.full(len(screened), self.args.min_generations)
        merged: dict = {}
        for prompt_id, wins, tries in zip(plan.prompt_ids, observed, rollouts, strict=True):
            previous = merged.get(prompt_id, (0, 0))
            merged[prompt_id] = (previous[0] + int(wins), previous[1] + int(tries))
        wins, tries = (np.array(column, dtype=np.int64) for column in zip(*merged.values(), strict=True))
        self.allocator.observe(wins / tries)
        return successes

    def _write_round_record(self, successes: np.ndarray) -> None:
        """Process 0: complete the round's allocation record with its successes and append it to the log."""
        record, self._round_record = self._round_record, None
        if self._round_log is not None and record is not None:
            self._round_log.write({**record, "successes": plain(successes)})

    def _coba_state(self) -> dict:
        return {
            "allocator": self.allocator.state_dict(),
            "pass_rate_history": self.pass_rate_history.state_dict(),
            "micro_step": self._step,
            "round": self._current_round,
        }

    def _save_checkpoint(self, model, trial):
        # Written before TRL's save, which may start an asynchronous Hub upload of the folder (push_to_hub).
        if self.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            save_state(os.path.join(self._get_output_dir(trial=trial), folder), self._coba_state())
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        state = load_state(checkpoint)
        if state is None:
            logger.warning(
                f"{os.path.join(checkpoint, STATE_FILE)} not found: resuming with an empty pass-rate history and "
                "capability estimate."
            )
            return
        self.allocator.load_state_dict(state["allocator"])
        self.pass_rate_history.load_state_dict(state["pass_rate_history"])
        if self._round_log is not None and self.is_world_process_zero():
            # Keep the rounds that started before the checkpoint (all of them for a checkpoint without a micro-step).
            self._round_log.start(resume_micro_step=state.get("micro_step", math.inf))
        if "micro_step" not in state:  # saved by coba-trl 0.1: round boundaries and the round in progress unknown
            logger.warning(f"{checkpoint} predates exact resume: a round interrupted by it is allocated afresh.")
            return
        # TRL does not checkpoint its micro-step counter; restoring it keeps every later round where it was.
        self._step = state["micro_step"]
        if self._step % (self.args.steps_per_generation * self.num_iterations) and state["round"] is not None:
            self._replay_round = state["round"]
