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

from coba_trl.advantages import group_advantages, segment_nanmean, zero_std_group_fraction
from coba_trl.allocation.history import prompt_id_from_json
from coba_trl.checkpoint import STATE_FILE, encode_round, load_state, save_state
from coba_trl.compat import check_trl_compatibility
from coba_trl.config import CoBAConfig
from coba_trl.grouping import deal_groups, expected_length_weight
from coba_trl.sampling import RoundSampler
from coba_trl.telemetry import budget_metrics
from coba_trl.validation import (
    check_dataset,
    check_features,
    check_generation_kwargs,
    check_reward_columns,
    check_round_layout,
    check_success_reward,
)

check_trl_compatibility()

logger = get_logger(__name__)

__all__ = ["STATE_FILE", "CoBAGRPOTrainer", "RoundPlan"]


@dataclass
class RoundPlan:
    """One generation round: the distinct prompts, their group sizes, and the rows of every process."""

    prompt_ids: list
    group_sizes: np.ndarray
    pass_rates: np.ndarray  # the estimates the allocation used (NaN = unseen)
    global_group_ids: np.ndarray  # group id of each row, in the order TRL gathers rows (process 0's rows first)
    local_rows: list[dict]
    observe: bool  # False when a resumed run regenerates a round its checkpoint had already observed


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
        self._coba_columns = [c for c in (args.prompt_id_column, args.prior_pass_rate_column) if c is not None]
        super().__init__(model, reward_funcs, args, train_dataset, **kwargs)
        self._success_index = check_success_reward(args.success_reward_func, self.reward_func_names)
        self.allocator = args.build_allocator()
        self.pass_rate_history = args.build_pass_rate_history()
        self._captured_rewards = None
        self._round_sampler: RoundSampler | None = None
        self._prompt_texts = None  # the train set's prompt column, to check rows against the sampler's schedule
        self._current_round: dict | None = None  # the round in progress, saved with every checkpoint
        self._replay_round: dict | None = None  # the round a resumed checkpoint was saved inside of

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
        plan = self._plan_round(inputs)
        self._captured_rewards = None  # set again by this round's `_calculate_rewards`, never carried over
        mean_group_size = self.num_generations
        self.num_generations = 1  # one completion per expanded row, in every generation backend
        try:
            output = super()._generate_and_score_completions(plan.local_rows)
        finally:
            self.num_generations = mean_group_size
        rewards = self._captured_rewards
        expected = (len(plan.global_group_ids), len(self.reward_funcs))
        if rewards is None or tuple(rewards.shape) != expected:
            found = None if rewards is None else tuple(rewards.shape)
            raise RuntimeError(
                f"The round's gathered rewards have shape {found}, but its plan has {expected[0]} completions for "
                f"{expected[1]} reward function(s). TRL's reward path no longer matches what CoBAGRPOTrainer "
                "expects; install a tested TRL version (see coba_trl.compat)."
            )
        group_ids = torch.as_tensor(plan.global_group_ids, device=rewards.device)
        num_groups = len(plan.group_sizes)
        advantages = group_advantages(
            rewards, group_ids, num_groups, self.reward_weights, self.scale_rewards, self.multi_objective_aggregation
        )
        rows = len(plan.local_rows)
        start = self.accelerator.process_index * rows
        output["advantages"] = advantages[start : start + rows]
        self._log_round(rewards, advantages, group_ids, num_groups)
        if plan.observe:
            self._observe_round(rewards, plan)
        return output

    def _plan_round(self, local_prompts: list[dict]) -> RoundPlan:
        """Gather the round's prompts, allocate on process 0, broadcast, expand into groups and deal the rows."""
        prompts = gather_object(local_prompts)[: self._prompts_per_round]  # gathered in sampler order: drop padding
        prompt_ids = self._round_prompt_ids(local_prompts, prompts)
        replay = self._take_replay_round(prompt_ids)
        if replay is not None:
            group_sizes, pass_rates = replay
            metrics = budget_metrics(group_sizes, pass_rates)
        else:
            payload = [self._allocate(prompts, prompt_ids) if self.accelerator.is_main_process else None]
            broadcast_object_list(payload, from_process=0)
            group_sizes, pass_rates, metrics = payload[0]
        total = self.args.generation_batch_size
        if group_sizes.shape != (len(prompts),) or group_sizes.sum() != total or group_sizes.min() < 1:
            raise ValueError(  # checked on every process, after the broadcast, so all of them stop
                f"The allocator {type(self.allocator).__name__} returned group sizes {group_sizes.tolist()}; expected "
                f"{len(prompts)} sizes >= 1 summing to generation_batch_size ({total})."
            )
        dealt = deal_groups(group_sizes, self.accelerator.num_processes, expected_length_weight(pass_rates))
        local_rows = [dict(prompts[group]) for group in dealt[self.accelerator.process_index]]
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        self._current_round = encode_round(prompt_ids, group_sizes, pass_rates)
        return RoundPlan(prompt_ids, group_sizes, pass_rates, np.concatenate(dealt), local_rows, replay is None)

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
        if [prompt_id_from_json(i) for i in replay["prompt_ids"]] != list(prompt_ids):
            logger.warning(
                "The round in progress saved in the checkpoint has other prompts than the resumed round (was the "
                "dataset, the seed or the batch layout changed?): allocating the resumed round afresh.",
                main_process_only=True,
            )
            return None
        pass_rates = np.array([np.nan if rate is None else rate for rate in replay["pass_rates"]], dtype=np.float64)
        return np.asarray(replay["group_sizes"], dtype=np.int64), pass_rates

    def _allocate(self, prompts: list[dict], prompt_ids: list) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """Group sizes for the round's prompts from their pass rates (history, else prior, else unseen)."""
        start = time.perf_counter()
        prior = None
        if self.args.prior_pass_rate_column is not None:
            column = self.args.prior_pass_rate_column
            prior = np.array([np.nan if row[column] is None else float(row[column]) for row in prompts])
        pass_rates = self.pass_rate_history.pass_rates(prompt_ids, prior=prior)
        group_sizes = np.asarray(self.allocator.allocate(pass_rates, self.args.generation_batch_size), dtype=np.int64)
        elapsed = time.perf_counter() - start
        metrics = {
            f"coba/{key}": float(value)
            for key, value in self.allocator.metrics().items()
            if value is not None and math.isfinite(value) and key not in ("budget_min", "budget_max")
        }  # budget min / max are logged with the mean below
        metrics.update(budget_metrics(group_sizes, pass_rates))
        metrics["coba/allocation_time"] = elapsed
        metrics["coba/prompts_with_history"] = float(len(self.pass_rate_history))
        return group_sizes, pass_rates, metrics

    def _log_round(self, rewards, advantages, group_ids, num_groups):
        """Fix the stock metrics that saw groups of one, and add prompt-weighted reward means.

        TRL's `reward` and `rewards/<name>/mean` average over completion rows, so under CoBA a prompt weighs as much as
        its group is large. `coba/reward_per_prompt` and `coba/rewards/<name>/mean_per_prompt` average each group's
        mean over prompts instead: the quantity GRPO's `reward` measures (all its groups are equal), for comparing curves.
        """
        metrics = self._metrics["train"]
        metrics["frac_reward_zero_std"][-1] = zero_std_group_fraction(
            rewards, group_ids, num_groups, self.reward_weights
        )
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        weighted = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(rewards).all(dim=1)] = torch.nan
        metrics["coba/reward_per_prompt"].append(
            torch.nanmean(segment_nanmean(weighted, group_ids, num_groups)).item()
        )
        for column, name in enumerate(self.reward_func_names):
            per_prompt = segment_nanmean(rewards[:, column], group_ids, num_groups)
            metrics[f"coba/rewards/{name}/mean_per_prompt"].append(torch.nanmean(per_prompt).item())

    def _observe_round(self, rewards: torch.Tensor, plan: RoundPlan) -> None:
        """Update the pass-rate history and the capability estimate from the round's gathered correctness.

        A completion succeeds when the success reward is >= `success_threshold` (NaN = failure). Every process sees
        the same gathered rewards, so every process updates identically.
        """
        scores = rewards[:, self._success_index].float().cpu().numpy()
        success = np.nan_to_num(scores, nan=-np.inf) >= self.args.success_threshold
        successes = np.bincount(plan.global_group_ids, weights=success, minlength=len(plan.group_sizes))
        merged: dict = {}  # a prompt id listed twice in a round (duplicate rows) is one appearance
        for prompt_id, wins, tries in zip(plan.prompt_ids, successes, plan.group_sizes, strict=True):
            previous = merged.get(prompt_id, (0, 0))
            merged[prompt_id] = (previous[0] + int(wins), previous[1] + int(tries))
        ids = list(merged)
        wins, tries = (np.array(column, dtype=np.int64) for column in zip(*merged.values(), strict=True))
        self.pass_rate_history.update(ids, wins, tries)
        self.allocator.observe(wins / tries)

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
        if "micro_step" not in state:  # saved by coba-trl 0.1: round boundaries and the round in progress unknown
            logger.warning(f"{checkpoint} predates exact resume: a round interrupted by it is allocated afresh.")
            return
        # TRL does not checkpoint its micro-step counter; restoring it keeps every later round where it was.
        self._step = state["micro_step"]
        if self._step % (self.args.steps_per_generation * self.num_iterations) and state["round"] is not None:
            self._replay_round = state["round"]
